"""``postgres-replicated``: a :class:`~eosink.services.postgres_cluster.PostgresCluster` as a service.

``eosink services up postgres-replicated`` starts a supervisor process (``python -m
eosink.services.postgres_replicated serve ...``; :mod:`eosink.services._supervisor`) that
builds the cluster (a primary, a synchronous and an asynchronous standby, each behind its
fault proxies), keeps it and its proxies alive, and takes commands on a Unix socket in the
service's run directory for a fixed list of operations (:data:`CLUSTER_OPS`, :data:`PROXY_OPS`).
:class:`ClusterControl` sends them, so a test written against
:class:`~eosink.services.postgres_cluster.ReplicatedCluster` runs on this service or on a cluster
of its own.

It is started only when named: ``eosink services up`` alone starts the plain servers.
Clients connect to ``EOSINK_POSTGRES_REPLICATED_URL``, a libpq multi-host URL that finds the
read-write primary; ``EOSINK_POSTGRES_REPLICATED_CONTROL`` is the control socket.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError
from eosink.services._supervisor import (
    PROXY_OPS,
    Control,
    RemoteProxy,
    SupervisedService,
    Supervisor,
    control_path,
    run_supervisor,
    serve,
)
from eosink.services.postgres import PostgresEndpoint, PostgresService, postgres_bindir
from eosink.services.postgres_cluster import NODE_NAMES, ClusterStatus, Mode, PostgresCluster

if TYPE_CHECKING:
    from psycopg import sql

__all__ = [
    "CLUSTER_OPS",
    "PROXY_OPS",
    "ClusterControl",
    "RemoteProxy",
    "ReplicatedPostgresEndpoint",
    "ReplicatedPostgresService",
    "control_path",
    "main",
]

log = logging.getLogger("eosink.services")

NAME = "postgres-replicated"
#: The cluster's operations a client may ask for, with their arguments' types (the node's name is required).
CLUSTER_OPS: dict[str, dict[str, type]] = {
    "ping": {},
    "endpoint": {},
    "primary": {},
    "status": {},
    "kill": {"name": str},
    "stop": {"name": str},
    "start": {"name": str, "timeout_s": float},
    "promote": {"name": str, "timeout_s": float},
    "rejoin": {"name": str, "timeout_s": float},
    "cut_link": {"name": str},
    "restore_link": {"name": str},
    "pause": {"name": str},
    "resume": {"name": str},
    "set_mode": {"mode": str},
    "wait_replayed": {"name": str, "timeout_s": float},
    "wait_streaming": {"name": str, "timeout_s": float},
}
_REQUIRED = frozenset({"name", "node", "mode"})


@dataclass(frozen=True)
class ReplicatedPostgresEndpoint(PostgresEndpoint):
    """The replicated PostgreSQL: ``url`` is a libpq multi-host URL that finds the read-write primary among the
    three client proxies (``host`` and ``port`` are its first host's: node "primary"'s proxy); ``node_urls``
    reach one node each through its proxy, ``direct_urls`` on its own port (administration). The URLs hold the
    password: they are not in the repr."""

    node_urls: dict[str, str] = field(default_factory=dict, repr=False)
    direct_urls: dict[str, str] = field(default_factory=dict, repr=False)
    ports: dict[str, int] = field(default_factory=dict)
    """Each node's client proxy port."""
    control: str = ""
    """The supervisor's control socket."""
    mode: str = "sync"
    """The mode the cluster was made in (:meth:`ClusterControl.status` has the current one)."""

    def jdbc_url(self) -> str:
        """``jdbc:postgresql://`` every client proxy, ``targetServerType=primary`` (credentials go in apart)."""
        hosts = ",".join(f"{self.host}:{port}" for port in self.ports.values())
        return f"jdbc:postgresql://{hosts}/{self.dbname}?targetServerType=primary"

    def env(self) -> dict[str, str]:
        return {"EOSINK_POSTGRES_REPLICATED_URL": self.url, "EOSINK_POSTGRES_REPLICATED_CONTROL": self.control}


