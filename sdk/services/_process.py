"""Start server processes detached, wait until they serve, stop them by PID.

A server is started in a session of its own, so stopping it signals its whole process group
(by the recorded PID, never by name). The PID is recorded with the process's start time, so
a recycled PID is never signalled. The process table itself is :mod:`eosink._procs`.

Ports: a server is given ports found free (:func:`free_port`) and binds them a moment later, by
when another process may have taken one. :func:`start_on_ports` runs every server's start: a
first start whose log says a port was taken (:class:`PortClash`) tries again on fresh ports; a
restart, which must keep its ports, fails naming the port and, if ``/proc`` shows it, the process
that holds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from eosink._procs import children, group_members, kill_pids, start_time, stat
from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError

__all__ = [
    "START_ATTEMPTS",
    "Attempt",
    "PortClash",
    "Proc",
    "ServerProcess",
    "children",
    "free_port",
    "free_ports",
    "group_members",
    "kill_all",
    "log_after",
    "log_size",
    "log_tail",
    "port_holder",
    "port_open",
    "spawn",
    "start_on_ports",
    "stop",
    "wait_until",
]

log = logging.getLogger("eosink.services")

T = TypeVar("T")

#: How many times a first start tries (its ports, then fresh ones) while a port it was given is taken meanwhile.
START_ATTEMPTS = 3

#: What a server logs when a port it was given is taken: Java's ``BindException: Address already in use`` (HDFS,
#: Kafka's ``Socket server failed to bind to ...: Address already in use``), Go's ``bind: address already in use``,
#: MinIO's ``Specified port is already in use``, PostgreSQL's ``could not bind IPv4 address "...": Address already
#: in use`` and ``could not create any TCP/IP sockets``.
_CLASH = re.compile(r"already in use|could not create any TCP/IP sockets", re.IGNORECASE)
#: A port named in a clash line or the lines just after it: ``127.0.0.1:N``, ``[localhost:N]``, ``[::1]:N``, ``port N``
#: (not the minutes and seconds of a time stamp).
_PORT_NAMED = re.compile(r"(?:\d+\.\d+\.\d+\.\d+|localhost|\]):(\d{1,5})\b|\bport (\d{1,5})\b")


@dataclass(frozen=True)
class Proc:
    """A started server: its PID and the kernel's start time of that PID (clock ticks)."""

    pid: int
    start_time: int

    def alive(self) -> bool:
        """Whether this very process (not a recycled PID) still runs and is not a zombie."""
        fields = stat(self.pid)  # one read: the state and the start time of the same process
        return fields is not None and fields[0] != "Z" and int(fields[19]) == self.start_time


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (another process may take it before a server binds it:
    see :func:`start_on_ports`)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_ports(n: int) -> tuple[int, ...]:
    """``n`` different TCP ports on 127.0.0.1 that are free right now."""
    ports: list[int] = []
    while len(ports) < n:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return tuple(ports)


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
        return True
    return False


def spawn(
    argv: Sequence[str | os.PathLike[str]],
    log_path: Path,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: tuple[int, int] | None = None,
    stdin: int | None = None,
) -> Proc:
    """Start ``argv`` in a new session, output appended to ``log_path``; optionally as (uid, gid).

    ``stdin``: a file descriptor the server reads as its standard input (e.g. the read end of a pipe
    that the caller writes commands into); by default /dev/null."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as out:
        if user is not None:
            os.chown(log_path, *user)
        child = subprocess.Popen(
            [os.fspath(a) for a in argv],
            stdin=subprocess.DEVNULL if stdin is None else stdin,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
            close_fds=True,
            user=user[0] if user else None,
            group=user[1] if user else None,
            extra_groups=[] if user else None,
        )
    # The Popen object is dropped on purpose: the server outlives this process. Python reaps
    # nothing it does not wait for, so a server that exits early stays a zombie until we exit.
    return Proc(child.pid, start_time(child.pid) or 0)


def log_after(log_path: Path, since: int) -> str:
    """What a server wrote to its log after byte ``since`` (empty while there is no log)."""
    try:
        with log_path.open("rb") as fh:
            fh.seek(since)
            return fh.read().decode(errors="replace")
    except OSError:
        return ""


def log_size(log_path: Path) -> int:
    """The log's size now (0 while there is none): where the output of a server started next begins."""
    try:
        return log_path.stat().st_size
    except OSError:
        return 0


