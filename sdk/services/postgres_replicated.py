"""``postgres-replicated``: a :class:`~eosink.services.postgres_cluster.PostgresCluster` as a service.

``eosink services up postgres-replicated`` starts a supervisor process (``python -m
eosink.services.postgres_replicated serve ...``, stopped by its PID like every server) that
builds the cluster (a primary, a synchronous and an asynchronous standby, each behind its
fault proxies), keeps it and its proxies alive, and takes commands on a Unix socket in the
service's run directory (mode 0600): one JSON line ``{"op": ..., "args": {...}}`` per
connection, answered by ``{"ok": result}`` or ``{"error": problem, "fix": fix}``, for a fixed
list of operations (:data:`CLUSTER_OPS`, :data:`PROXY_OPS`). :class:`ClusterControl` sends
them, so a test written against :class:`~eosink.services.postgres_cluster.ReplicatedCluster`
runs on this service or on a cluster of its own.

It is started only when named: ``eosink services up`` alone starts the plain servers.
Clients connect to ``EOSINK_POSTGRES_REPLICATED_URL``, a libpq multi-host URL that finds the
read-write primary; ``EOSINK_POSTGRES_REPLICATED_CONTROL`` is the control socket.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import signal
import socket
import socketserver
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError
from eosink.services._process import Proc, spawn, stop, wait_until
from eosink.services.base import Service
from eosink.services.postgres import PostgresEndpoint, PostgresService, postgres_bindir
from eosink.services.postgres_cluster import NODE_NAMES, ClusterStatus, Mode, PostgresCluster
from eosink.services.proxy import ProxyStats, RequestMatch

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
#: The operations on a node's client proxy (``node`` names it; ``match`` is bytes as latin-1 text, a regular
#: expression with ``regex``).
PROXY_OPS: dict[str, dict[str, type]] = {
    "passthrough": {"node": str},
    "cut_after_request": {
        "node": str,
        "match": str,
        "regex": bool,
        "times": int,
        "wait_for_reply": bool,
        "skip": int,
    },
    "cut_before_request": {"node": str, "match": str, "regex": bool, "times": int},
    "refuse": {"node": str},
    "cut_all": {"node": str},
    "delay": {"node": str, "seconds": float},
    "wait_for_cut": {"node": str, "timeout_s": float},
    "stats": {"node": str},
}
_REQUIRED = {"name", "node", "mode"}
#: The longest request line the supervisor reads.
_MAX_REQUEST = 1 << 20
#: The longest path a Unix socket may have (108 bytes with the terminating NUL on Linux), with a margin.
_MAX_SOCKET_PATH = 100


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


def control_path(run: Path) -> Path:
    """The control socket of the service whose run directory is ``run``: ``run/ctl.sock``, or, where that path
    is too long for a Unix socket, one in a private directory under the temporary directory."""
    path = run / "ctl.sock"
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    tag = hashlib.sha256(os.fsencode(run.absolute())).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"eosink-ctl-{tag}" / "ctl.sock"


# -- the client -------------------------------------------------------------------------------------------


class ClusterControl:
    """The operations of :class:`~eosink.services.postgres_cluster.PostgresCluster`, sent to the service's
    supervisor (one connection per call). A supervisor that is gone is a :class:`ServiceError` saying so."""

    def __init__(self, endpoint: ReplicatedPostgresEndpoint, *, timeout_s: float = 300.0) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        """How long a call without a timeout of its own waits for its answer."""

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

    def request(self, op: str, **args: Any) -> Any:
        """Send operation ``op`` and return its result; the supervisor's error as a :class:`ServiceError`."""
        wait_s = self.timeout_s
        for key in ("timeout_s", "seconds"):
            if isinstance(args.get(key), (int, float)):
                wait_s = max(wait_s, float(args[key]) + 60.0)  # its own bound, and the operation's steps after it
        reply = _exchange(Path(self.endpoint.control), {"op": op, "args": args}, wait_s)
        if "error" in reply:
            raise ServiceError(str(reply["error"]), str(reply.get("fix") or "") or None)
        return reply.get("ok")


