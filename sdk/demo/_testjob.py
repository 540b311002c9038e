"""The kill-and-restart tests' Spark driver (``python -m eosink.demo job ...``).

:func:`job_main` is one Spark streaming driver: payments read from JSON files, one file per
micro-batch (``trigger(availableNow=True)``), written into a :class:`ReferenceSink` through
eosink or through a plain at-least-once ``foreachBatch``. Fault points come from
``EOSINK_FAULTS``. Its SparkSession is :func:`eosink.demo.session.job_session`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from eosink._procs import error_line
from eosink.demo.session import JAVA_OPTS, SCHEMA, job_session

__all__ = ["JAVA_OPTS", "SCHEMA", "job_main", "job_session"]  # the session's names: where they used to live

EXIT_EOSINK_ERROR = 3


# -- the streaming job ----------------------------------------------------------------------------


def _naive_partition_writer(path: str, atomic: bool, batch_id: int) -> Callable[[Iterator[pa.RecordBatch]], Any]:
    """A plain at-least-once writer: rows become visible as they are written, no bookkeeping."""

    def part(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eosink.connectors.reference import ReferenceSink
        from eosink.contract import BatchRef, TaskRef

        sink = ReferenceSink(path, atomic=atomic)
        task = TaskRef(BatchRef("naive", batch_id), 0, 0, os.urandom(8).hex(), None, False)
        txn = None
        for b in batches:
            if b.num_rows:
                txn = txn or sink.begin(task)
                sink.write(txn, b)
        if txn is not None:
            sink.pre_commit(txn)
        yield pa.RecordBatch.from_pydict({"ok": pa.array([1], pa.int64())})

    return part


def _job_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="eosink job", description="One Spark streaming driver (demo and tests).")
    ap.add_argument("--input", required=True, help="directory of JSON files, one per micro-batch")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--eosink-checkpoint", help="eosink's checkpoint location (default: --checkpoint; tests)")
    ap.add_argument("--sink", required=True, help="ReferenceSink SQLite file")
    ap.add_argument("--app-id", default="demo")
    ap.add_argument("--strategy", default="2pc")
    ap.add_argument(
        "--mode",
        choices=["eosink", "naive", "datasource"],
        default="eosink",
        help="eosink.foreach_batch, a plain foreachBatch, or format('eosink')",
    )
    ap.add_argument("--master", default="local[2,4]", help="local[N,maxFailures] retries failed tasks")
    ap.add_argument("--atomic", type=int, default=1, help="0: the sink commits a batch in several steps")
    ap.add_argument("--nondeterministic", action="store_true", help="add rand() to every row")
    ap.add_argument("--participants", type=int, default=3)
    ap.add_argument("--key-columns", default="", help="comma-separated user keys for the idempotent strategy")
    ap.add_argument("--stats-out")
    return ap.parse_args(argv)


def job_main(argv: Sequence[str] | None = None) -> int:
    """Run the streaming job to the end of its input; 0 when done, 3 on an eosink error."""
    args = _job_args(argv)
    # Fault points inside Spark's Python workers (process groups of their own) crash this whole driver.
    from eosink.faults import export_crash_scope

    export_crash_scope()
    from pyspark.sql import functions as F

    import eosink
    from eosink import faults
    from eosink.connectors.reference import ReferenceSink
    from eosink.faults import FaultPoint

    spark = job_session(args.master, "eosink-demo")
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    if args.nondeterministic:
        df = df.withColumn("noise", F.rand())

    writer: eosink.BatchWriter | None = None
    fn: Callable[[Any, int], None] | None = None
    if args.mode == "eosink":
        writer = eosink.foreach_batch(
            ReferenceSink(args.sink, atomic=bool(args.atomic)),
            app_id=args.app_id,
            strategy=eosink.Idempotent(args.key_columns.split(",")) if args.key_columns else args.strategy,
            checkpoint_location=args.eosink_checkpoint or args.checkpoint,
            participants=args.participants,
        )
        fn = writer
    elif args.mode == "naive":

        def fn(batch_df: Any, batch_id: int) -> None:
            batch_df.mapInArrow(_naive_partition_writer(args.sink, bool(args.atomic), batch_id), "ok long").collect()
            faults.hit(FaultPoint.F8, batch_id)  # the same crash window eosink is tested in

    stream = df.writeStream.option("checkpointLocation", args.checkpoint)
    if args.mode == "datasource":
        eosink.spark.register(spark)
        stream = (
            stream.format("eosink")
            .option("sink", "reference")
            .option("reference.path", args.sink)
            .option("reference.atomic", str(bool(args.atomic)).lower())
            .option("app_id", args.app_id)
            .option("strategy", "idempotent" if args.key_columns else args.strategy)
        )
        if args.key_columns:
            stream = stream.option("key_columns", args.key_columns)
    else:
        stream = stream.foreachBatch(fn)
    try:
        if args.mode == "datasource":  # named, started with a path: Spark passes both as options
            named = stream.queryName(f"eosink-{args.app_id}").trigger(availableNow=True)
            named.start(str(Path(args.checkpoint).parent / "unused-path")).awaitTermination()
        else:
            stream.trigger(availableNow=True).start().awaitTermination()
        if writer is not None:
            writer.close()
    except Exception as exc:
        print(error_line(exc, str), file=sys.stderr, flush=True)
        spark.stop()
        return EXIT_EOSINK_ERROR
    if args.stats_out and writer is not None:
        Path(args.stats_out).write_text(json.dumps(writer.stats.to_json()))
    spark.stop()
    return 0
