"""Files -> Spark -> Kafka, exactly once: each payment in the files becomes exactly one record of a topic.

Spark's own Kafka sink is at-least-once: a batch replayed after a crash is written again. Here
eosink writes each micro-batch in Kafka transactions, committed once Spark's checkpoint holds the
batch (2pc), so a ``read_committed`` consumer of the topic sees every payment once.

One command, with the test harness's Kafka started and stopped for you:

    make example-files-to-kafka

By hand, against your own Kafka (transactions allowed, ``transaction.max.timeout.ms`` >= 15 min):

    export EOSINK_KAFKA_BOOTSTRAP=127.0.0.1:9092
    python examples/files_to_kafka.py --input /tmp/payments --checkpoint /tmp/f2k-ckpt --generate 5

It streams the JSON payment files in ``--input`` (``--generate N`` first writes N more there)
into topic ``--topic``, one record per payment keyed by account, its value the payment as JSON.
Run it again: it only reads new files, and never writes a payment twice, even if the previous run
was killed half-way. Under ``--strategy idempotent`` records are keyed by payment id instead, and
a replay writes the same keys again (a compacted topic, or a consumer keeping the last record per
key, sees each payment once).
"""

from __future__ import annotations

import os
import sys

from _files_input import generated, parser, payment_stream
from _kafka_output import count_committed
from pyspark.sql import functions as F

import eosink
from eosink.connectors.kafka import KafkaConfig, KafkaSink


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--topic", default="payments-out", help="the output topic (created if missing)")
    args = ap.parse_args()
    bootstrap = os.environ.get("EOSINK_KAFKA_BOOTSTRAP")
    if not bootstrap:
        print('Set EOSINK_KAFKA_BOOTSTRAP (e.g. `eval "$(eosink services env kafka)"`).', file=sys.stderr)
        return 2
    generated(args)

    spark, payments = payment_stream("eosink-example-files-to-kafka", args.input)
    if args.strategy == "idempotent":
        strategy: eosink.Idempotent | str = eosink.Idempotent(["id"])  # the record key: the payment id
        records = payments
    else:
        strategy = args.strategy
        records = payments.withColumn("key", F.col("account"))  # the record key, as in Spark's Kafka sink
    # value_format="json": every column but key becomes the record's JSON value
    sink = KafkaSink(
        KafkaConfig(bootstrap, topic=args.topic, value_format="json", create_topic=True, topic_partitions=2)
    )
    writer = eosink.foreach_batch(
        sink, app_id=f"example-f2k-{args.topic}", strategy=strategy, checkpoint_location=args.checkpoint
    )
    # writer.start sets Spark's checkpointLocation to the writer's: the path is stated once
    writer.start(records.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()  # 2pc: commits the last batch Spark committed
    spark.stop()

    total, distinct = count_committed(bootstrap, args.topic, lambda v: v["id"])
    print(
        f"{args.topic}: {total} records for {distinct} distinct payments; "
        f"{writer.stats.batches_committed} batch(es) committed in this run, "
        f"{writer.stats.replays_skipped} replay(s) skipped"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
