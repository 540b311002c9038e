"""Running benchmark jobs: each Spark run is a fresh driver process (``python -m eosink.bench.runner JOB``).

A fresh process per run means a cold JVM for every contender alike, no memory carried from one
run to the next, and a driver whose peak RSS (``VmHWM`` of the Python driver and its JVM) belongs
to that run alone. The parent writes a job file (:class:`~eosink.bench.job.Job`), starts the
driver as a :class:`~eosink._driver.DriverRun`, waits (bounded), reaps the session and reads the
result file back.

Throughput jobs stream the data set's Parquet files as one micro-batch (``availableNow``) through
the run's foreachBatch function: the eosink strategies, the at-least-once path, Spark's JDBC
writer and the Arrow floor all pay the same streaming overhead. The clock covers the query from
start to end plus, for eosink, ``flush()`` (2PC commits after Spark's commit log). Latency jobs
are :mod:`eosink.bench.stream`'s.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosink._driver import DriverRun
from eosink._procs import processes
from eosink.bench.job import Job
from eosink.bench.runs import BenchAdapter
from eosink.bench.session import SPARK_SCHEMA, finish_writer, floor_function, spark_session, start_queries, warm_up
from eosink.bench.stream import latency_job
from eosink.errors import ConfigurationError
from eosink.profiles import get_profile

# Job and the session's functions lived here; they stay importable from here.
__all__ = [
    "SPARK_SCHEMA",
    "Job",
    "finish_writer",
    "floor_function",
    "get_adapter",
    "job_main",
    "peak_rss_mb",
    "root_cause",
    "run_job",
    "spark_session",
    "warm_up",
]

RESULT_FILE = "result.json"


def get_adapter(name: str, topology: str = "single") -> BenchAdapter:
    """The benchmark adapter of sink ``name``, from its profile, on servers laid out as ``topology``; ``a+b``: a
    fan-out into those sinks in that order (:class:`~eosink.bench.fanout.FanOutAdapter`)."""
    if "+" in name:
        if topology != "single":
            raise ConfigurationError(
                f"--topology {topology} takes one sink, not the fan-out {name!r}.", "Name one sink with --sink."
            )
        from eosink.bench.fanout import FanOutAdapter

        return FanOutAdapter([get_adapter(part) for part in name.split("+")])
    profile = get_profile(name, "bench_adapter")
    if topology not in profile.bench_topologies:
        raise ConfigurationError(
            f"The {name} benchmark offers the topologies {', '.join(profile.bench_topologies)}, not {topology!r}.",
            "Pick one of those: a three-node Kafka is --sink kafka --topology cluster, a four-node MinIO --sink s3 "
            "--topology cluster, an HA HDFS --sink hdfs --topology ha.",
        )
    if topology == "single":  # a profile written before topologies existed takes no such argument
        return profile.bench_adapter()
    return profile.bench_adapter(topology=topology)


# -- memory ---------------------------------------------------------------------------------------


def _status_kb(pid: int, key: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _java_children(pid: int) -> list[int]:
    return [child for child, comm, fields in processes() if comm == "java" and int(fields[1]) == pid]


def peak_rss_mb(pid: int | None = None) -> tuple[float, float]:
    """Peak RSS (``VmHWM``) in MB of process ``pid`` (default: this one) and of its ``java`` children."""
    pid = os.getpid() if pid is None else pid
    python = _status_kb(pid, "VmHWM") / 1024
    jvm = sum(_status_kb(p, "VmHWM") for p in _java_children(pid)) / 1024
    return python, jvm


# -- the driver process ----------------------------------------------------------------------------------


def _throughput(job: Job, adapter: BenchAdapter, spark: Any) -> dict[str, Any]:
    checkpoint = str(Path(job.root) / "checkpoint")
    warm_up(spark, adapter, job, job.data)
    fn = adapter.batch_function(job.spec, job.ns, checkpoint, job.participants)
    df = spark.readStream.schema(SPARK_SCHEMA).parquet(job.data)
    started = time.monotonic()
    for query in start_queries(df, fn, checkpoint, job.participants, {"availableNow": True}):
        query.awaitTermination()
    commit_ms = finish_writer(fn)
    seconds = time.monotonic() - started
    python, jvm = peak_rss_mb()
    return {"seconds": seconds, "commit_ms": commit_ms, "python_mb": python, "jvm_mb": jvm}


_ERROR_LINE = re.compile(r"^\s*([A-Za-z_][\w.]*(Error|Exception|Fault)): \S")


def root_cause(text: str, limit: int = 1500) -> str:
    """The error line that says what went wrong, first, then the start of ``text``.

    A failed foreachBatch reaches the driver as a Spark exception wrapping a Python traceback; the
    eosink error (or else the innermost Python error) inside it is what a reader needs.
    """
    lines = [line.strip() for line in text.splitlines() if _ERROR_LINE.match(line)]
    eosink = [line for line in lines if line.startswith("eosink.")]
    found = eosink[0] if eosink else (lines[-1] if len(lines) > 1 else "")
    return (f"{found} | {text}" if found else text)[:limit]


def job_main(argv: list[str] | None = None) -> int:
    """Run the job described by the JSON file ``argv[0]``; write its result next to it."""
    path = Path((argv if argv is not None else sys.argv[1:])[0])
    job = Job.from_json(json.loads(path.read_text()))
    adapter = get_adapter(job.sink)
    out = Path(job.root) / RESULT_FILE
    spark = spark_session(job, adapter.spark_conf())
    run = latency_job if job.kind == "latency" else _throughput
    try:
        body = run(job, adapter, spark)
    except Exception as exc:
        out.write_text(json.dumps({"error": adapter.scrub(root_cause(f"{type(exc).__name__}: {exc}"))}))
        return 1
    finally:
        closer: Callable[[], None] | None = getattr(adapter, "close", None)
        if closer is not None:
            closer()
    out.write_text(json.dumps(body))
    spark.stop()
    return 0


# -- the parent ----------------------------------------------------------------------------------------


def run_job(job: Job, env: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """Run ``job`` in a fresh driver process; its result (``{"error": ...}`` when it failed)."""
    root = Path(job.root)
    root.mkdir(parents=True, exist_ok=True)
    (root / "job.json").write_text(json.dumps(job.to_json()))
    (root / RESULT_FILE).unlink(missing_ok=True)
    full_env = dict(os.environ, **env)
    full_env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
    )
    cmd = [sys.executable, "-m", "eosink.bench.runner", str(root / "job.json")]
    with DriverRun(cmd, full_env, root / "driver.log", timeout_s=timeout_s, merge_stdout=True) as driver:
        driver.watch()
    result = root / RESULT_FILE
    if result.exists():
        body: dict[str, Any] = json.loads(result.read_text())
        return body
    outcome = driver.outcome()
    late = f", killed after {timeout_s:.0f} s" if outcome.status == "timeout" else ""
    return {"error": f"the driver left no result (exit {outcome.returncode}{late}); log tail: {outcome.error or ''}"}


def median(values: list[float]) -> float:
    """The median (for repeated runs)."""
    return float(statistics.median(values))


if __name__ == "__main__":
    sys.exit(job_main())
