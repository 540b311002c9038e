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

import os
import sys

from _files_input import generated, parser, payment_stream, strategy

import eosink
from eosink.connectors.hdfs import HdfsConfig, HdfsSink


def main() -> int:
    ap = parser(__doc__, checkpoint="Spark's checkpoint location for this query (or hdfs://...)")
    ap.add_argument("--directory", default="/eosink-examples/payments", help="the target directory in HDFS")
    args = ap.parse_args()
    generated(args)
    namenode = os.environ.get("EOSINK_HDFS_URL")
    if not namenode:
        print("Set EOSINK_HDFS_URL=hdfs://namenode:8020 (`eosink services env hdfs`).", file=sys.stderr)
        return 2
    config = HdfsConfig(namenode.rstrip("/") + args.directory)

    spark, payments = payment_stream("eosink-example-files-to-hdfs", args.input)
    app_id = f"example-f2h-{args.directory.strip('/').replace('/', '-')}"
    sink = HdfsSink(config)
    writer = eosink.foreach_batch(
        sink, app_id=app_id, strategy=strategy(args.strategy), checkpoint_location=args.checkpoint
    )
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
