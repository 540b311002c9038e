"""A replicated PostgreSQL of its own: a primary and two hot standbys, a fault proxy on every link.

For tests of what a failover does to a sink: a commit acknowledged by a primary that dies, a
standby promoted without it (asynchronous loss), an old primary that comes back as a primary
(split brain) or is rewound into a standby. Three nodes of the same binaries as
:class:`~eosink.services.postgres.PostgresServer`, on 127.0.0.1 only, run as the service user
under root, each stopped by its own PID::

    with PostgresCluster(tmp / "cluster") as cluster:   # "primary", then "sync" and "async" from it
        cluster.kill("primary")
        cluster.promote("sync")        # "async" follows the new primary
        cluster.rejoin("primary")      # pg_rewind, then a standby of "sync"

The names are the nodes' (stable) labels; which node is the primary changes with failovers
(:meth:`PostgresCluster.primary`). Every node has two :class:`~eosink.services.proxy.FaultProxy`:

* its *client* proxy, which clients use (:attr:`PostgresCluster.url` is a libpq multi-host URL
  over the three with ``target_session_attrs=read-write``; :meth:`PostgresCluster.node_url` one
  node's; :meth:`PostgresCluster.proxy` the proxy, to cut a COMMIT's reply);
* its *replication link* proxy: its ``primary_conninfo`` names that proxy, which forwards to the
  current primary, so a link is cut (:meth:`PostgresCluster.cut_link`) and a standby re-pointed
  after a promotion (the proxy's target changes) without touching its configuration.

Rules this harness keeps:

* **Slots**: the current primary holds one physical slot per other node, named after it
  (``pg_basebackup -C`` makes the first; :meth:`PostgresCluster.promote` makes the new primary's,
  :meth:`PostgresCluster.rejoin` any that is missing). A rewound node's own old slots are
  dropped, so that a standby pins no WAL.
* **The synchronous standby** (``mode="sync"``): the primary waits for one standby,
  ``synchronous_standby_names = 'FIRST 1 (<name>)'``: node ``"sync"`` when it is a standby and
  running, else the first other running standby (in the order primary, sync, async), else none
  (``''``: commits wait for nobody). It is chosen again at every promotion and
  :meth:`PostgresCluster.set_mode`, never when a standby dies or its link is cut afterwards: then
  commits wait, as PostgreSQL makes them.
* A standby that has replayed WAL the new primary never had (it was ahead of the promoted one)
  cannot follow it: PostgreSQL logs "new timeline N forked off current database system
  timeline ... before current recovery point" and keeps trying. :meth:`PostgresCluster.rejoin`
  rewinds it.

The settings every node shares are written to its ``postgresql.conf`` (``pg_basebackup`` copies
it; ``pg_rewind``'s own crash recovery, a single-user server, reads only that file); the port,
the address and the node's name are on its command line.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol
from urllib.parse import quote

from eosink._procs import is_alive, is_stopped
from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError
from eosink.services._process import (
    Attempt,
    Proc,
    children,
    free_ports,
    kill_all,
    log_tail,
    spawn,
    start_on_ports,
    stop,
    wait_until,
)
from eosink.services._users import service_user
from eosink.services.postgres import (
    MAX_PREPARED_TRANSACTIONS,
    SUPERUSER,
    _initdb,
    _server_argv,
    _server_env,
    postgres_bindir,
    runnable_bindir,
)
from eosink.services.proxy import FaultProxy, ProxyStats, RequestMatch

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = [
    "NODE_NAMES",
    "ClusterStatus",
    "Mode",
    "NodeStatus",
    "PostgresCluster",
    "ProxyControl",
    "ReplicatedCluster",
    "Role",
]

log = logging.getLogger("eosink.services")

#: The nodes, in creation order: the first is the primary, the others are made from it.
NODE_NAMES = ("primary", "sync", "async")
#: Whether the primary waits for a synchronous standby ("sync") or for nobody ("async").
Mode = Literal["sync", "async"]
#: What a node is now: a read-write primary, a standby in recovery, not answering, or stopped by SIGSTOP.
Role = Literal["primary", "standby", "down", "paused"]

#: Seconds a libpq connection to one node may take (a paused node never answers).
CONNECT_TIMEOUT_S = 5
#: The settings of every node (``max_connections`` as PostgresServer's; standbys need the primary's values or more).
SETTINGS = {
    "wal_level": "replica",
    "max_wal_senders": "10",
    "max_replication_slots": "10",
    "wal_log_hints": "on",  # pg_rewind needs it (or data checksums, which PostgreSQL 15's initdb does not enable)
    "hot_standby": "on",
    "max_connections": "60",
    "synchronous_commit": "on",
    "wal_keep_size": "128MB",
    "wal_retrieve_retry_interval": "200ms",  # a standby retries its upstream at once, not after 5 s
    "wal_receiver_status_interval": "1s",
    "wal_receiver_timeout": "15s",
    "wal_sender_timeout": "15s",
    "shared_buffers": "32MB",
    "log_checkpoints": "off",
}


@dataclass(frozen=True)
class NodeStatus:
    """One node as it answers now (every field but ``name`` and ``role`` is None when it does not answer)."""

    name: str
    role: Role
    timeline: int | None = None
    """A primary's current timeline; a standby's of the WAL it receives (of its last restartpoint when it
    receives none)."""
    system_identifier: int | None = None
    replay_lsn: str | None = None
    """A standby's ``pg_last_wal_replay_lsn()``; a primary's ``pg_current_wal_lsn()``."""
    flush_lsn: str | None = None
    """A standby's ``pg_last_wal_receive_lsn()`` (received and flushed); a primary's ``pg_current_wal_flush_lsn()``."""
    sync_state: str | None = None
    """This node's ``sync_state`` in the current primary's ``pg_stat_replication`` (``sync``, ``async``,
    ``potential``, ``quorum``); None when it is not listed there."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class ClusterStatus:
    """Every node, and the node the cluster last made its primary (it may be down, or not alone)."""

    primary: str
    mode: Mode
    nodes: tuple[NodeStatus, ...] = field(default=())

    def node(self, name: str) -> NodeStatus:
        """The status of node ``name``."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise ServiceError(f"The cluster has no node called {name!r}.", f"use one of: {', '.join(NODE_NAMES)}.")

    def summary(self) -> str:
        """One line: each node's role and timeline, and its sync state."""
        parts = []
        for n in self.nodes:
            timeline = f" tl{n.timeline}" if n.timeline is not None else ""
            state = f" {n.sync_state}" if n.sync_state else ""
            parts.append(f"{n.name}={n.role}{timeline}{state}")
        return ", ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"primary": self.primary, "mode": self.mode, "nodes": [n.to_json() for n in self.nodes]}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ClusterStatus:
        return cls(primary=data["primary"], mode=data["mode"], nodes=tuple(NodeStatus(**n) for n in data["nodes"]))


