"""Fault points (how tests crash eosink on purpose) and the error tree (what users see)."""

from __future__ import annotations

import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from eosink import errors, faults
from eosink._procs import kill_session, session_members
from eosink.errors import (
    AmbiguousCommitError,
    CheckpointMismatchError,
    ConfigurationError,
    EosinkError,
    InjectedFault,
    NonDeterministicReplayError,
)
from eosink.faults import FaultPoint

# -- fault specs -------------------------------------------------------------------------------


def test_disabled_by_default_and_after_reset() -> None:
    """No fault point is armed unless configured; reset() disarms; an empty spec arms nothing.

    Pass: enabled() is False after reset, True after configure, False after configure("")/(",")/(None),
    and hitting every point while disarmed does nothing.
    """
    assert not faults.enabled()
    for point in FaultPoint:
        faults.hit(point, 1)
    faults.configure("F4:raise")
    assert faults.enabled()
    faults.reset()
    assert not faults.enabled()
    for spec in ("", " , ", None):
        faults.configure(spec)
        assert not faults.enabled()


@pytest.mark.parametrize(
    ("spec", "point"),
    [
        ("F4@1:raise", FaultPoint.F4),
        ("f4@1:raise", FaultPoint.F4),
        ("after_record@1:raise", FaultPoint.F4),
        ("AFTER_RECORD @ 1 : RAISE", FaultPoint.F4),
        ("F11@1:raise", FaultPoint.F11),
        ("after_task_pre_commit@1:raise", FaultPoint.F11),
        ("F1@1:raise", FaultPoint.F1),
        ("mid_recovery@1:raise", FaultPoint.F9),
        ("F14@1:raise", FaultPoint.F14),
        ("between_sinks@1:raise", FaultPoint.F14),
    ],
)
def test_spec_names_points_by_number_or_name(spec: str, point: FaultPoint) -> None:
    """A spec names its point as F-number or by name (any case, blanks ignored).

    Pass: the configured point fires at its batch, and no other point does.
    """
    faults.configure(spec)
    for other in FaultPoint:
        if other is not point:
            faults.hit(other, 1)
    with pytest.raises(InjectedFault, match=point.name):
        faults.hit(point, 1)


def test_batch_filter_and_fires_once() -> None:
    """``@BATCH`` restricts a spec to one batch id, and each spec fires once per process.

    Pass: no firing at batch 0, 2 or None; one firing at batch 1; none at the second pass.
    """
    faults.configure("F4@1:raise")
    faults.hit(FaultPoint.F4, 0)
    faults.hit(FaultPoint.F4, 2)
    faults.hit(FaultPoint.F4, None)
    with pytest.raises(InjectedFault, match="batch 1"):
        faults.hit(FaultPoint.F4, 1)
    faults.hit(FaultPoint.F4, 1)
    assert faults.enabled()  # still configured, just spent


def test_spec_without_batch_fires_at_the_first_batch_and_several_specs_fire_in_turn() -> None:
    """A spec without ``@BATCH`` fires at the first batch it meets; two specs of one point fire twice.

    Pass: F2 fires at batch 5 then at batch 6 (two specs), then never again.
    """
    faults.configure("F2:raise, F2:raise")
    with pytest.raises(InjectedFault, match="batch 5"):
        faults.hit(FaultPoint.F2, 5)
    with pytest.raises(InjectedFault, match="batch 6"):
        faults.hit(FaultPoint.F2, 6)
    faults.hit(FaultPoint.F2, 7)


def test_actions_raise_and_ambiguous() -> None:
    """``raise`` raises InjectedFault; ``ambiguous`` raises AmbiguousCommitError (a lost COMMIT reply).

    Pass: the two error types, each with a fix; the ambiguous one is not an InjectedFault.
    """
    faults.configure("F7@3:ambiguous,F6@3:raise")
    with pytest.raises(AmbiguousCommitError) as amb:
        faults.hit(FaultPoint.F7, 3)
    assert not isinstance(amb.value, InjectedFault) and amb.value.fix
    with pytest.raises(InjectedFault) as inj:
        faults.hit(FaultPoint.F6, 3)
    assert inj.value.fix


@pytest.mark.parametrize("spec", ["F10:raise", "F12", "F0:raise", "before_everything:raise", "@1:raise", ":raise"])
def test_unknown_point_is_a_configuration_error(spec: str) -> None:
    """F10 and F12 are not fault points (zombies and sink outages are made otherwise), nor are other names.

    Pass: ConfigurationError listing the valid points; nothing armed.
    """
    with pytest.raises(ConfigurationError, match=re.escape("F1..F9, F11")):
        faults.configure(spec)
    assert not faults.enabled()


