"""Kafka -> Spark -> Kafka, exactly once: each payment record becomes exactly one record of the output topic.

Spark's own Kafka sink is at-least-once: a batch replayed after a crash is written again. Here
eosink writes each micro-batch in Kafka transactions, committed once Spark's checkpoint holds the
batch, so a ``read_committed`` consumer of the output topic sees every payment once.

One command, with the test harness's Kafka started and stopped for you:

    make example-kafka-to-kafka

By hand, against your own Kafka (transactions allowed, ``transaction.max.timeout.ms`` >= 15 min):

    export EOSINK_KAFKA_BOOTSTRAP=127.0.0.1:9092
    python examples/kafka_to_kafka.py --topic payments --output payments-checked \\
        --checkpoint /tmp/k2k-ckpt --produce 1000

``--produce N`` first sends N JSON payments to the input topic. Each output record is keyed by
account, its value the payment with a ``large`` flag and the input record's partition and offset.
Spark's Kafka connector comes from Maven Central (``spark.jars.packages``) unless
``EOSINK_EXAMPLE_SPARK_JARS`` lists local jars.
"""

from __future__ import annotations

import argparse
import os
import sys

from _kafka_input import produce, read_payments, session
from _kafka_output import count_committed
from pyspark.sql import functions as F

import eosink
from eosink.connectors.kafka import KafkaConfig, KafkaSink


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", default="payments", help="the input topic")
    ap.add_argument("--output", default="payments-checked", help="the output topic (created if missing)")
    ap.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory for this query")
    ap.add_argument("--strategy", choices=["2pc", "txid-check"], default="2pc")
    ap.add_argument("--produce", type=int, default=0, metavar="N", help="first send N payments to the input topic")
    ap.add_argument("--seed", type=int, default=1, help="ids and amounts of the produced payments")
    ap.add_argument("--max-offsets", type=int, default=500, help="records per micro-batch")
    args = ap.parse_args()
    bootstrap = os.environ.get("EOSINK_KAFKA_BOOTSTRAP")
    if not bootstrap:
        print('Set EOSINK_KAFKA_BOOTSTRAP (e.g. `eval "$(eosink services env kafka)"`).', file=sys.stderr)
        return 2
    if args.produce:
        produce(bootstrap, args.topic, args.produce, args.seed)

    spark = session("eosink-example-kafka-to-kafka")
    payments = read_payments(spark, bootstrap, args.topic, args.max_offsets)
    checked = payments.select(
        F.col("account").alias("key"),  # the record key, as in Spark's Kafka sink
        "id",
        "amount",
        (F.col("amount") >= 400).alias("large"),
        "kafka_partition",
        "kafka_offset",
    )
    # value_format="json": every column but key becomes the record's JSON value
    sink = KafkaSink(
        KafkaConfig(bootstrap, topic=args.output, value_format="json", create_topic=True, topic_partitions=2)
    )
    writer = eosink.foreach_batch(
        sink, app_id=f"example-k2k-{args.output}", strategy=args.strategy, checkpoint_location=args.checkpoint
    )
    writer.start(checked.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()  # 2pc: commits the last batch Spark committed
    spark.stop()

    total, distinct = count_committed(bootstrap, args.output, lambda v: (v["kafka_partition"], v["kafka_offset"]))
    print(
        f"{args.output}: {total} records for {distinct} distinct input records; "
        f"{writer.stats.batches_committed} batch(es) committed in this run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
