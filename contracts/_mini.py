"""Spark, simulated at protocol level: a fake checkpoint, in-memory batches, strategy variants.

The pieces mimic what Spark and :mod:`eosink.spark` do around
:class:`~eosink.coordinator.Coordinator`, without starting Spark, so that the contract suite
(and eosink's own unit tests) can drive every strategy through every failure point:

* :class:`FakeCheckpoint` writes a checkpoint directory the way Spark does: ``metadata``
  (the query id), ``offsets/N`` before a batch runs and ``commits/N`` after foreachBatch returned;
* :class:`MemoryBatch` is a :class:`~eosink.coordinator.BatchInput` (and a fan-out's
  :class:`~eosink.fanout.FanOutInput`) over rows split into participant shares; ``write`` (a fan-out:
  ``write_many``) runs :func:`eosink.participant.run_participants` per share, as ``SparkBatch`` does
  inside ``mapInArrow``;
* :class:`Variant` is one strategy configuration (:data:`VARIANTS`);
* :class:`SparkOrderDriver` runs batches in Spark's order around a real Coordinator, and
  restarts as a new driver process would (a connector's bad-input tests build on it).
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import pyarrow as pa

from eosink._rowhash import row_hashes
from eosink._waiting import wait_until as _wait_until
from eosink.checkpoint import SparkCheckpoint
from eosink.contract import Committable, Fingerprint, Sink
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.coordinator import CommitPolicy, Coordinator
from eosink.errors import EosinkError, InjectedFault
from eosink.fingerprint import FINGERPRINT_VERSION
from eosink.keys import KEY_COLUMN
from eosink.participant import WritePlan, fingerprint_participant, run_participants
from eosink.strategies import Idempotent, Strategy, TwoPhaseCommit, TxidCheck

__all__ = [
    "BASE_TS_MS",
    "FAST",
    "NON_2PC",
    "PATIENT",
    "SCHEMA",
    "VARIANTS",
    "FakeCheckpoint",
    "MemoryBatch",
    "NoWatcherCoordinator",
    "PatientDriver",
    "SparkOrderDriver",
    "Variant",
    "batches_for",
    "canon",
    "chunks",
    "first_status_meets",
    "make_rows",
    "run_in_spark_order",
    "wait_until",
]

BASE_TS_MS = 1_700_000_000_000
SCHEMA = CONTRACT_SCHEMA
FAST = CommitPolicy(resolve_timeout_s=5.0, transient_timeout_s=0.05, backoff_s=0.001, max_backoff_s=0.01)
"""A commit policy with tiny back-offs, so that retries in tests take milliseconds."""
PATIENT = CommitPolicy(resolve_timeout_s=180.0, transient_timeout_s=180.0, backoff_s=0.05, max_backoff_s=2.0)
"""A commit policy whose retries outlast a failover of a replicated store, and a dead MinIO node's object locks
(they expire after about a minute); FAST gives up after 50 ms."""


@dataclass(frozen=True)
class Variant:
    """One strategy configuration the protocol tests run under."""

    id: str
    make: Callable[[], Strategy]
    user_keys: bool = False

    @property
    def two_pc(self) -> bool:
        return self.id == "2pc"

    @property
    def transactional(self) -> bool:
        return self.make().transactional

    @property
    def generated_keys(self) -> bool:
        return self.make().generates_keys()


VARIANTS = [
    Variant("2pc", TwoPhaseCommit),
    Variant("txid-check", TxidCheck),
    Variant("idempotent-generated", Idempotent),
    Variant("idempotent-id", lambda: Idempotent(["id"]), user_keys=True),
]
NON_2PC = [v for v in VARIANTS if not v.two_pc]


def make_rows(batch_id: int, n: int = 9, *, duplicate: bool = True, salt: str = "") -> list[dict[str, Any]]:
    """Rows of one batch: unique ids, some null tags, plus (``duplicate``) one exact duplicate row."""
    rows: list[dict[str, Any]] = [
        {
            "id": batch_id * 100 + i,
            "name": f"b{batch_id}-r{i}{salt}",
            "amount": round(i * 1.25 + batch_id, 2),
            "tag": None if i % 4 == 0 else f"t{i % 3}",
        }
        for i in range(n)
    ]
    if duplicate:
        rows.append(dict(rows[1]))
    return rows


def chunks(rows: Sequence[dict[str, Any]], size: int) -> list[pa.RecordBatch]:
    """``rows`` as record batches of at most ``size`` rows, with the fixed schema."""
    return [pa.RecordBatch.from_pylist(list(rows[i : i + size]), schema=SCHEMA) for i in range(0, len(rows), size)]


class MemoryBatch:
    """An in-memory :class:`~eosink.coordinator.BatchInput`: ``participants`` shares of record batches.

    ``write`` runs one participant per share, like ``SparkBatch`` (and, for generated keys,
    first re-splits the rows by row hash, as ``SparkBatch`` repartitions by every column so
    that identical rows meet in one participant). ``speculative`` maps a participant index to
    a number of extra attempts whose committables are dropped (losing speculative duplicates);
    ``task_retries`` re-runs a participant that raised InjectedFault (Spark retrying a task).
    """

    def __init__(
        self,
        rows: Sequence[dict[str, Any]],
        *,
        participants: int = 3,
        chunk: int = 2,
        speculative: dict[int, int] | None = None,
        task_retries: int = 0,
    ) -> None:
        self.rows = [dict(r) for r in rows]
        self.participants = participants
        self.chunk = chunk
        self.speculative = dict(speculative or {})
        self.task_retries = task_retries
        self.writes = 0
        self.fingerprints = 0
        self.attempts = 0

    def shares(self, by_hash: bool = False) -> list[list[pa.RecordBatch]]:
        """The participants' shares: contiguous slices, or (``by_hash``) rows grouped by row hash."""
        p = self.participants
        if by_hash and self.rows:
            hashes = row_hashes(pa.RecordBatch.from_pylist(self.rows, schema=SCHEMA))
            groups: list[list[dict[str, Any]]] = [[] for _ in range(p)]
            for row, h in zip(self.rows, hashes, strict=True):
                groups[int(h) % p].append(row)
        else:
            size = -(-len(self.rows) // p) if self.rows else 0
            groups = [self.rows[i * size : (i + 1) * size] for i in range(p)]
        return [chunks(g, self.chunk) for g in groups]

    def write(self, plan: WritePlan) -> list[Committable]:
        return self.write_many([plan])[0]

    def write_many(self, plans: Sequence[WritePlan]) -> list[list[Committable]]:
        """One pass: each participant writes its share into the sink of every plan (a fan-out's write)."""
        self.writes += 1
        out: list[list[Committable]] = [[] for _ in plans]
        for i, share in enumerate(self.shares(by_hash=any(p.generate_keys for p in plans))):
            for n, committable in enumerate(self._attempt(plans, i, share)):
                if committable is not None:
                    out[n].append(committable)
            for _ in range(self.speculative.get(i, 0)):
                self.attempts += 1
                run_participants(plans, i, share)  # the losing duplicate: its committables are dropped
        return out

    def _attempt(self, plans: Sequence[WritePlan], i: int, share: list[pa.RecordBatch]) -> list[Committable | None]:
        for attempt in range(self.task_retries + 1):
            self.attempts += 1
            try:
                return run_participants(plans, i, share)
            except InjectedFault:
                if attempt == self.task_retries:
                    raise
        raise AssertionError("unreachable")

    def fingerprint(self, version: int) -> Fingerprint:
        self.fingerprints += 1
        return self.expected_fingerprint(version)

    def expected_fingerprint(self, version: int = FINGERPRINT_VERSION) -> Fingerprint:
        """The batch's fingerprint, computed without counting as a call by the coordinator."""
        return sum((fingerprint_participant(s, version) for s in self.shares()), Fingerprint(version=version))


def batches_for(variant: Variant, n: int = 4, **kwargs: Any) -> list[MemoryBatch]:
    """``n`` batches of test data; exact duplicate rows only where the strategy keeps them apart."""
    return [MemoryBatch(make_rows(b, duplicate=not variant.user_keys), **kwargs) for b in range(n)]


def canon(rows: Sequence[dict[str, Any]]) -> Counter[str]:
    """The multiset of rows (generated keys removed), comparable whatever the order."""
    return Counter(json.dumps({k: v for k, v in r.items() if k != KEY_COLUMN}, sort_keys=True) for r in rows)


# -- Spark's checkpoint ------------------------------------------------------------------------


class FakeCheckpoint:
    """A Spark checkpoint directory, written the way Spark writes it."""

    def __init__(self, root: Path, query_id: str | None = None, *, metadata: bool = True) -> None:
        self.root = root
        self.query_id = query_id or str(uuid.uuid4())
        root.mkdir(parents=True, exist_ok=True)
        if metadata:
            (root / "metadata").write_text(json.dumps({"id": self.query_id}) + "\n")

    def write_offsets(self, batch_id: int) -> None:
        """``offsets/N``, written once before the batch runs (a replay reuses it)."""
        path = self.root / "offsets" / str(batch_id)
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            path.write_text("v1\n" + json.dumps({"batchTimestampMs": self.timestamp_ms(batch_id)}) + "\n{}\n")

    @staticmethod
    def timestamp_ms(batch_id: int) -> int:
        return BASE_TS_MS + 1000 * batch_id

    def write_commit(self, batch_id: int) -> None:
        """``commits/N``: Spark's promise never to replay the batch."""
        path = self.root / "commits" / str(batch_id)
        path.parent.mkdir(exist_ok=True)
        path.write_text('v1\n{"nextBatchWatermarkMs":0}\n')

    def has_commit(self, batch_id: int) -> bool:
        return (self.root / "commits" / str(batch_id)).exists()

    def spark(self) -> SparkCheckpoint:
        return SparkCheckpoint(self.root)


def run_in_spark_order(engine: Any, ckpt: FakeCheckpoint, batches: Sequence[Any], *, two_pc: bool) -> None:
    """Every batch Spark has not committed, in order, around ``engine`` (a Coordinator or a FanOut): offsets,
    foreachBatch, commit log, then (2pc) what the commit-log watcher does; then make sure recovery ran."""
    for batch_id, batch in enumerate(batches):
        if ckpt.has_commit(batch_id):
            continue
        ckpt.write_offsets(batch_id)
        engine.process(batch_id, batch)
        ckpt.write_commit(batch_id)
        if two_pc:
            engine.commit_ready()
    engine.start()


class NoWatcherCoordinator(Coordinator):
    """The Coordinator without its background commit-log watcher thread.

    Tests call ``commit_ready()`` where the watcher would have, so every interleaving is
    deterministic (and fault points never fire in a thread). One test runs the real watcher.
    """

    watch_in_background = False


C = TypeVar("C")


class SparkOrderDriver(Generic[C]):
    """Spark's order of events (offsets, foreachBatch, commit log, then the 2PC commit) around a real
    :class:`NoWatcherCoordinator`; :meth:`restart` is a new driver process: a new sink from the
    configuration, a new Coordinator, the same :class:`FakeCheckpoint` and app_id."""

    def __init__(
        self, root: Path, variant: Variant, config: C, make_sink: Callable[[C], Sink[Any]], app_id: str = "app_bad"
    ) -> None:
        self.variant, self.config, self.make_sink, self.app_id = variant, config, make_sink, app_id
        self.ckpt = FakeCheckpoint(root / "checkpoint")
        self.coordinator = self._new()

    def _new(self) -> Coordinator:
        return NoWatcherCoordinator(
            self.make_sink(self.config), self.app_id, self.variant.make(), self.ckpt.spark(), FAST
        )

    def run(self, batches: Sequence[MemoryBatch]) -> None:
        """Process every batch Spark has not committed, in order; then make sure recovery ran."""
        run_in_spark_order(self.coordinator, self.ckpt, batches, two_pc=self.variant.two_pc)

    def fail(
        self, batches: Sequence[MemoryBatch], error: type[EosinkError] | tuple[type[EosinkError], ...]
    ) -> EosinkError:
        """Run until the query stops; the error, whose class must be exactly ``error`` (or one of them)."""
        allowed = error if isinstance(error, tuple) else (error,)
        names = " or ".join(e.__name__ for e in allowed)
        try:
            self.run(batches)
        except EosinkError as exc:
            if type(exc) not in allowed:
                raise AssertionError(f"expected {names}, got {type(exc).__name__}: {exc}") from exc
            return exc
        raise AssertionError(f"expected {names}, but every batch ran")

    def restart(self, config: C | None = None) -> None:
        """Drop the stopped driver and its sink; a new driver (new sink, new Coordinator), same checkpoint."""
        with contextlib.suppress(Exception):
            self.coordinator.sink.close()  # a dead driver commits nothing more: no Coordinator.close()
        self.config = config if config is not None else self.config
        self.coordinator = self._new()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.coordinator.sink.close()


class PatientDriver(SparkOrderDriver[C]):
    """:class:`SparkOrderDriver` with :data:`PATIENT` retries: for stores that fail over mid-batch."""

    def _new(self) -> Coordinator:
        return NoWatcherCoordinator(
            self.make_sink(self.config), self.app_id, self.variant.make(), self.ckpt.spark(), PATIENT
        )


S = TypeVar("S", bound=Sink[Any])


def first_status_meets(base: type[S], fault: Callable[[], object]) -> type[S]:
    """``base`` whose first ``commit_status`` call (the coordinator asking after a lost commit reply) runs ``fault``
    first: a failover, say, between the lost reply and the look that settles it."""
    fired: list[bool] = []

    class Failing(base):  # type: ignore[misc,valid-type]
        def commit_status(self, batch: Any, committables: Any) -> Any:
            if not fired:
                fired.append(True)
                fault()
            return super().commit_status(batch, committables)

    Failing.__name__ = f"{base.__name__}AtFirstStatus"
    return Failing


def wait_until(predicate: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    """Poll ``predicate`` until it holds or ``timeout_s`` passes (bounded; no fixed sleeps)."""
    return _wait_until(predicate, timeout_s, interval_s=0.002, max_interval_s=0.05)
