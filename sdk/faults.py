"""Named fault points in the commit protocol, for tests that crash eosink on purpose.

Disabled unless configured, and then free: each point is one ``if`` on a module global.
Configure with the ``EOSINK_FAULTS`` environment variable (read at import, so it reaches
Spark's Python workers too) or :func:`configure`::

    EOSINK_FAULTS="F5@3:kill"          SIGKILL the whole driver at F5 of batch 3
    EOSINK_FAULTS="F7:ambiguous,F2@1:raise"

A spec is ``POINT[@BATCH][:ACTION]``; ``POINT`` is ``F1``..``F9``, ``F11``, ``F14`` or its name below.
Actions: ``kill`` (default; SIGKILL of the whole driver, as a real crash), ``raise``
(:class:`~eosink.errors.InjectedFault`), ``ambiguous`` (:class:`~eosink.errors.AmbiguousCommitError`,
as if a COMMIT reply was lost), ``stop`` (SIGSTOP of the whole driver, to make a zombie), ``slow``
(:data:`SLOW_S` seconds of sleep where it fires: a straggling task attempt, for Spark's speculation).
Each spec fires once per process; with ``EOSINK_FAULT_LOG`` set, once across all processes
sharing that log (Spark forks a fresh Python worker per task attempt, and a retried attempt
must not fail again). Every firing appends ``POINT BATCH ACTION PID`` to the log first, so a
test can prove the fault happened.

What ``kill`` and ``stop`` signal: every process of the session ``EOSINK_FAULT_SESSION`` when
set (by PID: the driver's Python, its JVM, and Spark's Python workers, which run in process
groups of their own; ``own`` means the caller's session, for a harness that started the driver
with ``setsid``), else the process group ``EOSINK_FAULT_PGID``, else the caller's own group.
A driver calls :func:`export_crash_scope` before it starts Spark, and passes the variables on to
its executors, so a fault point that fires in a worker crashes the whole driver.
"""

from __future__ import annotations

import enum
import os
import signal
import time
from dataclasses import dataclass

from eosink.errors import AmbiguousCommitError, ConfigurationError, InjectedFault

__all__ = ["CRASH_SCOPE_VARS", "SLOW_S", "FaultPoint", "configure", "enabled", "export_crash_scope", "hit", "reset"]

CRASH_SCOPE_VARS = ("EOSINK_FAULT_SESSION", "EOSINK_FAULT_PGID")
"""The variables that say what ``kill`` and ``stop`` signal; a driver passes them to its executors."""


class FaultPoint(str, enum.Enum):
    """The failure matrix's crash points (design brief F1-F9; F11: a task attempt fails after pre_commit;
    F14: a fan-out committed a batch in one sink and not yet in the next, see :mod:`eosink.fanout`)."""

    F1 = "before_begin"
    F2 = "mid_write"
    F3 = "after_pre_commit"
    F4 = "after_record"
    F5 = "after_spark_commit"
    F6 = "mid_commit"
    F7 = "commit_reply_lost"
    F8 = "after_commit"
    F9 = "mid_recovery"
    F11 = "after_task_pre_commit"
    F14 = "between_sinks"


_ACTIONS = ("kill", "raise", "ambiguous", "stop", "slow")
SLOW_S = 60.0
"""How long a ``slow`` fault holds the attempt it fires in (a straggler that Spark kills once its copy won)."""


@dataclass
class _Spec:
    point: FaultPoint
    batch_id: int | None
    action: str
    fired: bool = False


_PLAN: list[_Spec] | None = None


def _parse_point(text: str) -> FaultPoint:
    text = text.strip()
    if text.upper() in FaultPoint.__members__:
        return FaultPoint[text.upper()]
    try:
        return FaultPoint(text.lower())
    except ValueError:
        raise ConfigurationError(
            f"Unknown fault point {text!r}.",
            "Use F1..F9, F11, F14 or one of: " + ", ".join(p.value for p in FaultPoint) + ".",
        ) from None


