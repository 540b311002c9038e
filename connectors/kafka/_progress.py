"""The progress topic: bundles of committed batches and the markers of data transactions.

One compacted topic (``KafkaConfig.progress_topic``), shared by every app_id of the sink, with
two partitions::

    partition 0  bundles   key <tag>|bundle|<batch:020d>   value {"app_id", "bundle"}
                           written by the coordinator's bundle transaction, after the batch's
                           data transactions committed; a tombstone of the key WINDOW batches
                           back rides along, so compaction keeps WINDOW bundles per app_id
    partition 1  markers   key txn|<transactional id>      value {"app_id", "batch_id", "epoch",
                           "participant", "attempt", "state": "begun"|"prepared", "rows"}
                           written by each participant inside its own data transaction, when it
                           begins and when it prepares: recovery reads which batch an open
                           transaction belongs to (an id is reused across batches, so its name
                           cannot say); compaction keeps the last per id

Both are read with :func:`eosink.connectors.kafka._wire.read_log`, which resolves transactions
by their markers: a bundle committed after another transaction that is still open is read at
once (a ``read_committed`` consumer would wait for the open one), and the markers of open
transactions are read where they are.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from eosink.connectors.kafka import _wire
from eosink.connectors.kafka._names import app_tag, bundle_key, marker_key
from eosink.contract import BatchRef, Bundle
from eosink.errors import ConfigurationError

__all__ = ["BUNDLES", "MARKERS", "WINDOW", "Marker", "ProgressView", "ensure_progress_topic"]

BUNDLES = 0
MARKERS = 1
WINDOW = 1000
"""Bundles kept per app_id: commit_status of an older batch answers from the newest bundle."""

TOPIC_CONFIG = {
    "cleanup.policy": "compact",
    "min.cleanable.dirty.ratio": "0.1",
    "segment.ms": "3600000",
    "delete.retention.ms": "604800000",
}


def ensure_progress_topic(admin: Any, topic: str) -> None:
    """Create the progress topic (2 partitions, compacted) if missing; refuse one of another shape."""
    from kafka.errors import TopicAlreadyExistsError

    found = _partitions(admin, topic)
    if found is None:
        with contextlib.suppress(TopicAlreadyExistsError):
            admin.create_topics(
                {topic: {"num_partitions": 2, "replication_factor": -1, "configs": TOPIC_CONFIG}},
                wait_for_metadata=True,
            )
        found = _partitions(admin, topic, created=True)
    if found is None or found < 2:
        raise ConfigurationError(
            f"The progress topic {topic!r} has {found or 0} partition(s); eosink keeps bundles in partition 0 and "
            "transaction markers in partition 1.",
            f"Delete {topic!r} (eosink creates it) or give the sink another KafkaConfig(progress_topic=...).",
        )


def _partitions(admin: Any, topic: str, created: bool = False, settle_s: float = 10.0) -> int | None:
    """How many partitions ``topic`` has; None when it does not exist.

    A topic being created answers "leader not available" (or, once ``created``, "unknown") for a
    moment: ask again for a while.
    """
    from kafka.errors import UnknownTopicOrPartitionError, for_code

    deadline = time.monotonic() + settle_s
    while True:
        try:
            described = admin.describe_topics([topic])
        except UnknownTopicOrPartitionError:
            described = []
        mine = [t for t in described if t.get("name") == topic]
        code = int(mine[0].get("error_code") or 0) if mine else UnknownTopicOrPartitionError.errno
        if code == 0:
            return len(mine[0].get("partitions") or [])
        if (code == UnknownTopicOrPartitionError.errno and not created) or not for_code(code).retriable:
            return None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.1)


def bundle_record(bundle: Bundle) -> tuple[bytes, bytes]:
    """The key and value of ``bundle``'s record."""
    value = json.dumps({"app_id": bundle.batch.app_id, "bundle": bundle.to_json()}, sort_keys=True)
    return bundle_key(bundle.batch.app_id, bundle.batch.batch_id), value.encode()