class RemoteProxy:
    """A node's client proxy in the supervisor: the operations of :class:`~eosink.services.proxy.FaultProxy`."""

    def __init__(self, control: ClusterControl, node: str) -> None:
        self._control = control
        self.node = node

    def __repr__(self) -> str:
        return f"RemoteProxy({self.node!r}, port={self.port})"

    @property
    def port(self) -> int:
        return self._control.endpoint.ports[self.node]

    @property
    def stats(self) -> ProxyStats:
        data = self._control.request("stats", node=self.node)
        return ProxyStats(**{**data, "requests_cut": [r.encode("latin-1") for r in data["requests_cut"]]})

    def passthrough(self) -> None:
        self._control.request("passthrough", node=self.node)

    def cut_after_request(
        self, match: RequestMatch = b"", *, times: int = 1, wait_for_reply: bool = True, skip: int = 0
    ) -> None:
        self._control.request(
            "cut_after_request", node=self.node, **_match(match), times=times, wait_for_reply=wait_for_reply, skip=skip
        )

    def cut_before_request(self, match: RequestMatch = b"", *, times: int = 1) -> None:
        self._control.request("cut_before_request", node=self.node, **_match(match), times=times)

    def delay(self, seconds: float) -> None:
        self._control.request("delay", node=self.node, seconds=seconds)

    def refuse(self) -> None:
        self._control.request("refuse", node=self.node)

    def cut_all(self) -> int:
        return int(self._control.request("cut_all", node=self.node))

    def wait_for_cut(self, timeout_s: float) -> bool:
        return bool(self._control.request("wait_for_cut", node=self.node, timeout_s=timeout_s))


def _match(match: RequestMatch) -> dict[str, Any]:
    """A request match as JSON: bytes as latin-1 text (every byte one character), a pattern's with ``regex``."""
    if isinstance(match, bytes):
        return {"match": match.decode("latin-1"), "regex": False}
    return {"match": match.pattern.decode("latin-1"), "regex": True}


def _known(name: str, names: dict[str, Any]) -> str:
    if name not in names:
        raise ServiceError(f"The cluster has no node called {name!r}.", f"use one of: {', '.join(names)}.")
    return name


