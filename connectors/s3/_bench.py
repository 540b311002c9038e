"""The benchmark's S3 adapter: the harness's MinIO, eosink's S3Sink, and Spark's own streaming file sink.

Every run writes the data set's rows as Parquet objects under a prefix of its own
(``eosink-bench/<ns>/`` in the bucket ``eosink-bench``), removed again after the run.
Baselines: Spark's streaming Parquet file sink to ``s3a://`` (``spark-file-sink``: the
``FileStreamSink`` that ``writeStream.format("parquet")`` runs, called per micro-batch from
foreachBatch so that it pays the same streaming overhead as every other run; its
``_spark_metadata`` log makes it exactly-once for readers of that log), with the ``hadoop-aws``
jars from :class:`~eosink.services.spark_jars.SparkJars`; and a raw boto3 upload of the data set's
own Parquet files (``raw-upload``: boto3's managed transfer, multipart, its default threads): the
store's ingest limit for one client.

``eosink-at-least-once`` is eosink's data path with the exactly-once bookkeeping taken out: the
same ``mapInArrow`` participants, the same row checks and the same Parquet encoder streaming parts
into a multipart upload (:class:`~eosink.connectors.s3._encode.ObjectEncoder` over a
:class:`~eosink.stores.s3_upload.PartWriter`), but each object is completed by its task at
once: no epoch, commit marker, bundle or commit step. A retried task leaves its rows twice.

Latency: a poll lists the app_id's commit markers (one LIST, nothing downloaded) and stamps each new
batch with the moment it was first seen; the rows' ``at`` stamps are read afterwards, in a poll that
found nothing new, so reading them never delays the sight of a batch. The local clock serves (the
store and the job share the machine). Credentials reach the job through its environment (the JVM's
s3a through the AWS SDK's environment provider), never through argv or Spark's configuration.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eosink.bench.datasets import Dataset
from eosink.bench.file_sinks import (
    AT_LEAST_ONCE_PREFIX,
    SparkFileSink,
    at_least_once_name,
    file_sink_goals,
    file_sink_runs,
    latency_buckets,
)
from eosink.bench.object_store import BUCKET, ObjectStoreBench, app_id, object_prefix
from eosink.bench.runs import BatchFunction, BenchGoals, RunSpec, run_app_ids
from eosink.errors import ConfigurationError

__all__ = ["S3Adapter", "app_id", "object_prefix"]


class _DirectPut:
    """``mapInArrow`` function of eosink-at-least-once: the partition's rows as one object, completed at once."""

    def __init__(self, config: Any, batch_id: int) -> None:
        self.config = config
        self.batch_id = batch_id

    def key(self) -> str:
        return f"{self.config.prefix}/{at_least_once_name(self.batch_id)}.parquet"

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eosink.connectors.s3._encode import ObjectEncoder
        from eosink.stores.encoding import check_record_sizes
        from eosink.stores.s3 import client as s3_client
        from eosink.stores.s3_upload import PartWriter

        encoder: ObjectEncoder | None = None
        rows = 0
        try:
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                check_record_sizes(batch, self.config.max_record_bytes, "at-least-once")
                if encoder is None:
                    s3 = s3_client(self.config.connection())
                    encoder = ObjectEncoder(self.config, PartWriter(self.config, s3, self.key()), batch.schema)
                encoder.write(batch)
                rows += batch.num_rows
            if encoder is not None:
                encoder.finish(transactional=False)
        except BaseException:
            if encoder is not None:
                encoder.abort()
            raise
        yield pa.RecordBatch.from_pydict({"rows": [rows]})


@dataclass
class _Poll:
    """What the latency poll of one namespace has seen: the newest key, and batches whose rows are unread."""

    mode: str | None = None
    """``markers`` (eosink) or ``objects`` (at-least-once), once the first batch shows which."""
    last_key: str | None = None
    last_batch: int = -1
    seen: set[str] = field(default_factory=set)
    pending: list[tuple[float, str]] = field(default_factory=list)
    """(first seen, wall clock s; key of a marker or an at-least-once object) whose rows are unread."""