class ProxyControl(Protocol):
    """The faults of one node's client proxy: a :class:`~eosink.services.proxy.FaultProxy` in process, or
    the same operations forwarded to a supervisor (:class:`eosink.services.postgres_replicated.ClusterControl`)."""

    @property
    def port(self) -> int: ...

    @property
    def stats(self) -> ProxyStats: ...

    def passthrough(self) -> None: ...

    def cut_after_request(
        self, match: RequestMatch = b"", *, times: int = 1, wait_for_reply: bool = True, skip: int = 0
    ) -> None: ...

    def cut_before_request(self, match: RequestMatch = b"", *, times: int = 1) -> None: ...

    def delay(self, seconds: float) -> None: ...

    def refuse(self) -> None: ...

    def cut_all(self) -> int: ...

    def wait_for_cut(self, timeout_s: float) -> bool: ...


class ReplicatedCluster(Protocol):
    """What a test does to a replicated PostgreSQL: :class:`PostgresCluster` in process, or
    :class:`eosink.services.postgres_replicated.ClusterControl` through the service's supervisor."""

    @property
    def url(self) -> str: ...

    def node_url(self, name: str) -> str: ...

    def direct_url(self, name: str) -> str: ...

    def proxy(self, name: str) -> ProxyControl: ...

    def primary(self) -> str: ...

    def status(self) -> ClusterStatus: ...

    def kill(self, name: str) -> None: ...

    def stop(self, name: str) -> None: ...

    def start(self, name: str, *, timeout_s: float = 60.0) -> None: ...

    def promote(self, name: str, *, timeout_s: float = 60.0) -> None: ...

    def rejoin(self, name: str, *, timeout_s: float = 120.0) -> None: ...

    def cut_link(self, name: str) -> None: ...

    def restore_link(self, name: str) -> None: ...

    def pause(self, name: str) -> None: ...

    def resume(self, name: str) -> None: ...

    def set_mode(self, mode: Mode) -> None: ...

    def wait_replayed(self, name: str, timeout_s: float = 60.0) -> None: ...

    def wait_streaming(self, name: str, timeout_s: float = 60.0) -> None: ...


@dataclass(eq=False)
class _Node:
    """One node's state: its data directory, its server's port and process, and its two proxies."""

    name: str
    data: Path
    log_path: Path
    label: str
    port: int
    client: FaultProxy
    link: FaultProxy
    standby: bool
    """Whether it starts as a standby (its data directory holds ``standby.signal``)."""
    started: bool = False
    """Whether a start succeeded: from then on the port is kept."""
    proc: Proc | None = None
    paused: bool = False

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.alive()


