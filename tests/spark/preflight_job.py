"""One Spark session that starts ``writer.start(...)`` streams into PostgreSQL, one case after another.

Usage: preflight_job.py <plan.json> <results.json>. The plan holds ``input`` (JSON files) and ``cases``:
``[{"name", "url_env", "table", "control_schema", "create_table", "strategy", "app_id", "checkpoint",
"sql": [statements run first, on EOSINK_TEST_PG_URL]}, ...]``. Each case builds its writer, starts it
with ``availableNow`` and waits (``query.run()``). Its result: ``error`` (the class of the exception the
user got, and whether it is an eosink error), ``started`` (whether Spark created the checkpoint: the
query started), ``active`` (queries still active afterwards). URLs come from the environment.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[0]).read_text())
    import psycopg

    import eosink
    from eosink._procs import save_json
    from eosink.connectors.postgres import PostgresConfig, PostgresSink
    from eosink.coordinator import CommitPolicy
    from eosink.demo import SCHEMA, job_session
    from eosink.errors import EosinkError

    spark = job_session("local[2,4]", "eosink-preflight")
    results: dict[str, Any] = {}
    for case in plan["cases"]:
        with psycopg.connect(os.environ["EOSINK_TEST_PG_URL"], autocommit=True) as admin:
            for statement in case.get("sql", []):
                admin.execute(statement)
        config = PostgresConfig(
            os.environ[case["url_env"]],
            table=case["table"],
            control_schema=case["control_schema"],
            create_table=case["create_table"],
            connect_timeout_s=3,
        )
        writer = eosink.foreach_batch(
            PostgresSink(config),
            app_id=case["app_id"],
            strategy=case["strategy"],
            checkpoint_location=case["checkpoint"],
            policy=CommitPolicy(transient_timeout_s=3),
        )
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(plan["input"])
        result: dict[str, Any] = {"error": None}
        try:
            writer.start(df.writeStream.trigger(availableNow=True)).run()
        except Exception as exc:
            result["error"] = type(exc).__name__
            result["eosink"] = isinstance(exc, EosinkError)
            result["message"] = str(exc)[:2000]
        try:
            writer.close()  # after a preflight failure on a fresh checkpoint: nothing to do, nothing raised
        except Exception as exc:
            result["close_error"] = f"{type(exc).__name__}: {str(exc)[:500]}"
        result["started"] = (Path(case["checkpoint"]) / "metadata").exists()
        result["active"] = len(spark.streams.active)
        results[case["name"]] = result
    save_json(argv[1], results)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
