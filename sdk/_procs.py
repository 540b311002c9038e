"""Starting and killing Spark driver processes as whole sessions (used by the demo and tests).

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
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "driver_env",
    "error_line",
    "is_stopped",
    "kill_session",
    "processes",
    "save_json",
    "session_members",
    "signal_session",
    "spark_cds_options",
]


def driver_env(fault_log: Path, java_opts: str, faults: str | None = None, **extra: str) -> dict[str, str]:
    """The environment of a Spark driver started by the demo or a harness: loopback Spark, this Python,
    fault points from ``faults`` (none otherwise, whatever this process has), and ``extra``."""
    env = dict(os.environ)
    env.pop("EOSINK_FAULTS", None)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONUNBUFFERED="1",
        EOSINK_FAULT_LOG=str(fault_log),
        EOSINK_DRIVER_JAVA_OPTS=java_opts,
        **extra,
    )
    if faults:
        env["EOSINK_FAULTS"] = faults
    return env


def error_line(exc: BaseException, scrub: Callable[[str], str]) -> str:
    """``EOSINK-ERROR <kind>: <message>``, what a driver prints on stderr when its query fails: the most
    specific eosink error named in the text (Spark and Py4J wrap it), its own message, secrets scrubbed."""
    from eosink import errors

    text = scrub(str(exc))
    names = [n for n in errors.__all__ if n in text]
    kind = max(names, key=len) if names else type(exc).__name__
    at = text.rfind(f"{kind}: ")
    message = text[at + len(kind) + 2 :] if at >= 0 else text
    return f"EOSINK-ERROR {kind}: {' | '.join(message.splitlines())[:3000]}"


def save_json(path: str | os.PathLike[str], data: Any) -> None:
    """Write ``data`` as JSON atomically (a reader, or a killed writer, never sees half a file)."""
    tmp = f"{os.fspath(path)}.tmp"
    Path(tmp).write_text(json.dumps(data))
    os.replace(tmp, path)


def processes() -> Iterator[tuple[int, str, list[str]]]:
    """Every process as (pid, command name, the ``/proc/<pid>/stat`` fields after the name: state, ppid, ...)."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        yield int(entry), stat[stat.find("(") + 1 : stat.rfind(")")], stat[stat.rfind(")") + 2 :].split()


def session_members(sid: int) -> list[int]:
    """Live (non-zombie) processes of session ``sid``."""
    return [pid for pid, _, fields in processes() if fields[0] != "Z" and int(fields[3]) == sid]


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


def is_stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] == "T"


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
