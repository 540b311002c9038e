"""The benchmark's Delta adapter: a Delta table on the harness's MinIO, eosink's DeltaSink, and Spark's own Delta sink.

Every run writes the data set's rows into a table of its own (``s3://eosink-bench/eosink-bench/<ns>``),
removed after the run; the store, its bucket and credentials are the S3 adapter's
(:class:`~eosink.bench.object_store.ObjectStoreBench`, which this extends).

* ``spark-delta-sink``: Delta's own streaming sink, ``writeStream.format("delta")`` with delta-spark's jars:
  each micro-batch's files and a ``txn`` action (the query's id, the batch) in one log entry,
  exactly-once for every Delta reader.
* ``eosink-at-least-once``: eosink's data path with the exactly-once bookkeeping taken out: the same
  ``mapInArrow`` participants writing Parquet files with Delta statistics (the sink's own
  ``DataFiles``), then one plain Delta commit of their add actions by the driver: no epoch, manifest,
  ``txn`` or bundle. A retried task or a replayed batch adds its rows twice.

Latency: a poll lists the table's ``_delta_log/`` after the newest entry seen (one LIST) and stamps each
new entry with the moment it was first seen; the rows of the files an entry adds are read in a later poll
that finds nothing new. The batch an entry commits is eosink's commit info (or the ``txn`` of Spark's).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eosink.bench.datasets import Dataset
from eosink.bench.file_sinks import at_least_once_name, latency_buckets
from eosink.bench.object_store import BUCKET, ObjectStoreBench, app_id, object_prefix
from eosink.bench.runs import Baseline, BatchFunction, BenchGoals, DataSourceWrite, RunSpec, generic_runs
from eosink.errors import ConfigurationError

__all__ = ["DeltaAdapter"]

LOG = "_delta_log/"


@dataclass
class _Poll:
    """What the latency poll of one table has seen: the newest log entry, and entries whose rows are unread."""

    last_key: str | None = None
    last_batch: int = -1
    pending: list[tuple[float, str]] = field(default_factory=list)


class _WriteFiles:
    """``mapInArrow`` function of eosink-at-least-once: the partition's rows as Parquet files with Delta
    statistics; yields their add actions (JSON)."""

    def __init__(self, config: Any, batch_id: int) -> None:
        self.config, self.batch_id = config, batch_id

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eosink.connectors.delta._files import DataFiles
        from eosink.connectors.delta._store import open_store

        files = DataFiles(
            open_store(self.config),
            at_least_once_name(self.batch_id),
            (),
            self.config.row_group_rows,
            self.config.file_rows,
        )
        for batch in batches:
            if batch.num_rows:
                files.add(batch)
        adds = [json.dumps(a.to_json()) for a in files.close()]
        yield pa.RecordBatch.from_pydict({"add": adds}, schema=pa.schema([("add", pa.string())]))


class _AtLeastOnce:
    """foreachBatch of eosink-at-least-once: the participants' files, then one plain Delta commit."""

    def __init__(self, config: Any, participants: int) -> None:
        self.config, self.participants = config, participants

    def __call__(self, df: Any, batch_id: int) -> None:
        from eosink._spark_schema import arrow_schema
        from eosink.connectors.delta import _log
        from eosink.connectors.delta._files import AddFile

        schema = arrow_schema(df.schema)
        rows = df.coalesce(self.participants).mapInArrow(_WriteFiles(self.config, batch_id), "add string").collect()
        adds = [AddFile.from_json(json.loads(r["add"])).action() for r in rows]
        table = _log.load(self.config.table, self.config.delta_options())
        if table is None:
            from deltalake import DeltaTable

            table = DeltaTable.create(self.config.table, schema, storage_options=self.config.delta_options())
        table.create_write_transaction(adds, "append", schema)


