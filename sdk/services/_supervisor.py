"""A cluster of servers as one service: a supervisor process that keeps the cluster and its fault proxies alive.

``eosink services up postgres-replicated`` (or ``kafka-cluster``) starts a supervisor process, stopped by its
PID like every server, that builds the cluster, keeps it and the fault proxies in front of its nodes alive, and
takes commands on a Unix socket in the service's run directory (mode 0600): one JSON line
``{"op": ..., "args": {...}}`` per connection, answered by ``{"ok": result}`` or ``{"error": problem, "fix":
fix}``, for a fixed list of operations with typed arguments (the cluster's own, and :data:`PROXY_OPS` on a
node's proxy). :class:`Control` sends them and :class:`RemoteProxy` stands for a node's proxy, so a test
written against a cluster of its own runs on the service unchanged.

This module is what the services share; each one (:mod:`eosink.services.postgres_replicated`,
:mod:`eosink.services.kafka_cluster_service`) names its operations, its endpoint and how to build its cluster.
"""

from __future__ import annotations

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
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, ClassVar, Protocol, TypeVar

from eosink.errors import ServiceError
from eosink.services._process import Proc, spawn, stop, wait_until
from eosink.services.base import E, Service
from eosink.services.proxy import FaultProxy, ProxyStats, RequestMatch

__all__ = [
    "PROXY_OPS",
    "Control",
    "Ops",
    "RemoteProxy",
    "SupervisedService",
    "Supervisor",
    "control_path",
    "exchange",
    "run_supervisor",
    "serve",
]

log = logging.getLogger("eosink.services")

Ops = dict[str, dict[str, type]]
"""Operations a client may ask for, each with its arguments' types."""

#: The operations on a node's client proxy (``node`` names it; ``match`` is bytes as latin-1 text, a regular
#: expression with ``regex``).
PROXY_OPS: Ops = {
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
    "hold_request": {"node": str, "match": str, "regex": bool, "seconds": float, "times": int},
    "refuse": {"node": str},
    "cut_all": {"node": str},
    "delay": {"node": str, "seconds": float},
    "wait_for_cut": {"node": str, "timeout_s": float},
    "wait_for_held": {"node": str, "timeout_s": float},
    "stats": {"node": str},
}
#: The longest request line the supervisor reads.
_MAX_REQUEST = 1 << 20
#: The longest path a Unix socket may have (108 bytes with the terminating NUL on Linux), with a margin.
_MAX_SOCKET_PATH = 100


def control_path(run: Path) -> Path:
    """The control socket of the service whose run directory is ``run``: ``run/ctl.sock``, or, where that path
    is too long for a Unix socket, one in a private directory under the temporary directory."""
    path = run / "ctl.sock"
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    tag = hashlib.sha256(os.fsencode(run.absolute())).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"eosink-ctl-{tag}" / "ctl.sock"


# -- the client -------------------------------------------------------------------------------------------


class _Endpoint(Protocol):
    @property
    def control(self) -> str: ...
    @property
    def ports(self) -> dict[str, int]: ...


class Control:
    """Sends a service's operations to its supervisor; subclasses give them the cluster's own signatures."""

    service = ""
    """The service's name, for its errors."""

    def __init__(self, endpoint: _Endpoint, *, timeout_s: float = 300.0) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s

    def proxy(self, node: Any) -> RemoteProxy:
        """The client proxy of node ``node``, in the supervisor."""
        return RemoteProxy(self, str(node))

    def request(self, op: str, **args: Any) -> Any:
        """Send operation ``op`` and return its result; the supervisor's error as a :class:`ServiceError`."""
        wait_s = self.timeout_s
        for key in ("timeout_s", "seconds"):
            if isinstance(args.get(key), (int, float)):
                wait_s = max(wait_s, float(args[key]) + 60.0)  # its own bound, and the operation's steps after it
        reply = exchange(self.service, Path(self.endpoint.control), {"op": op, "args": args}, wait_s)
        if "error" in reply:
            raise ServiceError(str(reply["error"]), str(reply.get("fix") or "") or None)
        return reply.get("ok")


