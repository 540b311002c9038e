"""A Spark streaming driver writing into PostgreSQL through eosink (the PostgreSQL kill-and-restart tests).

The same job as ``eosink.demo.job_main`` (JSON files, one per micro-batch, ``availableNow``,
``spark.driver.maxResultSize=1m``, fault points from ``EOSINK_FAULTS``), with a
:class:`~eosink.connectors.postgres.PostgresSink` instead of the reference sink. Two queries:

* ``rows``: every input row appended (or, idempotent, upserted by a generated or given key);
* ``balance``: a running balance per account (``groupBy(account).sum(amount)``, update mode),
  upserted by ``account``.

The connection string comes from ``EOSINK_TEST_PG_URL`` (never from argv: it holds a password).
Exit codes: 0 done, 3 an eosink error (``EOSINK-ERROR <kind>: ...`` on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from eosink.demo import SCHEMA, job_session

EXIT_EOSINK_ERROR = 3


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="pg_driver", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--input", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--control-schema", required=True)
    ap.add_argument("--app-id", required=True)
    ap.add_argument("--strategy", default="2pc")
    ap.add_argument("--key-columns", default="", help="comma-separated user keys for the idempotent strategy")
    ap.add_argument("--query", choices=["rows", "balance"], default="rows")
    ap.add_argument("--master", default="local[2,4]")
    ap.add_argument("--participants", type=int, default=3)
    ap.add_argument("--stats-out")
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _args(argv)
    from eosink.faults import export_crash_scope

    export_crash_scope()  # a fault point that fires in an executor crashes this whole driver
    url = os.environ["EOSINK_TEST_PG_URL"]
    from pyspark.sql import functions as F

    import eosink
    from eosink._procs import error_line
    from eosink.connectors.postgres import PostgresConfig, PostgresSink

    spark = job_session(args.master, "eosink-pg-test")
    df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    config = PostgresConfig(url, args.table, control_schema=args.control_schema, create_table=True)
    output_mode = "append"
    if args.query == "balance":
        df = df.groupBy("account").agg(F.sum("amount").alias("balance"))
        config = replace(config, mode="upsert", key_columns=("account",))
        output_mode = "update"
    sink = PostgresSink(config)
    keys = [k for k in args.key_columns.split(",") if k]
    writer = eosink.foreach_batch(
        sink,
        app_id=args.app_id,
        strategy=eosink.Idempotent(keys) if keys else args.strategy,
        checkpoint_location=args.checkpoint,
        participants=args.participants,
    )
    query = df.writeStream.outputMode(output_mode).option("checkpointLocation", args.checkpoint).foreachBatch(writer)
    try:
        query.trigger(availableNow=True).start().awaitTermination()
        writer.close()
    except Exception as exc:
        print(error_line(exc, sink.config.scrub), file=sys.stderr, flush=True)
        spark.stop()
        return EXIT_EOSINK_ERROR
    if args.stats_out:
        Path(args.stats_out).write_text(json.dumps(writer.stats.to_json()))
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
