"""A benchmark driver's SparkSession and what every run does with it, throughput and latency runs alike.

Before a run's clock starts, :func:`warm_up` starts Spark's Python workers with the sink's
modules imported and reads the data once, as a long-running streaming job did long ago (a
``format("eosink")`` run also writes a few rows through the data source first); after
the query, :func:`finish_writer` flushes and closes an eosink writer (2PC commits after Spark's
commit log, and that commit is counted). :func:`floor_function` is the Arrow floor's contender.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa

from eosink._procs import spark_cds_options
from eosink.bench.job import Job
from eosink.bench.runs import BatchFunction, BenchAdapter, DataSourceWrite, RunSpec, SeparateQueries
from eosink.spark import BatchWriter, FanOutWriter

__all__ = [
    "SPARK_SCHEMA",
    "arrow_task_function",
    "datasource_write",
    "eosink_function",
    "finish_writer",
    "floor_function",
    "query_checkpoint",
    "spark_session",
    "start_queries",
    "start_query",
    "warm_up",
]

ArrowTask = Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]
"""A ``mapInArrow`` function that yields one row, ``rows``: what it wrote."""

SPARK_SCHEMA = "id BIGINT NOT NULL, name STRING, amount DECIMAL(12,2), at TIMESTAMP, note STRING"


def spark_session(job: Job, conf: dict[str, str]) -> Any:
    """The session of ``job``'s driver: its master, no UI, UTC, one shuffle partition per participant,
    Spark's class-data archive, and the adapter's ``conf``."""
    from pyspark.sql import SparkSession

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


WARMED_KINDS = ("eosink", "datasource", "at-least-once", "spark")
"""The kinds of run whose own write :func:`warm_up` runs once on a few rows before the clock (all Spark runs
when it warms up on the data set)."""


def warm_up(spark: Any, adapter: BenchAdapter, job: Job, data: str | None) -> None:
    """Start Spark's Python workers (one per concurrent task) with the sink's modules imported, read the
    data once, and write a few rows the run's own way (:func:`_warm_write`), so that no run's clock
    includes what a long-running streaming job pays only at its start.
    """
    modules = ("eosink.spark", *getattr(adapter, "worker_modules", ()))
    spark.range(0, job.participants * 100, 1, job.participants).mapInArrow(_Warm(modules), "rows long").collect()
    if data:
        spark.read.schema(SPARK_SCHEMA).parquet(data).write.format("noop").mode("overwrite").save()
    if data and job.warm_on_data:
        _warm_write(spark, adapter, job, data)
    elif job.spec.kind in WARMED_KINDS:
        _warm_write(spark, adapter, job)


def _warm_write(spark: Any, adapter: BenchAdapter, job: Job, data: str | None = None) -> None:
    """Run a streaming query of a few rows (or of the whole data set ``data``) through the run's own write,
    into a scratch namespace that is dropped after.

    Each way of writing pays once, at a stream's first batch, what a long-running stream never pays
    again: eosink's driver imports its connector and opens its first client (boto3 alone takes about a
    second to import and load its service model), Spark's own sinks load their classes and open their
    file system or producer, and a ``format("eosink")`` write has Spark start its driver-side Python
    workers, cold. Every contender writes the same few rows this way first, so no clock includes it.

    A few rows leave the JVM's just-in-time compiler cold: the run's own write is then interpreted for its
    first seconds. Written over the whole data set (``--warm-up data``), every contender is measured in the
    compiled steady state of a stream that has run for a while.
    """
    ns = f"{job.ns}w"
    root = Path(job.root) / "warm-up"
    source = data or str(root / "input")
    if data is None:
        spark.range(0, job.participants * 10, 1, job.participants).selectExpr(
            "id",
            "'warm-up' AS name",
            "CAST(1 AS DECIMAL(12,2)) AS amount",
            "TIMESTAMP '2026-01-01 00:00:00' AS at",
            "'' AS note",
        ).write.mode("overwrite").parquet(source)
    adapter.prepare(ns, keyed=job.spec.strategy == "idempotent")
    try:
        checkpoint = str(root / "checkpoint")
        fn = adapter.batch_function(job.spec, ns, checkpoint, job.participants)
        df = spark.readStream.schema(SPARK_SCHEMA).parquet(source)
        for query in start_queries(df, fn, checkpoint, job.participants, {"availableNow": True}):
            query.awaitTermination()
        finish_writer(fn)
    finally:
        adapter.drop(ns)


def floor_function(participants: int) -> BatchFunction:
    """foreachBatch of spark-arrow-floor: the batch handed to Python as Arrow, counted, dropped."""
    return arrow_task_function(lambda batch_id: _discard, participants)


def arrow_task_function(task_for: Callable[[int], ArrowTask], participants: int) -> BatchFunction:
    """foreachBatch that runs ``task_for(batch_id)`` on each of ``participants`` partitions (eosink's
    at-least-once paths, the floor)."""

    def run(df: Any, batch_id: int) -> None:
        df.coalesce(participants).mapInArrow(task_for(batch_id), "rows long").collect()

    return run


def eosink_function(sink: Any, strategy: str | None, app_id: str, checkpoint: str, participants: int) -> BatchFunction:
    """foreachBatch of an eosink run: ``eosink.foreach_batch`` with ``strategy`` (idempotent: keyed by the data
    set's ``id``)."""
    import eosink

    chosen: Any = eosink.Idempotent(["id"]) if strategy == "idempotent" else strategy
    writer: BatchFunction = eosink.foreach_batch(
        sink, app_id=app_id, strategy=chosen, checkpoint_location=checkpoint, participants=participants
    )
    return writer


def datasource_write(
    spec: RunSpec, sink: str, config: Any, app_id: str, from_env: dict[str, str] | None = None
) -> DataSourceWrite:
    """The ``format("eosink")`` write of run ``spec``: ``config`` as options (secrets named by variable,
    as ``from_env`` maps them), its strategy (idempotent: keyed by the data set's ``id``) and input."""
    from eosink.datasource import options_from_config

    options = {"sink": sink, "app_id": app_id, "strategy": spec.strategy or "txid-check"}
    if spec.strategy == "idempotent":
        options["key_columns"] = "id"
    if spec.options.get("arrow") is False:
        options["arrow"] = "false"
    return DataSourceWrite({**options, **options_from_config(sink, config, from_env=from_env)})


def start_query(df: Any, fn: BatchFunction, checkpoint: str, participants: int, trigger: dict[str, Any]) -> Any:
    """Start the run's streaming query: ``foreachBatch(fn)``, eosink's data source in ``participants`` tasks
    (what foreach_batch gives its participants), or another streaming sink of Spark's."""
    if isinstance(fn, DataSourceWrite) and fn.format == "eosink":
        import eosink.spark

        eosink.spark.register(df.sparkSession)
        writer = df.coalesce(participants).writeStream.format("eosink").options(**fn.options)
    elif isinstance(fn, DataSourceWrite):
        writer = df.writeStream.format(fn.format).options(**fn.options)
    elif isinstance(fn, SeparateQueries):
        raise TypeError("several queries start through start_queries()")
    else:
        writer = df.writeStream.foreachBatch(fn)
    return writer.option("checkpointLocation", checkpoint).trigger(**trigger).start()


def query_checkpoint(checkpoint: str, n: int) -> str:
    """The checkpoint of the ``n``-th query of a :class:`~eosink.bench.runs.SeparateQueries` run."""
    return str(Path(checkpoint) / f"query-{n}")


def start_queries(df: Any, fn: BatchFunction, checkpoint: str, participants: int, trigger: dict[str, Any]) -> list[Any]:
    """Start the run's streaming queries: one, or each of a :class:`~eosink.bench.runs.SeparateQueries` run's
    over the same input, each with the checkpoint :func:`query_checkpoint` names."""
    if not isinstance(fn, SeparateQueries):
        return [start_query(df, fn, checkpoint, participants, trigger)]
    return [
        start_query(df, one, query_checkpoint(checkpoint, n), participants, trigger) for n, one in enumerate(fn.queries)
    ]


def finish_writer(fn: BatchFunction, strict: bool = True) -> list[float]:
    """Flush and close an eosink writer; its per-batch commit times (ms): a fan-out's, its sinks' commits of a
    batch added up; several queries', every query's. Not ``strict``: a batch that a stopped query never logged
    stays prepared (the run's cleanup rolls it back) instead of failing the run."""
    if isinstance(fn, SeparateQueries):
        return [ms for one in fn.queries for ms in finish_writer(one, strict)]
    if not isinstance(fn, BatchWriter | FanOutWriter):
        return []
    if not fn.flush(600 if strict else 10) and strict:
        raise RuntimeError("eosink did not commit every batch within 600 s")
    if isinstance(fn, FanOutWriter):
        per_sink = [stats.commit_latency_ms for stats in fn.stats.values()]
        commit_ms = [sum(batch) for batch in zip(*per_sink, strict=False)]
    else:
        commit_ms = list(fn.stats.commit_latency_ms)
    fn.close()
    return commit_ms
