"""Running benchmark jobs: each Spark run is a fresh driver process (``python -m eosink.bench.runner JOB``).

A fresh process per run means a cold JVM for every contender alike, no memory carried from one
run to the next, and a driver whose peak RSS (``VmHWM`` of the Python driver and its JVM) belongs
to that run alone. The parent writes a job file, starts the driver in a session of its own,
waits (bounded), reaps the session and reads the result file back.

Throughput jobs stream the data set's Parquet files as one micro-batch (``availableNow``) through
the run's foreachBatch function: the eosink strategies, the at-least-once path, Spark's JDBC
writer and the Arrow floor all pay the same streaming overhead. The clock covers the query from
start to end plus, for eosink, ``flush()`` (2PC commits after Spark's commit log).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

from eosink._procs import processes
from eosink.bench.runs import BatchFunction, BenchAdapter, RunSpec

__all__ = ["Job", "floor_function", "get_adapter", "job_main", "peak_rss_mb", "run_job"]

SPARK_SCHEMA = "id BIGINT NOT NULL, name STRING, amount DECIMAL(12,2), at TIMESTAMP, note STRING"
RESULT_FILE = "result.json"


def get_adapter(name: str) -> BenchAdapter:
    """The benchmark adapter of sink ``name``, from its profile."""
    from eosink.profiles import get_profile

    return get_profile(name, "bench_adapter").bench_adapter()


@dataclass
class Job:
    """Everything a driver process needs for one run (written as JSON next to its checkpoint)."""

    kind: str  # "throughput" | "latency" | "rss"
    sink: str
    spec: RunSpec
    ns: str
    root: str
    master: str = "local[2]"
    participants: int = 2
    data: str = ""
    rows: int = 0
    rate: int = 0
    duration_s: float = 0.0
    warmup_s: float = 0.0
    trigger_ms: int = 200
    poll_ms: int = 10
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body = dict(self.__dict__)
        body["spec"] = self.spec.to_json()
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> Job:
        body = dict(body)
        body["spec"] = RunSpec.from_json(body["spec"])
        return cls(**body)


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


def _discard(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    rows = 0
    for batch in batches:
        rows += batch.num_rows
    yield pa.RecordBatch.from_pydict({"rows": [rows]})


class _Warm:
    """A ``mapInArrow`` function that only imports ``modules`` (warm-up: workers started, imports done)."""

    def __init__(self, modules: tuple[str, ...]) -> None:
        self.modules = modules

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import importlib

        for module in self.modules:
            importlib.import_module(module)
        yield from _discard(batches)


def warm_up(spark: Any, adapter: BenchAdapter, participants: int, data: str | None) -> None:
    """Start Spark's Python workers (one per concurrent task) with the sink's modules imported, and read the
    data once, so that no run's clock includes what a long-running streaming job pays only at its start."""
    modules = ("eosink.spark", *getattr(adapter, "worker_modules", ()))
    spark.range(0, participants * 100, 1, participants).mapInArrow(_Warm(modules), "rows long").collect()
    if data:
        spark.read.schema(SPARK_SCHEMA).parquet(data).write.format("noop").mode("overwrite").save()


def floor_function(participants: int) -> BatchFunction:
    """foreachBatch of spark-arrow-floor: the batch handed to Python as Arrow, counted, dropped."""

    def floor(df: Any, batch_id: int) -> None:
        df.coalesce(participants).mapInArrow(_discard, "rows long").collect()

    return floor


def spark_session(job: Job, conf: dict[str, str]) -> Any:
    from pyspark.sql import SparkSession

    from eosink._procs import spark_cds_options

    builder = (
        SparkSession.builder.master(job.master)
        .appName(f"eosink-bench-{job.spec.name}")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(job.participants))
        .config("spark.sql.streaming.numRecentProgressUpdates", "10000")
        .config("spark.driver.extraJavaOptions", spark_cds_options())
    )
    if job.master.startswith("local-cluster"):
        builder = builder.config("spark.executor.memory", "1g")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def finish_writer(fn: BatchFunction, strict: bool = True) -> list[float]:
    """Flush and close an eosink writer; its per-batch commit times (ms). Not ``strict``: a batch that a
    stopped query never logged stays prepared (the run's cleanup rolls it back) instead of failing the run."""
    from eosink.spark import BatchWriter

    if not isinstance(fn, BatchWriter):
        return []
    if not fn.flush(600 if strict else 10) and strict:
        raise RuntimeError("eosink did not commit every batch within 600 s")
    commit_ms = list(fn.stats.commit_latency_ms)
    fn.close()
    return commit_ms


def _throughput(job: Job, adapter: BenchAdapter, spark: Any) -> dict[str, Any]:
    checkpoint = str(Path(job.root) / "checkpoint")
    warm_up(spark, adapter, job.participants, job.data)
    fn = adapter.batch_function(job.spec, job.ns, checkpoint, job.participants)
    df = spark.readStream.schema(SPARK_SCHEMA).parquet(job.data)
    started = time.monotonic()
    query = df.writeStream.foreachBatch(fn).option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
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
    try:
        if job.kind == "latency":
            from eosink.bench.stream import latency_job

            body = latency_job(job, adapter, spark)
        else:
            body = _throughput(job, adapter, spark)
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
    from eosink._procs import kill_session

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
    with open(root / "driver.log", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "eosink.bench.runner", str(root / "job.json")],
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        finally:
            kill_session(proc.pid)
    result = root / RESULT_FILE
    if result.exists():
        body: dict[str, Any] = json.loads(result.read_text())
        return body
    tail = (root / "driver.log").read_text(errors="replace")[-1500:]
    return {"error": f"the driver left no result (exit {proc.returncode}); log tail: {tail}"}


def median(values: list[float]) -> float:
    """The median (for repeated runs)."""
    return float(statistics.median(values))


if __name__ == "__main__":
    sys.exit(job_main())