class RemoteProxy:
    """A node's client proxy in the supervisor: the operations of :class:`~eosink.services.proxy.FaultProxy`."""

    def __init__(self, control: Control, node: str) -> None:
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
        taken = {k: [r.encode("latin-1") for r in data[k]] for k in ("requests_cut", "requests_held")}
        return ProxyStats(**{**data, **taken})

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

    def hold_request(self, match: RequestMatch, seconds: float, *, times: int = 1) -> None:
        self._control.request("hold_request", node=self.node, **_match(match), seconds=seconds, times=times)

    def delay(self, seconds: float) -> None:
        self._control.request("delay", node=self.node, seconds=seconds)

    def refuse(self) -> None:
        self._control.request("refuse", node=self.node)

    def cut_all(self) -> int:
        return int(self._control.request("cut_all", node=self.node))

    def wait_for_cut(self, timeout_s: float) -> bool:
        return bool(self._control.request("wait_for_cut", node=self.node, timeout_s=timeout_s))

    def wait_for_held(self, timeout_s: float) -> bool:
        return bool(self._control.request("wait_for_held", node=self.node, timeout_s=timeout_s))


def _match(match: RequestMatch) -> dict[str, Any]:
    """A request match as JSON: bytes as latin-1 text (every byte one character), a pattern's with ``regex``."""
    if isinstance(match, bytes):
        return {"match": match.decode("latin-1"), "regex": False}
    return {"match": match.pattern.decode("latin-1"), "regex": True}