class DeltaAdapter(ObjectStoreBench):
    """:class:`~eosink.bench.runs.BenchAdapter` for Delta tables on S3 (the harness's MinIO, or ``EOSINK_S3_*``)."""

    name = "delta"
    worker_modules = ("eosink.connectors.delta", "deltalake", "boto3", "pyarrow.parquet")

    jar_groups = ("s3", "delta")
    settings = {"bucket": BUCKET, "format": "Delta (Parquet, snappy)", "writer": "delta-rs"}

    fanout_member = True
    """Its target can be checked when written as a fan-out's sink (a Delta reader counts the table's rows)."""

    def __init__(self, modes: tuple[str, ...] = ("default",)) -> None:
        super().__init__(modes)
        self._logs: dict[str, _Poll] = {}

    # -- parent side ------------------------------------------------------------------------------

    def goals(self) -> BenchGoals:
        """Best exactly-once at least 1.0x Spark's Delta sink at every size (each judged on the median of three
        rounds), 2pc at least 0.85x at-least-once, a 2pc batch visible at most 150 ms p50 after Spark's commit
        log, driver memory flat across sizes."""
        return BenchGoals(
            baselines=(Baseline("spark-delta-sink", "spark-delta-sink", 1.0),),
            vs_at_least_once=(("2pc", 0.85),),
            commit_p50_ms=None,
            visible_after_commit_log_p50_ms=150.0,
            baselines_at_every_size=True,
            rounds=(3, 3),
        )

    def runs(self) -> list[RunSpec]:
        return [*generic_runs(self.modes, ()), RunSpec("spark-delta-sink", "spark")]

    def delta_config(self, ns: str) -> Any:
        """The DeltaConfig of namespace ``ns``'s table."""
        from eosink.connectors.delta import DeltaConfig

        return DeltaConfig.on_endpoint(f"s3://{BUCKET}/{object_prefix(ns)}", self._require_store())

    def verify(self, ns: str) -> int:
        """Rows a Delta reader sees in the table's newest snapshot."""
        from eosink.connectors.delta import _log

        config = self.delta_config(ns)
        table = _log.load(config.table, config.delta_options())
        return 0 if table is None else _log.count_rows(table)

    def run_external(self, spec: RunSpec, ns: str, dataset: Dataset) -> float:
        raise ConfigurationError(f"No external run {spec.name!r} for Delta.", "Delta's runs are all Spark runs.")

    # -- in the Spark job ---------------------------------------------------------------------------

    def spark_conf(self) -> dict[str, str]:
        """The store's settings and jars (s3a's and delta-spark's), and Delta's session extension."""
        from eosink.services.spark_jars import DELTA_SPARK_CONF

        return {**super().spark_conf(), **DELTA_SPARK_CONF}

    def eosink_sink(self, spec: RunSpec, ns: str) -> Any:
        from eosink.connectors.delta import DeltaSink

        return DeltaSink(self.delta_config(ns))

    def batch_function(self, spec: RunSpec, ns: str, checkpoint: str, participants: int) -> BatchFunction:
        from eosink.bench.session import eosink_function

        if spec.kind == "eosink":
            return eosink_function(self.eosink_sink(spec, ns), spec.strategy, app_id(ns), checkpoint, participants)
        if spec.kind == "at-least-once":
            return _AtLeastOnce(self.delta_config(ns), participants)
        if spec.kind == "spark":  # Delta's own streaming sink: its commit log keeps the batches (txn: query, batch)
            return DataSourceWrite({"path": f"s3a://{BUCKET}/{object_prefix(ns)}"}, format="delta")
        if spec.kind == "floor":
            from eosink.bench.runner import floor_function

            return floor_function(participants)
        raise ConfigurationError(f"Run {spec.name!r} ({spec.kind}) is not a Spark run of Delta's.", "See runs().")

    def poll_visible(self, ns: str, after_id: int, warm_from_us: int) -> tuple[list[tuple[int, int]], int, int | None]:
        """New log entries are stamped as soon as a LIST shows them; the rows they add are read in a later
        poll that finds nothing new (see the module docstring)."""
        state = self._logs.setdefault(ns, _Poll())
        if self._new_entries(ns, state):
            return [], after_id, state.last_batch if state.last_batch >= 0 else None
        buckets: dict[int, int] = {}
        hi = after_id
        for seen, key in state.pending:
            for table in self._added_rows(ns, key, state):
                for ms, count in latency_buckets(table.column("at"), seen, warm_from_us).items():
                    buckets[ms] = buckets.get(ms, 0) + count
                if table.num_rows:
                    hi = max(hi, int(pc.max(table.column("id")).as_py()))
        state.pending.clear()
        return sorted(buckets.items()), hi, state.last_batch if state.last_batch >= 0 else None

    def close(self) -> None:
        self._logs.clear()

    def drop(self, ns: str) -> None:
        self._logs.pop(ns, None)
        super().drop(ns)

    def _new_entries(self, ns: str, state: _Poll) -> bool:
        root = f"{object_prefix(ns)}/{LOG}"
        args: dict[str, Any] = {"Bucket": BUCKET, "Prefix": root}
        if state.last_key is not None:
            args["StartAfter"] = state.last_key
        reply = self._client().list_objects_v2(**args)
        keys = [str(o["Key"]) for o in reply.get("Contents", []) if str(o["Key"]).endswith(".json")]
        if not keys:
            return False
        now = time.time()
        state.last_key = keys[-1]
        state.pending += [(now, k) for k in keys]
        return True

    def _added_rows(self, ns: str, key: str, state: _Poll) -> list[pa.Table]:
        """``id`` and ``at`` of the files the log entry ``key`` adds (data changes only, not compactions);
        the batch it commits noted in ``state``."""
        from eosink.stores.parquet import parquet_table

        s3 = self._client()
        entry = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read().decode()
        paths: list[str] = []
        for line in entry.splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action and action["add"].get("dataChange", True):
                paths.append(str(action["add"]["path"]))
            meta = (action.get("commitInfo") or {}).get("eosink")
            if isinstance(meta, str):
                meta = json.loads(meta)
            if isinstance(meta, dict) and "batch" in meta:
                state.last_batch = max(state.last_batch, int(meta["batch"]))
            txn = action.get("txn")
            if txn is not None and not str(txn.get("appId", "")).startswith("eosink"):
                state.last_batch = max(state.last_batch, int(txn["version"]))
        root = object_prefix(ns)
        bodies = [s3.get_object(Bucket=BUCKET, Key=f"{root}/{p}")["Body"].read() for p in paths]
        return [parquet_table(body, ["id", "at"]) for body in bodies]
