"""The chaos harness's HDFS target (:class:`~eosink.chaos.target.ChaosTarget`).

A private :class:`~eosink.services.hdfs.HdfsServer` (a MiniDFSCluster: one NameNode, two DataNodes)
that the harness restarts and crashes on purpose; :class:`~eosink.connectors.hdfs.HdfsSink` writing
Parquet files under ``/eosink-chaos/<table>`` (its bookkeeping lives under ``<table>/_eosink/``, so
the control schema is not used); Spark's own ``df.write.parquet("hdfs://...")`` as the plain
baseline. The fault proxy sits in front of the NameNode's RPC port (the DataNodes are reached
directly, at the addresses the NameNode hands out) and cuts the reply of the ``rename2`` call that
commits a batch (:data:`~eosink.connectors.hdfs.testing.COMMIT_REQUEST_MARKER`).

Two readers, as users have them: where eosink wrote (its ``_eosink`` directory exists from the first
fence, before any data file), a reader of the batch records
(:func:`~eosink.connectors.hdfs.read_committed`); where the baseline wrote, a reader that lists the
directory, as ``spark.read.parquet`` does (names starting with ``_`` or ``.`` skipped).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from eosink.chaos.oracle import Row
from eosink.chaos.target import Names, ServerSide, Snapshot, oracle_rows, snapshot_of

__all__ = ["HdfsChaosTarget"]

ROOT = "/eosink-chaos"
URL_VAR = "EOSINK_HDFS_URL"
DIRECT_VAR = "EOSINK_CHAOS_HDFS_DIRECT"
NAMENODES_VAR = "EOSINK_CHAOS_HDFS_NAMENODES"
"""An HA name service's NameNodes (JSON, name to address) for the job's sink; unset on one NameNode."""
COLUMNS = ("batch_id", "key", "running_sum", "concat", "n_tokens")


class HdfsChaosTarget(ServerSide):
    """HDFS: a private MiniDFSCluster (restarted and crashed on purpose), :class:`~eosink.connectors.hdfs.HdfsSink`
    with Parquet files, and Spark's Parquet writer to ``hdfs://`` as the baseline."""

    name = "hdfs"

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root, "eosink-chaos-hdfs-")

    # -- the runner's side -------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.hdfs import HdfsServer

        self.server = self.dir.serve(lambda root: HdfsServer(root / "hdfs"))

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        direct = str(self.server.endpoint.url)
        via = f"hdfs://127.0.0.1:{proxy_port}" if proxy_port is not None else direct
        return {URL_VAR: via, DIRECT_VAR: direct}

    def atomic(self, strategy: str) -> bool:
        return strategy != "idempotent"  # a batch appears by one rename; idempotent tasks publish file by file

    def _config(self, table: str) -> Any:
        """The table's configuration as the runner's readers reach it (directly, past any fault proxy)."""
        from eosink.connectors.hdfs import HdfsConfig

        return HdfsConfig(f"{self._url()}{ROOT}/{table}", namenodes=self._namenodes())

    def _url(self) -> str:
        return str(self.server.endpoint.url)

    def _namenodes(self) -> Mapping[str, str]:
        return {}

    def _tables(self, names: Names) -> tuple[list[dict[str, Any]], frozenset[int] | None]:
        """The rows a reader sees, and the batches with a record (None: the baseline's directory, read by
        listing it). The records are read first and the rows of later batches left out: one snapshot."""
        from eosink.connectors.hdfs import committed_batches, read_committed
        from eosink.connectors.hdfs._layout import OWN_DIR
        from eosink.connectors.hdfs.testing import listed_rows
        from eosink.stores.hdfs import Fs

        config = self._config(names.table)
        if not Fs(config).exists(f"{config.path}/{OWN_DIR}"):
            return listed_rows(config), None
        records = frozenset(r.bundle.batch.batch_id for _, r in committed_batches(config, names.app_id))
        table: Any = read_committed(config, names.app_id, columns=list(COLUMNS))
        return [r for r in table.to_pylist() if r["batch_id"] in records], records

    def read_rows(self, names: Names) -> list[Row]:
        return oracle_rows(self._tables(names)[0])

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        """A poll function: committed rows per batch and the batches with a record; None while the server
        is down (it is restarted on purpose). The baseline's directory has no records."""
        from eosink.errors import EosinkError

        def poll() -> Snapshot | None:
            try:
                return snapshot_of(*self._tables(names))
            except (EosinkError, OSError, RuntimeError):  # hdfs-native raises RuntimeError when it cannot connect
                return None

        return poll

    def leftovers(self, names: Names) -> dict[str, int]:
        """In-doubt work of the schedule left behind: prepared attempt directories and staged files not committed
        (``recover``). An unprepared attempt's hidden ``.w-`` directory is no such work: it is never committed,
        and the next fence removes it."""
        from eosink.connectors.hdfs import HdfsSink

        return {"prepared_attempts": len(HdfsSink(self._config(names.table)).recover(names.app_id))}

    def drop(self, names: Names) -> None:
        from eosink.connectors.hdfs.testing import remove

        remove(self._config(names.table))

    def scrub(self, text: str) -> str:
        return text  # no secrets: the private cluster has no authentication

    # -- the job's side ----------------------------------------------------------------------

    def job_sink(self, table: str, control_schema: str) -> Any:
        """The eosink sink, reaching the NameNode through the fault proxy (``EOSINK_HDFS_URL``)."""
        from eosink.connectors.hdfs import HdfsConfig, HdfsSink

        namenodes = json.loads(os.environ.get(NAMENODES_VAR, "{}"))
        return HdfsSink(HdfsConfig(f"{os.environ[URL_VAR]}{ROOT}/{table}", namenodes=namenodes))

    def job_frame(self, df: Any) -> Any:
        return df  # HdfsSink reserves no column name

    def job_naive_writer(self, table: str) -> Callable[[Any, int], None]:
        """Spark's Parquet writer appending each batch under ``hdfs://`` (at-least-once: what eosink replaces)."""

        target = f"{os.environ[DIRECT_VAR]}{ROOT}/{table}"

        def write(df: Any, batch_id: int) -> None:
            df.write.mode("append").parquet(target)

        return write