def _parse(spec: str) -> list[_Spec]:
    plan: list[_Spec] = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        where, _, action = part.partition(":")
        point_text, _, batch_text = where.partition("@")
        action = action.strip().lower() or "kill"
        if action not in _ACTIONS:
            raise ConfigurationError(f"Unknown fault action {action!r} in {part!r}.", f"Use one of {_ACTIONS}.")
        try:
            batch_id = int(batch_text) if batch_text else None
        except ValueError:
            raise ConfigurationError(f"Bad batch id in fault spec {part!r}.", "Write POINT@BATCH:ACTION.") from None
        plan.append(_Spec(_parse_point(point_text), batch_id, action))
    return plan


def configure(spec: str | None) -> None:
    """Enable the fault points in ``spec`` in this process (None or "" disables all)."""
    global _PLAN
    _PLAN = _parse(spec) or None if spec else None


def reset() -> None:
    """Disable every fault point in this process."""
    configure(None)


def export_crash_scope() -> dict[str, str]:
    """Make this process's fault points (and its children's) crash the whole driver; returns the variables set.

    A driver that leads its session (started with ``setsid`` / ``start_new_session``, as the
    tests, the chaos harness and the demo start it) exports the session: ``kill`` then ends
    every process of it. Otherwise only its process group, so that a fault never signals the
    shell's session.
    """
    if os.getsid(0) == os.getpid():
        scope = {"EOSINK_FAULT_SESSION": str(os.getpid()), "EOSINK_FAULT_PGID": ""}
    else:
        scope = {"EOSINK_FAULT_SESSION": "", "EOSINK_FAULT_PGID": str(os.getpgrp())}
    os.environ.update(scope)
    return scope


def enabled() -> bool:
    """Whether any fault point is armed in this process."""
    return _PLAN is not None


def hit(point: FaultPoint, batch_id: int | None = None) -> None:
    """Pass fault point ``point``: fires it if a matching spec is armed, else does nothing."""
    if _PLAN is None:
        return
    for spec in _PLAN:
        if spec.fired or spec.point is not point:
            continue
        if spec.batch_id is not None and spec.batch_id != batch_id:
            continue
        spec.fired = True
        if _claim(spec, batch_id):
            _fire(spec, batch_id)


def _claim(spec: _Spec, batch_id: int | None) -> bool:
    """Whether this process is the first, among those sharing EOSINK_FAULT_LOG, to fire ``spec``."""
    log = os.environ.get("EOSINK_FAULT_LOG")
    if not log:
        return True
    marker = f"{log}.{spec.point.name}@{spec.batch_id}.{spec.action}.fired"
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError:  # no shared marker possible (e.g. the log's folder is gone): fire here
        return True
    return True


def _fire(spec: _Spec, batch_id: int | None) -> None:
    log = os.environ.get("EOSINK_FAULT_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(f"{spec.point.name} {batch_id} {spec.action} {os.getpid()}\n")
            fh.flush()
            os.fsync(fh.fileno())
    where = f"fault point {spec.point.name} ({spec.point.value}) at batch {batch_id}"
    if spec.action in ("kill", "stop"):
        _signal_driver(signal.SIGKILL if spec.action == "kill" else signal.SIGSTOP)
    elif spec.action == "slow":
        time.sleep(SLOW_S)
    elif spec.action == "ambiguous":
        raise AmbiguousCommitError(f"Injected lost commit reply at {where}.", "Resolve with commit_status.")
    else:
        raise InjectedFault(f"Injected failure at {where}.", "Unset EOSINK_FAULTS.")


def _signal_driver(sig: int) -> None:
    session = os.environ.get("EOSINK_FAULT_SESSION")
    if session:
        from eosink._procs import signal_session

        signal_session(os.getsid(0) if session == "own" else int(session), sig)
    else:
        os.killpg(int(os.environ.get("EOSINK_FAULT_PGID") or os.getpgrp()), sig)


configure(os.environ.get("EOSINK_FAULTS"))