@dataclass(frozen=True)
class Marker:
    """What a participant wrote about its data transaction, in it."""

    txid: str
    app_id: str
    batch_id: int
    epoch: int
    participant: int
    attempt: str
    state: str
    rows: int
    producer_id: int
    offset: int

    def to_value(self) -> bytes:
        data = {
            "app_id": self.app_id,
            "batch_id": self.batch_id,
            "epoch": self.epoch,
            "participant": self.participant,
            "attempt": self.attempt,
            "state": self.state,
            "rows": self.rows,
        }
        return json.dumps(data, sort_keys=True).encode()


def marker_record(
    txid: str, batch: BatchRef, epoch: int, participant: int, attempt: str, state: str, rows: int
) -> tuple[bytes, bytes]:
    marker = Marker(txid, batch.app_id, batch.batch_id, epoch, participant, attempt, state, rows, -1, -1)
    return marker_key(txid), marker.to_value()


@dataclass
class ProgressView:
    """This process's view of the bundles partition, read incrementally (thread-safe)."""

    topic: str
    _by_tag: dict[str, dict[int, Bundle]] = field(default_factory=dict)
    _next: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self, admin: Any) -> None:
        """Read the bundles committed since the last refresh."""
        with self._lock:
            part = _wire.read_log(admin, self.topic, BUNDLES, self._next)
            for record in part.committed:
                self._apply(record)
            # an open transaction's records are read again next time, when its marker is there
            # (committed records after it are applied twice: harmless)
            first_open = min((rs[0].offset for rs in part.open.values() if rs), default=None)
            self._next = part.high_watermark if first_open is None else first_open

    def _apply(self, record: _wire.LogRecord) -> None:
        key = (record.key or b"").decode(errors="replace")
        tag, _, number = key.rpartition("|bundle|")
        if not tag or not number.isdigit():
            return
        if record.value is None:  # a tombstone of an old bundle
            self._by_tag.get(tag, {}).pop(int(number), None)
            return
        bundle = Bundle.from_json(json.loads(record.value)["bundle"])
        self._by_tag.setdefault(tag, {})[bundle.batch.batch_id] = bundle

    def app_ids(self) -> set[str]:
        """Every app_id with a kept bundle."""
        return {b.batch.app_id for found in self._by_tag.values() for b in found.values()}

    def _mine(self, app_id: str) -> dict[int, Bundle]:
        """The app_id's bundles (exactly its own: the tag's hash could collide, the app_id cannot)."""
        found = self._by_tag.get(app_tag(app_id), {})
        return {n: b for n, b in found.items() if b.batch.app_id == app_id}

    def bundle(self, app_id: str, batch_id: int) -> Bundle | None:
        return self._mine(app_id).get(batch_id)

    def bundles(self, app_id: str) -> list[Bundle]:
        """The app_id's kept bundles, oldest batch first."""
        mine = self._mine(app_id)
        return [mine[n] for n in sorted(mine)]

    def last(self, app_id: str) -> Bundle | None:
        mine = self._mine(app_id)
        return mine[max(mine)] if mine else None

    def lists(self, app_id: str, committable_id: str) -> Bundle | None:
        """The kept bundle of ``app_id`` that commits ``committable_id``, if any."""
        for bundle in self._mine(app_id).values():
            if committable_id in bundle.committables:
                return bundle
        return None


def read_markers(admin: Any, topic: str) -> tuple[dict[int, list[Marker]], list[Marker]]:
    """Markers of open transactions (by producer id) and of finished ones, in log order."""
    part = _wire.read_log(admin, topic, MARKERS, 0)
    open_ = {pid: [m for r in rs if (m := _marker(r)) is not None] for pid, rs in part.open.items()}
    done = [m for r in part.committed if (m := _marker(r)) is not None]
    return open_, done


def _marker(record: _wire.LogRecord) -> Marker | None:
    if record.key is None or record.value is None or not record.key.startswith(b"txn|"):
        return None
    try:
        data = json.loads(record.value)
        return Marker(
            record.key[4:].decode(),
            str(data["app_id"]),
            int(data["batch_id"]),
            int(data["epoch"]),
            int(data["participant"]),
            str(data["attempt"]),
            str(data["state"]),
            int(data.get("rows", 0)),
            record.producer_id,
            record.offset,
        )
    except (ValueError, KeyError, TypeError):
        return None