@pytest.mark.parametrize("spec", ["F4:explode", "F4@1:crash", "F4@x:raise", "F4@1.5:raise"])
def test_unknown_action_or_bad_batch_is_a_configuration_error(spec: str) -> None:
    """An unknown action or a non-integer batch id is a ConfigurationError with a fix.

    Pass: ConfigurationError whose text contains the offending spec; nothing armed.
    """
    with pytest.raises(ConfigurationError) as info:
        faults.configure(spec)
    assert spec.split(":")[0] in str(info.value) and info.value.fix
    assert not faults.enabled()


def test_fault_log_gets_a_line_per_firing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With EOSINK_FAULT_LOG set, every firing appends ``POINT BATCH ACTION PID`` before acting.

    Pass: two lines, in firing order, with this process's pid; nothing for points that did not fire.
    """
    log = tmp_path / "faults.log"
    monkeypatch.setenv("EOSINK_FAULT_LOG", str(log))
    faults.configure("F3@2:raise,F7:ambiguous")
    faults.hit(FaultPoint.F3, 1)
    with pytest.raises(InjectedFault):
        faults.hit(FaultPoint.F3, 2)
    with pytest.raises(AmbiguousCommitError):
        faults.hit(FaultPoint.F7, 4)
    assert log.read_text().splitlines() == [f"F3 2 raise {os.getpid()}", f"F7 4 ambiguous {os.getpid()}"]


def _child(code: str, env: dict[str, str], timeout: float = 60) -> subprocess.Popen[str]:
    """A Python child in its own process group (kill/stop act on the whole group)."""
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, **env},
        start_new_session=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_environment_arms_faults_at_import(tmp_path: Path) -> None:
    """EOSINK_FAULTS is read at import, so Spark's Python workers get the faults too.

    Pass: a child with EOSINK_FAULTS=F2@3:raise starts armed and raises at F2 of batch 3 only.
    """
    code = (
        "from eosink import faults\n"
        "print(faults.enabled())\n"
        "faults.hit(faults.FaultPoint.F2, 2)\n"
        "try:\n"
        "    faults.hit(faults.FaultPoint.F2, 3)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    child = _child(code, {"EOSINK_FAULTS": "F2@3:raise"})
    out, err = child.communicate(timeout=60)
    assert child.returncode == 0, err
    assert out.split() == ["True", "InjectedFault"]


def test_kill_action_sigkills_the_process_group(tmp_path: Path) -> None:
    """``kill`` (the default action) is a real crash: SIGKILL of the process group, logged first.

    Pass: the child dies by SIGKILL at the fault point (the line after it never prints), and
    the fault log holds ``F5 7 kill <pid>``.
    """
    log = tmp_path / "faults.log"
    code = "from eosink import faults\nfaults.hit(faults.FaultPoint.F5, 7)\nprint('survived')\n"
    child = _child(code, {"EOSINK_FAULTS": "F5@7", "EOSINK_FAULT_LOG": str(log)})
    out, _ = child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    assert "survived" not in out
    assert log.read_text().split() == ["F5", "7", "kill", str(child.pid)]


def test_stop_action_sigstops_the_process_group(tmp_path: Path) -> None:
    """``stop`` freezes the process group (to make a zombie driver); SIGCONT lets it go on.

    Pass: waitpid reports the child stopped by SIGSTOP; after SIGCONT it finishes normally.
    """
    code = "from eosink import faults\nfaults.hit(faults.FaultPoint.F4, 1)\nprint('resumed')\n"
    child = _child(code, {"EOSINK_FAULTS": "F4@1:stop"})
    try:
        _, status = os.waitpid(child.pid, os.WUNTRACED)
        assert os.WIFSTOPPED(status) and os.WSTOPSIG(status) == signal.SIGSTOP
        os.killpg(child.pid, signal.SIGCONT)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=60)
    assert child.returncode == 0, err
    assert out.strip() == "resumed"


_SESSION_DRIVER = """
import os, subprocess, sys, time
from eosink import faults
faults.export_crash_scope()
# a worker in a process group of its own, as Spark's Python worker daemon puts itself
worker = subprocess.Popen([sys.executable, "-c", WORKER], preexec_fn=os.setpgrp)
print(worker.pid, flush=True)
time.sleep(120)
"""
_SESSION_WORKER = """
import os, sys, time
from eosink import faults
print("worker", os.getpid(), os.getpgrp(), flush=True)
time.sleep(0.5)
faults.hit(faults.FaultPoint.F2, 1)
time.sleep(120)
"""


def test_kill_in_a_worker_of_its_own_group_ends_the_whole_driver_session(tmp_path: Path) -> None:
    """A fault that fires in an executor must crash the whole driver, whatever process group it sits in.

    Spark's Python workers move into process groups of their own; a SIGKILL of the driver's group
    left 3-4 of them alive, able to write after the "crash". How: a driver in a session of its
    own exports its crash scope and starts a worker in another process group; the worker fires
    ``F2@1:kill``. Pass: the driver dies by SIGKILL, and within 10 s no process of the session is
    left, without the test reaping anything.
    """
    code = _SESSION_DRIVER.replace("WORKER", repr(_SESSION_WORKER))
    child = _child(code, {"EOSINK_FAULTS": "F2@1:kill", "EOSINK_FAULT_LOG": str(tmp_path / "faults.log")})
    try:
        worker = int(child.stdout.readline()) if child.stdout else 0
        assert worker and os.getpgid(worker) != child.pid, "the worker must sit in a process group of its own"
        child.wait(timeout=60)
        assert child.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while session_members(child.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session_members(child.pid) == [], "the crash left processes of the driver's session alive"
    finally:
        kill_session(child.pid)


# -- the error tree ----------------------------------------------------------------------------

ERROR_CLASSES = [getattr(errors, name) for name in errors.__all__]


def test_error_tree_shape() -> None:
    """Every exported error is an EosinkError; the mismatch, credentials, TLS and permission errors are
    ConfigurationErrors (terminal: fix, then restart).

    Pass: the subclass relations hold, and the module exports all eighteen classes.
    """
    assert len(ERROR_CLASSES) == 18
    assert all(issubclass(cls, EosinkError) for cls in ERROR_CLASSES)
    for cls in (CheckpointMismatchError, errors.AuthenticationError, errors.TlsError, errors.PermissionDeniedError):
        assert issubclass(cls, ConfigurationError)
    denied = pickle.loads(pickle.dumps(errors.PermissionDeniedError("No.", "Grant it.", permission="INSERT on t")))
    assert denied.permission == "INSERT on t"
    assert issubclass(errors.CommittedWorkLostError, errors.PreparedWorkLostError)
    lost = errors.CommittedWorkLostError("Gone.", "Rewind.", app_id="a", batch_id=3, batches=(3, 4), server="t 1 -> 2")
    copy = pickle.loads(pickle.dumps(lost))
    assert (copy.app_id, copy.batch_id, copy.batches, copy.server) == ("a", 3, (3, 4), "t 1 -> 2")
    assert issubclass(EosinkError, Exception)


@pytest.mark.parametrize("cls", ERROR_CLASSES, ids=lambda c: c.__name__)
def test_errors_pickle_with_problem_and_fix(cls: type[EosinkError]) -> None:
    """Errors cross process boundaries (executors to driver): they pickle round-trip.

    Pass: the copy has the same class, problem, fix and message, and str() shows 'Fix:'.
    """
    err = cls("Something broke.", "Do this.")
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is cls
    assert (copy.problem, copy.fix, str(copy)) == ("Something broke.", "Do this.", str(err))
    assert str(copy) == "Something broke. Fix: Do this."
    bare = pickle.loads(pickle.dumps(cls("Only a problem.")))
    assert (bare.fix, str(bare)) == (None, "Only a problem.")


def test_non_deterministic_replay_error_keeps_its_batch_id() -> None:
    """NonDeterministicReplayError says which batch diverged, also after pickling.

    Pass: batch_id 42 survives the round trip; it defaults to None.
    """
    err = NonDeterministicReplayError("Batch 42 differs.", "Make the query deterministic.", batch_id=42)
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.batch_id, copy.problem, copy.fix) == (42, "Batch 42 differs.", "Make the query deterministic.")
    assert "Fix:" in str(copy)
    assert NonDeterministicReplayError("x").batch_id is None


def test_errors_raised_by_faults_say_where() -> None:
    """An injected fault names its point, its point's name and the batch.

    Pass: the message contains 'F8', 'after_commit' and 'batch 9'.
    """
    faults.configure("F8@9:raise")
    with pytest.raises(InjectedFault) as info:
        faults.hit(FaultPoint.F8, 9)
    text = str(info.value)
    assert "F8" in text and "after_commit" in text and "batch 9" in text and "Fix:" in text
