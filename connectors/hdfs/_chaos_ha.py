"""The chaos harness's HDFS target on an HA name service (``eosink chaos --sink hdfs --topology ha``).

A private :class:`~eosink.services.hdfs_ha.HdfsHaCluster`: name service ``ns1``, two NameNodes sharing their edit
log through three JournalNodes, each behind a fault proxy of its own, and two DataNodes. The job's sink reaches
``hdfs://ns1`` through both proxies (``HdfsConfig(namenodes=...)``). The name service's faults
(:mod:`eosink.chaos.schedule`):

* the active NameNode stopped and its standby made active (a failover), at a moment of the run; the stopped one
  starts again, as a standby, when the run ends (:meth:`heal`);
* the reply of the rename that commits a batch cut at whichever NameNode is active (the runner's ``commit-cut``).

The judge is a WebHDFS reader (:class:`~eosink.connectors.hdfs.audit.WebHdfsReader`: plain HTTP to whichever
NameNode is active, no hdfs-native), listing the target as ``spark.read.parquet`` does: rows per batch and the
batches with a record, for the harness's reader; and batch directories whose files are not the ones their record
names, counted among the schedule's leftovers (``torn_batches``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from eosink.chaos.oracle import Row
from eosink.chaos.schedule import ClusterFaults
from eosink.chaos.target import FollowingProxy, Names, Snapshot, oracle_rows, snapshot_of
from eosink.connectors.hdfs._chaos import NAMENODES_VAR, ROOT, URL_VAR, HdfsChaosTarget

__all__ = ["HdfsHaChaosTarget"]

_BATCH_PREFIX = "eosink_batch="


class HdfsHaChaosTarget(HdfsChaosTarget):
    """HDFS on a private HA name service (see the module docstring)."""

    cluster_faults = ClusterFaults(("active",), pause=False)

    # -- the name service ---------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.hdfs_ha import HdfsHaCluster

        self.server = self.dir.serve(lambda root: HdfsHaCluster(root / "hdfs-ha"))

    def _url(self) -> str:
        return str(self.server.url)

    def _namenodes(self) -> Mapping[str, str]:
        return dict(self.server.namenodes(direct=True))

    def restart(self, *, crash: bool) -> None:
        """The active NameNode stopped and the standby made active (an HA name service restarts by failing over)."""
        self.server.kill_active()

    def address(self) -> tuple[str, int]:
        return "127.0.0.1", int(self.server.proxy(self.server.active()).port)

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        return {URL_VAR: self._url(), NAMENODES_VAR: json.dumps(self.server.namenodes())}

    def fault_proxy(self) -> Any:
        """The proxy of whichever NameNode is active when a cut is armed."""
        return FollowingProxy(
            lambda: [self.server.proxy(nn) for nn in (0, 1)], lambda: self.server.proxy(self.server.active())
        )

    def heal(self) -> None:
        """Start a stopped NameNode again, as a standby. One that started but whose DataNodes' first block reports
        did not come within the harness's wait (a starved machine) is left running: the active one serves, and a
        later failover to it waits until it leaves safe mode."""
        from eosink.errors import ServiceError

        for nn, state in self.server.state().items():
            if state != "stopped":
                continue
            try:
                self.server.start_namenode(nn)
            except ServiceError as exc:
                if self.server.state()[nn] == "stopped":
                    raise
                print(f"    NameNode nn{nn} started without its block reports yet: {str(exc)[:200]}", file=sys.stderr)
                self.server.proxy(nn).start()

    def kill_node(self, role: str) -> str:
        killed = self.server.kill_active()
        return f"active NameNode nn{killed} stopped, nn{1 - killed} made active"

    # -- what the independent reader sees ------------------------------------------------------

    def _reader(self, table: str) -> Any:
        from eosink.connectors.hdfs.audit import WebHdfsReader

        bases = [f"http://127.0.0.1:{self.server.http_port(nn)}/webhdfs/v1" for nn in (0, 1)]
        return WebHdfsReader(bases, f"{ROOT}/{table}")

    def _visible(self, names: Names, reader: Any = None) -> tuple[list[dict[str, Any]], frozenset[int]]:
        """Rows of every visible batch directory, and the batches whose record is there."""
        reader = reader or self._reader(names.table)
        rows: list[dict[str, Any]] = []
        recorded: set[int] = set()
        for batch, (batch_rows, has_record) in reader.batches().items():
            name = batch.rsplit("/", 1)[-1]
            if name.startswith(_BATCH_PREFIX) and has_record:  # grouped: <batch>; flat: <app>-<batch>
                recorded.add(int(name[len(_BATCH_PREFIX) :].rsplit("-", 1)[-1]))
            rows += batch_rows
        return rows, frozenset(recorded)

    def read_rows(self, names: Names) -> list[Row]:
        return oracle_rows(self._visible(names)[0])

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        """A poll function over WebHDFS; None while no NameNode answers (one is failing over)."""

        def poll() -> Snapshot | None:
            try:
                return snapshot_of(*self._visible(names), reader="webhdfs")
            except (OSError, ValueError):
                return None

        return poll

    def leftovers(self, names: Names) -> dict[str, int]:
        """Prepared attempts left in doubt, and batch directories the WebHDFS reader finds torn once the schedule
        is over (while it runs, a partial batch is the harness's reader's finding, where the strategy is atomic:
        idempotent tasks publish file by file)."""
        reader = self._reader(names.table)
        self._visible(names, reader)
        torn = set(reader.torn)
        for text in sorted(torn):
            print(f"    torn batch in {names.table}: {text}", file=sys.stderr, flush=True)
        return {**super().leftovers(names), "torn_batches": len(torn)}
