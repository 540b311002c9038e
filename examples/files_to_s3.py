"""Files -> Spark -> S3 Parquet, exactly once: each payment in the files lands in exactly one committed object.

Spark's own Parquet writer on ``s3a://`` is at-least-once: a batch replayed after a crash is
written again, as new objects. Here eosink uploads each micro-batch as Parquet objects by
multipart upload, completed once Spark's checkpoint holds the batch (2pc), and commits the batch
with a create-only marker, so a reader of the markers sees every payment once.

One command, with the test harness's MinIO started and stopped for you:

    make example-files-to-s3

By hand, against your own S3 or MinIO (the bucket is created when missing):

    export EOSINK_S3_ENDPOINT=http://127.0.0.1:9000 EOSINK_S3_ACCESS_KEY=... EOSINK_S3_SECRET_KEY=...
    python examples/files_to_s3.py --input /tmp/payments --checkpoint /tmp/f2s-ckpt --generate 5

(Without ``EOSINK_S3_ENDPOINT``, boto3's usual chain applies: AWS credentials, profile or role.)
It streams the JSON payment files in ``--input`` (``--generate N`` first writes N more there)
into Parquet objects under ``s3://BUCKET/PREFIX/``. Run it again: it only reads new files, and
never writes a payment twice, even if the previous run was killed half-way. Under ``--strategy
idempotent`` a replay rewrites the same objects, and readers keep the newest row per payment id.
"""

from __future__ import annotations

import sys

from _files_input import generated, parser, payment_stream, strategy
from _s3_output import count_committed, ensure_bucket

import eosink
from eosink.connectors.s3 import S3Config, S3Sink


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--bucket", default="eosink-examples", help="the bucket (created if missing)")
    ap.add_argument("--prefix", default="payments", help="the objects' prefix in the bucket")
    args = ap.parse_args()
    generated(args)
    # the connection: EOSINK_S3_ENDPOINT and its keys (`eosink services env minio`), else boto3's chain
    config = S3Config.from_env(args.bucket, args.prefix)
    ensure_bucket(config)

    spark, payments = payment_stream("eosink-example-files-to-s3", args.input)
    app_id = f"example-f2s-{config.prefix.replace('/', '-')}"
    writer = eosink.foreach_batch(
        S3Sink(config), app_id=app_id, strategy=strategy(args.strategy), checkpoint_location=args.checkpoint
    )
    # writer.start sets Spark's checkpointLocation to the writer's: the path is stated once
    writer.start(payments.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()  # 2pc: commits the last batch Spark committed
    spark.stop()

    total, distinct = count_committed(config, app_id, lambda row: row["id"])
    print(
        f"{config.root}: {total} rows for {distinct} distinct payments; "
        f"{writer.stats.batches_committed} batch(es) committed in this run, "
        f"{writer.stats.replays_skipped} replay(s) skipped"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
