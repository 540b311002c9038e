"""The benchmark's HDFS adapter: the harness's MiniDFSCluster, eosink's HdfsSink, and Spark's own streaming file sink.

Every run writes the data set's rows as Parquet files under a directory of its own
(``/eosink-bench/<ns>``), removed again after the run. Baselines: Spark's streaming Parquet file
sink to ``hdfs://`` (``spark-file-sink``, :class:`~eosink.bench.file_sinks.SparkFileSink`:
exactly-once for readers of its ``_spark_metadata`` log), through the Hadoop client that ships with
PySpark; and hdfs-native writing the data set's own Parquet files one after another
(``raw-write``: create, write in 8 MiB pieces, close): the cluster's ingest limit for one client.

``eosink-at-least-once`` is eosink's data path with the exactly-once bookkeeping taken out: the
same ``mapInArrow`` participants and the same Parquet file writer
(:class:`~eosink.connectors.hdfs._files.FileSet`), but each task writes its file into the target
directory under a hidden name and renames it into view when closed: no epoch, pending directory,
batch record or batch rename. A retried task leaves its rows twice.

Latency: a poll lists the target directory and the app's newest batch range (two NameNode calls)
and stamps each new batch directory (``eosink_range=<app>-<first>/eosink_batch=<batch>``) or
at-least-once file with the moment it was first seen; their rows' ``at`` stamps are read in a later
poll that found nothing new, so reading never delays the sight of a batch. The local clock serves
(the cluster and the job share the machine).
"""

from __future__ import annotations

import json
import os
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
from eosink.bench.runs import BatchFunction, BenchGoals, RunSpec, run_app_ids
from eosink.errors import ConfigurationError

__all__ = ["HdfsAdapter", "app_id", "target_path"]

URL_ENV = "EOSINK_HDFS_URL"
NAMENODES_ENV = "EOSINK_BENCH_HDFS_NAMENODES"
"""An HA name service's NameNodes (JSON, name to address) for the job; unset on one NameNode."""
ROOT = "/eosink-bench"
_CHUNK = 8 << 20


def target_path(ns: str) -> str:
    """The directory of namespace ``ns``'s files (and eosink's bookkeeping under it)."""
    return f"{ROOT}/{ns}"


def app_id(ns: str) -> str:
    """The app_id of namespace ``ns``'s eosink writer."""
    return f"bench-{ns}"


class _DirectWrite:
    """``mapInArrow`` function of eosink-at-least-once: the partition's rows as one file in the target, written
    under a hidden name and renamed into view when closed (as any writer that readers list must do)."""

    def __init__(self, config: Any, batch_id: int) -> None:
        self.config = config
        self.batch_id = batch_id

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eosink.connectors.hdfs._files import FileSet
        from eosink.stores.hdfs import Fs

        fs = Fs(self.config)
        name = at_least_once_name(self.batch_id)
        files: FileSet | None = None
        for batch in batches:
            if batch.num_rows == 0:
                continue
            if files is None:
                files = FileSet(self.config, fs, self.config.path, name=f".{name}")
            files.add(batch)
        if files is not None:
            for rel in files.close():
                visible = rel.replace(f".{name}", name, 1)
                fs.rename(f"{self.config.path}/{rel}", f"{self.config.path}/{visible}")
        yield pa.RecordBatch.from_pydict({"rows": [files.rows if files is not None else 0]})


@dataclass
class _Poll:
    """What the latency poll of one namespace has seen, and what it has seen but not read yet."""

    seen: set[str] = field(default_factory=set)
    """Batch directories (relative to the target) and at-least-once files seen."""
    last_range: int = -1
    """The first batch of the newest range directory seen (older ones get no new batch)."""
    last_batch: int = -1
    """The newest committed batch (eosink's batch directories only)."""
    pending: list[tuple[float, str]] = field(default_factory=list)
    """(first seen, wall clock s; a batch directory or an at-least-once file) whose rows are unread."""


