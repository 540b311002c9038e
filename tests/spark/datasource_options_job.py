"""One Spark session that starts a ``format("eosink")`` stream once per set of options, in order.

Usage: datasource_options_job.py <plan.json> <results.json>. The plan holds ``input`` (JSON files),
``checkpoint`` and ``cases``: ``[{"name": ..., "options": {...}}, ...]``. Each case's query runs to
the end of the input (``availableNow``) on the same checkpoint; its result is ``"ok"`` or the
``EOSINK-ERROR <kind>: <message>`` line of the eosink error it raised (``Query.of(...).awaitTermination()``).
Options name secrets by environment variable.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    plan = json.loads(Path(argv[0]).read_text())
    from eosink._procs import error_line, save_json
    from eosink.demo import SCHEMA, job_session

    spark = job_session("local[2,4]", "eosink-options")
    import eosink.spark
    from eosink.errors import EosinkError
    from eosink.spark import Query

    eosink.spark.register(spark)
    results: dict[str, str] = {}
    for case in plan["cases"]:
        df = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(plan["input"])
        query = df.writeStream.format("eosink").options(**case["options"])
        try:
            started = query.option("checkpointLocation", plan["checkpoint"]).trigger(availableNow=True).start()
            Query.of(started).awaitTermination()
            results[case["name"]] = "ok"
        except EosinkError as exc:  # the eosink error itself, as a user catching it gets it
            results[case["name"]] = error_line(exc, lambda text: text)
        except Exception as exc:
            results[case["name"]] = f"not an eosink error: {error_line(exc, lambda text: text)}"
    save_json(argv[1], results)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
