"""Files -> Spark -> HDFS Parquet, exactly once: each payment in the files lands in exactly one committed batch.

Spark's own Parquet writer on ``hdfs://`` is at-least-once: a batch replayed after a crash is
written again, as new files. Here eosink writes each micro-batch's Parquet files under a hidden
directory, and makes the whole batch visible with one directory rename once Spark's checkpoint
holds it (2pc), so any reader that lists the target (``spark.read.parquet``, pyarrow) sees every
payment once, and never part of a batch.

One command, with the test harness's HDFS (a MiniDFSCluster) started and stopped for you:

    make example-files-to-hdfs

By hand, against your own cluster:

    export EOSINK_HDFS_URL=hdfs://namenode:8020
    python examples/files_to_hdfs.py --input /tmp/payments --checkpoint /tmp/f2h-ckpt --generate 5

It streams the JSON payment files in ``--input`` (``--generate N`` first writes N more there)
into Parquet files under ``$EOSINK_HDFS_URL/--directory`` (default ``/eosink-examples/payments``).
Run it again: it only reads new files, and never writes a payment twice, even if the previous run
was killed half-way. The checkpoint may live on HDFS too (``--checkpoint hdfs://...``).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from _files_input import SCHEMA, generate
from pyspark.sql import SparkSession

import eosink
from eosink.connectors.hdfs import HdfsConfig, HdfsSink


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", required=True, help="directory of JSON payment files")
    ap.add_argument("--checkpoint", required=True, help="Spark's checkpoint location for this query (or hdfs://...)")
    ap.add_argument("--directory", default="/eosink-examples/payments", help="the target directory in HDFS")
    ap.add_argument("--strategy", choices=["2pc", "txid-check", "idempotent"], default="2pc")
    ap.add_argument("--generate", type=int, default=0, metavar="N", help="first write N new files of payments")
    ap.add_argument("--rows", type=int, default=100, help="payments per generated file")
    args = ap.parse_args()
    if args.generate:
        generate(Path(args.input), args.generate, args.rows)
    namenode = os.environ.get("EOSINK_HDFS_URL")
    if not namenode:
        print("Set EOSINK_HDFS_URL=hdfs://namenode:8020 (`eosink services env hdfs`).", file=sys.stderr)
        return 2
    config = HdfsConfig(namenode.rstrip("/") + args.directory)

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("eosink-example-files-to-hdfs")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    payments = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).json(args.input)
    strategy: eosink.Idempotent | str = eosink.Idempotent(["id"]) if args.strategy == "idempotent" else args.strategy
    app_id = f"example-f2h-{args.directory.strip('/').replace('/', '-')}"
    sink = HdfsSink(config)
    writer = eosink.foreach_batch(sink, app_id=app_id, strategy=strategy, checkpoint_location=args.checkpoint)
    # writer.start sets Spark's checkpointLocation to the writer's: the path is stated once
    writer.start(payments.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()  # 2pc: commits the last batch Spark committed

    landed = spark.read.parquet(config.target_url)  # a plain reader that lists the directory
    total, distinct = landed.count(), landed.select("id").distinct().count()
    spark.stop()
    print(
        f"{config.target_url}: {total} rows for {distinct} distinct payments; "
        f"{writer.stats.batches_committed} batch(es) committed in this run, "
        f"{writer.stats.replays_skipped} replay(s) skipped"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