class HdfsAdapter:
    """:class:`~eosink.bench.runs.BenchAdapter` for HDFS (the harness's MiniDFSCluster, or ``EOSINK_HDFS_URL``)."""

    name = "hdfs"
    worker_modules = ("eosink.connectors.hdfs", "hdfs_native", "pyarrow.parquet")

    fanout_member = True
    """Its target can be checked when written as a fan-out's sink (its rows are counted whatever the app_id)."""

    all_modes: tuple[str, ...] = ("default",)

    def __init__(self, modes: tuple[str, ...] = ("default",), *, topology: str = "single") -> None:
        self.modes = modes
        self.topology = topology
        """``single`` (the harness's MiniDFSCluster, or ``EOSINK_HDFS_URL``) or ``ha`` (a private HA name service)."""
        self._started = False
        self._url: str | None = os.environ.get(URL_ENV) or None
        self._namenodes: dict[str, str] = json.loads(os.environ.get(NAMENODES_ENV) or "{}")
        self._cluster: Any = None
        self._polls: dict[str, _Poll] = {}

    # -- parent side ------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        from eosink.services import get_service

        if self.topology == "ha":
            return self._start_ha()

        service = get_service("hdfs")
        if service.external() is None and service.pid() is None:
            service.up()
            self._started = True
        self._url = str(service.endpoint().url)
        return {
            "server_version": "MiniDFSCluster (harness: 2 DataNodes, replication 2)"
            if service.external() is None
            else "external",
            "settings": {"root": ROOT, "format": "parquet (snappy)"},
            "started_by_bench": self._started,
        }

    def _start_ha(self) -> dict[str, Any]:
        """A private HA name service under the cache, reached past its fault proxies (nothing is failed)."""
        import shutil

        from eosink.services._layout import cache_root
        from eosink.services.hdfs_ha import HdfsHaCluster

        root = cache_root() / "bench" / "hdfs-ha"
        shutil.rmtree(root, ignore_errors=True)
        self._cluster = HdfsHaCluster(root).start()
        self._url, self._namenodes = str(self._cluster.url), dict(self._cluster.namenodes(direct=True))
        return {
            "server_version": "HA name service (harness: 2 NameNodes, 3 JournalNodes, 2 DataNodes, replication 2)",
            "settings": {"root": ROOT, "format": "parquet (snappy)", "name service": self._url},
        }

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self._started:
            from eosink.services import get_service

            get_service("hdfs").down()
            self._started = False

    def child_env(self) -> dict[str, str]:
        return {URL_ENV: self._require_url(), NAMENODES_ENV: json.dumps(self._namenodes)}

    def goals(self) -> BenchGoals:
        return file_sink_goals("raw-write")

    def runs(self) -> list[RunSpec]:
        return file_sink_runs(self.modes, "raw-write")

    def prepare(self, ns: str, *, keyed: bool = False) -> None:
        """Nothing to create: a namespace is a fresh directory (``keyed`` needs nothing of the file system)."""

    def verify(self, ns: str) -> int:
        """Rows readers of the run's own commit protocol see: for eosink, the files its batch records name
        (distinct ids when they upsert by key); otherwise every visible Parquet file under the directory."""
        from eosink.connectors.hdfs import committed_batches, read_committed
        from eosink.connectors.hdfs._layout import OWN_DIR
        from eosink.connectors.hdfs._read import visible_files
        from eosink.stores.hdfs import Fs

        config = self.config(ns)
        fs = Fs(config)
        if not fs.exists(f"{config.path}/{OWN_DIR}"):
            return sum(_parquet_rows(fs, path) for path in visible_files(fs, config.path))
        total = 0
        for app in run_app_ids(app_id(ns), self.name):  # on its own, or as a fan-out's sink
            batches = committed_batches(config, app)
            if any(record.keys for _, record in batches):
                total += int(read_committed(config, app, columns=["id"]).num_rows)  # newest row per id
            else:
                total += sum(_parquet_rows(fs, f"{d}/{rel}") for d, record in batches for rel in record.files)
        return total

    def drop(self, ns: str) -> None:
        """Delete the namespace's directory."""
        from eosink.stores.hdfs import Fs

        self._polls.pop(ns, None)
        config = self.config(ns)
        Fs(config).delete(config.path, recursive=True)

    def run_external(self, spec: RunSpec, ns: str, dataset: Dataset) -> float:
        """``raw-write``: hdfs-native writing the data set's Parquet files, one after the other."""
        if spec.name != "raw-write":
            raise ConfigurationError(f"No external run {spec.name!r} for HDFS.", "Use raw-write.")
        from eosink.stores.hdfs import Fs

        config = self.config(ns)
        fs = Fs(config)
        files = sorted(Path(dataset.parquet).glob("*.parquet"))
        started = time.monotonic()
        for path in files:
            writer = fs.create(f"{config.path}/{path.name}")
            with path.open("rb") as f:
                while chunk := f.read(_CHUNK):
                    writer.write(chunk)
            writer.close()
        return time.monotonic() - started

    # -- in the Spark job ---------------------------------------------------------------------------

    def spark_conf(self) -> dict[str, str]:
        """PySpark's own Hadoop client reads ``hdfs://``; on an HA name service it is told the NameNodes."""
        return dict(self.config("conf").spark_conf()) if self._namenodes else {}

    def config(self, ns: str) -> Any:
        """The HdfsConfig of namespace ``ns`` (Parquet, snappy)."""
        from eosink.connectors.hdfs import HdfsConfig

        return HdfsConfig(f"{self._require_url()}{target_path(ns)}", namenodes=self._namenodes)

    def eosink_sink(self, spec: RunSpec, ns: str) -> Any:
        from eosink.connectors.hdfs import HdfsSink

        return HdfsSink(self.config(ns))

    def batch_function(self, spec: RunSpec, ns: str, checkpoint: str, participants: int) -> BatchFunction:
        from eosink.bench.session import arrow_task_function, eosink_function, floor_function

        if spec.kind == "eosink":
            return eosink_function(self.eosink_sink(spec, ns), spec.strategy, app_id(ns), checkpoint, participants)
        if spec.kind == "at-least-once":
            config = self.config(ns)
            return arrow_task_function(lambda batch_id: _DirectWrite(config, batch_id), participants)
        if spec.kind == "spark":
            return SparkFileSink(self.config(ns).target_url)
        if spec.kind == "floor":
            return floor_function(participants)
        raise ConfigurationError(f"Run {spec.name!r} ({spec.kind}) is not a Spark run.", "Run it with run_external.")

    def poll_visible(self, ns: str, after_id: int, warm_from_us: int) -> tuple[list[tuple[int, int]], int, int | None]:
        """New batch directories and files are stamped as soon as a listing shows them; their rows are read in
        a later poll that finds nothing new (see the module docstring)."""
        state = self._polls.setdefault(ns, _Poll())
        if self._list_new(ns, state):
            return [], after_id, self._batch(state)
        buckets, hi = self._read_pending(ns, state, warm_from_us)
        return sorted(buckets.items()), max(after_id, hi), self._batch(state)

    def scrub(self, text: str) -> str:
        """``text`` unchanged: the harness's HDFS takes no secret (Kerberos credentials never reach argv)."""
        return text

    def close(self) -> None:
        self._polls.clear()

    # -- latency poll --------------------------------------------------------------------------------

    def _list_new(self, ns: str, state: _Poll) -> bool:
        """List the target and its newest batch range; stamp what is new. True when something new was seen."""
        from eosink.stores.hdfs import Fs

        config = self.config(ns)
        fs = Fs(config)
        now = time.time()
        new: list[str] = []
        for rel, batch in self._listed(fs, config.path, app_id(ns), state):
            if rel in state.seen:
                continue
            if batch is not None:
                state.last_batch = max(state.last_batch, batch)
            state.seen.add(rel)
            new.append(rel)
        state.pending += [(now, rel) for rel in sorted(new)]
        return bool(new)

    @staticmethod
    def _listed(fs: Any, root: str, app: str, state: _Poll) -> Iterator[tuple[str, int | None]]:
        """(path relative to ``root``, batch id or None) of the batch directories in the newest ranges of ``app``
        and of the at-least-once files (older ranges are not listed again: batches commit in order)."""
        from eosink.connectors.hdfs import _layout as L

        for name in fs.names(root):
            if name.startswith(AT_LEAST_ONCE_PREFIX):
                yield name, None
                continue
            first = L.parse_range_dir(name, app)
            if first is None or first < state.last_range:
                continue
            state.last_range = first
            for batch_name in fs.names(f"{root}/{name}"):
                batch = L.parse_grouped_batch_dir(batch_name)
                if batch is not None:
                    yield f"{name}/{batch_name}", batch

    def _batch(self, state: _Poll) -> int | None:
        """The newest committed batch (batch directories only: at-least-once has no commit to be late after)."""
        return state.last_batch if state.last_batch >= 0 else None

    def _read_pending(self, ns: str, state: _Poll, warm_from_us: int) -> tuple[dict[int, int], int]:
        from eosink.connectors.hdfs._files import read_table
        from eosink.connectors.hdfs._read import visible_files
        from eosink.stores.hdfs import Fs

        config = self.config(ns)
        fs = Fs(config)
        buckets: dict[int, int] = {}
        hi = -1
        for seen, name in state.pending:
            path = f"{config.path}/{name}"
            paths = [path] if name.startswith(AT_LEAST_ONCE_PREFIX) else visible_files(fs, path)
            for file in paths:
                table = read_table(fs, file, "parquet").select(["id", "at"])
                for ms, count in latency_buckets(table.column("at"), seen, warm_from_us).items():
                    buckets[ms] = buckets.get(ms, 0) + count
                if table.num_rows:
                    hi = max(hi, int(pc.max(table.column("id")).as_py()))
        state.pending.clear()
        return buckets, hi

    # -- helpers --------------------------------------------------------------------------------------

    def _require_url(self) -> str:
        if not self._url:
            raise ConfigurationError("The benchmark has no HDFS yet.", f"Call start() first, or set {URL_ENV}.")
        return self._url


def _parquet_rows(fs: Any, path: str) -> int:
    """Rows in the Parquet file ``path``, from its footer."""
    import pyarrow.parquet as pq

    return int(pq.read_metadata(pa.BufferReader(fs.read_bytes(path) or b"")).num_rows)
