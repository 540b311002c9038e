"""Rewind a Spark checkpoint to a batch whose work the sink lost, so that Spark runs that batch again.

When Spark's commit log holds batch N but the sink no longer has its work
(:class:`~eosink.errors.PreparedWorkLostError`), Spark will never run N again by itself. Spark
resumes at the newest entry of its offsets log and treats it as done when the commit log holds
it; so removing the commit-log entries from N on, and the offsets entries after N (batches
Spark planned but never committed), makes the next start run N again, from the offsets and
state it had the first time, exactly as after a crash before ``commits/N``. eosink's manifests
of those batches go too; recovery then aborts whatever in-doubt work of them is left.

Nothing is deleted: what the rewind removes is moved into
``<checkpoint>/eosink/<app>/rewinds/<time>/``, with ``rewind.json`` saying what was done, when,
by whom, and why. :func:`plan_rewind` refuses, saying why, when rewinding is unsafe:

* nothing of the app_id is lost (never rewind a good checkpoint);
* the sink already holds a batch after N (the rewind would replay work it has);
* a driver of the app_id still runs on this checkpoint (its lease names a live process);
* the checkpoint's layout is not one eosink understands (a file it does not know, a log
  version other than ``v1``, no ``offsets/N`` to run N from).
"""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import re
import socket
from dataclasses import asdict, dataclass, field
from typing import Any

from eosink.checkpoint import SparkCheckpoint
from eosink.errors import ConfigurationError
from eosink.recovery import RecoveryPlan

__all__ = ["RewindPlan", "lease_holder", "new_lease", "plan_rewind", "rewind"]

_LOG_FILE = re.compile(r"^\d+$")
# Hadoop's checksums (.N.crc), and files Spark was writing when it stopped (.N.<uuid>.tmp, with their .crc)
_SPARK_SIDE_FILE = re.compile(r"^\.(\d+\.crc|.+\.tmp|.+\.tmp\.crc)$")
_LOGS = ("commits", "offsets")


@dataclass(frozen=True)
class RewindPlan:
    """What a rewind of ``app_id`` to ``batch_id`` moves aside (nothing is done until :func:`rewind`)."""

    app_id: str
    batch_id: int
    reason: str
    commits: tuple[int, ...]
    """Commit-log entries from ``batch_id`` on: Spark runs these batches again."""
    offsets: tuple[int, ...]
    """Offsets entries after ``batch_id``: planned by Spark, never committed; planned anew."""
    manifests: tuple[int, ...]
    """eosink's manifests of batches from ``batch_id`` on."""
    backup: tuple[str, ...]
    """Where the moved files go, relative to the checkpoint."""
    lease: dict[str, Any] | None = field(default=None)
    """The lease a dead driver left (None: none)."""

    def to_json(self) -> dict[str, Any]:
        body = asdict(self)
        body["backup"] = "/".join(self.backup)
        return body


def plan_rewind(checkpoint: SparkCheckpoint, recovery: RecoveryPlan, last_bundle_batch: int | None) -> RewindPlan:
    """The rewind of ``recovery.app_id`` to its first lost batch; ConfigurationError when it is unsafe.

    ``recovery`` is what recovery would do now (:meth:`eosink.coordinator.Coordinator.recovery_plan`,
    which also refuses a checkpoint that is not the app_id's); ``last_bundle_batch`` the batch of
    the sink's newest bundle.
    """
    app_id = recovery.app_id
    lost = recovery.lost
    if not lost:
        raise ConfigurationError(
            f"Nothing of app_id {app_id!r} is lost: every batch Spark's commit log holds is in the sink, or is in "
            "doubt and recovery completes it. Rewinding would make Spark run batches again for nothing.",
            "Do not rewind; start the query (it recovers at start), or run eosink recover without --rewind.",
        )
    batch_id = lost[0].batch_id
    if last_bundle_batch is not None and last_bundle_batch > batch_id:
        raise ConfigurationError(
            f"The sink holds batch {last_bundle_batch} of app_id {app_id!r}, after the lost batch {batch_id}: a rewind "
            f"to {batch_id} would make Spark run batches again whose rows the sink already has.",
            "Do not rewind. Recover the lost batch's rows another way (re-read its offsets from offsets/"
            f"{batch_id} and write them with a new app_id), or restore the sink.",
        )
    _check_layout(checkpoint, batch_id)
    lease = _check_lease(checkpoint, app_id)
    commits = tuple(n for n in _entries(checkpoint, "commits") if n >= batch_id)
    offsets = tuple(n for n in _entries(checkpoint, "offsets") if n > batch_id)
    manifests = tuple(n for n in checkpoint.manifest_batches(app_id) if n >= batch_id)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
    backup = (*checkpoint.eosink_dir(app_id), "rewinds", f"{stamp}-batch-{batch_id}")
    return RewindPlan(app_id, batch_id, lost[0].reason, commits, offsets, manifests, backup, lease)


