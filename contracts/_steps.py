"""Building blocks of the contract suite: write a share, make a bundle, crash at a step, read back.

A *crash* in the suite drops every object of a simulated process: the sink is closed (its
server rolls back whatever transaction was open, as it would for a dead process) and a new
sink is made from configuration. :class:`CrashAt` crashes *inside* a sink operation, at the
k-th line of the sink's own code, so a case can walk a crash through every step of ``commit``.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from types import FrameType
from typing import Any

import pyarrow as pa
import pytest

from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, Sink
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.errors import TransientError
from eosink.participant import WritePlan, run_participant

__all__ = [
    "CrashAt",
    "SimulatedCrash",
    "bundle_for",
    "canon",
    "prepare",
    "rows_for",
    "settle_commit",
    "settle_status",
    "sink_files",
]


class SimulatedCrash(BaseException):
    """Raised inside a sink operation to simulate the process dying there.

    A BaseException, so that a sink's ``except Exception`` cannot swallow it.
    """


def rows_for(app: str, batch_id: int, participant: int, n: int, *, base: int = 0) -> list[dict[str, Any]]:
    """``n`` distinct rows of one participant's share (ids unique across app, batch and participant)."""
    start = base + batch_id * 10_000 + participant * 1_000
    return [
        {
            "id": start + i,
            "name": f"{app}/b{batch_id}/p{participant}/r{i} · ünïcode",
            "amount": round(i * 1.25 + batch_id, 2),
            "tag": None if i % 3 == 0 else f"t{i % 2}",
        }
        for i in range(n)
    ]


def prepare(
    sink: Sink[Any],
    batch: BatchRef,
    epoch: int,
    participant: int,
    rows: Sequence[dict[str, Any]],
    *,
    upsert_keys: tuple[str, ...] | None = None,
    transactional: bool = True,
    follows: int | None = None,
) -> Committable:
    """One participant's begin / write (in chunks of 3 rows) / pre_commit; its committable."""
    plan = WritePlan(sink, batch, epoch, upsert_keys, transactional, False, 0, follows=follows)
    chunks = [pa.RecordBatch.from_pylist(list(rows[i : i + 3]), schema=CONTRACT_SCHEMA) for i in range(0, len(rows), 3)]
    committable = run_participant(plan, participant, chunks)
    assert committable is not None, "a share with rows must produce a committable"
    return committable


def bundle_for(batch: BatchRef, epoch: int, committables: Sequence[Committable], strategy: str = "2pc") -> Bundle:
    """The bundle the coordinator would commit with ``committables``."""
    fingerprint = sum((c.fingerprint for c in committables), Fingerprint())
    return Bundle(batch, epoch, fingerprint, tuple(c.id for c in committables), None, strategy)


def canon(rows: Sequence[dict[str, Any]]) -> Counter[str]:
    """The multiset of rows without generated keys, comparable whatever the order or the value types."""
    out: Counter[str] = Counter()
    for row in rows:
        clean = {k: row.get(k) for k in CONTRACT_SCHEMA.names}
        if clean["amount"] is not None:
            clean["amount"] = float(clean["amount"])
        if clean["id"] is not None:
            clean["id"] = int(clean["id"])
        out[json.dumps(clean, sort_keys=True, default=str)] += 1
    return out


def settle_status(read: Callable[[], CommitStatus], timeout_s: float = 30.0) -> CommitStatus:
    """``commit_status``, asked again (bounded) while the sink says IN_PROGRESS."""
    deadline = time.monotonic() + timeout_s
    while True:
        status = read()
        if status is not CommitStatus.IN_PROGRESS or time.monotonic() > deadline:
            return status
        time.sleep(0.02)


def settle_commit(commit: Callable[[], None], timeout_s: float = 60.0) -> None:
    """``commit()``, asked again (bounded) while it raises TransientError (a server that has just failed over)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            commit()
            return
        except TransientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def sink_files(sink: Sink[Any]) -> set[str]:
    """Source files of the sink's own classes (its MRO without the contract's base classes)."""
    files = set()
    for cls in type(sink).__mro__:
        module = getattr(cls, "__module__", "")
        if module in ("builtins", "abc", "typing") or module.startswith("eosink.contract"):
            continue
        with contextlib.suppress(TypeError, OSError):
            source = inspect.getsourcefile(cls)
            if source:
                files.add(source)
    return files


def crash_steps(request: pytest.FixtureRequest, limit: int) -> range:
    """The steps a crash walk crashes at: every one, or every N-th with ``--eosink-crash-stride=N``."""
    try:
        stride = request.config.getoption("eosink_crash_stride") or 1
    except ValueError:  # the plugin is not loaded
        stride = 1
    if int(stride) < 1:
        raise pytest.UsageError(f"--eosink-crash-stride must be at least 1, not {stride}")
    return range(1, limit, int(stride))


class CrashAt:
    """Crash (raise :class:`SimulatedCrash`) at the ``step``-th line executed in ``files``.

    ``fired`` tells whether the crash happened; a run where it did not means the operation
    has fewer steps than ``step``.
    """

    def __init__(self, files: set[str], step: int) -> None:
        self.files = files
        self.step = step
        self.seen = 0
        self.fired = False

    @contextlib.contextmanager
    def armed(self) -> Iterator[CrashAt]:
        """Trace this thread while the block runs."""
        previous = sys.gettrace()
        sys.settrace(self._global)
        try:
            yield self
        finally:
            sys.settrace(previous)

    def _global(self, frame: FrameType, event: str, arg: object) -> Callable[..., Any] | None:
        if event == "call" and frame.f_code.co_filename in self.files:
            return self._local
        return None

    def _local(self, frame: FrameType, event: str, arg: object) -> Callable[..., Any] | None:
        if event == "line" and not self.fired:
            self.seen += 1
            if self.seen >= self.step:
                self.fired = True
                raise SimulatedCrash(f"crash at step {self.step} in {frame.f_code.co_name}")
        return self._local