def log_tail(path: Path, lines: int = 30) -> str:
    """The last lines of a log, for error messages."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def wait_until(
    ready: Callable[[], bool],
    *,
    what: str,
    proc: Proc,
    log_path: Path,
    timeout_s: float,
    fix: str,
    attempt: Attempt | None = None,
) -> None:
    """Poll ``ready`` until true; fail with the log's tail if the process dies or time runs out.

    With ``attempt`` (see :func:`start_on_ports`), a log that says a port was taken fails the wait at once with
    :class:`PortClash`, whether the server exited or lingers on: ``fix`` (e.g. "more memory") does not fit that.
    """

    def clash() -> PortClash | None:
        return None if attempt is None else attempt.clash(what, proc)

    def done() -> bool:
        if (taken := clash()) is not None:  # first: what answers on the port may be the process that took it
            raise taken
        if ready():
            return True
        if not proc.alive():
            if (taken := clash()) is not None:  # written while ``ready`` was asked (a client waits on the port)
                raise taken
            raise ServiceError(
                f"{what} exited while starting (pid {proc.pid}). Last lines of {log_path}:\n{log_tail(log_path)}", fix
            )
        return False

    if not poll(done, timeout_s, interval_s=0.05, max_interval_s=0.5):
        if (taken := clash()) is not None:
            raise taken
        raise ServiceError(
            f"{what} did not become ready within {timeout_s:.0f} s (pid {proc.pid}). "
            f"Last lines of {log_path}:\n{log_tail(log_path)}",
            fix,
        )


# -- ports that another process takes -------------------------------------------------------------

#: The process listening on a port: its PID and command line.
Holder = tuple[int, str]


class PortClash(ServiceError):
    """A server could not bind a port it was given: another process took it after the port was found free.

    ``port`` is that port (None when neither the log nor ``/proc`` tells which of them), ``holder`` the PID and
    command line of the process listening on it (None when ``/proc`` does not show one), ``evidence`` the log's
    line that says so.
    """

    def __init__(
        self,
        problem: str,
        fix: str | None = None,
        *,
        port: int | None = None,
        holder: Holder | None = None,
        evidence: str = "",
    ) -> None:
        super().__init__(problem, fix)
        self.port = port
        self.holder = holder
        self.evidence = evidence


@dataclass(frozen=True)
class Attempt:
    """One try at starting a server: the ports it is given, and where its output begins in its log (a retried or
    restarted server appends to the same log, so what an earlier try wrote there is not this one's)."""

    ports: tuple[int, ...]
    log_path: Path
    since: int

    def clash(self, what: str, proc: Proc) -> PortClash | None:
        """A :class:`PortClash` if this try's log says a port was already in use, else None."""
        text = log_after(self.log_path, self.since)
        if _CLASH.search(text) is None:
            return None
        lines = text.splitlines()
        at = next(i for i, line in enumerate(lines) if _CLASH.search(line))
        ours = {proc.pid, *group_members(proc.pid)}  # the server itself may hold its other ports
        port, holder = _taken_port(lines[at:], self.ports, ours)
        return _clash_error(what, port, holder, evidence=lines[at].strip()[:300])


_TAKEN = "{what} could not bind {which}: {who} took it after the port was found free."
_TAKEN_ON_RESTART = (
    "{what} could not bind {which} when restarted: {who} took it while the server was down. The server keeps its "
    "ports across restarts (its clients and any fault proxy in front of it know them), so it cannot move to others."
)
_TAKEN_EVERY_TIME = (
    "{what} could not start on free ports in {tries} tries: each time another process took one of them before the "
    "server bound it (the last time {which}, taken by {who})."
)


def _taken_port(lines: Sequence[str], ports: Sequence[int], ours: Collection[int]) -> tuple[int | None, Holder | None]:
    """Which port was taken, and by whom: the first port named in a clash line or the two after it (a PostgreSQL
    hint names the port), one of ``ports`` if any is; else the first of ``ports`` another process listens on; else
    the only one."""
    named = [
        int(a or b)
        for i, line in enumerate(lines)
        if _CLASH.search(line)
        for near in lines[i : i + 3]
        for a, b in _PORT_NAMED.findall(near)
    ]
    if named:
        port = next((p for p in named if p in ports), named[0])
        return port, port_holder(port, besides=ours)
    for port in ports:
        holder = port_holder(port, besides=ours)
        if holder is not None:
            return port, holder
    return (ports[0] if len(ports) == 1 else None), None


def _clash_error(
    what: str,
    port: int | None,
    holder: Holder | None,
    *,
    evidence: str,
    template: str = _TAKEN,
    tries: int = 1,
    then: str = "restart the test",
) -> PortClash:
    """The error of a port clash, worded by ``template``: which port, who holds it, the log's line that says so;
    the fix is to free the port, or ``then``."""
    which = f"port {port}" if port is not None else "one of its ports"
    who = f"process {holder[0]} ({holder[1]})" if holder else "another process"
    problem = template.format(what=what, which=which, who=who, tries=tries)
    problem = problem[:1].upper() + problem[1:]  # "private HDFS could not ..." starts a sentence
    where = f"port {port}" if port is not None else "its ports"
    pid = f" (pid {holder[0]})" if holder else ""
    return PortClash(
        f"{problem} The log says: {evidence}",
        f"stop the process on {where}{pid}, or {then}.",
        port=port,
        holder=holder,
        evidence=evidence,
    )


def start_on_ports(
    start: Callable[[Attempt], T],
    ports: Sequence[int],
    *,
    log_path: Path,
    what: str,
    may_move: bool,
    attempts: int = START_ATTEMPTS,
) -> T:
    """``start(attempt)`` on ``ports``: it starts the server, waits for it (``wait_until(attempt=...)``) and stops
    it if that fails. A port taken meanwhile (:class:`PortClash`) is retried on fresh ports when they ``may_move`` (a
    first start: nobody knows them yet), at most ``attempts`` tries in all; a server that must keep its ports (a
    restart: its clients and a fault proxy know them) fails at once, naming the port and who took it."""
    current = tuple(ports)
    for n in range(1, attempts + 1):
        try:
            return start(Attempt(current, log_path, log_size(log_path)))
        except PortClash as clash:
            if may_move and n < attempts:
                which = f"port {clash.port}" if clash.port is not None else "a port"
                log.info("[%s] %s was taken before the server bound it: trying fresh ports", what, which)
                current = free_ports(len(current))
                continue
            raise _clash_error(
                what,
                clash.port,
                clash.holder,
                evidence=clash.evidence,
                template=_TAKEN_EVERY_TIME if may_move else _TAKEN_ON_RESTART,
                tries=attempts,
                then="try again" if may_move else "restart the test",
            ) from None
    raise AssertionError("unreachable")


def port_holder(port: int, *, besides: Collection[int] = ()) -> Holder | None:
    """The PID and command line of a process (other than ``besides``) listening on TCP ``port``, on any local
    address; None if none is, or /proc does not show it (another user's process, without root). Best effort:
    ``/proc/net/tcp`` and ``tcp6`` give the listening socket's inode, ``/proc/*/fd`` its owner."""
    inodes = _listening_inodes(port)
    if not inodes:
        return None
    for entry in sorted(os.listdir("/proc"), key=lambda e: (len(e), e)):
        if not entry.isdigit() or int(entry) in besides:
            continue
        try:
            fds = os.listdir(f"/proc/{entry}/fd")
        except OSError:
            continue
        for fd in fds:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{entry}/fd/{fd}")
                if target.startswith("socket:[") and int(target[8:-1]) in inodes:
                    return int(entry), _command_line(int(entry))
    return None


def _listening_inodes(port: int) -> set[int]:
    """The inodes of the sockets in LISTEN state on ``port`` (IPv4 and IPv6) in this network namespace."""
    inodes: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()  # sl local_address rem_address st ... uid timeout inode
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(int(fields[9]))
    return inodes


def _command_line(pid: int, limit: int = 160) -> str:
    """A process's command line, shortened to ``limit`` characters ("?" once it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    text = " ".join(raw.replace(b"\0", b" ").decode(errors="replace").split()) or "?"  # one line, for messages
    return text if len(text) <= limit else text[: limit - 3] + "..."


def stop(proc: Proc, *, what: str, timeout_s: float = 30.0, sig: signal.Signals = signal.SIGTERM) -> None:
    """Signal the process group led by ``proc`` (``sig``), SIGKILL after ``timeout_s``; wait until all are gone."""
    if not proc.alive():
        return
    for signum, wait_s in ((sig, timeout_s), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signum)
        deadline = time.monotonic() + wait_s
        while (proc.alive() or group_members(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not proc.alive() and not group_members(proc.pid):
            _reap(proc.pid)
            return
        log.warning("%s (pid %d) ignored %s", what, proc.pid, signum.name)
    raise ServiceError(f"{what} (pid {proc.pid}) is still running after SIGKILL.", f"inspect it: ps -g {proc.pid}")


def kill_all(pids: Sequence[int], *, what: str, timeout_s: float = 10.0) -> None:
    """SIGKILL each of ``pids`` and wait until none is alive (zombies count as gone)."""
    alive = kill_pids(pids, timeout_s)
    if alive:
        raise ServiceError(f"{what}: processes {alive} still run after SIGKILL.", f"inspect them: ps -p {alive[0]}")


def _reap(pid: int, timeout_s: float = 10.0) -> None:
    """Collect our own child's exit status, once every thread of it has exited (bounded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            return  # not our child (its parent reaps it) or already collected
        if done == pid or time.monotonic() > deadline:
            return
        time.sleep(0.02)


class ServerProcess:
    """A private server that the chaos harness and the demos restart and crash on purpose (the shared
    services are never restarted). A subclass starts it (:meth:`start`, setting :attr:`proc`); stopping
    and restarting are these, by its own PID's process group."""

    #: What logs and errors call it.
    what: ClassVar[str] = "private server"
    proc: Proc | None = None

    def start(self) -> Any:
        raise NotImplementedError

    def stop(self, *, crash: bool = False) -> None:
        """Stop the server: SIGTERM, or with ``crash`` SIGKILL."""
        if self.proc is not None:
            stop(self.proc, what=self.what, sig=signal.SIGKILL if crash else signal.SIGTERM)
            self.proc = None

    def restart(self, *, crash: bool = False) -> None:
        """Stop (``crash``: SIGKILL) and start again on the same ports and data."""
        self.stop(crash=crash)
        self.start()

    def close(self) -> None:
        self.stop()