def exchange(service: str, path: Path, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One request and its answer on the control socket ``path`` of ``service``."""
    fix = f"start it with `eosink services up {service}`; its log is in the service's run directory."
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        try:
            sock.connect(os.fspath(path))
        except (FileNotFoundError, ConnectionRefusedError):
            raise ServiceError(f"The {service} supervisor is not running: nothing answers on {path}.", fix) from None
        try:
            sock.sendall(json.dumps(message).encode() + b"\n")
            with sock.makefile("rb") as answers:
                line = answers.readline()
        except TimeoutError:
            raise ServiceError(
                f"The {service} supervisor did not answer {message['op']} within {timeout_s:.0f} s.",
                f"see its log (eosink services status {service}).",
            ) from None
        except OSError as exc:
            raise ServiceError(f"The {service} supervisor dropped the connection ({exc}).", fix) from None
    if not line:
        raise ServiceError(
            f"The {service} supervisor closed the connection without answering {message['op']}: it stopped or crashed.",
            fix,
        )
    reply: dict[str, Any] = json.loads(line)
    return reply


# -- the supervisor ---------------------------------------------------------------------------------------


class _Stopped(BaseException):
    """SIGTERM or SIGINT reached the supervisor."""


class Supervisor(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    """The control socket in front of one cluster: each connection a thread, one cluster operation at a time
    (proxy operations go on meanwhile: a test waits for a cut while it fails a node over).

    ``ops`` are the cluster's operations; ``cluster_op(op, args)`` carries one out, ``proxy_of(node)`` is the
    named node's proxy; arguments named in ``required`` must be given.
    """

    daemon_threads = True

    def __init__(
        self,
        service: str,
        path: Path,
        *,
        ops: Ops,
        cluster_op: Callable[[str, dict[str, Any]], Any],
        proxy_of: Callable[[str], FaultProxy],
        required: frozenset[str] = frozenset({"node"}),
    ) -> None:
        self.service, self.ops, self.required = service, {**ops, **PROXY_OPS}, required
        self.cluster_op, self.proxy_of = cluster_op, proxy_of
        self.lock = threading.Lock()
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
        umask = os.umask(0o177)  # the socket is 0600 from the start: it gives control of the servers
        try:
            super().__init__(os.fspath(path), _Handler)
        finally:
            os.umask(umask)
        self.path = path

    def answer(self, request: Any) -> dict[str, Any]:
        """The answer to one request: ``{"ok": ...}`` or ``{"error": ..., "fix": ...}``."""
        try:
            op, args = self._checked(request)
            if op in PROXY_OPS:
                return {"ok": self._proxy_op(op, args)}
            with self.lock:
                return {"ok": "pong" if op == "ping" else self.cluster_op(op, args)}
        except ServiceError as exc:
            return {"error": exc.problem, "fix": exc.fix}
        except Exception as exc:
            log.exception("[%s] %r failed", self.service, request)
            return {"error": f"{type(exc).__name__}: {exc}", "fix": "see the supervisor's log."}

    def _proxy_op(self, op: str, args: dict[str, Any]) -> Any:
        proxy = self.proxy_of(args.pop("node"))
        if "match" in args or "regex" in args:
            raw = str(args.pop("match", "")).encode("latin-1")
            args["match"] = re.compile(raw) if args.pop("regex", False) else raw
        if op == "stats":
            stats = dataclasses.asdict(proxy.stats)
            for key in ("requests_cut", "requests_held"):
                stats[key] = [r.decode("latin-1") for r in stats[key]]
            return stats
        return getattr(proxy, op)(**args)

    def _checked(self, request: Any) -> tuple[str, dict[str, Any]]:
        """The operation and its arguments, if the operation is known and every argument has its type."""
        ops = self.ops
        if not isinstance(request, dict) or not isinstance(request.get("op"), str) or request["op"] not in ops:
            op = request.get("op") if isinstance(request, dict) else None
            raise ServiceError(f"Unknown operation {op!r}.", f"use one of: {', '.join(ops)}.")
        op, args = request["op"], request.get("args") or {}
        schema = ops[op]
        if not isinstance(args, dict):
            raise ServiceError(
                f"The arguments of {op} are not an object.", f"send its arguments: {_described(schema)}."
            )
        for key, value in args.items():
            if key not in schema:
                raise ServiceError(f"{op} takes no argument {key!r}.", f"its arguments: {_described(schema)}.")
            if not _fits(value, schema[key]):
                raise ServiceError(
                    f"{op}: {key}={value!r} is no {schema[key].__name__}.", f"its arguments: {_described(schema)}."
                )
        missing = [k for k in schema if k in self.required and k not in args]
        if missing:
            raise ServiceError(f"{op} needs {', '.join(missing)}.", f"its arguments: {_described(schema)}.")
        return op, dict(args)


class _Handler(socketserver.StreamRequestHandler):
    server: Supervisor

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


class _Closable(Protocol):
    def close(self) -> None: ...


C = TypeVar("C", bound=_Closable)


def serve(service: str, control: Path, make_cluster: Callable[[], C], supervise: Callable[[C], Supervisor]) -> int:
    """Build a cluster (``make_cluster``), serve its supervisor on ``control`` until SIGTERM or SIGINT, then stop
    the cluster."""
    signal.signal(signal.SIGTERM, _raise_stopped)
    signal.signal(signal.SIGINT, _raise_stopped)
    cluster: C | None = None
    server: Supervisor | None = None
    try:
        cluster = make_cluster()
        server = supervise(cluster)
        log.info("[%s] serving %s (pid %d)", service, control, os.getpid())
        server.serve_forever(poll_interval=0.5)
    except _Stopped as stopped:
        log.info("[%s] stopping (signal %s)", service, stopped.args[0])
    except ServiceError as exc:
        log.error("[%s] error: %s", service, exc)
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


def run_supervisor(main: Callable[[], int]) -> int:
    """Run a supervisor's ``main`` with the harness's progress on stderr (its log file)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
    logging.getLogger("eosink").addHandler(handler)
    logging.getLogger("eosink").setLevel(logging.INFO)
    return main()


# -- the service ------------------------------------------------------------------------------------------


class SupervisedService(Service[E]):
    """A cluster run by a supervisor process (``python -m <module> serve DATA CONTROL``), stopped by its PID; its
    endpoint is what the supervisor answers to ``endpoint``. A subclass names the :attr:`module` and stops what a
    supervisor that died left running (:meth:`clean_up`)."""

    module: ClassVar[str]
    stop_signal = signal.SIGTERM  # the supervisor stops the nodes and proxies, then exits

    @property
    def control(self) -> Path:
        return control_path(self.run)

    def serve_args(self) -> list[str]:
        """The supervisor's options after ``serve DATA CONTROL``."""
        return []

    def launch(self) -> tuple[Proc, E]:
        argv: list[str | os.PathLike[str]] = [sys.executable, "-m", self.module, "serve", self.data, self.control]
        proc = spawn([*argv, *self.serve_args()], self.log_path, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        answers: list[dict[str, Any]] = []

        def ready() -> bool:
            with contextlib.suppress(ServiceError, OSError, ValueError):
                answers.append(exchange(self.name, self.control, {"op": "endpoint", "args": {}}, 10.0)["ok"])
            return bool(answers)

        try:
            wait_until(
                ready,
                what=f"the {self.name} supervisor",
                proc=proc,
                log_path=self.log_path,
                timeout_s=self.start_timeout_s,
                fix=f"see the log above; `eosink services down {self.name}` then `up` starts it afresh.",
            )
        except BaseException:
            stop(proc, what=self.name, sig=self.stop_signal, timeout_s=60.0)
            self.after_stop()
            raise
        endpoint: E = self.endpoint_type(**answers[0])  # type: ignore[assignment]
        return proc, endpoint

    def clean_up(self) -> None:
        """Stop what a supervisor that did not stop cleanly left running (its nodes, by their recorded PIDs)."""

    def after_stop(self) -> None:
        self.clean_up()
        control = self.control
        control.unlink(missing_ok=True)
        if control.parent != self.run:
            with contextlib.suppress(OSError):
                control.parent.rmdir()