def _exchange(path: Path, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One request and its answer on the control socket ``path``."""
    fix = f"start it with `eosink services up {NAME}`; its log is in the service's run directory."
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(os.fspath(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise ServiceError(f"The {NAME} supervisor is not running: nothing answers on {path}.", fix) from None
        try:
            sock.sendall(json.dumps(message).encode() + b"\n")
            with sock.makefile("rb") as answers:
                line = answers.readline()
        except TimeoutError:
            raise ServiceError(
                f"The {NAME} supervisor did not answer {message['op']} within {timeout_s:.0f} s.",
                "see its log (eosink services status postgres-replicated).",
            ) from None
        except OSError as exc:
            raise ServiceError(f"The {NAME} supervisor dropped the connection ({exc}).", fix) from None
    if not line:
        raise ServiceError(
            f"The {NAME} supervisor closed the connection without answering {message['op']}: it stopped or crashed.",
            fix,
        )
    reply: dict[str, Any] = json.loads(line)
    return reply


# -- the supervisor ---------------------------------------------------------------------------------------


class _Stopped(BaseException):
    """SIGTERM or SIGINT reached the supervisor."""


class _Supervisor(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The control socket in front of one cluster: each connection a thread, one cluster operation at a time."""

    daemon_threads = True

    def __init__(self, cluster: PostgresCluster, path: Path) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        umask = os.umask(0o177)  # the socket is 0600 from the start: it gives control of the servers
        try:
            super().__init__(os.fspath(path), _Handler)
        finally:
            os.umask(umask)
        self.path = path

    def endpoint(self) -> ReplicatedPostgresEndpoint:
        return ReplicatedPostgresEndpoint(
            url=self.cluster.url,
            port=self.cluster.proxy(NODE_NAMES[0]).port,
            node_urls={n: self.cluster.node_url(n) for n in NODE_NAMES},
            direct_urls={n: self.cluster.direct_url(n) for n in NODE_NAMES},
            ports={n: self.cluster.proxy(n).port for n in NODE_NAMES},
            control=os.fspath(self.path),
            mode=self.cluster.mode,
        )

    def answer(self, request: Any) -> dict[str, Any]:
        """The answer to one request: ``{"ok": ...}`` or ``{"error": ..., "fix": ...}``."""
        try:
            op, args = _checked(request)
            if op in PROXY_OPS:
                return {"ok": self._proxy_op(op, args)}
            with self.lock:
                return {"ok": self._cluster_op(op, args)}
        except ServiceError as exc:
            return {"error": exc.problem, "fix": exc.fix}
        except Exception as exc:
            log.exception("[%s] %r failed", NAME, request)
            return {"error": f"{type(exc).__name__}: {exc}", "fix": "see the supervisor's log."}

    def _cluster_op(self, op: str, args: dict[str, Any]) -> Any:
        if op == "ping":
            return "pong"
        if op == "endpoint":
            return self.endpoint().to_json()
        if op == "status":
            return self.cluster.status().to_json()
        return getattr(self.cluster, op)(**args)

    def _proxy_op(self, op: str, args: dict[str, Any]) -> Any:
        proxy = self.cluster.proxy(args.pop("node"))
        if "match" in args or "regex" in args:
            raw = str(args.pop("match", "")).encode("latin-1")
            args["match"] = re.compile(raw) if args.pop("regex", False) else raw
        if op == "stats":
            stats = dataclasses.asdict(proxy.stats)
            stats["requests_cut"] = [r.decode("latin-1") for r in proxy.stats.requests_cut]
            return stats
        return getattr(proxy, op)(**args)


class _Handler(socketserver.StreamRequestHandler):
    server: _Supervisor

    def handle(self) -> None:
        line = self.rfile.readline(_MAX_REQUEST)
        try:
            request = json.loads(line)
        except ValueError:
            reply: dict[str, Any] = {
                "error": "The request is not one line of JSON.",
                "fix": 'send {"op": ..., "args": {...}}.',
            }
        else:
            reply = self.server.answer(request)
        self.wfile.write(json.dumps(reply).encode() + b"\n")


def _checked(request: Any) -> tuple[str, dict[str, Any]]:
    """The operation and its arguments, if the operation is known and every argument has its type."""
    ops = {**CLUSTER_OPS, **PROXY_OPS}
    if not isinstance(request, dict) or not isinstance(request.get("op"), str) or request["op"] not in ops:
        op = request.get("op") if isinstance(request, dict) else None
        raise ServiceError(f"Unknown operation {op!r}.", f"use one of: {', '.join(ops)}.")
    op, args = request["op"], request.get("args") or {}
    schema = ops[op]
    if not isinstance(args, dict):
        raise ServiceError(f"The arguments of {op} are not an object.", f"send its arguments: {_described(schema)}.")
    for key, value in args.items():
        if key not in schema:
            raise ServiceError(f"{op} takes no argument {key!r}.", f"its arguments: {_described(schema)}.")
        if not _fits(value, schema[key]):
            raise ServiceError(
                f"{op}: {key}={value!r} is no {schema[key].__name__}.", f"its arguments: {_described(schema)}."
            )
    missing = [k for k in schema if k in _REQUIRED and k not in args]
    if missing:
        raise ServiceError(f"{op} needs {', '.join(missing)}.", f"its arguments: {_described(schema)}.")
    return op, dict(args)


def _fits(value: Any, wanted: type) -> bool:
    """Whether a JSON ``value`` has type ``wanted`` (an integer is a float too; a boolean is no number)."""
    if isinstance(value, bool):
        return wanted is bool
    if wanted is float:
        return isinstance(value, (int, float))
    return isinstance(value, wanted)


def _described(schema: dict[str, type]) -> str:
    return ", ".join(f"{key} ({kind.__name__})" for key, kind in schema.items()) or "none"


def _raise_stopped(signum: int, frame: FrameType | None) -> None:
    raise _Stopped(signum)


def serve(root: Path, control: Path, mode: Mode) -> int:
    """Build a cluster in ``root``, serve ``control`` until SIGTERM or SIGINT, then stop the cluster."""
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, _raise_stopped)
    cluster: PostgresCluster | None = None
    server: _Supervisor | None = None
    try:
        cluster = PostgresCluster(root, mode=mode)
        server = _Supervisor(cluster, control)
        log.info("[%s] serving %s (pid %d)", NAME, control, os.getpid())
        server.serve_forever(poll_interval=0.5)
    except _Stopped as stopped:
        log.info("[%s] stopping (signal %s)", NAME, stopped.args[0])
    except ServiceError as exc:
        log.error("[%s] error: %s", NAME, exc)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second signal must not cut the cleanup short
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if server is not None:
            server.server_close()
            server.lock.acquire(timeout=20)  # an operation in progress ends first, if it can
            control.unlink(missing_ok=True)
        if cluster is not None:
            cluster.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m eosink.services.postgres_replicated serve ROOT CONTROL [--mode sync|async]``."""
    parser = argparse.ArgumentParser(prog="python -m eosink.services.postgres_replicated")
    parser.add_argument("action", choices=["serve"])
    parser.add_argument("root", type=Path, help="the cluster's directory")
    parser.add_argument("control", type=Path, help="the control socket")
    parser.add_argument("--mode", choices=["sync", "async"], default="sync")
    args = parser.parse_args(argv)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger("eosink").addHandler(handler)
    logging.getLogger("eosink").setLevel(logging.INFO)
    mode: Mode = "async" if args.mode == "async" else "sync"
    return serve(args.root, args.control, mode)


# -- the service ------------------------------------------------------------------------------------------


class ReplicatedPostgresService(Service[ReplicatedPostgresEndpoint]):
    """A primary, a synchronous and an asynchronous standby, each behind fault proxies, run by a supervisor."""

    name = NAME
    endpoint_type = ReplicatedPostgresEndpoint
    start_timeout_s = 180.0
    stop_signal = signal.SIGTERM  # the supervisor stops the nodes and proxies, then exits

    def external(self) -> ReplicatedPostgresEndpoint | None:
        return None  # failovers need the harness's own servers

    def provision(self) -> None:
        postgres_bindir()  # the binaries come with a package: nothing to download

    @property
    def control(self) -> Path:
        return control_path(self.run)

    def launch(self) -> tuple[Proc, ReplicatedPostgresEndpoint]:
        argv: list[str | os.PathLike[str]] = [
            sys.executable,
            "-m",
            "eosink.services.postgres_replicated",
            "serve",
            self.data,
            self.control,
        ]
        proc = spawn(argv, self.log_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        answers: list[dict[str, Any]] = []

        def ready() -> bool:
            with contextlib.suppress(ServiceError, OSError, ValueError):
                answers.append(_exchange(self.control, {"op": "endpoint", "args": {}}, 10.0)["ok"])
            return bool(answers)

        try:
            wait_until(
                ready,
                what="the replicated PostgreSQL",
                proc=proc,
                log_path=self.log_path,
                timeout_s=self.start_timeout_s,
                fix=f"see the log above; `eosink services down {self.name}` then `up` starts it afresh.",
            )
        except BaseException:
            stop(proc, what=self.name, sig=self.stop_signal, timeout_s=60.0)
            self.after_stop()
            raise
        return proc, ReplicatedPostgresEndpoint(**answers[0])

    def after_stop(self) -> None:
        """What a supervisor that did not stop cleanly left: its nodes (by their recorded PIDs), its directories."""
        PostgresCluster.clean_up(self.data)
        control = self.control
        control.unlink(missing_ok=True)
        if control.parent != self.run:
            with contextlib.suppress(OSError):
                control.parent.rmdir()

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
