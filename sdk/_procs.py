"""Processes by PID, read from ``/proc``, and the Spark drivers that the demo, the harnesses and the tests start.

* The process table (the one reader of ``/proc`` in eosink, also behind the service harness):
  a session's, a process group's or a parent's live processes, whether one is stopped, when it
  started; signalling and killing them by PID, never by name.
* A driver: its environment, the JVM options that start it faster, the ``EOSINK-ERROR`` line it
  prints on stderr when its query fails (and reading it back), its counters saved as JSON.

A PySpark driver is several processes: the Python driver, its JVM, and Spark's Python worker
daemon, which moves itself into a process group of its own. A crash is simulated by SIGKILL of
every process of the driver's session, by PID, and waiting until all are gone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from eosink import errors

__all__ = [
    "ERROR_PREFIX",
    "children",
    "driver_env",
    "error_line",
    "group_members",
    "is_alive",
    "is_stopped",
    "kill_pids",
    "kill_session",
    "parse_error_line",
    "processes",
    "save_json",
    "session_members",
    "signal_session",
    "spark_cds_options",
    "start_time",
    "stat",
]

ERROR_PREFIX = "EOSINK-ERROR "
"""How a driver's stderr line naming its query's error starts (see :func:`error_line`)."""


# -- the process table ------------------------------------------------------------------------------


def _read(pid: int | str) -> tuple[str, list[str]] | None:
    """(command name, the ``/proc/<pid>/stat`` fields after it), or None when ``pid`` is gone."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw[raw.find("(") + 1 : raw.rfind(")")], raw[raw.rfind(")") + 2 :].split()


def stat(pid: int) -> list[str] | None:
    """The ``/proc/<pid>/stat`` fields after the command name (state, ppid, pgrp, session, ...), or None."""
    found = _read(pid)
    return found[1] if found else None


def processes() -> Iterator[tuple[int, str, list[str]]]:
    """Every process as (pid, command name, the ``/proc/<pid>/stat`` fields after the name: state, ppid, ...)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (found := _read(entry)) is not None:
            comm, fields = found
            yield int(entry), comm, fields


def _live(field: int, value: int) -> list[int]:
    """Live (non-zombie) processes whose stat ``field`` (after the name: 1 ppid, 2 pgrp, 3 session) is ``value``."""
    return [pid for pid, _, fields in processes() if fields[0] != "Z" and int(fields[field]) == value]


def children(pid: int) -> list[int]:
    """Live (non-zombie) processes whose parent is ``pid``."""
    return _live(1, pid)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of process group ``pgid``."""
    return _live(2, pgid)


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    return _live(3, sid)


def is_alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    fields = stat(pid)
    return fields is not None and fields[0] != "Z"


def is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP)."""
    fields = stat(pid)
    return fields is not None and fields[0] == "T"


def start_time(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot): with the PID, it names one process, never a recycled PID."""
    fields = stat(pid)
    return int(fields[19]) if fields else None


def signal_session(sid: int, sig: int) -> None:
    """Send ``sig`` to every process of session ``sid``, by PID, twice over (a process forked meanwhile
    is caught by the second pass); the caller last, if it belongs to the session."""
    me = os.getpid()
    for _ in range(2):
        for pid in session_members(sid):
            if pid != me:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, sig)
    if os.getsid(0) == sid:
        os.kill(me, sig)


def kill_session(sid: int, timeout_s: float = 60.0) -> None:
    """A crash of a whole driver: SIGKILL every process of session ``sid`` (its Python, its JVM and Spark's
    Python workers, which sit in process groups of their own) and wait, bounded, until none is left.

    Raises RuntimeError when a process outlives the bound: a harness must never go on while a
    process of the dead driver can still touch the sink.
    """
    deadline = time.monotonic() + timeout_s
    while members := session_members(sid):
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise RuntimeError(f"processes of session {sid} still alive after SIGKILL: {members}")
        time.sleep(0.05)


def kill_pids(pids: Sequence[int], timeout_s: float = 10.0) -> list[int]:
    """SIGKILL each of ``pids`` once and wait, bounded, until none is alive (zombies count as gone); the ones
    still alive then. Once: a PID that died meanwhile may already name another process."""
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + timeout_s
    while (alive := [pid for pid in pids if is_alive(pid)]) and time.monotonic() <= deadline:
        time.sleep(0.05)
    return alive