# -- the client -------------------------------------------------------------------------------------------


class ClusterControl(Control):
    """The operations of :class:`~eosink.services.postgres_cluster.PostgresCluster`, sent to the service's
    supervisor (one connection per call). A supervisor that is gone is a :class:`ServiceError` saying so."""

    service = NAME
    endpoint: ReplicatedPostgresEndpoint

    def __repr__(self) -> str:
        return f"ClusterControl({self.endpoint.control!r})"

    @property
    def url(self) -> str:
        return self.endpoint.url

    def node_url(self, name: str) -> str:
        return self.endpoint.node_urls[_known(name, self.endpoint.node_urls)]

    def direct_url(self, name: str) -> str:
        return self.endpoint.direct_urls[_known(name, self.endpoint.direct_urls)]

    def proxy(self, name: str) -> RemoteProxy:
        return RemoteProxy(self, _known(name, self.endpoint.ports))

    def primary(self) -> str:
        return str(self.request("primary"))

    def status(self) -> ClusterStatus:
        return ClusterStatus.from_json(self.request("status"))

    def kill(self, name: str) -> None:
        self.request("kill", name=name)

    def stop(self, name: str) -> None:
        self.request("stop", name=name)

    def start(self, name: str, *, timeout_s: float = 60.0) -> None:
        self.request("start", name=name, timeout_s=timeout_s)

    def promote(self, name: str, *, timeout_s: float = 60.0) -> None:
        self.request("promote", name=name, timeout_s=timeout_s)

    def rejoin(self, name: str, *, timeout_s: float = 120.0) -> None:
        self.request("rejoin", name=name, timeout_s=timeout_s)

    def cut_link(self, name: str) -> None:
        self.request("cut_link", name=name)

    def restore_link(self, name: str) -> None:
        self.request("restore_link", name=name)

    def pause(self, name: str) -> None:
        self.request("pause", name=name)

    def resume(self, name: str) -> None:
        self.request("resume", name=name)

    def set_mode(self, mode: Mode) -> None:
        self.request("set_mode", mode=mode)

    def wait_replayed(self, name: str, timeout_s: float = 60.0) -> None:
        self.request("wait_replayed", name=name, timeout_s=timeout_s)

    def wait_streaming(self, name: str, timeout_s: float = 60.0) -> None:
        self.request("wait_streaming", name=name, timeout_s=timeout_s)


def _known(name: str, names: dict[str, Any]) -> str:
    if name not in names:
        raise ServiceError(f"The cluster has no node called {name!r}.", f"use one of: {', '.join(names)}.")
    return name


def _supervise(cluster: PostgresCluster, control: Path) -> Supervisor:
    """The supervisor of ``cluster``: its operations, and ``endpoint`` and ``status`` as JSON."""
    supervisor: Supervisor

    def cluster_op(op: str, args: dict[str, Any]) -> Any:
        if op == "endpoint":
            return _endpoint(cluster, supervisor.path).to_json()
        if op == "status":
            return cluster.status().to_json()
        return getattr(cluster, op)(**args)

    supervisor = Supervisor(
        NAME, control, ops=CLUSTER_OPS, cluster_op=cluster_op, proxy_of=cluster.proxy, required=_REQUIRED
    )
    return supervisor


