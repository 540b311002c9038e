"""What the benchmarks of file and object sinks (S3, HDFS) share.

:class:`SparkFileSink` is the baseline they are judged against: Spark's streaming file sink (the
``FileStreamSink`` that ``writeStream.format("parquet")`` runs, exactly-once for readers of its
``_spark_metadata`` log), called per micro-batch from foreachBatch so that it pays the same
streaming overhead as every other run. :func:`latency_buckets` turns the ``at`` stamps of rows a
poll found into the per-millisecond counts that :meth:`~eosink.bench.runs.BenchAdapter.poll_visible`
returns.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eosink.bench.runs import Baseline, BenchGoals, RunSpec, generic_runs
from eosink.errors import ConfigurationError

__all__ = [
    "AT_LEAST_ONCE_PREFIX",
    "SparkFileSink",
    "at_least_once_name",
    "file_sink_goals",
    "file_sink_runs",
    "latency_buckets",
]

AT_LEAST_ONCE_PREFIX = "alo-"
"""Names of eosink-at-least-once's files and objects start so: ``alo-<batch:020d>-p<partition>-a<attempt>-<hex>``."""

_FILE_SINKS = (
    "org.apache.spark.sql.execution.streaming.sinks.FileStreamSink",  # Spark 4
    "org.apache.spark.sql.execution.streaming.FileStreamSink",  # Spark 3.5
)


def at_least_once_name(batch_id: int) -> str:
    """A name for the file (or object) the calling Spark task writes at least once: batch, partition and
    attempt, and a random part (a retried task writes a second file)."""
    import uuid

    from pyspark import TaskContext

    ctx = TaskContext.get()
    part, attempt = (ctx.partitionId(), ctx.attemptNumber()) if ctx is not None else (0, 0)
    return f"{AT_LEAST_ONCE_PREFIX}{batch_id:020d}-p{part}-a{attempt}-{uuid.uuid4().hex[:8]}"


def file_sink_runs(modes: tuple[str, ...], raw_run: str) -> list[RunSpec]:
    """The generic runs, Spark's file sink, and the store's own raw ingest run ``raw_run``."""
    return [*generic_runs(modes, ()), RunSpec("spark-file-sink", "spark"), RunSpec(raw_run, "external")]


def file_sink_goals(raw_run: str) -> BenchGoals:
    """What a file sink is judged on: the best exactly-once run at least 1.0x Spark's file sink at every size
    (``raw_run`` shown only), 2pc at least 0.85x at-least-once, visible at most 150 ms p50 after Spark's commit
    log. Every size runs three rounds: one 5M-row run of Spark's file sink varies by 15 % from round to round."""
    return BenchGoals(
        baselines=(Baseline("spark-file-sink", "spark-file-sink", 1.0), Baseline(raw_run, raw_run)),
        vs_at_least_once=(("2pc", 0.85),),
        commit_p50_ms=None,
        visible_after_commit_log_p50_ms=150.0,
        baselines_at_every_size=True,
        rounds=(3, 3),
    )


class SparkFileSink:
    """foreachBatch function of ``spark-file-sink``: Spark's streaming Parquet file sink on ``path``, made at
    the first batch."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._sink: Any = None

    def __call__(self, df: Any, batch_id: int) -> None:
        if self._sink is None:
            self._sink = self._make(df.sparkSession)
        self._sink.addBatch(batch_id, df._jdf)

    def _make(self, session: Any) -> Any:
        jvm = session.sparkContext._jvm
        found = [c for name in _FILE_SINKS if type(c := _jvm_class(jvm, name)).__name__ == "JavaClass"]
        if not found:
            raise ConfigurationError("This Spark has no FileStreamSink class.", f"Expected one of {_FILE_SINKS}.")
        utils = jvm.org.apache.spark.api.python.PythonUtils
        parquet = jvm.org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat()
        no_columns = utils.toSeq(jvm.java.util.ArrayList())
        no_options = utils.toScalaMap(jvm.java.util.HashMap())
        return found[0](session._jsparkSession, self.path, parquet, no_columns, no_options)


def _jvm_class(jvm: Any, name: str) -> Any:
    """``jvm``'s view of ``name``: a JavaClass when the class exists, a JavaPackage when it does not."""
    node = jvm
    for part in name.split("."):
        node = getattr(node, part)
    return node


def latency_buckets(at: pa.Array, seen_s: float, warm_from_us: int) -> dict[int, int]:
    """Rows per whole millisecond from their ``at`` to ``seen_s``; rows stamped before ``warm_from_us``: -1."""
    import numpy as np

    stamps = pc.cast(pc.cast(at, pa.timestamp("us", "UTC")), pa.int64()).to_numpy(zero_copy_only=False)
    ms = np.where(stamps < warm_from_us, -1, (int(seen_s * 1_000_000) - stamps) // 1000)
    values, counts = np.unique(ms, return_counts=True)
    return {int(v): int(c) for v, c in zip(values, counts, strict=True)}
