"""Kafka -> Spark -> S3 Parquet, exactly once: each payment record lands in exactly one committed object.

Spark's own Parquet writer on ``s3a://`` is at-least-once: a batch replayed after a crash is
written again. Here eosink uploads each micro-batch as Parquet objects, one folder per account
(``account=.../``, as Spark's ``partitionBy`` writes them), completed once Spark's checkpoint
holds the batch, and commits it with a create-only marker, so a reader of the markers sees every
input record once.

One command, with the test harness's Kafka and MinIO started and stopped for you:

    make example-kafka-to-s3

By hand, against your own Kafka and S3 or MinIO (the bucket is created when missing):

    export EOSINK_KAFKA_BOOTSTRAP=127.0.0.1:9092
    export EOSINK_S3_ENDPOINT=http://127.0.0.1:9000 EOSINK_S3_ACCESS_KEY=... EOSINK_S3_SECRET_KEY=...
    python examples/kafka_to_s3.py --topic payments --checkpoint /tmp/k2s-ckpt --produce 1000

``--produce N`` first sends N JSON payments to the input topic. Each row is the payment with a
``large`` flag and the input record's partition and offset. Spark's Kafka connector comes from
Maven Central (``spark.jars.packages``) unless ``EOSINK_EXAMPLE_SPARK_JARS`` lists local jars.
"""

from __future__ import annotations

import argparse
import os
import sys

from _kafka_input import produce, read_payments, session
from _s3_output import count_committed, ensure_bucket
from pyspark.sql import functions as F

import eosink
from eosink.connectors.s3 import S3Config, S3Sink


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", default="payments", help="the input topic")
    ap.add_argument("--bucket", default="eosink-examples", help="the bucket (created if missing)")
    ap.add_argument("--prefix", default="payments-checked", help="the objects' prefix in the bucket")
    ap.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory for this query")
    ap.add_argument("--strategy", choices=["2pc", "txid-check"], default="2pc")
    ap.add_argument("--produce", type=int, default=0, metavar="N", help="first send N payments to the input topic")
    ap.add_argument("--seed", type=int, default=1, help="ids and amounts of the produced payments")
    ap.add_argument("--max-offsets", type=int, default=500, help="records per micro-batch")
    args = ap.parse_args()
    bootstrap = os.environ.get("EOSINK_KAFKA_BOOTSTRAP")
    if not bootstrap:
        print('Set EOSINK_KAFKA_BOOTSTRAP (e.g. `eval "$(eosink services env kafka minio)"`).', file=sys.stderr)
        return 2
    if args.produce:
        produce(bootstrap, args.topic, args.produce, args.seed)
    # the connection: EOSINK_S3_ENDPOINT and its keys (`eosink services env minio`), else boto3's chain
    config = S3Config.from_env(args.bucket, args.prefix, partition_by=("account",))
    ensure_bucket(config)

    spark = session("eosink-example-kafka-to-s3")
    payments = read_payments(spark, bootstrap, args.topic, args.max_offsets)
    checked = payments.select(
        "id", "account", "amount", (F.col("amount") >= 400).alias("large"), "kafka_partition", "kafka_offset"
    )
    app_id = f"example-k2s-{config.prefix.replace('/', '-')}"
    writer = eosink.foreach_batch(
        S3Sink(config), app_id=app_id, strategy=args.strategy, checkpoint_location=args.checkpoint
    )
    writer.start(checked.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()  # 2pc: commits the last batch Spark committed
    spark.stop()

    total, distinct = count_committed(config, app_id, lambda row: (row["kafka_partition"], row["kafka_offset"]))
    print(
        f"{config.root}: {total} rows for {distinct} distinct input records; "
        f"{writer.stats.batches_committed} batch(es) committed in this run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
