"""What one participant (a Spark task) does with its share of a batch.

Engine-neutral: the Spark integration calls :func:`run_participant` inside ``mapInArrow``
on executors; unit tests call it directly. The participant writes, fingerprints in the
same pass, pre-commits, and hands back only a small :class:`~eosink.contract.Committable`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa
import uuid6

from eosink import faults
from eosink._retry import retry_transient
from eosink.contract import BatchRef, Committable, Fingerprint, Sink, TaskRef
from eosink.faults import FaultPoint
from eosink.fingerprint import FINGERPRINT_VERSION, fingerprint_of
from eosink.keys import KeyGenerator

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
        )


def run_participant(plan: WritePlan, participant: int, batches: Iterable[pa.RecordBatch]) -> Committable | None:
    """Write ``batches`` as one participant; None when it had no rows."""
    return run_participants([plan], participant, batches)[0]


def run_participants(
    plans: Sequence[WritePlan], participant: int, batches: Iterable[pa.RecordBatch]
) -> list[Committable | None]:
    """Write ``batches`` as one participant into the sink of each plan, in one pass over the data (a fan-out,
    :mod:`eosink.fanout`); per plan, its committable, or None when the participant had no rows."""
    if not plans:
        return []
    keys = [KeyGenerator(p.batch.app_id, p.batch.batch_id, p.time_ms) if p.generate_keys else None for p in plans]
    txns: list[Any] = [None] * len(plans)
    fingerprint = Fingerprint()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        fingerprint += fingerprint_of(batch)
        for i, plan in enumerate(plans):
            if txns[i] is None:
                txns[i] = _begin(plan, participant)
            generator = keys[i]
            plan.sink.write(txns[i], batch if generator is None else generator.add_keys(batch))
        faults.hit(FaultPoint.F2, plans[0].batch.batch_id)
    if txns[0] is None:  # no rows: every sink's transaction is still unopened
        return [None] * len(plans)
    made: list[Committable | None] = [
        replace(plan.sink.pre_commit(txn), rows=fingerprint.rows, fingerprint=fingerprint)
        for plan, txn in zip(plans, txns, strict=True)
    ]
    faults.hit(FaultPoint.F11, plans[0].batch.batch_id)
    return made


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
