"""Files -> Spark -> a PostgreSQL table and a Kafka topic, exactly once in each, PostgreSQL first.

One query, one pass over each micro-batch: every payment becomes one row of the table ``--table``
and one event (JSON, keyed by account) in the topic ``--topic``. Under 2pc (the default) and
txid-check an event is readable by a ``read_committed`` consumer only once its row is committed in
PostgreSQL, through crashes and restarts: the outbox pattern, without an outbox table or a relay.

One command, with the test harness's PostgreSQL and Kafka started and stopped for you:

    make example-fanout

By hand, against your own servers (``max_prepared_transactions`` > 0 for 2pc; Kafka transactions
allowed, ``transaction.max.timeout.ms`` >= 15 min):

    export EOSINK_POSTGRES_URL=postgresql://user:password@127.0.0.1:5432/db EOSINK_KAFKA_BOOTSTRAP=127.0.0.1:9092
    python examples/files_to_postgres_and_kafka.py --input /tmp/payments --checkpoint /tmp/fanout-ckpt --generate 5

It streams the JSON payment files in ``--input`` (``--generate N`` first writes N more there).
Run it again: it only reads new files, and never writes a payment twice into either sink, even if
the previous run was killed between the two sinks' commits (the restart commits the rest).
"""

from __future__ import annotations

import os
import sys

from _files_input import generated, parser, payment_stream, strategy
from _kafka_output import count_committed
from pyspark.sql import functions as F

import eosink
from eosink.connectors.kafka import KafkaConfig, KafkaSink
from eosink.connectors.postgres import PostgresConfig, PostgresSink


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--table", default="payments_fanout", help="the PostgreSQL table (created if missing)")
    ap.add_argument("--topic", default="payment-events", help="the Kafka topic (created if missing)")
    args = ap.parse_args()
    url, bootstrap = os.environ.get("EOSINK_POSTGRES_URL"), os.environ.get("EOSINK_KAFKA_BOOTSTRAP")
    if not url or not bootstrap:
        print(
            'Set EOSINK_POSTGRES_URL and EOSINK_KAFKA_BOOTSTRAP (e.g. `eval "$(eosink services env postgres kafka)"`).',
            file=sys.stderr,
        )
        return 2
    generated(args)

    spark, payments = payment_stream("eosink-example-fanout", args.input)
    # the Kafka sink writes every column but ``key`` as the event's JSON value; the table ignores no column, so
    # both sinks get the same rows and the table keeps the account twice (account and key)
    rows = payments.withColumn("key", F.col("account"))
    sinks = {  # commit order: the table first, then the topic
        "ledger": PostgresSink(PostgresConfig(url, args.table, create_table=True)),
        "events": KafkaSink(
            KafkaConfig(bootstrap, topic=args.topic, value_format="json", create_topic=True, topic_partitions=2)
        ),
    }
    writer = eosink.foreach_batch(
        sinks,
        app_id=f"example-fanout-{args.table}",  # each sink keeps its state under <app_id>.<name>
        strategy=strategy(args.strategy),
        checkpoint_location=args.checkpoint,
    )
    # writer.start sets Spark's checkpointLocation to the writer's: the path is stated once
    writer.start(rows.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()  # 2pc: commits, in order, the last batch Spark committed
    spark.stop()

    import psycopg
    from psycopg import sql

    with psycopg.connect(url) as conn:
        count = conn.execute(sql.SQL("SELECT count(*), count(DISTINCT id) FROM {}").format(sql.Identifier(args.table)))
        table_rows, table_ids = count.fetchone() or (0, 0)
    events, event_ids = count_committed(bootstrap, args.topic, lambda v: v["id"])
    stats = writer.stats
    print(f"{args.table}: {table_rows} rows for {table_ids} distinct payments")
    print(f"{args.topic}: {events} events for {event_ids} distinct payments")
    for name, s in stats.items():
        print(f"  {name}: {s.batches_committed} batch(es) committed in this run, {s.replays_skipped} replay(s) skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