class PostgresCluster:
    """Three PostgreSQL nodes in ``root``: ``"primary"``, and ``"sync"`` and ``"async"`` streaming from it.

    Made and started at once (a failed start stops what it started); every operation waits, bounded,
    for its effect and logs what it did on ``eosink.services``. Not thread-safe: one caller at a time
    (the service's supervisor serialises its clients).
    """

    def __init__(
        self,
        root: Path,
        *,
        mode: Mode = "sync",
        max_prepared: int = MAX_PREPARED_TRANSACTIONS,
        start_timeout_s: float = 60.0,
        **settings: str,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)  # the server's user must reach the nodes' directories
        _check_mode(mode)
        self.mode: Mode = mode
        self.user = service_user()
        self.bindir = postgres_bindir()
        if self.user is not None:
            self.bindir = runnable_bindir(self.user, self.bindir)
        self.password = secrets.token_urlsafe(18)
        self.settings = {**SETTINGS, "max_prepared_transactions": str(max_prepared), **settings}
        self.start_timeout_s = start_timeout_s
        self._primary = NODE_NAMES[0]
        self._nodes: dict[str, _Node] = {}
        self._proxies: list[FaultProxy] = []
        tag = hashlib.sha256(str(self.root.absolute()).encode()).hexdigest()[:10]
        try:
            # The proxies first, on ports of the system's choosing; the nodes' ports are picked free after them,
            # so that none of them is a proxy's.
            proxies = {name: (self._proxy(), self._proxy()) for name in NODE_NAMES}
            ports = free_ports(len(NODE_NAMES))
            for (name, (client, link)), port in zip(proxies.items(), ports, strict=True):
                client.target = ("127.0.0.1", port)
                self._nodes[name] = _Node(
                    name=name,
                    data=self.root / name / "pgdata",
                    log_path=self.root / name / "postgres.log",
                    label=f"pgcluster-{tag}-{name}",
                    port=port,
                    client=client,
                    link=link,
                    standby=name != self._primary,
                )
            self._create()
        except BaseException:
            with contextlib.suppress(ServiceError):  # the error that stopped the start is the one to see
                self.close()
            raise

    def _proxy(self) -> FaultProxy:
        """A started proxy; its target is set once the node it leads to has its port."""
        proxy = FaultProxy("127.0.0.1", 0).start()
        self._proxies.append(proxy)
        return proxy

    def __repr__(self) -> str:
        return f"PostgresCluster(root={str(self.root)!r}, primary={self._primary!r}, mode={self.mode!r})"

    # -- where clients connect ----------------------------------------------------------------

    @property
    def url(self) -> str:
        """A libpq multi-host URL over the three client proxies that connects to a read-write primary
        (it holds the password). The hosts are tried in node order, each for at most 10 s."""
        hosts = ",".join(f"127.0.0.1:{node.client.port}" for node in self._nodes.values())
        return (
            f"postgresql://{SUPERUSER}:{quote(self.password, safe='')}@{hosts}/postgres"
            "?target_session_attrs=read-write&connect_timeout=10"
        )

    def node_url(self, name: str) -> str:
        """Node ``name``'s URL through its client proxy, whatever its role."""
        return self._url(self._node(name).client.port)

    def direct_url(self, name: str) -> str:
        """Node ``name``'s URL on its own port (administration that the proxies must not disturb)."""
        return self._url(self._node(name).port)

    def proxy(self, name: str) -> FaultProxy:
        """Node ``name``'s client proxy: arm it to cut a request's reply, refuse or delay its clients."""
        return self._node(name).client

    def primary(self) -> str:
        """The node the cluster last made its primary (it may be down)."""
        return self._primary

    def _url(self, port: int) -> str:
        return f"postgresql://{SUPERUSER}:{quote(self.password, safe='')}@127.0.0.1:{port}/postgres"

    def _node(self, name: str) -> _Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise ServiceError(
                f"The cluster has no node called {name!r}.", f"use one of: {', '.join(NODE_NAMES)}."
            ) from None

    # -- creation -----------------------------------------------------------------------------

    def _create(self) -> None:
        """initdb the primary and start it; make each standby with pg_basebackup and start it; wait until both
        stream and the synchronous standby is named."""
        started = time.monotonic()
        primary = self._nodes[self._primary]
        self._fresh_data(primary)
        _initdb(self.bindir, primary.data, self.password, self.user)
        self._configure(primary.data)
        self._start(primary, self.start_timeout_s)
        self._retarget_links()
        for node in self._nodes.values():
            if node is primary:
                continue
            self._fresh_data(node)
            self._run(
                node,
                "pg_basebackup",
                ["-D", node.data, "-X", "stream", "-S", node.name, "-C", "--checkpoint=fast", "--no-sync"],
                source=primary,
                fix="see the message above and the primary's log.",
            )
            self._follow(node)
            self._start(node, self.start_timeout_s)
        for node in self._nodes.values():
            if node is not primary:
                self.wait_streaming(node.name, self.start_timeout_s)
        self._apply_sync_names(self.start_timeout_s)
        log.info(
            "[postgres-cluster] %s up in %.1f s (%s): %s",
            self.root,
            time.monotonic() - started,
            self.mode,
            ", ".join(f"{n.name} on {n.port} (proxy {n.client.port})" for n in self._nodes.values()),
        )

    def _fresh_data(self, node: _Node) -> None:
        """An empty data directory the server's user owns (under the temporary directory when it cannot
        reach ``root``)."""
        node.data.parent.mkdir(parents=True, exist_ok=True)
        os.chmod(node.data.parent, 0o755)
        if self.user is not None:
            node.data = self.user.private_dir(node.data, node.label)
        else:
            if node.data.exists():
                shutil.rmtree(node.data)
            node.data.mkdir(mode=0o700)

    def _configure(self, data: Path) -> None:
        """The shared settings in ``postgresql.conf``; replication connections from 127.0.0.1 with scram."""
        lines = ["", "# eosink PostgresCluster: the same on every node (pg_basebackup copies this file)"]
        lines += [f"{key} = '{_conf_quote(value)}'" for key, value in self.settings.items()]
        with (data / "postgresql.conf").open("a") as conf:
            conf.write("\n".join(lines) + "\n")
        hba = data / "pg_hba.conf"
        wanted = ["host", "replication", "all", "127.0.0.1/32", "scram-sha-256"]
        if not any(line.split() == wanted for line in hba.read_text().splitlines()):
            with hba.open("a") as out:
                out.write("host    replication     all             127.0.0.1/32            scram-sha-256\n")

    def _follow(self, node: _Node) -> None:
        """Make ``node`` a standby that streams through its link proxy from its slot (written while it is down)."""
        conninfo = (
            f"host=127.0.0.1 port={node.link.port} user={SUPERUSER} password={self.password} "
            f"application_name={node.name} connect_timeout={CONNECT_TIMEOUT_S}"
        )
        auto = node.data / "postgresql.auto.conf"
        kept = [
            line
            for line in (auto.read_text().splitlines() if auto.exists() else [])
            if line.split("=", 1)[0].strip() not in ("primary_conninfo", "primary_slot_name")
        ]
        kept += [f"primary_conninfo = '{_conf_quote(conninfo)}'", f"primary_slot_name = '{node.name}'"]
        self._write(auto, "\n".join(kept) + "\n")
        self._write(node.data / "standby.signal", "")
        node.standby = True

    def _write(self, path: Path, text: str) -> None:
        """Write a file of the data directory, owned by the server's user, mode 0600."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(text)
        if self.user is not None:
            os.chown(path, *self.user.ids)

    def _retarget_links(self) -> None:
        """Point every replication link at the current primary; cut what they had open (a standby reconnects
        to the new target within ``wal_retrieve_retry_interval``)."""
        port = self._nodes[self._primary].port
        for node in self._nodes.values():
            if node.link.target != ("127.0.0.1", port):
                node.link.target = ("127.0.0.1", port)
                node.link.cut_all()

    # -- processes ------------------------------------------------------------------------------

    def _start(self, node: _Node, timeout_s: float) -> None:
        """Start ``node``'s server and wait until it accepts connections (a first start may move to a free port;
        a later one keeps its port: its proxies point at it)."""
        argv_settings = {"cluster_name": node.name, "log_min_messages": "log"}

        def start(attempt: Attempt) -> None:
            (node.port,) = attempt.ports
            argv = _server_argv(self.bindir, node.data, node.port, argv_settings)
            node.proc = proc = spawn(argv, node.log_path, user=self.user.ids if self.user else None, env=_server_env())
            url = self.direct_url(node.name)
            try:
                wait_until(
                    lambda: _serves(url, node.name),
                    what=f"PostgreSQL node {node.name}",
                    proc=proc,
                    log_path=node.log_path,
                    timeout_s=timeout_s,
                    fix=f"see the node's log {node.log_path}.",
                    attempt=attempt,
                )
            except BaseException:
                stop(proc, what=f"PostgreSQL node {node.name}", sig=signal.SIGINT)
                node.proc = None
                raise

        what = f"the replicated PostgreSQL's {node.name}"
        start_on_ports(start, (node.port,), log_path=node.log_path, what=what, may_move=not node.started)
        node.started = True
        node.paused = False
        node.client.target = ("127.0.0.1", node.port)
        self._record()

    def _run(self, node: _Node, tool: str, args: Sequence[str | Path], *, source: _Node, fix: str) -> None:
        """Run PostgreSQL's ``tool`` as the server's user, connecting to ``source`` on its own port; its output
        goes to ``node``'s log."""
        argv = [os.fspath(self.bindir / tool), *(os.fspath(a) for a in args)]
        if tool == "pg_rewind":
            argv.append(f"--source-server=host=127.0.0.1 port={source.port} user={SUPERUSER} dbname=postgres")
        else:
            argv += ["-h", "127.0.0.1", "-p", str(source.port), "-U", SUPERUSER]
        env = {**_server_env(), "PGPASSWORD": self.password, "PGCONNECT_TIMEOUT": str(CONNECT_TIMEOUT_S)}
        started = time.monotonic()
        try:
            done = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                check=False,
                cwd=node.data.parent,
                env=env,
                timeout=300,
                user=self.user.uid if self.user else None,
                group=self.user.gid if self.user else None,
                extra_groups=[] if self.user else None,
            )
        except subprocess.TimeoutExpired:
            raise ServiceError(f"{tool} for node {node.name} did not finish within 300 s.", fix) from None
        output = (done.stdout + done.stderr).strip()
        with node.log_path.open("a") as out:
            out.write(f"--- {tool} (exit {done.returncode}) ---\n{output}\n")
        if done.returncode != 0:
            raise ServiceError(f"{tool} for node {node.name} failed ({argv[0]}):\n{output[-2000:]}", fix)
        log.info(
            "[postgres-cluster] %s for %s from %s in %.1f s", tool, node.name, source.name, time.monotonic() - started
        )

    def _record(self) -> None:
        """The nodes' PIDs and private directories in ``root/nodes.json``, for :meth:`clean_up`."""
        state = {
            "nodes": {
                n.name: None if n.proc is None else {"pid": n.proc.pid, "start_time": n.proc.start_time}
                for n in self._nodes.values()
            },
            "labels": [n.label for n in self._nodes.values()],
        }
        tmp = self.root / "nodes.json.tmp"
        tmp.write_text(json.dumps(state, indent=1))
        os.replace(tmp, self.root / "nodes.json")

    # -- operations --------------------------------------------------------------------------------

    def kill(self, name: str) -> None:
        """SIGKILL node ``name``'s postmaster and every backend (a crash: its next start runs crash recovery)."""
        node = self._node(name)
        if node.proc is None:
            return
        backends = children(node.proc.pid)
        stop(node.proc, what=f"PostgreSQL node {name}", sig=signal.SIGKILL, timeout_s=10.0)
        kill_all(backends, what=f"PostgreSQL node {name}'s backends")
        node.proc, node.paused = None, False
        self._record()
        log.info("[postgres-cluster] killed %s", name)

    def stop(self, name: str) -> None:
        """Fast shutdown of node ``name`` (a paused node is resumed first)."""
        node = self._node(name)
        if node.proc is None:
            return
        if node.paused:
            self.resume(name)
        stop(node.proc, what=f"PostgreSQL node {name}", sig=signal.SIGINT)
        node.proc = None
        self._record()
        log.info("[postgres-cluster] stopped %s", name)

    def start(self, name: str, *, timeout_s: float = 60.0) -> None:
        """Start a stopped or killed node ``name`` in its current role, on its port, and wait until it accepts
        connections. An old primary that was not rejoined starts as a primary of its old timeline."""
        node = self._node(name)
        if node.running:
            if node.paused:
                raise ServiceError(f"Node {name} is paused (SIGSTOP), not stopped.", f"resume({name!r}) it instead.")
            return
        if not node.standby and name != self._primary:
            log.warning(
                "[postgres-cluster] %s starts as a primary beside %s (rejoin() makes it a standby)", name, self._primary
            )
        self._start(node, timeout_s)
        log.info("[postgres-cluster] started %s as %s on %d", name, "standby" if node.standby else "primary", node.port)

    def promote(self, name: str, *, timeout_s: float = 60.0) -> None:
        """Promote standby ``name`` (``pg_promote``); make it the primary every link leads to.

        The new primary gets a slot for each other node and, in sync mode, its synchronous standby (see the
        module's rules). Every other standby is re-pointed at it through its link proxy and follows it if it
        can (see :meth:`wait_streaming`); the old primary is left as it is (down, or still a primary)."""
        node = self._node(name)
        self._check_answers(node, "promote")
        started = time.monotonic()
        with _connection(self.direct_url(name)) as conn:
            recovery = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            if recovery != (True,):
                raise ServiceError(f"Node {name} is not a standby: there is nothing to promote.", "promote a standby.")
            row = conn.execute("SELECT pg_promote(wait => true, wait_seconds => %s)", (max(int(timeout_s), 1),))
            promoted = row.fetchone()
        if promoted != (True,):
            raise ServiceError(
                f"Node {name} did not finish its promotion within {timeout_s:.0f} s. Last lines of {node.log_path}:\n"
                f"{log_tail(node.log_path)}",
                "see the node's log.",
            )
        old, self._primary = self._primary, name
        node.standby = False
        for other in self._nodes.values():
            if other is not node:
                self._ensure_slot(other.name)
        self._apply_sync_names(timeout_s)
        self._retarget_links()
        log.info("[postgres-cluster] promoted %s in %.1f s (was %s)", name, time.monotonic() - started, old)

    def rejoin(self, name: str, *, timeout_s: float = 120.0) -> None:
        """Make node ``name`` (an old primary, or a standby that went past the new primary's timeline) a standby
        of the current primary: stopped if it runs, rewound with ``pg_rewind`` from the primary (which runs the
        node's crash recovery itself when it was killed), pointed through its link at its slot, started, and
        waited for until it streams."""
        node = self._node(name)
        if name == self._primary:
            raise ServiceError(f"Node {name} is the current primary: it cannot rejoin itself.", "promote another.")
        primary = self._nodes[self._primary]
        self._check_answers(primary, "rewind from")
        started = time.monotonic()
        self.stop(name)
        # pg_rewind before 16 reads the source's timeline from its control file, which a promoted server updates
        # at its first checkpoint only: until then it finds "no rewind required" and the node cannot follow.
        with _connection(self.direct_url(primary.name)) as conn:
            conn.execute("CHECKPOINT")
        # pg_rewind's crash recovery runs a single-user server, which cannot be a standby.
        (node.data / "standby.signal").unlink(missing_ok=True)
        self._run(
            node,
            "pg_rewind",
            [f"--target-pgdata={node.data}", "--no-sync"],
            source=primary,
            fix="see the message above; a node whose WAL since the divergence is gone cannot be rewound: make a "
            "new cluster.",
        )
        slots = node.data / "pg_replslot"
        if slots.is_dir():
            for slot in slots.iterdir():  # its slots of when it was a primary would pin WAL on a standby
                shutil.rmtree(slot)
        self._ensure_slot(name)
        self._follow(node)
        self._retarget_links()
        self._start(node, timeout_s)
        self.wait_streaming(name, timeout_s)
        log.info(
            "[postgres-cluster] %s rejoined as a standby of %s in %.1f s",
            name,
            self._primary,
            time.monotonic() - started,
        )

    def cut_link(self, name: str) -> None:
        """Cut node ``name``'s replication link: open streams are cut, new ones refused (the primary goes on)."""
        self._node(name).link.refuse()
        log.info("[postgres-cluster] cut %s's replication link", name)

    def restore_link(self, name: str) -> None:
        """Let node ``name``'s replication link pass again (the standby reconnects by itself)."""
        self._node(name).link.passthrough()
        log.info("[postgres-cluster] restored %s's replication link", name)

    def pause(self, name: str, *, timeout_s: float = 10.0) -> None:
        """SIGSTOP node ``name``'s postmaster and every process of it: it neither answers nor notices."""
        node = self._node(name)
        if node.proc is None or not node.proc.alive():
            raise ServiceError(f"Node {name} is not running: there is nothing to pause.", f"start({name!r}) it first.")
        pids = [node.proc.pid]
        with contextlib.suppress(ProcessLookupError):
            os.kill(node.proc.pid, signal.SIGSTOP)  # first: it forks nothing new meanwhile
        pids += children(node.proc.pid)
        for pid in pids[1:]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGSTOP)
        node.paused = True
        if not poll(lambda: all(is_stopped(p) or not is_alive(p) for p in pids), timeout_s):
            raise ServiceError(
                f"Node {name}'s processes did not stop within {timeout_s:.0f} s.", f"inspect: ps -p {pids[0]}"
            )
        log.info("[postgres-cluster] paused %s (%d processes)", name, len(pids))

    def resume(self, name: str) -> None:
        """SIGCONT every process of node ``name`` (a resumed old primary is still a primary of its timeline)."""
        node = self._node(name)
        if node.proc is None:
            node.paused = False
            return
        for pid in [*children(node.proc.pid), node.proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        node.paused = False
        log.info("[postgres-cluster] resumed %s", name)

    def set_mode(self, mode: Mode) -> None:
        """Name the synchronous standby on the current primary (``"sync"``) or none (``"async"``), and reload."""
        _check_mode(mode)
        self.mode = mode
        self._apply_sync_names(30.0)

    def wait_replayed(self, name: str, timeout_s: float = 60.0) -> None:
        """Wait until standby ``name`` has replayed the current primary's WAL position of now."""
        node = self._node(name)
        primary = self._nodes[self._primary]
        self._check_answers(primary, "read the WAL position of")
        (target,) = _one(self.direct_url(primary.name), "SELECT pg_current_wal_lsn()::text")
        seen: list[str | None] = [None]

        def replayed() -> bool:
            try:
                (seen[0],) = _one(self.direct_url(name), "SELECT pg_last_wal_replay_lsn()::text")
            except _unavailable():
                return False
            return seen[0] is not None and _lsn(seen[0]) >= _lsn(target)

        if not poll(replayed, timeout_s, max_interval_s=0.2):
            raise ServiceError(
                f"Node {name} did not replay the primary {primary.name}'s WAL up to {target} within {timeout_s:.0f} s "
                f"(it is at {seen[0]}). Last lines of {node.log_path}:\n{log_tail(node.log_path, 10)}",
                "is its link cut, or did it go past the primary's timeline (rejoin it)?",
            )

    def wait_streaming(self, name: str, timeout_s: float = 60.0) -> None:
        """Wait until node ``name`` streams the current primary's timeline: listed as streaming in the primary's
        ``pg_stat_replication``, its WAL receiver streaming on that timeline (a standby that went past the
        primary's fork point restarts streaming on its old timeline over and over, and is never both)."""
        node = self._node(name)
        primary_url, standby_url = self.direct_url(self._primary), self.direct_url(name)

        def streaming() -> bool:
            try:
                walfile, listed = _one(
                    primary_url,
                    "SELECT pg_walfile_name(pg_current_wal_lsn()), (SELECT count(*) FROM pg_stat_replication "
                    "WHERE application_name = %s AND state = 'streaming')",
                    (name,),
                )
                receiver = _one(standby_url, "SELECT status, received_tli FROM pg_stat_wal_receiver")
            except _unavailable():
                return False
            return bool(listed) and receiver == ("streaming", int(str(walfile)[:8], 16))

        if not poll(streaming, timeout_s, max_interval_s=0.2):
            raise ServiceError(
                f"Node {name} does not stream from the primary {self._primary} after {timeout_s:.0f} s. Last lines "
                f"of {node.log_path}:\n{log_tail(node.log_path, 10)}",
                "is its link cut, or did it go past the primary's timeline (rejoin it)?",
            )

    def status(self) -> ClusterStatus:
        """Every node as it answers now, with its sync state as the current primary reports it."""
        sync_states: dict[str, str] = {}
        primary = self._nodes[self._primary]
        if primary.running and not primary.paused:
            with contextlib.suppress(*_unavailable()), _connection(self.direct_url(primary.name)) as conn:
                rows = conn.execute(
                    "SELECT application_name, sync_state FROM pg_stat_replication ORDER BY state = 'streaming'"
                ).fetchall()
                sync_states = {str(app): str(state) for app, state in rows}  # the streaming one last: it wins
        return ClusterStatus(
            primary=self._primary,
            mode=self.mode,
            nodes=tuple(self._node_status(n, sync_states.get(n.name)) for n in self._nodes.values()),
        )

    def _node_status(self, node: _Node, sync_state: str | None) -> NodeStatus:
        if node.paused and node.running:
            return NodeStatus(node.name, "paused")
        if not node.running:
            return NodeStatus(node.name, "down")
        try:
            with _connection(self.direct_url(node.name)) as conn:
                row = conn.execute(
                    "SELECT pg_is_in_recovery(), (SELECT system_identifier FROM pg_control_system())"
                ).fetchone()
                assert row is not None
                in_recovery, system_identifier = bool(row[0]), int(row[1])
                if in_recovery:
                    lsns = conn.execute(
                        "SELECT pg_last_wal_replay_lsn()::text, pg_last_wal_receive_lsn()::text, "
                        "coalesce((SELECT nullif(received_tli, 0) FROM pg_stat_wal_receiver), "
                        "(SELECT timeline_id FROM pg_control_checkpoint()))"
                    ).fetchone()
                else:
                    lsns = conn.execute(
                        "SELECT pg_current_wal_lsn()::text, pg_current_wal_flush_lsn()::text, "
                        "pg_walfile_name(pg_current_wal_lsn())"
                    ).fetchone()
        except _unavailable():
            return NodeStatus(node.name, "down")
        assert lsns is not None
        timeline = int(lsns[2]) if in_recovery else int(str(lsns[2])[:8], 16)
        return NodeStatus(
            name=node.name,
            role="standby" if in_recovery else "primary",
            timeline=timeline,
            system_identifier=system_identifier,
            replay_lsn=lsns[0],
            flush_lsn=lsns[1],
            sync_state=sync_state,
        )

    # -- rules ---------------------------------------------------------------------------------------

    def _sync_standby(self) -> str | None:
        """The standby the primary waits for in sync mode: "sync" if it is a running standby, else the first
        other running standby, else none."""
        if self.mode != "sync":
            return None
        candidates = [
            n.name for n in self._nodes.values() if n.name != self._primary and n.standby and n.running and not n.paused
        ]
        return "sync" if "sync" in candidates else next(iter(candidates), None)

    def _apply_sync_names(self, timeout_s: float) -> None:
        """``synchronous_standby_names`` on the current primary by the rule; wait until the server and each
        streaming standby's sender have taken it."""
        from psycopg import sql

        primary = self._nodes[self._primary]
        self._check_answers(primary, "set synchronous_standby_names on")
        chosen = self._sync_standby()
        wanted = f"FIRST 1 ({chosen})" if chosen else ""
        url = self.direct_url(primary.name)
        with _connection(url) as conn:
            conn.execute(sql.SQL("ALTER SYSTEM SET synchronous_standby_names = {}").format(sql.Literal(wanted)))
            conn.execute("SELECT pg_reload_conf()")

        def taken() -> bool:
            try:
                with _connection(url) as conn:
                    shown = conn.execute("SHOW synchronous_standby_names").fetchone()
                    rows = conn.execute(
                        "SELECT application_name, sync_state FROM pg_stat_replication WHERE state = 'streaming'"
                    ).fetchall()
            except _unavailable():
                return False
            expected = {str(app): "sync" if app == chosen else "async" for app, _ in rows}
            return shown == (wanted,) and {str(app): str(state) for app, state in rows} == expected

        if not poll(taken, timeout_s, max_interval_s=0.2):
            raise ServiceError(
                f"The primary {primary.name} did not take synchronous_standby_names = {wanted!r} within "
                f"{timeout_s:.0f} s.",
                f"see its log {primary.log_path}.",
            )
        log.info("[postgres-cluster] %s: synchronous_standby_names = %r", primary.name, wanted)

    def _ensure_slot(self, name: str) -> None:
        """A physical slot for node ``name`` on the current primary (reserving WAL from now)."""
        with _connection(self.direct_url(self._primary)) as conn:
            conn.execute(
                "SELECT pg_create_physical_replication_slot(%s, true) "
                "WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = %s)",
                (name, name),
            )

    def _check_answers(self, node: _Node, doing: str) -> None:
        if not node.running:
            raise ServiceError(f"Node {node.name} is down: cannot {doing} it.", f"start({node.name!r}) it first.")
        if node.paused:
            raise ServiceError(f"Node {node.name} is paused: cannot {doing} it.", f"resume({node.name!r}) it first.")

    # -- cleanup ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Stop every node (fast shutdown, by PID), close every proxy, remove the directories."""
        errors: list[ServiceError] = []
        for node in reversed(list(self._nodes.values())):
            try:
                self.stop(node.name)  # a paused node is resumed first
            except ServiceError as exc:
                errors.append(exc)
        for proxy in self._proxies:
            proxy.close()
        shutil.rmtree(self.root, ignore_errors=True)
        if self.user is not None:
            for node in self._nodes.values():
                self.user.discard(node.data, node.label)
        if errors:
            raise errors[0]

    @staticmethod
    def clean_up(root: Path) -> None:
        """What a cluster in ``root`` left when its owner died without :meth:`close`: SIGKILL every node still
        running, by the PIDs it recorded, and remove its directories."""
        try:
            state = json.loads((Path(root) / "nodes.json").read_text())
        except (OSError, ValueError):
            return
        for name, recorded in state.get("nodes", {}).items():
            if recorded is None:
                continue
            proc = Proc(int(recorded["pid"]), int(recorded["start_time"]))
            if proc.alive():
                backends = children(proc.pid)
                stop(proc, what=f"PostgreSQL node {name}", sig=signal.SIGKILL, timeout_s=10.0)
                kill_all(backends, what=f"PostgreSQL node {name}'s backends")
                log.info("[postgres-cluster] killed %s (pid %d), left running", name, proc.pid)
        user = service_user()
        if user is not None:
            for label in state.get("labels", []):
                user.discard(Path(root), str(label))
        shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_mode(mode: str) -> None:
    if mode not in ("sync", "async"):
        raise ServiceError(f"Unknown replication mode {mode!r}.", "use 'sync' or 'async'.")


def _conf_quote(value: str) -> str:
    """A value for a single-quoted setting in a PostgreSQL configuration file."""
    return value.replace("\\", "\\\\").replace("'", "''")


_LSN = re.compile(r"^([0-9A-Fa-f]+)/([0-9A-Fa-f]+)$")


def _lsn(text: str) -> int:
    """``"16/B374D848"`` as a number."""
    match = _LSN.match(text)
    if match is None:
        raise ValueError(f"not an LSN: {text!r}")
    return (int(match[1], 16) << 32) | int(match[2], 16)


def _serves(url: str, name: str) -> bool:
    """Whether the server on ``url`` accepts connections as node ``name`` (not another server, or one of the
    cluster's proxies, that took its port)."""
    try:
        return _one(url, "SHOW cluster_name") == (name,)
    except _unavailable():
        return False


def _unavailable() -> tuple[type[Exception], ...]:
    """What a node that is down, starting or gone raises."""
    import psycopg

    return (psycopg.OperationalError,)


@contextlib.contextmanager
def _connection(url: str) -> Iterator[Connection[tuple[Any, ...]]]:
    """An autocommit connection to one node, bounded by :data:`CONNECT_TIMEOUT_S`."""
    import psycopg

    with psycopg.connect(url, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        yield conn


def _one(url: str, query: str, params: Sequence[Any] | None = None) -> tuple[Any, ...]:
    """The first row of ``query`` on a fresh connection (empty when there is none)."""
    with _connection(url) as conn:
        row = conn.execute(query, params).fetchone()
    return tuple(row) if row is not None else ()