def rewind(checkpoint: SparkCheckpoint, plan: RewindPlan) -> tuple[str, ...]:
    """Carry ``plan`` out: move its files into the backup folder, commit log first; the record's path.

    The commit-log entries move newest first, so a rewind cut short leaves a commit log Spark
    still reads (it ends earlier); running the same rewind again finishes it.
    """
    record = {
        **plan.to_json(),
        "done_at": dt.datetime.now(dt.timezone.utc).isoformat(),
        "host": socket.gethostname(),
        "user": _user(),
        "checkpoint": checkpoint.location,
    }
    checkpoint.write((*plan.backup, "rewind.json"), json.dumps(record, indent=2, sort_keys=True))
    for log, ids in (("commits", plan.commits), ("offsets", plan.offsets)):
        for n in sorted(ids, reverse=True):
            checkpoint.move((log, str(n)), (*plan.backup, log, str(n)))
            if f".{n}.crc" in checkpoint.names(log):
                checkpoint.move((log, f".{n}.crc"), (*plan.backup, log, f".{n}.crc"))
    for n in plan.manifests:
        checkpoint.move((*checkpoint.eosink_dir(plan.app_id), f"{n}.json"), (*plan.backup, "eosink", f"{n}.json"))
    if plan.lease is not None:
        checkpoint.delete_lease(plan.app_id)
    return (*plan.backup, "rewind.json")


def new_lease(epoch: int) -> dict[str, Any]:
    """The lease of this process, the driver of an app_id from now on (written by the coordinator at start)."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "pid_start": _start_time(os.getpid()),
        "epoch": epoch,
        "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }


def lease_holder(lease: dict[str, Any]) -> str:
    """``pid 123 on host h (started ...)``: the driver a lease names."""
    return f"pid {lease.get('pid')} on host {lease.get('host')} (started {lease.get('started_at')})"


def _entries(checkpoint: SparkCheckpoint, log: str) -> list[int]:
    return sorted(int(n) for n in checkpoint.names(log) if _LOG_FILE.match(n))


def _check_layout(checkpoint: SparkCheckpoint, batch_id: int) -> None:
    where = checkpoint.location
    if checkpoint.query_id() is None:
        raise _layout(f"{where} has no Spark metadata file with a query id")
    for log in _LOGS:
        for name in checkpoint.names(log):
            if not (_LOG_FILE.match(name) or _SPARK_SIDE_FILE.match(name)):
                raise _layout(f"{where}/{log} holds {name!r}, which is no Spark log entry eosink knows")
    for log in _LOGS:
        for n in _entries(checkpoint, log):
            if n < batch_id and log == "offsets":
                continue
            text = checkpoint.read(log, str(n)) or ""
            version = text.splitlines()[0].strip() if text.strip() else ""
            if version != "v1":
                raise _layout(f"{where}/{log}/{n} is of log version {version or '(empty)'!r}, not v1")
    if batch_id not in _entries(checkpoint, "offsets"):
        raise _layout(f"{where}/offsets has no entry {batch_id}: Spark could not run batch {batch_id} again")


def _layout(problem: str) -> ConfigurationError:
    return ConfigurationError(
        f"Refusing to rewind: {problem}.",
        "Rewind this checkpoint by hand, or restore it from a backup; eosink only rewinds checkpoints whose "
        "layout it understands (Spark 3.5 / 4.x, logs of version v1).",
    )


def _check_lease(checkpoint: SparkCheckpoint, app_id: str) -> dict[str, Any] | None:
    """The lease a dead driver left, or None; ConfigurationError while the driver it names may still run."""
    lease = checkpoint.read_lease(app_id)
    if lease is None:
        return None
    path = "/".join((checkpoint.location, *checkpoint.eosink_dir(app_id), "lease.json"))
    if lease.get("host") != socket.gethostname():
        raise ConfigurationError(
            f"Refusing to rewind: a driver of app_id {app_id!r} may still run on this checkpoint: "
            f"{lease_holder(lease)}.",
            f"Stop that query; once you are sure no driver of it runs, delete {path} and run the rewind again.",
        )
    if _alive(lease):
        raise ConfigurationError(
            f"Refusing to rewind: a driver of app_id {app_id!r} runs on this checkpoint: {lease_holder(lease)}.",
            "Stop the query (its batch is lost: it cannot go on), then run the rewind again.",
        )
    return lease


def _alive(lease: dict[str, Any]) -> bool:
    """Whether the process a lease of this host names still runs (the same process: its start time matches)."""
    try:
        pid = int(lease["pid"])
    except (KeyError, TypeError, ValueError):
        return False
    started = _start_time(pid)
    if started is None:
        return _exists(pid)
    return lease.get("pid_start") in (None, started)


def _start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot; Linux), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            stat = fh.read()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19]) if len(fields) > 19 and fields[0] != "Z" else None


def _exists(pid: int) -> bool:
    if not os.path.isdir("/proc"):  # no /proc (macOS): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return False


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())
