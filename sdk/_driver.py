"""One run of a Spark driver as a subprocess, for the chaos harness, the demo and the benchmark.

A driver runs in a session of its own (its Python, its JVM and Spark's Python workers, which move
into process groups of their own), so that killing it, by PID, ends every process of it: a crash.
The tool that starts it watches it against a deadline, arms its own faults meanwhile, and reads
back how it ended: done, killed (by the tool or by a fault point of the driver), an error (with
the ``EOSINK-ERROR`` line the driver printed), or out of time.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, NamedTuple

from eosink._procs import kill_session, parse_error_line

__all__ = ["DriverOutcome", "DriverRun", "FiredFault", "fired_faults"]

Status = Literal["done", "killed", "error", "timeout"]


class FiredFault(NamedTuple):
    """One line of a fault log: a fault point that fired (:mod:`eosink.faults` writes them)."""

    point: str
    batch: str
    action: str

    def __str__(self) -> str:
        return f"{self.point}@{self.batch}:{self.action}"


def fired_faults(log: Path | None) -> list[FiredFault]:
    """The fault points that fired, in order, from a fault log (``POINT BATCH ACTION PID`` per line)."""
    if log is None or not log.exists():
        return []
    return [FiredFault(*parts[:3]) for line in log.read_text().splitlines() if len(parts := line.split()) >= 3]


@dataclass(frozen=True)
class DriverOutcome:
    """How a driver run ended."""

    status: Status
    returncode: int | None
    killed_by_us: bool
    """The tool killed it (its own fault, or the deadline)."""
    killed_by_fault: bool
    """A fault point of the driver killed it (a ``kill`` in its fault log)."""
    error_kind: str | None
    """The eosink error its ``EOSINK-ERROR`` line names, if it printed one."""
    error: str | None
    """That line's ``<kind>: <message>``, else the end of its log (None when the log is empty)."""


class DriverRun:
    """A Spark driver started in a new session: polled, waited for, watched against a deadline, killed whole.

    Use it as a context manager: leaving it kills whatever is left of the session (a clean exit's
    JVM and Python workers may take a moment) and reaps the driver. The driver's stderr (and, with
    ``merge_stdout``, its stdout) goes to ``log``; its fault log is the ``EOSINK_FAULT_LOG`` of ``env``.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        env: Mapping[str, str],
        log: Path,
        *,
        timeout_s: float,
        merge_stdout: bool = False,
    ) -> None:
        self.log = log
        self.fault_log = Path(env["EOSINK_FAULT_LOG"]) if env.get("EOSINK_FAULT_LOG") else None
        self.deadline = time.monotonic() + timeout_s
        self._killed = False
        self._timed_out = False
        with open(log, "w") as out:
            self._proc = subprocess.Popen(
                list(cmd),
                env=dict(env),
                start_new_session=True,
                stdout=out if merge_stdout else subprocess.DEVNULL,
                stderr=out,
            )

    @property
    def pid(self) -> int:
        """The driver's PID, which is also its session's id."""
        return self._proc.pid

    def poll(self) -> int | None:
        """The driver's exit code, or None while it runs."""
        return self._proc.poll()

    def wait(self, timeout_s: float) -> int | None:
        """Wait up to ``timeout_s`` for the driver to exit; its exit code, or None while it runs."""
        try:
            return self._proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def watch(self, step: Callable[[], bool] | None = None, poll_s: float = 0.05) -> None:
        """Until the driver exits, call ``step`` every ``poll_s``; kill the session when it returns True
        (the tool's own kill) or when the deadline passes."""
        while self.poll() is None:
            if step is not None and step():
                self.kill()
                return
            if time.monotonic() > self.deadline:
                self.kill(timed_out=True)
                return
            self.wait(poll_s)

    def kill(self, *, timed_out: bool = False) -> None:
        """SIGKILL every process of the driver's session, wait (bounded) until all are gone, reap the driver."""
        self._killed = True
        self._timed_out = timed_out
        self._reap()

    def _reap(self) -> None:
        kill_session(self.pid)  # raises when a process outlives the bound: nothing may touch the sink after
        self._proc.wait()

    def __enter__(self) -> DriverRun:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._reap()

    def faults_fired(self) -> list[FiredFault]:
        """The driver's fault points that fired, from its fault log."""
        return fired_faults(self.fault_log)

    def outcome(self) -> DriverOutcome:
        """How the run ended (after the ``with`` block, or once :meth:`kill` returned)."""
        code = self._proc.returncode
        by_fault = any(f.action == "kill" for f in self.faults_fired())
        status: Status
        if self._timed_out:
            status = "timeout"
        elif code == 0:
            status = "done"
        elif code == -signal.SIGKILL and (self._killed or by_fault):
            status = "killed"
        else:
            status = "error"
        kind, error = parse_error_line(self.log.read_text(errors="replace"))
        return DriverOutcome(status, code, self._killed, by_fault, kind, error)
