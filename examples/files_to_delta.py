"""Files -> Spark -> a Delta Lake table on S3, exactly once: every Delta reader sees each payment once.

Spark's own Delta writer in ``foreachBatch`` appends a batch replayed after a crash again (unless it
is given ``txnAppId``/``txnVersion``, which only the JVM writer offers). Here eosink writes each
micro-batch's Parquet files from the executors into the table and commits them in one Delta commit,
with the batch's txn and bundle, once Spark's checkpoint holds the batch (2pc). Every engine that reads
Delta (Spark, Trino, DuckDB, pandas through ``deltalake``) sees whole batches only.

One command, with the test harness's MinIO started and stopped for you:

    make example-files-to-delta

By hand, against your own S3 or MinIO (the bucket is created when missing):

    export EOSINK_S3_ENDPOINT=http://127.0.0.1:9000 EOSINK_S3_ACCESS_KEY=... EOSINK_S3_SECRET_KEY=...
    python examples/files_to_delta.py --input /tmp/payments --checkpoint /tmp/f2d-ckpt --generate 5

(Without ``EOSINK_S3_ENDPOINT``, the AWS chain applies: credentials, profile or role; ``--table`` may
also be a local directory.) It streams the JSON payment files in ``--input`` (``--generate N`` first
writes N more there) into the Delta table ``--table``, created at the first batch with the stream's
schema. Run it again: it only reads new files, and never writes a payment twice, even if the previous
run was killed half-way.
"""

from __future__ import annotations

import sys

from _files_input import generated, parser, payment_stream, strategy

import eosink
from eosink.connectors.delta import DeltaConfig, DeltaSink


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--table", default="s3://eosink-examples/payments_delta", help="the Delta table's URI")
    args = ap.parse_args()
    generated(args)
    # an s3:// table's connection: EOSINK_S3_ENDPOINT and its keys (`eosink services env minio`), else the AWS chain
    config = DeltaConfig(args.table)
    _ensure_bucket(config)

    spark, payments = payment_stream("eosink-example-files-to-delta", args.input)
    writer = eosink.foreach_batch(
        DeltaSink(config),
        app_id="example-files-to-delta",
        strategy=strategy(args.strategy),
        checkpoint_location=args.checkpoint,
    )
    # writer.start sets Spark's checkpointLocation to the writer's: the path is stated once
    writer.start(payments.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()  # 2pc: commits the last batch Spark committed
    spark.stop()

    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(config.table, storage_options=config.delta_options())
    # delta-rs's own engine reads the snapshot (pyarrow's dataset over it can abort the process at exit)
    ids = QueryBuilder().register("payments", table).execute("SELECT id FROM payments").read_all()["id"].to_pylist()
    print(
        f"{config.table} (version {table.version()}): {len(ids)} rows for {len(set(ids))} distinct payments; "
        f"{writer.stats.batches_committed} batch(es) committed in this run, "
        f"{writer.stats.replays_skipped} replay(s) skipped"
    )
    return 0


def _ensure_bucket(config: DeltaConfig) -> None:
    """Create an s3:// table's bucket when it is missing (the harness's MinIO starts empty)."""
    if config.s3 is None:
        return
    from urllib.parse import urlsplit

    from eosink.stores.s3 import client, ensure_bucket

    ensure_bucket(client(config.s3), urlsplit(config.table).netloc)


if __name__ == "__main__":
    sys.exit(main())
