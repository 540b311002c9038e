"""The demo's Spark driver: ``python -m eosink.demo pipeline ...``, started, killed and restarted by the demo.

One streaming query over payment files (JSON, one file per micro-batch, ``availableNow``). Each
micro-batch goes to two tables of the same PostgreSQL:

* ``payments_plain``: what many pipelines do today, a plain ``foreachBatch`` whose tasks COPY
  their rows and COMMIT (at-least-once: a replayed batch or a retried task writes again);
* ``payments_eosink``: the same rows through eosink with the chosen strategy.

The plain write runs first, so a crash anywhere in eosink's protocol is also a crash after the
plain write. Each writer reaches the server through its own fault proxy, whose address is in the
environment (``EOSINK_DEMO_EOSINK_URL``, ``EOSINK_DEMO_PLAIN_URL``; never in argv: they hold a
password). The writer's counters are saved after every batch to ``--stats-out``, so a killed run
still reports what it did. Exit codes: 0 input exhausted; 3 an error, with
``EOSINK-ERROR <kind>: ...`` on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from eosink._procs import save_json
from eosink.demo._testjob import SCHEMA

__all__ = ["CONTROL_SCHEMA", "EOSINK_TABLE", "PLAIN_TABLE", "SCHEMA", "main"]

EOSINK_TABLE = "payments_eosink"
PLAIN_TABLE = "payments_plain"
CONTROL_SCHEMA = "eosink_demo"
APP_ID = "demo-payments"
EOSINK_URL_VAR = "EOSINK_DEMO_EOSINK_URL"
PLAIN_URL_VAR = "EOSINK_DEMO_PLAIN_URL"
EXIT_ERROR = 3


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="eosink.demo pipeline", description="The demo's Spark streaming driver.")
    ap.add_argument("--input", required=True, help="directory of payment files, one per micro-batch")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--strategy", choices=["2pc", "txid-check", "idempotent"], default="2pc")
    ap.add_argument("--master", default="local[2,4]", help="local[N,maxFailures]: failed tasks are retried")
    ap.add_argument("--participants", type=int, default=2)
    ap.add_argument("--stats-out", required=True)
    return ap.parse_args(argv)


def plain_partition_writer(url: str, table: str) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """A task of the plain writer: COPY the partition's rows, COMMIT, nothing else (the common pattern)."""

    def write(batches: Iterator[Any]) -> Iterator[Any]:
        import psycopg
        import pyarrow as pa
        from psycopg import sql

        copy_sql = sql.SQL("COPY {} (id, account, amount) FROM STDIN").format(sql.Identifier(table))
        n = 0
        # leaving the connection's block COMMITs
        with psycopg.connect(url, connect_timeout=10) as conn, conn.cursor() as cur, cur.copy(copy_sql) as copy:
            for batch in batches:
                cols = [batch.column(i).to_pylist() for i in range(3)]
                for row in zip(*cols, strict=True):
                    copy.write_row(row)
                n += batch.num_rows
        yield pa.RecordBatch.from_pydict({"rows": pa.array([n], pa.int64())})

    return write


def main(argv: Sequence[str] | None = None) -> int:
    """Run the query to the end of its input; 0 when done, 3 on an error."""
    args = _args(argv)
    from eosink.faults import export_crash_scope

    export_crash_scope()  # a fault point that fires in an executor crashes this whole driver
    import eosink
    from eosink.connectors.postgres import PostgresConfig, PostgresSink
    from eosink.demo import job_session

    eosink_url, plain_url = os.environ[EOSINK_URL_VAR], os.environ[PLAIN_URL_VAR]
    config = PostgresConfig(eosink_url, EOSINK_TABLE, control_schema=CONTROL_SCHEMA)
    sink = PostgresSink(config)
    writer = eosink.foreach_batch(
        sink,
        app_id=APP_ID,
        strategy=eosink.Idempotent(["id"]) if args.strategy == "idempotent" else args.strategy,
        checkpoint_location=args.checkpoint,
        participants=args.participants,
    )
    plain = plain_partition_writer(plain_url, PLAIN_TABLE)
    spark = job_session(args.master, f"eosink-demo-{args.strategy}")
    payments = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)

    def save_stats() -> None:
        save_json(args.stats_out, writer.stats.to_json())

    def process(df: Any, batch_id: int) -> None:
        save_stats()  # what happened since the last batch (2PC commits after Spark's commit log)
        df.mapInArrow(plain, "rows long").collect()  # the plain writer: one tiny result row per task
        writer(df, batch_id)
        save_stats()

    query = payments.writeStream.option("checkpointLocation", args.checkpoint).foreachBatch(process)
    try:
        query.trigger(availableNow=True).start().awaitTermination()
        writer.close()
        save_stats()
    except Exception as exc:
        from eosink._procs import error_line

        scrub_plain = PostgresConfig(plain_url, PLAIN_TABLE).scrub
        print(error_line(exc, lambda text: config.scrub(scrub_plain(text))), file=sys.stderr, flush=True)
        spark.stop()
        return EXIT_ERROR
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
