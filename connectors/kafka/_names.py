"""The names the Kafka sink gives things: transactional ids, progress-topic keys, committable ids.

Per app_id (``tag`` is the app_id made safe, plus a hash of the exact app_id, so ids that differ
only in case or punctuation never share a name)::

    <prefix>.<tag>.fence                      fence(): its producer id and epoch are the writer epoch
    <prefix>.<tag>.bundles                    the coordinator's bundle transactions
    <prefix>.<tag>.p<n>.<slot>                a participant's data transaction

The data transactional ids are one bounded pool per app_id, the same for every writer epoch:
participant ``n`` (a partition of the batch) and a ``slot`` that tells concurrent attempts of
one participant apart: the Spark task's attempt number (``a0`` for a first attempt). So an
app_id keeps at most (participants x slots + 2) ids on the brokers, however many batches and
writers it has had (a broker remembers every id for ``transactional.id.expiration.ms``, 7 days
by default). Reusing an id re-initialises it, which
aborts its open transaction, so an id is reused only once nothing can still commit its last
transaction: a driver settles batch N before batch N+1 writes (every strategy), and recovery
settles a dead driver's work before the first batch of the next. A zombie writer's open
transaction on an id is aborted by the new writer's initialisation, and its producer epoch is
then too old for EndTxn. As a last guard, ``begin`` passes over an id whose transaction is still
open (``a0r1``, ``a0r2``, ...) instead of initialising it: leftovers that recovery has not settled
yet are never destroyed. docs/design.md ("Kafka: one pool of transactional ids") says why this
keeps fencing whole, and what a zombie task can still do.

Earlier versions of eosink put the writer epoch into data ids (``<prefix>.<tag>.e<epoch>.p<n>.<slot>``,
a new pool per writer); those ids are still recognised, so that work such a writer left in doubt is
recovered after an upgrade.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eosink._rowhash import stable_u64

__all__ = [
    "BUNDLE_CLIENT_ID",
    "COMMIT_REQUEST",
    "TxnName",
    "app_tag",
    "app_txid_prefix",
    "bundle_key",
    "bundle_txid",
    "fence_txid",
    "marker_key",
    "parse_txid",
    "task_slot",
]

BUNDLE_CLIENT_ID = "eosink-bundles"
"""The client id that ends bundle transactions: its EndTxn is the batch's commit request."""

COMMIT_REQUEST = re.compile(rb"\x00\x1a\x00\x03.{4}\x00\x0e" + BUNDLE_CLIENT_ID.encode(), re.DOTALL)
"""The batch's commit request on the wire (for fault proxies): an EndTxn v3 (api key 26) request
header whose client id is :data:`BUNDLE_CLIENT_ID`."""

_SAFE = re.compile(r"[^A-Za-z0-9_-]")


def app_tag(app_id: str) -> str:
    """A name-safe, collision-free stand-in for ``app_id`` (readable prefix + 64-bit hash)."""
    return f"{_SAFE.sub('_', app_id)[:32]}-{stable_u64(app_id):016x}"


def fence_txid(prefix: str, app_id: str) -> str:
    return f"{prefix}.{app_tag(app_id)}.fence"


def bundle_txid(prefix: str, app_id: str) -> str:
    return f"{prefix}.{app_tag(app_id)}.bundles"


def app_txid_prefix(prefix: str, app_id: str) -> str:
    """Every transactional id of ``app_id`` (data, fence and bundles) starts with this."""
    return f"{prefix}.{app_tag(app_id)}."


@dataclass(frozen=True)
class TxnName:
    """A participant's data transactional id, taken apart (``epoch``: only in the names of earlier versions)."""

    app_tag: str
    participant: int
    slot: str
    epoch: int | None = None

    def txid(self, prefix: str) -> str:
        era = "" if self.epoch is None else f".e{self.epoch}"
        return f"{prefix}.{self.app_tag}{era}.p{self.participant}.{self.slot}"


_DATA = re.compile(r"^(?:e(?P<epoch>\d+)\.)?p(?P<participant>\d+)\.(?P<slot>[A-Za-z0-9]+)$")


def parse_txid(prefix: str, app_id: str, txid: str) -> TxnName | None:
    """The parts of one of ``app_id``'s data transactional ids; None for any other id."""
    mine = app_txid_prefix(prefix, app_id)
    found = _DATA.match(txid[len(mine) :]) if txid.startswith(mine) else None
    if found is None:
        return None
    epoch = found["epoch"]
    return TxnName(app_tag(app_id), int(found["participant"]), found["slot"], None if epoch is None else int(epoch))


def task_slot(retry: int = 0) -> str:
    """Which pool slot an attempt takes: ``a<n>`` for Spark's task attempt number n (``a0`` outside Spark, where
    attempts of one participant run one after another); ``retry`` passes over slots whose transaction is still
    open (``a0r1``, ...)."""
    try:
        from pyspark import TaskContext
    except ImportError:
        context = None
    else:
        context = TaskContext.get()
    base = f"a{context.attemptNumber()}" if context is not None else "a0"
    return f"{base}r{retry}" if retry else base


def bundle_key(app_id: str, batch_id: int) -> bytes:
    """The progress-topic key of a batch's bundle; zero-padded, so keys sort as the numbers do."""
    return f"{app_tag(app_id)}|bundle|{batch_id:020d}".encode()


def marker_key(txid: str) -> bytes:
    """The progress-topic key of a data transaction's marker (one per transactional id: compaction keeps the last)."""
    return f"txn|{txid}".encode()


def committable_id(txid: str, producer_id: int, producer_epoch: int) -> str:
    """A data transaction's committable id: its transactional id and the producer id and epoch that wrote it."""
    return f"{txid}@{producer_id}.{producer_epoch}"
