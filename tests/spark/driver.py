"""A real Spark streaming driver for the kill-and-restart tests (run as its own process group).

Reads JSON files from ``--input`` one file per micro-batch (``trigger(availableNow=True)``)
and writes them through eosink (or a plain at-least-once foreachBatch, ``--mode naive``)
into a ReferenceSink. Fault points come from ``EOSINK_FAULTS``. On a clean finish it
writes the coordinator's stats to ``--stats-out`` and exits 0; an eosink error exits 3 with
``EOSINK-ERROR <type>: <message>`` on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator

import pyarrow as pa

# Quick JVM start for short test runs: C1 only, serial GC (CDS archive added by the tests).
JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def _naive_writer(path: str, atomic: bool):  # type: ignore[no-untyped-def]
    def write(batch_id: int):  # type: ignore[no-untyped-def]
        from eosink.connectors.reference import ReferenceSink
        from eosink.contract import BatchRef, TaskRef

        sink = ReferenceSink(path, atomic=atomic)

        def part(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            task = TaskRef(BatchRef("naive", batch_id), 0, 0, os.urandom(8).hex(), None, False)
            txn = None
            for b in batches:
                if b.num_rows:
                    txn = txn or sink.begin(task)
                    sink.write(txn, b)
            if txn is not None:
                sink.pre_commit(txn)
            yield pa.RecordBatch.from_pydict({"ok": [1]})

        return part

    return write


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--sink", required=True)
    ap.add_argument("--app-id", default="test-app")
    ap.add_argument("--strategy", default="2pc")
    ap.add_argument("--mode", choices=["eosink", "naive"], default="eosink")
    ap.add_argument("--master", default="local[2,4]")
    ap.add_argument("--atomic", type=int, default=1)
    ap.add_argument("--nondeterministic", action="store_true")
    ap.add_argument("--participants", type=int, default=3)
    ap.add_argument("--stats-out")
    args = ap.parse_args()

    # fault points inside Spark's Python workers (own process groups) crash this driver's group
    os.environ["EOSINK_FAULT_PGID"] = str(os.getpgrp())
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import eosink
    from eosink import faults
    from eosink.connectors.reference import ReferenceSink
    from eosink.faults import FaultPoint

    spark = (
        SparkSession.builder.master(args.master)
        .appName("eosink-test-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", JAVA_OPTS + " " + os.environ.get("EOSINK_TEST_DRIVER_JAVA_OPTS", ""))
        .config("spark.executor.extraJavaOptions", JAVA_OPTS)
        .config("spark.driver.maxResultSize", "1m")  # proves the driver collects no rows
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.files.maxPartitionBytes", "2048")
        .config("spark.sql.files.openCostInBytes", "0")
        .config("spark.sql.streaming.minBatchesToRetain", "100")
        .config("spark.executorEnv.EOSINK_FAULTS", os.environ.get("EOSINK_FAULTS", ""))
        .config("spark.executorEnv.EOSINK_FAULT_LOG", os.environ.get("EOSINK_FAULT_LOG", ""))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    df = (
        spark.readStream.schema("id LONG, account STRING, amount LONG").option("maxFilesPerTrigger", 1).json(args.input)
    )
    if args.nondeterministic:
        df = df.withColumn("noise", F.rand())

    writer: eosink.BatchWriter | None = None
    if args.mode == "eosink":
        sink = ReferenceSink(args.sink, atomic=bool(args.atomic))
        writer = eosink.foreach_batch(
            sink,
            app_id=args.app_id,
            strategy=args.strategy,
            checkpoint_location=args.checkpoint,
            participants=args.participants,
        )
        fn = writer
    else:
        make = _naive_writer(args.sink, bool(args.atomic))

        def fn(batch_df, batch_id):  # type: ignore[no-untyped-def]
            batch_df.mapInArrow(make(batch_id), "ok long").collect()
            faults.hit(FaultPoint.F8, batch_id)

    query = (
        df.writeStream.option("checkpointLocation", args.checkpoint).foreachBatch(fn).trigger(availableNow=True).start()
    )
    try:
        query.awaitTermination()
        if writer is not None:
            writer.close()
    except Exception as exc:  # report the eosink error type for the test to assert on
        text = str(exc)
        names = [n for n in eosink.errors.__all__ if n in text]
        kind = max(names, key=len) if names else type(exc).__name__
        print(f"EOSINK-ERROR {kind}: {text[:2000]}", file=sys.stderr, flush=True)
        spark.stop()
        return 3
    if args.stats_out and writer is not None:
        with open(args.stats_out, "w") as fh:
            json.dump(writer.stats.to_json(), fh)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
