"""The names the Kafka sink gives things: transactional ids, progress-topic keys, committable ids.

Per app_id (``tag`` is the app_id made safe, plus a hash of the exact app_id, so ids that differ
only in case or punctuation never share a name)::

    <prefix>.<tag>.fence                      fence(): its producer id and epoch are the writer epoch
    <prefix>.<tag>.bundles                    the coordinator's bundle transactions
    <prefix>.<tag>.e<epoch>.p<n>.<slot>       a participant's data transaction

A data transactional id is reused batch after batch (a bounded pool per writer epoch and
participant); ``slot`` tells concurrent attempts of one participant apart: the Spark task's
attempt number (``a0`` for a first attempt), or, outside Spark, the attempt id. Reusing an id
re-initialises it, which aborts its open transaction, so an id is reused only once nothing can
still commit its last transaction: a driver settles batch N before batch N+1 writes (every
strategy), recovery settles a dead driver's work before the first batch, and a new driver's
epoch gives it ids of its own (a zombie's never collide with it). As a last guard, ``begin``
passes over an id whose transaction is still open (``a0r1``, ``a0r2``, ...) instead of
initialising it: leftovers that recovery has not settled yet are never destroyed.
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


def data_txid_prefix(prefix: str, app_id: str) -> str:
    """Every data transactional id of ``app_id`` starts with this."""
    return f"{prefix}.{app_tag(app_id)}.e"


@dataclass(frozen=True)
class TxnName:
    """A participant's data transactional id, taken apart."""

    app_tag: str
    epoch: int
    participant: int
    slot: str

    def txid(self, prefix: str) -> str:
        return f"{prefix}.{self.app_tag}.e{self.epoch}.p{self.participant}.{self.slot}"


_TXID = re.compile(r"^(?P<prefix>.+)\.(?P<tag>[^.]+)\.e(?P<epoch>\d+)\.p(?P<participant>\d+)\.(?P<slot>[A-Za-z0-9]+)$")


def parse_txid(prefix: str, app_id: str, txid: str) -> TxnName | None:
    """The parts of one of ``app_id``'s data transactional ids; None for any other id."""
    found = _TXID.match(txid)
    if found is None or found["prefix"] != prefix or found["tag"] != app_tag(app_id):
        return None
    return TxnName(found["tag"], int(found["epoch"]), int(found["participant"]), found["slot"])


def task_slot(attempt: str, retry: int = 0) -> str:
    """Which pool slot an attempt takes: Spark's task attempt number, else the attempt id; ``retry``
    passes over slots whose transaction is still open."""
    try:
        from pyspark import TaskContext
    except ImportError:
        context = None
    else:
        context = TaskContext.get()
    base = f"a{context.attemptNumber()}" if context is not None else "x" + re.sub(r"[^A-Za-z0-9]", "", attempt)[:40]
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
