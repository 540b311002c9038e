"""The chaos harness's Spark job: ``python -m eosink.chaos.job ...``, run and killed by the runner.

One streaming query over JSON files (one file per micro-batch, ``availableNow``): a stateful
per-key step (``applyInPandasWithState``, update mode) keeps the running sum of ``amount`` and
the ``seq``-ordered concatenation of ``token`` (:func:`eosink.chaos.oracle.advance`), and emits
``(batch_id, key, running_sum, concat, n_tokens)`` per key a batch touched. ``foreachBatch``
persists that output, appends what this attempt computed to the oracle log (one JSON line per
attempt, fsynced before anything is written to the sink), and writes it through eosink into the
target (``--strategy``), or with the target's plain writer (``--strategy naive``, the baseline).
The writer's stats are saved to ``--stats-out`` whenever they change (2PC's commits too, which
come after Spark's commit log), so a killed run still reports what it did.

``--nondeterministic`` shuffles each batch's tokens at random instead of ordering them by
``seq``: every replay of a batch computes different concatenations.

Secrets come from the environment (see :mod:`eosink.chaos.target`), never from argv. Exit
codes: 0 input exhausted; 3 an error, with ``EOSINK-ERROR <kind>: ...`` on stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from eosink._procs import error_line
from eosink._saved_stats import keep_stats
from eosink.chaos.oracle import advance
from eosink.chaos.target import get_target
from eosink.demo.session import job_session
from eosink.strategies import STRATEGY_NAMES

__all__ = ["main"]

EXIT_ERROR = 3
INPUT_SCHEMA = "id LONG, key STRING, seq LONG, token STRING, amount LONG"
OUTPUT_SCHEMA = "key STRING, running_sum LONG, concat STRING, n_tokens LONG"
STATE_SCHEMA = "total LONG, concat STRING, n LONG"
OUTPUT_COLUMNS = ("batch_id", "key", "running_sum", "concat", "n_tokens")


def _args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="eosink.chaos.job", description=__doc__.split("\n\n")[0] if __doc__ else None)
    ap.add_argument("--target", default="postgres")
    ap.add_argument("--input", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--control-schema", required=True)
    ap.add_argument("--app-id", required=True)
    ap.add_argument("--strategy", choices=[*STRATEGY_NAMES, "naive"], required=True)
    ap.add_argument("--master", default="local[2,4]")
    ap.add_argument("--participants", type=int, default=2)
    ap.add_argument("--nondeterministic", action="store_true")
    ap.add_argument("--oracle-log", required=True)
    ap.add_argument("--stats-out", required=True)
    return ap.parse_args(argv)


def _state_step(nondeterministic: bool) -> Callable[[Any, Iterator[Any], Any], Iterator[Any]]:
    """The per-key state function for ``applyInPandasWithState``."""

    def step(key: Any, frames: Iterator[Any], state: Any) -> Iterator[Any]:
        import pandas as pd

        prev = tuple(state.get) if state.exists else (0, "", 0)
        items: list[tuple[int, str, int]] = []
        for pdf in frames:
            items.extend(zip(pdf["seq"].tolist(), pdf["token"].tolist(), pdf["amount"].tolist(), strict=True))
        if nondeterministic:
            random.SystemRandom().shuffle(items)  # a step that changes on every replay
        else:
            items.sort()
        total, concat, n = advance((int(prev[0]), str(prev[1]), int(prev[2])), items)
        state.update((total, concat, n))
        yield pd.DataFrame({"key": [key[0]], "running_sum": [total], "concat": [concat], "n_tokens": [n]})

    return step


def _append_line(path: str, record: dict[str, Any]) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


def plain_writer(target: Any, table: str) -> Callable[[Any, int], None]:
    """The baseline's foreachBatch: the target's plain writer, then fault point ``F8``, its crash window
    (written, into every sink of a fan-out, and not yet in Spark's commit log)."""
    from eosink import faults
    from eosink.faults import FaultPoint

    write_plain = target.job_naive_writer(table)

    def write(df: Any, batch_id: int) -> None:
        write_plain(df, batch_id)
        faults.hit(FaultPoint.F8, batch_id)

    return write


def main(argv: Sequence[str] | None = None) -> int:
    """Run the query until its input is exhausted; 0 when done, 3 on an error."""
    args = _args(argv)
    from eosink.faults import export_crash_scope

    export_crash_scope()  # a fault point that fires in an executor crashes this whole driver
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    import eosink

    target = get_target(args.target)
    jars = os.environ.get("EOSINK_CHAOS_JARS", "")
    if args.strategy == "naive" and jars:  # the baseline's writer (JDBC, Kafka, s3a, Delta) needs its jars
        from eosink.services.spark_jars import class_path_submit_args

        conf = json.loads(os.environ.get("EOSINK_CHAOS_SPARK_CONF") or "{}")  # and its static settings, if any
        os.environ["PYSPARK_SUBMIT_ARGS"] = class_path_submit_args(jars, conf)
    spark = job_session(args.master, f"eosink-chaos-{args.strategy}")
    source = spark.readStream.schema(INPUT_SCHEMA).option("maxFilesPerTrigger", 1).json(args.input)
    stateful = source.groupBy("key").applyInPandasWithState(
        _state_step(args.nondeterministic), OUTPUT_SCHEMA, STATE_SCHEMA, "update", GroupStateTimeout.NoTimeout
    )
    writer: eosink.BatchWriter | eosink.FanOutWriter | None = None
    naive_write: Callable[[Any, int], None] | None = None
    if args.strategy == "naive":
        naive_write = plain_writer(target, args.table)
    else:
        writer = eosink.foreach_batch(
            target.job_sink(args.table, args.control_schema),
            app_id=args.app_id,
            strategy=args.strategy,
            checkpoint_location=args.checkpoint,
            participants=args.participants,
        )
        keep_stats(writer, args.stats_out)
    attempt = f"{os.getpid()}-{os.urandom(4).hex()}"

    def process(df: Any, batch_id: int) -> None:
        out = df.select(F.lit(batch_id).cast("long").alias("batch_id"), *OUTPUT_COLUMNS[1:]).persist()
        try:
            rows = [[r["key"], r["running_sum"], r["concat"], r["n_tokens"]] for r in out.collect()]
            _append_line(args.oracle_log, {"attempt": attempt, "batch": batch_id, "rows": rows})
            if writer is not None:
                writer(target.job_frame(out), batch_id)
            elif naive_write is not None:
                naive_write(out, batch_id)
        finally:
            out.unpersist()

    query = stateful.writeStream.outputMode("update").option("checkpointLocation", args.checkpoint)
    try:
        query.foreachBatch(process).trigger(availableNow=True).start().awaitTermination()
        if writer is not None:
            writer.close()
    except Exception as exc:
        print(error_line(exc, target.scrub), file=sys.stderr, flush=True)
        spark.stop()
        return EXIT_ERROR
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
