"""Starting and killing Spark driver processes as whole sessions (used by the demo and tests).

A PySpark driver is several processes: the Python driver, its JVM, and Spark's Python worker
daemon, which moves itself into a process group of its own. A crash is simulated by SIGKILL of
every process of the driver's session, by PID, and waiting until all are gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

__all__ = ["is_stopped", "kill_session", "session_members"]


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry))
    return members


def kill_session(sid: int, timeout_s: float = 60.0) -> None:
    """SIGKILL every process of session ``sid`` and wait, bounded, until all are gone."""
    deadline = time.monotonic() + timeout_s
    while members := session_members(sid):
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of session {sid} still alive after SIGKILL: {members}")
        time.sleep(0.05)


def is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] == "T"
