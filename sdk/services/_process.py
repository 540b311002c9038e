"""Start server processes detached, wait until they serve, stop them by PID.

A server is started in a session of its own, so stopping it signals its whole process group
(by the recorded PID, never by name). The PID is recorded with the process's start time, so
a recycled PID is never signalled. The process table itself is :mod:`eosink._procs`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from eosink._procs import children, group_members, kill_pids, start_time, stat
from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError

__all__ = [
    "Proc",
    "ServerProcess",
    "children",
    "free_port",
    "group_members",
    "kill_all",
    "log_tail",
    "port_open",
    "spawn",
    "stop",
    "wait_until",
]

log = logging.getLogger("eosink.services")


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
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


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
) -> None:
    """Poll ``ready`` until true; fail with the log's tail if the process dies or time runs out."""

    def done() -> bool:
        if ready():
            return True
        if not proc.alive():
            raise ServiceError(
                f"{what} exited while starting (pid {proc.pid}). Last lines of {log_path}:\n{log_tail(log_path)}", fix
            )
        return False

    if not poll(done, timeout_s, interval_s=0.05, max_interval_s=0.5):
        raise ServiceError(
            f"{what} did not become ready within {timeout_s:.0f} s (pid {proc.pid}). "
            f"Last lines of {log_path}:\n{log_tail(log_path)}",
            fix,
        )


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
