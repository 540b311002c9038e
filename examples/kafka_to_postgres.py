"""Kafka -> Spark -> PostgreSQL, exactly once: each record of the topic becomes exactly one row.

One command, with the test harness's Kafka and PostgreSQL started and stopped for you:

    make example-kafka

By hand, against your own Kafka and PostgreSQL 13+:

    export EOSINK_KAFKA_BOOTSTRAP=127.0.0.1:9092
    export EOSINK_POSTGRES_URL=postgresql://user:password@127.0.0.1:5432/db
    python examples/kafka_to_postgres.py --topic payments --checkpoint /tmp/kafka-ckpt --produce 1000

``--produce N`` first sends N JSON payments to the topic (kafka-python). Spark reads the topic
from its checkpointed offsets, so a restart re-reads exactly what the last run did not finish;
eosink's two-phase commit makes the rows of each micro-batch visible once, with the record's
partition and offset beside them. Spark's Kafka connector comes from Maven Central
(``spark.jars.packages``) unless ``EOSINK_EXAMPLE_SPARK_JARS`` lists local jars.
"""

from __future__ import annotations

import argparse
import os
import sys

from _kafka_input import produce, read_payments, session

import eosink
from eosink.connectors.postgres import PostgresConfig, PostgresSink


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topic", default="payments")
    ap.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory for this query")
    ap.add_argument("--table", default="kafka_payments")
    ap.add_argument("--strategy", choices=["2pc", "txid-check"], default="2pc")
    ap.add_argument("--produce", type=int, default=0, metavar="N", help="first send N payments to the topic")
    ap.add_argument("--seed", type=int, default=1, help="ids and amounts of the produced payments")
    ap.add_argument("--max-offsets", type=int, default=500, help="records per micro-batch")
    args = ap.parse_args()
    bootstrap, url = os.environ.get("EOSINK_KAFKA_BOOTSTRAP"), os.environ.get("EOSINK_POSTGRES_URL")
    if not bootstrap or not url:
        print(
            'Set EOSINK_KAFKA_BOOTSTRAP and EOSINK_POSTGRES_URL (e.g. `eval "$(eosink services env kafka postgres)"`).',
            file=sys.stderr,
        )
        return 2
    if args.produce:
        produce(bootstrap, args.topic, args.produce, args.seed)

    spark = session()
    payments = read_payments(spark, bootstrap, args.topic, args.max_offsets)
    sink = PostgresSink(PostgresConfig(url, args.table, create_table=True))
    writer = eosink.foreach_batch(
        sink, app_id=f"example-kafka-{args.table}", strategy=args.strategy, checkpoint_location=args.checkpoint
    )
    writer.start(payments.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()
    spark.stop()

    import psycopg
    from psycopg import sql

    with psycopg.connect(url) as conn:
        q = sql.SQL("SELECT count(*), count(DISTINCT (kafka_partition, kafka_offset)) FROM {}").format(
            sql.Identifier(args.table)
        )
        rows, distinct = conn.execute(q).fetchone() or (0, 0)
    print(
        f"{args.table}: {rows} rows for {distinct} distinct Kafka records; "
        f"{writer.stats.batches_committed} batch(es) committed in this run"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
