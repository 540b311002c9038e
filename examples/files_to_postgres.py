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

import os
import sys

from _files_input import generated, parser, payment_stream, strategy

import eosink
from eosink.connectors.postgres import PostgresConfig, PostgresSink


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--table", default="payments")
    args = ap.parse_args()
    url = os.environ.get("EOSINK_POSTGRES_URL")
    if not url:
        print('Set EOSINK_POSTGRES_URL (e.g. `eval "$(eosink services env postgres)"`).', file=sys.stderr)
        return 2
    generated(args)

    spark, payments = payment_stream("eosink-example-files", args.input)
    sink = PostgresSink(PostgresConfig(url, args.table, create_table=True))
    writer = eosink.foreach_batch(
        sink,
        app_id=f"example-files-{args.table}",  # names this (query, table) pair for good
        strategy=strategy(args.strategy),
        checkpoint_location=args.checkpoint,
    )
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