class S3Adapter(ObjectStoreBench):
    """:class:`~eosink.bench.runs.BenchAdapter` for S3 (the harness's MinIO, or ``EOSINK_S3_*``)."""

    name = "s3"
    worker_modules: tuple[str, ...] = ("eosink.connectors.s3", "boto3", "pyarrow.parquet")
    settings = {"bucket": BUCKET, "part size": "8 MiB", "format": "parquet (snappy)"}

    fanout_member = True
    """Its target can be checked when written as a fan-out's sink (its rows are counted whatever the app_id)."""

    def __init__(self, modes: tuple[str, ...] = ("default",), *, topology: str = "single") -> None:
        super().__init__(modes, topology=topology)
        self._polls: dict[str, _Poll] = {}

    def goals(self) -> BenchGoals:
        return file_sink_goals("raw-upload")

    def runs(self) -> list[RunSpec]:
        return file_sink_runs(self.modes, "raw-upload")

    def verify(self, ns: str) -> int:
        """Rows readers of the run's own commit protocol see: for eosink, the objects its markers name (distinct
        ids when its markers carry upsert keys; on its own or as a fan-out's sink); otherwise every Parquet
        object under the prefix."""
        from eosink.connectors.s3 import committed_markers

        config = self.config(ns)
        if not self._has_bookkeeping(ns):
            return int(self._dataset(config, None).count_rows())
        markers = [m for app in run_app_ids(app_id(ns), self.name) for m in committed_markers(config, app)]
        keys = [o.key for m in markers for o in m.objects]
        if not keys:
            return 0
        found = self._dataset(config, keys)
        if any(m.keys for m in markers):
            return int(pc.count_distinct(found.to_table(columns=["id"]).column("id")).as_py())
        return int(found.count_rows())

    def drop(self, ns: str) -> None:
        """Abort the prefix's uploads and delete its objects."""
        self._polls.pop(ns, None)
        super().drop(ns)

    def run_external(self, spec: RunSpec, ns: str, dataset: Dataset) -> float:
        """``raw-upload``: boto3's managed upload of the data set's Parquet files, one after the other."""
        if spec.name != "raw-upload":
            raise ConfigurationError(f"No external run {spec.name!r} for S3.", "Use raw-upload.")
        from boto3.s3.transfer import TransferConfig

        s3 = self._client()
        transfer = TransferConfig(multipart_threshold=8 << 20, multipart_chunksize=8 << 20)
        files = sorted(Path(dataset.parquet).glob("*.parquet"))
        started = time.monotonic()
        for path in files:
            s3.upload_file(str(path), BUCKET, f"{object_prefix(ns)}/{path.name}", Config=transfer)
        return time.monotonic() - started

    # -- in the Spark job ---------------------------------------------------------------------------

    def config(self, ns: str) -> Any:
        """The S3Config of namespace ``ns`` (Parquet, snappy, the default 8 MiB parts)."""
        from eosink.connectors.s3 import S3Config

        store = self._require_store()
        return S3Config(
            BUCKET,
            object_prefix(ns),
            endpoint_url=store.endpoint_url,
            access_key_id=store.access_key,
            secret_access_key=store.secret_key,
            region=store.region,
        )

    def eosink_sink(self, spec: RunSpec, ns: str) -> Any:
        from eosink.connectors.s3 import S3Sink

        return S3Sink(self.config(ns))

    def batch_function(self, spec: RunSpec, ns: str, checkpoint: str, participants: int) -> BatchFunction:
        from eosink.bench.session import arrow_task_function, eosink_function

        if spec.kind == "eosink":
            return eosink_function(self.eosink_sink(spec, ns), spec.strategy, app_id(ns), checkpoint, participants)
        if spec.kind == "at-least-once":
            config = self.config(ns)
            return arrow_task_function(lambda batch_id: _DirectPut(config, batch_id), participants)
        if spec.kind == "spark":
            return SparkFileSink(f"s3a://{BUCKET}/{object_prefix(ns)}")
        if spec.kind == "floor":
            from eosink.bench.runner import floor_function

            return floor_function(participants)
        raise ConfigurationError(f"Run {spec.name!r} ({spec.kind}) is not a Spark run.", "Run it with run_external.")

    def poll_visible(self, ns: str, after_id: int, warm_from_us: int) -> tuple[list[tuple[int, int]], int, int | None]:
        """New batches are stamped as soon as a LIST shows them; their rows are read in a later poll that finds
        nothing new (see the module docstring)."""
        state = self._polls.setdefault(ns, _Poll())
        if self._list_new(ns, state):
            return [], after_id, self._batch(state)
        buckets, hi = self._read_pending(ns, state, warm_from_us)
        return sorted(buckets.items()), max(after_id, hi), self._batch(state)

    def close(self) -> None:
        self._polls.clear()

    # -- latency poll --------------------------------------------------------------------------------

    def _list_new(self, ns: str, state: _Poll) -> bool:
        """List what became visible since the last poll; stamp it. True when something new was seen."""
        now = time.time()
        if state.mode in (None, "markers"):
            keys = self._new_markers(ns, state)
            if keys:
                state.mode, state.last_key = "markers", keys[-1]
                state.pending += [(now, k) for k in keys]
                return True
        if state.mode in (None, "objects"):
            keys = self._new_objects(ns, state)
            if keys:
                state.mode = "objects"
                state.seen.update(keys)
                state.pending += [(now, k) for k in keys]
                return True
        return False

    def _new_markers(self, ns: str, state: _Poll) -> list[str]:
        from eosink.connectors.s3._layout import Layout
        from eosink.connectors.s3._markers import list_marker_keys

        layout = Layout(object_prefix(ns))
        keys = list_marker_keys(self._client(), BUCKET, layout, app_id(ns), state.last_key)
        for key in keys:
            state.last_batch = max(state.last_batch, Layout.marker_batch(key) or 0)
        return keys

    def _new_objects(self, ns: str, state: _Poll) -> list[str]:
        """At-least-once objects not seen before, listed from the newest batch seen (older ones are complete)."""
        root = f"{object_prefix(ns)}/{AT_LEAST_ONCE_PREFIX}"
        args: dict[str, Any] = {"Bucket": BUCKET, "Prefix": root}
        if state.last_batch >= 0:
            args["StartAfter"] = f"{root}{state.last_batch:020d}"
        reply = self._client().list_objects_v2(**args)
        keys = [str(o["Key"]) for o in reply.get("Contents", []) if o["Key"] not in state.seen]
        for key in keys:
            state.last_batch = max(state.last_batch, int(key[len(root) :][:20]))
        return keys

    def _batch(self, state: _Poll) -> int | None:
        """The newest committed batch (markers only: at-least-once has no commit to be late after)."""
        return state.last_batch if state.mode == "markers" and state.last_batch >= 0 else None

    def _read_pending(self, ns: str, state: _Poll, warm_from_us: int) -> tuple[dict[int, int], int]:
        buckets: dict[int, int] = {}
        hi = -1
        for seen, key in state.pending:
            for table in self._tables(ns, key, state.mode):
                for ms, count in latency_buckets(table.column("at"), seen, warm_from_us).items():
                    buckets[ms] = buckets.get(ms, 0) + count
                if table.num_rows:
                    hi = max(hi, int(pc.max(table.column("id")).as_py()))
        state.pending.clear()
        return buckets, hi

    def _tables(self, ns: str, key: str, mode: str | None) -> list[pa.Table]:
        """``id`` and ``at`` of the objects a marker names (mode ``markers``), or of the object ``key``."""
        from eosink.stores.parquet import parquet_table

        s3 = self._client()
        keys = [key]
        if mode == "markers":
            keys = [o.key for o in self._marker(ns, key).objects]
        return [parquet_table(s3.get_object(Bucket=BUCKET, Key=k)["Body"].read(), ["id", "at"]) for k in keys]

    def _marker(self, ns: str, key: str) -> Any:
        """The commit marker at ``key``; from its segment when it was folded since it was listed."""
        from eosink.connectors.s3 import committed_marker
        from eosink.connectors.s3._layout import Layout
        from eosink.connectors.s3._markers import CommitMarker

        try:
            return CommitMarker.decode(self._client().get_object(Bucket=BUCKET, Key=key)["Body"].read())
        except self._client().exceptions.NoSuchKey:
            batch_id = Layout.marker_batch(key)
            found = None if batch_id is None else committed_marker(self.config(ns), app_id(ns), batch_id)
            if found is None:
                raise
            return found

    # -- helpers --------------------------------------------------------------------------------------

    def _has_bookkeeping(self, ns: str) -> bool:
        """Whether an eosink writer ran in ``ns`` (it fences, so it leaves ``_eosink/``)."""
        reply = self._client().list_objects_v2(Bucket=BUCKET, Prefix=f"{object_prefix(ns)}/_eosink/", MaxKeys=1)
        return bool(reply.get("KeyCount", 0))

    def _dataset(self, config: Any, keys: list[str] | None) -> Any:
        """A pyarrow Parquet dataset of ``keys``, or of every object under the prefix (``_``-folders skipped)."""
        import pyarrow.dataset as ds
        from pyarrow import fs as pafs

        store = self._require_store()
        scheme, _, host = store.endpoint_url.partition("://")
        filesystem = pafs.S3FileSystem(
            access_key=store.access_key,
            secret_key=store.secret_key,
            region=store.region,
            endpoint_override=host,
            scheme=scheme,
            force_virtual_addressing=False,
        )
        source: Any = [f"{BUCKET}/{k}" for k in keys] if keys is not None else f"{BUCKET}/{config.prefix}"
        return ds.dataset(source, format="parquet", filesystem=filesystem)