# -- a Spark driver ---------------------------------------------------------------------------------------


def driver_env(fault_log: Path, java_opts: str, faults: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a Spark driver started by the demo or a harness: loopback Spark, this Python,
    fault points from ``faults`` (none otherwise, whatever this process has), and ``extra``.

    The driver's JVM keeps its temporary files (native libraries, block manager and artifact
    directories) in ``driver-tmp`` beside ``fault_log`` (``EOSINK_DRIVER_TMP``, read by
    :func:`eosink.demo.session.job_session`), not in ``/tmp``: a driver killed with SIGKILL never
    removes them, and the run's own directory goes away with the run."""
    tmp = fault_log.parent / "driver-tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env.pop("EOSINK_FAULTS", None)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
        EOSINK_FAULT_LOG=str(fault_log),
        EOSINK_DRIVER_JAVA_OPTS=java_opts,
        EOSINK_DRIVER_TMP=str(tmp),
        **extra,
    )
    if faults:
        env["EOSINK_FAULTS"] = faults
    return env


def error_line(exc: BaseException, scrub: Callable[[str], str]) -> str:
    """``EOSINK-ERROR <kind>: <message>``, what a driver prints on stderr when its query fails: the most
    specific eosink error named in the text (Spark and Py4J wrap it), its own message, secrets scrubbed."""
    text = scrub(str(exc))
    names = [n for n in errors.__all__ if n in text]
    kind = max(names, key=len) if names else type(exc).__name__
    at = text.rfind(f"{kind}: ")
    message = text[at + len(kind) + 2 :] if at >= 0 else text
    return f"{ERROR_PREFIX}{kind}: {' | '.join(message.splitlines())[:3000]}"


def parse_error_line(stderr: str, limit: int = 1500) -> tuple[str | None, str | None]:
    """(kind, ``<kind>: <message>``) from the first :func:`error_line` in a driver's ``stderr``; without
    one, (None, the end of ``stderr``), or (None, None) when it is blank. Both at most ``limit`` characters."""
    for line in stderr.splitlines():
        if line.startswith(ERROR_PREFIX):
            kind = line.split()[1].rstrip(":")
            return kind, line[len(ERROR_PREFIX) :][:limit]
    return None, stderr[-limit:] if stderr.strip() else None


def save_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as JSON atomically (a reader, or a killed writer, never sees half a file)."""
    tmp = f"{os.fspath(path)}.tmp"
    Path(tmp).write_text(json.dumps(data))
    os.replace(tmp, path)


def _java_version() -> str:
    out = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    first = (out.stderr.splitlines() or ["unknown"])[0]
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in first)


def spark_cds_options(cache_dir: str | os.PathLike[str] | None = None) -> str:
    """JVM options that load a class-data-sharing archive of Spark's classes (about 2x faster start).

    The archive is built once per (pyspark, java) pair by a throw-away session, into
    ``cache_dir`` (default ``$EOSINK_CACHE`` or ``~/.cache/eosink``). A stale archive is only a
    warning for the JVM; if building fails, no options are returned.
    """
    import pyspark

    root = Path(cache_dir or os.environ.get("EOSINK_CACHE") or Path.home() / ".cache" / "eosink")
    archive = root / "spark-cds" / f"pyspark-{pyspark.__version__}-{_java_version()}.jsa"
    if not archive.exists():
        archive.parent.mkdir(parents=True, exist_ok=True)
        code = (
            "from pyspark.sql import SparkSession as S;"
            "s=S.builder.master('local[1]').config('spark.ui.enabled','false')"
            f".config('spark.driver.extraJavaOptions','-XX:ArchiveClassesAtExit={archive}')"
            ".getOrCreate(); s.range(10).selectExpr('id*2').collect(); s.stop()"
        )
        env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable)
        subprocess.run([sys.executable, "-c", code], env=env, check=False, capture_output=True, timeout=600)
    return f"-XX:SharedArchiveFile={archive} -Xshare:auto" if archive.exists() else ""