def _endpoint(cluster: PostgresCluster, control: Path) -> ReplicatedPostgresEndpoint:
    return ReplicatedPostgresEndpoint(
        url=cluster.url,
        port=cluster.proxy(NODE_NAMES[0]).port,
        node_urls={n: cluster.node_url(n) for n in NODE_NAMES},
        direct_urls={n: cluster.direct_url(n) for n in NODE_NAMES},
        ports={n: cluster.proxy(n).port for n in NODE_NAMES},
        control=os.fspath(control),
        mode=cluster.mode,
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m eosink.services.postgres_replicated serve ROOT CONTROL [--mode sync|async]``."""
    parser = argparse.ArgumentParser(prog="python -m eosink.services.postgres_replicated")
    parser.add_argument("action", choices=["serve"])
    parser.add_argument("root", type=Path, help="the cluster's directory")
    parser.add_argument("control", type=Path, help="the control socket")
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    args = parser.parse_args(argv)
    mode: Mode = "async" if args.mode == "async" else "sync"
    root, control = args.root, args.control
    return run_supervisor(
        lambda: serve(NAME, control, lambda: PostgresCluster(root, mode=mode), lambda c: _supervise(c, control))
    )


# -- the service ------------------------------------------------------------------------------------------


class ReplicatedPostgresService(SupervisedService[ReplicatedPostgresEndpoint]):
    """A primary, a synchronous and an asynchronous standby, each behind fault proxies, run by a supervisor."""

    name = NAME
    endpoint_type = ReplicatedPostgresEndpoint
    start_timeout_s = 180.0
    module = "eosink.services.postgres_replicated"

    def external(self) -> ReplicatedPostgresEndpoint | None:
        return None  # failovers need the harness's own servers

    def provision(self) -> None:
        postgres_bindir()  # the binaries come with a package: nothing to download

    def clean_up(self) -> None:
        PostgresCluster.clean_up(self.data)

    def check(self, endpoint: ReplicatedPostgresEndpoint) -> str:
        """One primary and two standbys streaming; a committed row on both standbys (read-only connections)
        within 30 s; PREPARE TRANSACTION / COMMIT PREPARED on the primary."""
        import psycopg
        from psycopg import sql

        started = time.monotonic()
        status = ClusterControl(endpoint).status()
        primaries = [n.name for n in status.nodes if n.role == "primary"]
        standbys = [n.name for n in status.nodes if n.role == "standby"]
        fix = f"see `eosink services status {NAME}`; `eosink services down {NAME}` then `up` starts it afresh."
        if len(primaries) != 1 or len(standbys) != 2:
            raise ServiceError(f"{NAME} is not one primary and two standbys: {status.summary()}.", fix)
        (primary,) = primaries
        PostgresService().check(PostgresEndpoint(url=endpoint.node_urls[primary], port=endpoint.ports[primary]))
        table = sql.Identifier(f"eosink_check_{uuid.uuid4().hex[:12]}")
        try:
            with psycopg.connect(endpoint.url, autocommit=True, connect_timeout=10) as admin:
                admin.execute(sql.SQL("CREATE TABLE {} (v int)").format(table))
                with admin.transaction():
                    admin.execute(sql.SQL("INSERT INTO {} VALUES (1)").format(table))
                committed = time.monotonic()
                try:
                    for name in standbys:
                        self._wait_for_row(endpoint.node_urls[name], table, name)
                    replicated_s = time.monotonic() - committed
                finally:
                    admin.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        except psycopg.Error as exc:
            raise ServiceError(f"{NAME} failed the health check: {type(exc).__name__}: {exc}", fix) from None
        return (
            f"{NAME} ({status.mode}): {status.summary()}; a committed row on both standbys in {replicated_s:.1f} s, "
            f"PREPARE TRANSACTION / COMMIT PREPARED ok on {primary} ({time.monotonic() - started:.1f} s)"
        )

    @staticmethod
    def _wait_for_row(url: str, table: sql.Identifier, name: str, timeout_s: float = 30.0) -> None:
        """Poll standby ``name`` (a read-only connection) until ``table`` holds its row."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(url, autocommit=True, connect_timeout=10, target_session_attrs="standby") as reader:

            def landed() -> bool:
                try:
                    row = reader.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
                except psycopg.errors.UndefinedTable:
                    return False
                return row == (1,)

            if not poll(landed, timeout_s, max_interval_s=0.2):
                raise ServiceError(
                    f"A row committed on the primary did not reach the standby {name} within {timeout_s:.0f} s.",
                    f"see `eosink services status {NAME}` and the node's log.",
                )


if __name__ == "__main__":
    sys.exit(main())
