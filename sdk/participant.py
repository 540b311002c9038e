"""What one participant (a Spark task) does with its share of a batch.

Engine-neutral: the Spark integration calls :func:`run_participant` inside ``mapInArrow``
on executors; unit tests call it directly. The participant writes, fingerprints in the
same pass, pre-commits, and hands back only a small :class:`~eosink.contract.Committable`.
"""

from __future__ import annotations

from collections.abc import Iterable
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

__all__ = ["WritePlan", "attempt_time", "fingerprint_participant", "new_attempt_id", "run_participant"]


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
    sink = plan.sink
    keys = KeyGenerator(plan.batch.app_id, plan.batch.batch_id, plan.time_ms) if plan.generate_keys else None
    txn: Any = None
    fingerprint = Fingerprint()
    for batch in batches:
        if batch.num_rows == 0:
            continue
        fingerprint += fingerprint_of(batch)
        if keys is not None:
            batch = keys.add_keys(batch)
        if txn is None:
            txn = retry_transient(
                f"begin of participant {participant} of batch {plan.batch}",
                lambda: sink.begin(plan.task(participant)),
                timeout_s=plan.begin_timeout_s,
            )
        sink.write(txn, batch)
        faults.hit(FaultPoint.F2, plan.batch.batch_id)
    if txn is None:
        return None
    committable = replace(sink.pre_commit(txn), rows=fingerprint.rows, fingerprint=fingerprint)
    faults.hit(FaultPoint.F11, plan.batch.batch_id)
    return committable


def fingerprint_participant(batches: Iterable[pa.RecordBatch], version: int = FINGERPRINT_VERSION) -> Fingerprint:
    """The fingerprint of a participant's share under row-hash ``version``, writing nothing (for replays of
    committed batches, fingerprinted as their bundle was)."""
    fingerprint = Fingerprint(version=version)
    for batch in batches:
        if batch.num_rows:
            fingerprint += fingerprint_of(batch, version)
    return fingerprint
