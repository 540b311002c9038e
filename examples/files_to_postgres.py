"""Files -> Spark -> PostgreSQL, exactly once.

One command, with the test harness's PostgreSQL started and stopped for you:

    make example-files

By hand, against any PostgreSQL 13+ (``max_prepared_transactions`` > 0 for the default 2pc strategy):

    export EOSINK_POSTGRES_URL=postgresql://user:password@127.0.0.1:5432/db
    python examples/files_to_postgres.py --input /tmp/payments --checkpoint /tmp/payments-ckpt --generate 5

It streams the JSON payment files in ``--input`` (``--generate N`` first writes N more there) into
the table ``payments`` and prints per-account balances. Run it again: it only reads new files,
and never writes a payment twice, even if the previous run was killed half-way.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from _files_input import SCHEMA, generate
from pyspark.sql import SparkSession

import eosink
from eosink.connectors.postgres import PostgresConfig, PostgresSink


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", required=True, help="directory of JSON payment files")
    ap.add_argument("--checkpoint", required=True, help="Spark's checkpoint directory for this query")
    ap.add_argument("--table", default="payments")
    ap.add_argument("--strategy", choices=["2pc", "txid-check", "idempotent"], default="2pc")
    ap.add_argument("--generate", type=int, default=0, metavar="N", help="first write N new files of payments")
    ap.add_argument("--rows", type=int, default=100, help="payments per generated file")
    args = ap.parse_args()
    url = os.environ.get("EOSINK_POSTGRES_URL")
    if not url:
        print('Set EOSINK_POSTGRES_URL (e.g. `eval "$(eosink services env postgres)"`).', file=sys.stderr)
        return 2
    if args.generate:
        generate(Path(args.input), args.generate, args.rows)

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("eosink-example-files")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    sink = PostgresSink(PostgresConfig(url, args.table, create_table=True))
    writer = eosink.foreach_batch(
        sink,
        app_id=f"example-files-{args.table}",  # names this (query, table) pair for good
        strategy=eosink.Idempotent(["id"]) if args.strategy == "idempotent" else args.strategy,
        checkpoint_location=args.checkpoint,
    )
    payments = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 2).json(args.input)
    # writer.start sets Spark's checkpointLocation to the writer's: the path is stated once
    writer.start(payments.writeStream.trigger(availableNow=True)).awaitTermination()
    writer.close()  # 2pc: commits the last batch Spark committed
    spark.stop()

    import psycopg
    from psycopg import sql

    with psycopg.connect(url) as conn:
        count = conn.execute(sql.SQL("SELECT count(*), count(DISTINCT id) FROM {}").format(sql.Identifier(args.table)))
        rows, distinct = count.fetchone() or (0, 0)
        balances = conn.execute(
            sql.SQL("SELECT account, sum(amount) FROM {} GROUP BY account ORDER BY account").format(
                sql.Identifier(args.table)
            )
        ).fetchall()
    print(
        f"{args.table}: {rows} payments ({distinct} distinct ids); {writer.stats.batches_committed} batch(es) "
        f"committed in this run, {writer.stats.replays_skipped} replay(s) skipped"
    )
    for account, total in balances:
        print(f"  {account}: {total}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
