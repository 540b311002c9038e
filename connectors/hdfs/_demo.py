"""The demo's HDFS target (:class:`~eosink.demo.target.DemoTarget`).

A private MiniDFSCluster of the demo's own (:class:`~eosink.services.hdfs.HdfsServer`) and two
directories of payments: ``/payments_eosink``, written by :class:`~eosink.connectors.hdfs.HdfsSink`
(a directory per batch, renamed into place whole), and ``/payments_plain``, written by what Spark
users have today, Spark's own Parquet writer on ``hdfs://`` (``df.write.parquet`` in
``foreachBatch``, mode append: a replayed batch is written again, as new files).

eosink's side is read as its readers read it, through the batch records
(:func:`~eosink.connectors.hdfs.read_committed`; under the idempotent strategy, the newest row per
payment id); the plain writer's by listing its directory, as ``spark.read.parquet`` does (names
starting with ``_`` or ``.``, such as ``_temporary/``, skipped).

Each side reaches the NameNode through its fault proxy (the DataNodes directly). eosink's lost
COMMIT reply is the reply to the ``rename2`` that makes a batch visible
(:data:`~eosink.connectors.hdfs.testing.COMMIT_REQUEST_MARKER`). The plain writer's job commit is
a series of renames (every task's files, then ``_SUCCESS``) with no one request to cut: the demo
cuts none there and crashes a run before Spark's commit log instead, where a replay writes the
batch again.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosink.demo.target import Payment, Side

__all__ = ["DIRS", "HdfsDemoTarget"]

DIRS: dict[Side, str] = {"eosink": "/payments_eosink", "plain": "/payments_plain"}
URL_VARS: dict[Side, str] = {"eosink": "EOSINK_DEMO_EOSINK_HDFS", "plain": "EOSINK_DEMO_PLAIN_HDFS"}
COLUMNS = ("id", "account", "amount")


class HdfsDemoTarget:
    """HDFS (a private MiniDFSCluster), as the demo drives it."""

    title = "a private HDFS (MiniDFSCluster)"
    plain_cuts = False
    plain_title = "Spark's Parquet writer (hdfs)"

    def __init__(self, root: Path | None = None) -> None:
        from eosink.chaos.target import PrivateRoot

        self.dir = PrivateRoot(root, "eosink-demo-hdfs-")
        self.server: Any = None

    def where(self, side: Side) -> str:
        return f"hdfs://{DIRS[side]}/"

    # -- the runner's side ------------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.hdfs import HdfsServer

        self.server = self.dir.serve(lambda root: HdfsServer(root / "hdfs"))

    def close(self) -> None:
        self.dir.close()  # the server too
        self.server = None

    def address(self, side: Side) -> tuple[str, int]:
        return "127.0.0.1", int(self.server.port)

    def proxy_port(self, side: Side) -> int:
        return 0

    def job_env(self, proxy_ports: dict[Side, int]) -> dict[str, str]:
        return {URL_VARS[side]: f"hdfs://127.0.0.1:{port}" for side, port in proxy_ports.items()}

    def counts(self) -> dict[Side, tuple[int, int]] | None:
        try:
            out: dict[Side, tuple[int, int]] = {}
            for side in DIRS:
                ids = [r["id"] for r in self._rows(side)]
                out[side] = (len(ids), len(ids) - len(set(ids)))
            return out
        except Exception:  # a file being written or a busy NameNode: the view waits for the next poll
            return None

    def payments(self, side: Side) -> Counter[Payment]:
        return Counter((int(r["id"]), str(r["account"]), int(r["amount"])) for r in self._rows(side))

    def in_doubt(self) -> int:
        from eosink.connectors.hdfs.admin import HdfsAdmin

        return HdfsAdmin(self._direct_config("eosink")).status().in_doubt  # prepared attempts and staged files

    def _rows(self, side: Side) -> list[dict[str, Any]]:
        """What a reader of ``side`` sees: eosink's committed batches, or every Parquet file of the directory."""
        config = self._direct_config(side)
        if side == "eosink":
            from eosink.connectors.hdfs import read_committed

            table = read_committed(config)
            return table.select(list(COLUMNS)).to_pylist() if table.num_columns else []  # nothing committed yet
        from eosink.connectors.hdfs.testing import listed_rows

        return listed_rows(config)

    def _direct_config(self, side: Side) -> Any:
        """``side``'s directory, reached directly (not through a fault proxy)."""
        from eosink.connectors.hdfs import HdfsConfig

        return HdfsConfig(f"{self.server.endpoint.url}{DIRS[side]}")

    # -- the job's side ------------------------------------------------------------------------------

    def job_sink(self, app_id: str) -> Any:
        from eosink.connectors.hdfs import HdfsConfig, HdfsSink

        return HdfsSink(HdfsConfig(f"{os.environ[URL_VARS['eosink']]}{DIRS['eosink']}"))

    def job_plain_writer(self) -> Callable[[Any, int], None]:
        path = f"{os.environ[URL_VARS['plain']]}{DIRS['plain']}"

        def write(df: Any, batch_id: int) -> None:
            df.write.mode("append").parquet(path)

        return write

    def scrub(self, text: str) -> str:
        return text  # no secrets: the private cluster has no authentication
