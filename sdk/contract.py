"""The sink contract: what a sink implements so that eosink can write to it exactly once.

A batch travels through the contract like this::

    executors (participants)                 driver (coordinator)
    ------------------------                 --------------------
    txn = begin(task)
    write(txn, record_batch) ...
    committable = pre_commit(txn)   ---->    commit(batch, committables, bundle)
                                             abort(committables)
                                             commit_status(batch, committables)
                                             fetch_last_bundle(app_id)
                                             recover(app_id) / fence(app_id)

Rules every sink obeys (the contract suite checks them):

* ``pre_commit`` makes written data durable and invisible (unless the task is not
  transactional); a later ``commit`` from another process must be able to succeed.
* ``commit`` writes the batch's bundle in the same atomic step as its data, or, for
  sinks without atomic batch visibility, last, once every committable is visible.
* ``commit`` and ``abort`` are idempotent; aborting committed work raises
  :class:`~eosink.errors.CommitAbortedError`.
* A commit whose outcome is unknown raises :class:`~eosink.errors.AmbiguousCommitError`;
  ``commit_status`` answers the truth, never a guess.
* ``fence`` hands out a new writer epoch; ``pre_commit`` and ``commit`` of an older
  epoch raise :class:`~eosink.errors.FencedError`.

The value types are frozen, picklable and JSON-serialisable (``to_json`` / ``from_json``).
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "BatchRef",
    "Bundle",
    "Capabilities",
    "CommitStatus",
    "Committable",
    "Fingerprint",
    "Sink",
    "TaskRef",
    "missing_predecessors",
]

_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class BatchRef:
    """One Spark micro-batch of one (query, sink) pair."""

    app_id: str
    batch_id: int

    def to_json(self) -> dict[str, Any]:
        return {"app_id": self.app_id, "batch_id": self.batch_id}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BatchRef:
        return cls(str(data["app_id"]), int(data["batch_id"]))

    def __str__(self) -> str:
        return f"{self.app_id}#{self.batch_id}"


@dataclass(frozen=True)
class Fingerprint:
    """Order-independent summary of a batch's rows: a count and two sums of row hashes.

    Participants compute theirs while writing; the coordinator adds them up. ``version`` is the
    row-hash version the sums were taken with (see ``eosink._rowhash``): fingerprints of
    different versions are never equal, except that every empty fingerprint equals every other.
    Version 0 holds the row count only (two-phase commit's, see :mod:`eosink.fingerprint`).
    """

    rows: int = 0
    sum1: int = 0
    sum2: int = 0
    version: int = 1

    def __add__(self, other: Fingerprint) -> Fingerprint:
        if not other.rows:
            return self
        if not self.rows:
            return other
        if self.version != other.version:
            raise ValueError(f"cannot add fingerprints of row-hash versions {self.version} and {other.version}")
        return Fingerprint(
            self.rows + other.rows,
            (self.sum1 + other.sum1) & _MASK64,
            (self.sum2 + other.sum2) & _MASK64,
            self.version,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Fingerprint):
            return NotImplemented
        if not self.rows and not other.rows:
            return True
        return (self.rows, self.sum1, self.sum2, self.version) == (other.rows, other.sum1, other.sum2, other.version)

    def __hash__(self) -> int:
        return hash((self.rows, self.sum1, self.sum2, self.version) if self.rows else 0)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"rows": self.rows, "sum1": f"{self.sum1:016x}", "sum2": f"{self.sum2:016x}"}
        if self.version != 1:  # fingerprints stored before versions existed are version 1
            data["version"] = self.version
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Fingerprint:
        return cls(
            int(data["rows"]), int(str(data["sum1"]), 16), int(str(data["sum2"]), 16), int(data.get("version", 1))
        )

    def __str__(self) -> str:
        if self.version == 0:
            return f"{self.rows} rows (count only)"
        suffix = f" (v{self.version})" if self.version != 1 else ""
        return f"{self.rows} rows/{self.sum1:016x}{self.sum2:016x}{suffix}"


def missing_predecessors(follows: int | None, newest: int | None) -> tuple[int, ...]:
    """The batches from the one after ``newest`` (None: from ``follows``) to ``follows`` that a sink lacks when its
    newest committed batch is ``newest``; () when it holds ``follows``, or when nothing is followed."""
    if follows is None or (newest is not None and newest >= follows):
        return ()
    return tuple(range(follows if newest is None else newest + 1, follows + 1))


@dataclass(frozen=True)
class TaskRef:
    """What a participant needs to write its share of a batch.

    ``attempt`` is unique per task attempt (never derived from the partition id alone:
    Spark may re-partition a replay). ``upsert_keys`` asks the sink to upsert by these
    columns instead of appending; ``transactional=False`` lets ``pre_commit`` make the
    data visible at once (the idempotent strategy). ``strategy`` names the strategy
    (``2pc``, ``txid-check``, ``idempotent``, or empty when unknown): a sink may keep work
    durable and invisible more cheaply when it knows the commit follows inline (txid-check)
    instead of after Spark's commit log, e.g. without a prepared transaction.
    """

    batch: BatchRef
    epoch: int
    participant: int
    attempt: str
    upsert_keys: tuple[str, ...] | None = None
    transactional: bool = True
    strategy: str = ""
    follows: int | None = None
    """The batch the writer last committed (the batch's :attr:`Bundle.follows`). A sink whose participants make
    rows visible as they write (``transactional=False``) checks it before the first row, in the participant's own
    transaction, where it can: a server that lost that batch must not show rows of this one."""

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "batch": self.batch.to_json(),
            "epoch": self.epoch,
            "participant": self.participant,
            "attempt": self.attempt,
            "upsert_keys": list(self.upsert_keys) if self.upsert_keys is not None else None,
            "transactional": self.transactional,
            "strategy": self.strategy,
        }
        if self.follows is not None:
            data["follows"] = self.follows
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TaskRef:
        keys = data.get("upsert_keys")
        follows = data.get("follows")
        return cls(
            BatchRef.from_json(data["batch"]),
            int(data["epoch"]),
            int(data["participant"]),
            str(data["attempt"]),
            tuple(keys) if keys is not None else None,
            bool(data.get("transactional", True)),
            str(data.get("strategy", "")),
            None if follows is None else int(follows),
        )


@dataclass(frozen=True)
class Committable:
    """The small record a participant returns from ``pre_commit``: never the data itself.

    ``id`` names the prepared work uniquely within the sink; ``payload`` holds what the
    sink needs to commit or abort it later (a gid, an upload id, a temp path, ...).
    """

    batch: BatchRef
    epoch: int
    participant: int
    id: str
    rows: int = 0
    fingerprint: Fingerprint = field(default_factory=Fingerprint)
    payload: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "batch": self.batch.to_json(),
            "epoch": self.epoch,
            "participant": self.participant,
            "id": self.id,
            "rows": self.rows,
            "fingerprint": self.fingerprint.to_json(),
            "payload": dict(self.payload),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Committable:
        return cls(
            BatchRef.from_json(data["batch"]),
            int(data["epoch"]),
            int(data["participant"]),
            str(data["id"]),
            int(data.get("rows", 0)),
            Fingerprint.from_json(data["fingerprint"]) if "fingerprint" in data else Fingerprint(),
            dict(data.get("payload") or {}),
        )


@dataclass(frozen=True)
class Bundle:
    """The marker of a committed batch, stored by the sink atomically with the batch's data."""

    batch: BatchRef
    epoch: int
    fingerprint: Fingerprint
    committables: tuple[str, ...] = ()
    checkpoint_id: str | None = None
    strategy: str = ""
    follows: int | None = None
    """The newest batch of the app_id the writer knew committed when it recorded this one (None: none).

    A sink that can tell refuses to commit a batch whose predecessor it no longer holds
    (:class:`~eosink.errors.CommittedWorkLostError`): its server lost committed batches, say in a
    failover, and committing on top of the gap would hide the loss for good."""

    def missing_predecessors(self, newest: int | None) -> tuple[int, ...]:
        """The batches up to :attr:`follows` that a sink whose newest committed batch of the app_id is ``newest``
        (None: none) no longer holds; () when it holds :attr:`follows` (or the bundle follows nothing). Not empty:
        the sink lost committed batches, and must refuse this one (:class:`~eosink.errors.CommittedWorkLostError`)."""
        return missing_predecessors(self.follows, newest)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "batch": self.batch.to_json(),
            "epoch": self.epoch,
            "fingerprint": self.fingerprint.to_json(),
            "committables": list(self.committables),
            "checkpoint_id": self.checkpoint_id,
            "strategy": self.strategy,
        }
        if self.follows is not None:  # bundles stored before the field existed read back the same
            data["follows"] = self.follows
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Bundle:
        follows = data.get("follows")
        return cls(
            BatchRef.from_json(data["batch"]),
            int(data["epoch"]),
            Fingerprint.from_json(data["fingerprint"]),
            tuple(str(c) for c in data.get("committables", ())),
            data.get("checkpoint_id"),
            str(data.get("strategy", "")),
            None if follows is None else int(follows),
        )


class CommitStatus(enum.Enum):
    """The fate of a batch's commit, as the sink knows it."""

    COMMITTED = "committed"
    """The batch and its bundle are visible."""
    ABORTED = "aborted"
    """Some prepared work is gone: the batch can no longer be committed."""
    PREPARED = "prepared"
    """In doubt but intact: ``commit`` will complete it (also after a partial commit)."""
    IN_PROGRESS = "in_progress"
    """The sink is still deciding (a commit is running); ask again."""


@dataclass(frozen=True)
class Capabilities:
    """What a sink can do, as data: strategies and the contract suite adapt to it."""

    supports_prepare: bool = True
    """``pre_commit`` survives the writing process; ``commit`` may run elsewhere, later."""
    supports_txid_status: bool = True
    """``commit_status`` can tell the fate of a commit whose reply was lost."""
    supports_keys: bool = False
    """Upsert by key columns (needed by the idempotent strategy and ``upsert`` mode)."""
    atomic_batch_visibility: bool = False
    """``commit`` makes a whole batch visible in one atomic step."""
    supports_recover: bool = True
    """``recover`` can list in-doubt work left by crashed writers."""
    begin_before_rows: bool = False
    """A participant may call ``begin`` before its first row arrives, while Spark is still reading its input, so that
    the round trips of ``begin`` overlap the read. An attempt that then gets no rows pre-commits its empty
    transaction, which the batch commits with the others: only for sinks where that is cheap and leaves nothing
    a reader sees (Kafka: two progress markers). False: ``begin`` runs at the first row, as it always may."""

    def to_json(self) -> dict[str, bool]:
        return {f.name: bool(getattr(self, f.name)) for f in fields(self)}


TxnT = TypeVar("TxnT")


class Sink(ABC, Generic[TxnT]):
    """A destination that eosink can write to exactly once.

    Instances are pickled to executors: keep connections out of the pickled state
    (open them lazily) and never put secrets into ``repr``.
    """

    capabilities: Capabilities = Capabilities()
    """Declared per class, or per instance when options change what the sink can do."""

    lost_work_hint: str = "the sink discarded prepared work of the batch before eosink committed it."
    """What, in this sink, most likely makes prepared work vanish (``PreparedWorkLostError`` says it)."""

    def setup(self, app_id: str) -> None:
        """Prepare the sink for ``app_id`` on the driver (DDL, control tables). Default: nothing."""

    def close(self) -> None:
        """Release connections held by this process. Default: nothing."""

    def server_identity(self) -> str | None:
        """Who answers for the sink now, as its server names itself (PostgreSQL: the cluster's system identifier
        and timeline), for the message that reports committed batches the sink lost. Default: None (cannot tell)."""
        return None

    def bind_schema(self, schema: pa.Schema) -> None:
        """The stream's Arrow schema, handed over on the driver before ``setup`` and the first batch (a sink
        that creates its table keeps it for that). Default: nothing."""

    def preflight(
        self, schema: pa.Schema | None, *, strategy: str, upsert_keys: tuple[str, ...] | None, transactional: bool
    ) -> None:
        """Check, on the driver before the stream starts and without writing, what the first batch would find
        wrong: the target (it exists, or will be created) and whether its columns take the stream's ``schema``
        (None: unknown), and whether the server offers what ``strategy``'s participants need (PostgreSQL's
        prepared transactions for ``2pc``). Raise the eosink error, with its fix. Default: nothing (the first
        batch finds it). Runs after :meth:`setup`, which reaches the server with the sink's credentials."""

    @abstractmethod
    def fence(self, app_id: str) -> int:
        """Register a new writer of ``app_id`` and return its epoch, higher than any before."""

    # -- participant side (executors) ------------------------------------------------------

    @abstractmethod
    def begin(self, task: TaskRef) -> TxnT:
        """Start writing one participant's share of a batch."""

    @abstractmethod
    def write(self, txn: TxnT, data: pa.RecordBatch) -> None:
        """Write one Arrow record batch into the transaction."""

    @abstractmethod
    def pre_commit(self, txn: TxnT) -> Committable:
        """Make the written data durable (and invisible, if transactional); return its committable."""

    # -- coordinator side (driver) ---------------------------------------------------------

    @abstractmethod
    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """Make the batch visible together with its bundle. Idempotent."""

    @abstractmethod
    def abort(self, committables: Sequence[Committable]) -> None:
        """Discard prepared work. Idempotent; aborting committed work raises CommitAbortedError."""

    @abstractmethod
    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        """The bundle of the newest committed batch of ``app_id``, or None."""

    @abstractmethod
    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        """The truth about a batch's commit, for resolving a lost commit reply."""

    @abstractmethod
    def recover(self, app_id: str) -> list[Committable]:
        """Every in-doubt (prepared, uncommitted) committable of ``app_id``, and of no other."""
