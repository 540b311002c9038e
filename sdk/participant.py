"""What one participant (a Spark task) does with its share of a batch.

Engine-neutral: the Spark integration calls :func:`run_participant` inside ``mapInArrow``
on executors; unit tests call it directly. The participant writes, fingerprints in the
same pass, pre-commits, and hands back only a small :class:`~eosink.contract.Committable`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import pyarrow as pa
import uuid6

from eosink import faults
from eosink._lanes import Lane
from eosink._retry import retry_transient
from eosink.contract import BatchRef, Committable, Fingerprint, Sink, TaskRef
from eosink.errors import EosinkError, InjectedFault
from eosink.faults import FaultPoint
from eosink.fingerprint import FINGERPRINT_VERSION, fingerprint_of
from eosink.keys import KeyGenerator

_T = TypeVar("_T")

__all__ = [
    "WritePlan",
    "attempt_time",
    "fingerprint_participant",
    "new_attempt_id",
    "run_participant",
    "run_participants",
]


def new_attempt_id() -> str:
    """A task attempt's id: a UUIDv7 in hex, unique and time-ordered, so listings of in-doubt work sort by age."""
    return str(uuid6.uuid7().hex)


def attempt_time(attempt: str) -> float | None:
    """When attempt ``attempt`` began (Unix seconds), read off its UUIDv7; None for another kind of id."""
    text = attempt.rsplit(":", 1)[-1].replace("-", "")
    if len(text) != 32 or text[12] != "7":
        return None
    try:
        return int(text[:12], 16) / 1000.0
    except ValueError:
        return None


@dataclass(frozen=True)
class WritePlan:
    """Everything participants of one batch need; pickled to executors with the sink."""

    sink: Sink[Any]
    batch: BatchRef
    epoch: int
    upsert_keys: tuple[str, ...] | None
    transactional: bool
    generate_keys: bool
    time_ms: int
    strategy: str = ""
    begin_timeout_s: float = 60.0
    """How long a participant retries ``begin`` through TransientError (its sink restarting) before its task fails:
    a short outage is waited out instead of using up Spark's task retries in a second."""
    member: str | None = None
    """The sink's name in a fan-out (None alone): errors its participants raise name it."""
    follows: int | None = None
    """The batch the writer last committed (``TaskRef.follows``)."""
    fingerprint_version: int = FINGERPRINT_VERSION
    """The version participants fingerprint their rows in (``COUNT_ONLY``: the count, see ``eosink.fingerprint``)."""

    def task(self, participant: int) -> TaskRef:
        """A task reference for one attempt of one participant (a fresh, unique attempt id)."""
        return TaskRef(
            self.batch,
            self.epoch,
            participant,
            new_attempt_id(),
            self.upsert_keys,
            self.transactional,
            self.strategy,
            self.follows,
        )


def run_participant(plan: WritePlan, participant: int, batches: Iterable[pa.RecordBatch]) -> Committable | None:
    """Write ``batches`` as one participant; None when it had no rows and began nothing."""
    return run_participants([plan], participant, batches)[0]


def run_participants(
    plans: Sequence[WritePlan], participant: int, batches: Iterable[pa.RecordBatch]
) -> list[Committable | None]:
    """Write ``batches`` as one participant into the sink of each plan, in one pass over the data (a fan-out,
    :mod:`eosink.fanout`); per plan, its committable, or None when it began nothing (no rows, see `_SinkWriter`)."""
    if not plans:
        return []
    writers = [_SinkWriter(plan, participant) for plan in plans]
    if len(writers) == 1:
        fingerprint = _pass(batches, writers[0].write, plans[0])
        made = [writers[0].pre_commit()]
    else:  # a fan-out: each sink in a lane of its own, fed the same batches in the same order
        lanes = [Lane(_named(w.plan, w.write), _named(w.plan, w.pre_commit)) for w in writers]
        try:

            def to_every_lane(batch: pa.RecordBatch) -> None:
                for lane in lanes:
                    lane.put(batch)

            fingerprint = _pass(batches, to_every_lane, plans[0])
            for lane in lanes:  # every sink pre-commits at once
                lane.finish()
            made = [lane.result() for lane in lanes]
        except BaseException:
            for lane in lanes:
                lane.stop()
            raise
    if not fingerprint.rows and all(c is None for c in made):  # no rows, and no sink began a transaction
        return [None] * len(plans)
    committables: list[Committable | None] = [
        None if c is None else replace(c, rows=fingerprint.rows, fingerprint=fingerprint) for c in made
    ]
    faults.hit(FaultPoint.F11, plans[0].batch.batch_id)
    return committables


