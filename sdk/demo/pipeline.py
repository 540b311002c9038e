"""The demo's Spark driver: ``python -m eosink.demo pipeline ...``, started, killed and restarted by the demo.

One streaming query over payment files (JSON, one file per micro-batch, ``availableNow``). Each
micro-batch goes into one sink twice, through the sink's :class:`~eosink.demo.target.DemoTarget`:

* ``plain``: what many pipelines do today, a plain ``foreachBatch`` whose tasks write their rows
  and commit (at-least-once: a replayed batch or a retried task writes again);
* ``eosink``: the same rows through eosink with the chosen strategy.

The plain write runs first, so a crash anywhere in eosink's protocol is also a crash after the
plain write. Each writer reaches the server through its own fault proxy, whose address is in the
environment (never in argv: it may hold a password). The writer's counters are saved to
``--stats-out`` whenever they change (2PC's commits too, which come after Spark's commit log), so
a killed run still reports what it did. Exit codes: 0 input exhausted; 3 an error, with
``EOSINK-ERROR <kind>: ...`` on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import Any

import eosink
from eosink._procs import error_line
from eosink._saved_stats import keep_stats
from eosink.demo.fanout import demo_target
from eosink.demo.session import SCHEMA, job_session
from eosink.demo.target import CONF_VAR, JARS_VAR
from eosink.faults import export_crash_scope
from eosink.strategies import STRATEGY_NAMES

__all__ = ["APP_ID", "SCHEMA", "main"]

APP_ID = "demo-payments"
EXIT_ERROR = 3


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="eosink.demo pipeline", description="The demo's Spark streaming driver.")
    ap.add_argument("--sink", default="postgres", help="the sink (a profile offering the demo), or several joined by +")
    ap.add_argument("--input", required=True, help="directory of payment files, one per micro-batch")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--strategy", choices=STRATEGY_NAMES, default="2pc")
    ap.add_argument("--master", default="local[2,4]", help="local[N,maxFailures]: failed tasks are retried")
    ap.add_argument("--participants", type=int, default=2)
    ap.add_argument("--stats-out", required=True)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the query to the end of its input; 0 when done, 3 on an error."""
    args = _args(argv)
    export_crash_scope()  # a fault point that fires in an executor crashes this whole driver
    target = demo_target(args.sink)
    writer = eosink.foreach_batch(
        target.job_sink(APP_ID),
        app_id=APP_ID,
        strategy=eosink.Idempotent(["id"]) if args.strategy == "idempotent" else args.strategy,
        checkpoint_location=args.checkpoint,
        participants=args.participants,
    )
    keep_stats(writer, args.stats_out)
    plain = target.job_plain_writer()
    jars = os.environ.get(JARS_VAR, "")
    if jars:  # the plain writer's own jars (Spark's Kafka sink, say), and its static settings
        from eosink.services.spark_jars import class_path_submit_args

        conf = json.loads(os.environ.get(CONF_VAR) or "{}")
        os.environ["PYSPARK_SUBMIT_ARGS"] = class_path_submit_args(jars, conf)
    spark = job_session(args.master, f"eosink-demo-{args.strategy}")
    payments = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)

    def process(df: Any, batch_id: int) -> None:
        plain(df, batch_id)
        writer(df, batch_id)

    query = payments.writeStream.trigger(availableNow=True)
    try:
        query.option("checkpointLocation", args.checkpoint).foreachBatch(process).start().awaitTermination()
        writer.close()
    except Exception as exc:
        print(error_line(exc, target.scrub), file=sys.stderr, flush=True)
        spark.stop()
        return EXIT_ERROR
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
