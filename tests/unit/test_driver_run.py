"""DriverRun, the one way the chaos harness, the demo and the benchmark run a driver: a small Python
program stands in for the Spark driver (no Spark)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from eosink._driver import DriverRun
from eosink._procs import is_alive, session_members


def _run(tmp_path: Path, code: str, *, timeout_s: float = 60.0, kill_when: str | None = None) -> DriverRun:
    """Run ``code`` as the driver; with ``kill_when``, kill it once that file exists."""
    env = dict(os.environ, EOSINK_FAULT_LOG=str(tmp_path / "faults.log"))
    with DriverRun([sys.executable, "-c", code], env, tmp_path / "driver.log", timeout_s=timeout_s) as run:
        run.watch(None if kill_when is None else lambda: (tmp_path / kill_when).exists(), 0.01)
    return run


def test_a_clean_exit_is_done(tmp_path: Path) -> None:
    outcome = _run(tmp_path, "print('hello')").outcome()
    assert (outcome.status, outcome.returncode, outcome.killed_by_us, outcome.killed_by_fault) == (
        "done",
        0,
        False,
        False,
    )


def test_an_error_names_the_kind_the_driver_printed(tmp_path: Path) -> None:
    code = "import sys; print('noise', file=sys.stderr); print('EOSINK-ERROR FencedError: epoch 3', file=sys.stderr)"
    outcome = _run(tmp_path, f"{code}; sys.exit(3)").outcome()
    assert (outcome.status, outcome.returncode) == ("error", 3)
    assert (outcome.error_kind, outcome.error) == ("FencedError", "FencedError: epoch 3")


def test_a_fault_points_kill_is_a_crash_not_an_error(tmp_path: Path) -> None:
    code = (
        "import os, signal; log = open(os.environ['EOSINK_FAULT_LOG'], 'a'); "
        "log.write(f'F8 2 kill {os.getpid()}\\n'); log.close(); os.kill(os.getpid(), signal.SIGKILL)"
    )
    run = _run(tmp_path, code)
    outcome = run.outcome()
    assert (outcome.status, outcome.killed_by_fault, outcome.killed_by_us) == ("killed", True, False)
    assert [str(f) for f in run.faults_fired()] == ["F8@2:kill"]


def test_the_tools_kill_ends_the_whole_session(tmp_path: Path) -> None:
    """The driver starts a child in a process group of its own (as Spark's Python workers do), then waits.

    Pass: killed by us; the child, in the driver's session but not its group, is gone too.
    """
    child = tmp_path / "child"
    code = (
        "import os, subprocess, sys, time; "
        "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], preexec_fn=os.setpgrp); "
        f"open({str(child)!r} + '.tmp', 'w').write(str(c.pid)); os.rename({str(child)!r} + '.tmp', {str(child)!r}); "
        "time.sleep(60)"
    )
    run = _run(tmp_path, code, kill_when="child")
    outcome = run.outcome()
    assert (outcome.status, outcome.killed_by_us, outcome.killed_by_fault) == ("killed", True, False)
    assert not is_alive(int(child.read_text())) and session_members(run.pid) == []


def test_a_driver_past_its_deadline_is_killed_and_timed_out(tmp_path: Path) -> None:
    outcome = _run(tmp_path, "import time; time.sleep(60)", timeout_s=0.5).outcome()
    assert (outcome.status, outcome.killed_by_us) == ("timeout", True)


def test_a_driver_keeps_its_temporary_files_in_its_run_directory(tmp_path: Path, monkeypatch: Any) -> None:
    """A SIGKILLed JVM never removes its temporary files, so they must not go to /tmp.

    Pass: driver_env names ``driver-tmp`` beside the fault log, made already, and job_session turns it into
    the JVM's java.io.tmpdir and Spark's local directory."""
    from eosink import _procs
    from eosink.demo import session

    env = _procs.driver_env(tmp_path / "run" / "faults.log", "")
    tmp = Path(env["EOSINK_DRIVER_TMP"])
    assert tmp == tmp_path / "run" / "driver-tmp" and tmp.is_dir()

    seen: dict[str, str] = {}

    class _Builder:
        def config(self, key: str, value: str) -> _Builder:
            seen[key] = value
            return self

        def master(self, _: str) -> _Builder:
            return self

        appName = master

        def getOrCreate(self) -> Any:
            return type("S", (), {"sparkContext": type("C", (), {"setLogLevel": lambda self, _: None})()})()

    import pyspark.sql

    monkeypatch.setattr(pyspark.sql.SparkSession, "builder", _Builder())
    monkeypatch.setattr(session, "export_crash_scope", dict)  # it would name this test run as the crash scope
    monkeypatch.setenv("EOSINK_DRIVER_TMP", str(tmp))
    session.job_session("local[1]", "t")
    assert seen["spark.local.dir"] == str(tmp)
    assert f'"-Djava.io.tmpdir={tmp}"' in seen["spark.driver.extraJavaOptions"]