def _pass(batches: Iterable[pa.RecordBatch], write: Callable[[pa.RecordBatch], None], plan: WritePlan) -> Fingerprint:
    """Read the participant's batches once: fingerprint each (in the plan's version; a fan-out's plans share
    their strategy's) and hand it to ``write``; the whole fingerprint."""
    fingerprint = Fingerprint(version=plan.fingerprint_version)
    for batch in batches:
        if batch.num_rows == 0:
            continue
        fingerprint += fingerprint_of(batch, plan.fingerprint_version)
        write(batch)
        faults.hit(FaultPoint.F2, plan.batch.batch_id)
    return fingerprint


class _SinkWriter:
    """One sink's side of a participant: its transaction, opened at the first row (or, where the sink allows,
    while the first row is on its way: ``Capabilities.begin_before_rows``), its keys, its pre-commit."""

    def __init__(self, plan: WritePlan, participant: int) -> None:
        self.plan, self.participant = plan, participant
        self.keys = KeyGenerator(plan.batch.app_id, plan.batch.batch_id, plan.time_ms) if plan.generate_keys else None
        self.txn: Any = None
        capabilities = getattr(plan.sink, "capabilities", None)  # a duck-typed sink may leave them out
        self._early = _EarlyBegin(plan, participant) if capabilities and capabilities.begin_before_rows else None

    def write(self, batch: pa.RecordBatch) -> None:
        if self.txn is None:
            self.txn = self._begun()
        self.plan.sink.write(self.txn, batch if self.keys is None else self.keys.add_keys(batch))

    def pre_commit(self) -> Committable | None:
        """The sink's committable (rows and fingerprint filled in by the caller); None if it began nothing (no
        rows, and a sink that begins at the first row)."""
        if self.txn is None and self._early is not None:  # began before the rows, and none came: commit it empty
            self.txn = self._begun()
        return None if self.txn is None else self.plan.sink.pre_commit(self.txn)

    def _begun(self) -> Any:
        early, self._early = self._early, None
        return _begin(self.plan, self.participant) if early is None else early.result()


class _EarlyBegin:
    """``begin`` of a participant, run in a thread of its own from the moment the participant starts, while Spark
    reads and converts its first rows; :meth:`result` waits for it (its error raised in the caller's thread). An
    attempt that fails before it takes the result leaves its transaction as a crash would: the sink's recovery
    and transaction timeout end it."""

    def __init__(self, plan: WritePlan, participant: int) -> None:
        self._txn: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run, args=(plan, participant), name=f"eosink-begin-{participant}", daemon=True
        )
        self._thread.start()

    def _run(self, plan: WritePlan, participant: int) -> None:
        try:
            self._txn = _begin(plan, participant)
        except BaseException as exc:  # handed to the participant's own thread
            self._error = exc

    def result(self) -> Any:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._txn


def _named(plan: WritePlan, call: Callable[..., _T]) -> Callable[..., _T]:
    """``call``, its eosink errors naming the fan-out's sink ``plan.member`` (which of several sinks refused)."""
    member = plan.member
    if member is None:
        return call

    def named(*args: Any) -> _T:
        try:
            return call(*args)
        except EosinkError as exc:
            if not isinstance(exc, InjectedFault):
                exc.problem = f"Fan-out sink {member!r}: {exc.problem}"
                exc.args = (exc.problem if exc.fix is None else f"{exc.problem} Fix: {exc.fix}",)
            raise

    return named


def _begin(plan: WritePlan, participant: int) -> Any:
    return retry_transient(
        f"begin of participant {participant} of batch {plan.batch}",
        lambda: plan.sink.begin(plan.task(participant)),
        timeout_s=plan.begin_timeout_s,
    )


def fingerprint_participant(batches: Iterable[pa.RecordBatch], version: int = FINGERPRINT_VERSION) -> Fingerprint:
    """The fingerprint of a participant's share under row-hash ``version``, writing nothing (for replays of
    committed batches, fingerprinted as their bundle was)."""
    fingerprint = Fingerprint(version=version)
    for batch in batches:
        if batch.num_rows:
            fingerprint += fingerprint_of(batch, version)
    return fingerprint
