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

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from eosink.connectors.kafka import _wire
from eosink.connectors.kafka._names import app_tag, bundle_key, marker_key
from eosink.contract import BatchRef, Bundle
from eosink.errors import ConfigurationError

__all__ = ["BUNDLES", "MARKERS", "TAIL", "WINDOW", "Marker", "ProgressView", "ensure_progress_topic", "read_markers"]

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
    from kafka.errors import TopicAlreadyExistsError, TopicAuthorizationFailedError

    found = _partitions(admin, topic)
    if found is None:
        try:
            admin.create_topics(
                {topic: {"num_partitions": 2, "replication_factor": -1, "configs": TOPIC_CONFIG}},
                wait_for_metadata=True,
            )
        except TopicAlreadyExistsError:
            pass
        except TopicAuthorizationFailedError:
            raise TopicAuthorizationFailedError(f"CreateTopics of {topic!r} was refused") from None
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
    from kafka.errors import TopicAuthorizationFailedError, UnknownTopicOrPartitionError, for_code

    deadline = time.monotonic() + settle_s
    while True:
        try:
            described = admin.describe_topics([topic])
        except UnknownTopicOrPartitionError:
            described = []
        mine = [t for t in described if t.get("name") == topic]
        code = int(mine[0].get("error_code") or 0) if mine else UnknownTopicOrPartitionError.errno
        if code == TopicAuthorizationFailedError.errno:
            raise TopicAuthorizationFailedError(f"Describe of {topic!r} was refused")
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


TAIL = 256
"""Offsets of the bundles partition a new view reads first, back from its end. An app_id's newest
bundle is its last record there (batches commit in order), so one that wrote lately is found in
this tail; otherwise the view reads twice as far back, and again, until it finds one or reaches
the log's start. Finding the last bundle costs what the app_id's idleness costs, never history."""


@dataclass
class ProgressView:
    """This process's view of the bundles partition: a tail of it, read forward incrementally (thread-safe).

    ``refresh(admin, app_id, batch_id)`` reads what was committed since the last refresh, and reads
    further back until the view holds ``app_id``'s newest bundle (and, with ``batch_id``, reaches
    back to that batch), or the whole log; ``refresh(admin)`` alone reads the whole log.
    """

    topic: str
    _by_tag: dict[str, dict[int, Bundle]] = field(default_factory=dict)
    _low: int | None = None
    """The first offset read (None: nothing read yet); every offset from it to ``_next`` is applied."""
    _next: int = 0
    _start: int = 0
    """The log's start offset, when the view last looked."""
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def refresh(self, admin: Any, app_id: str | None = None, batch_id: int | None = None) -> None:
        """Read the bundles committed since the last refresh, and as far back as ``app_id`` (or everyone) needs."""
        with self._lock:
            if self._low is None:
                self._start, end, _ = _wire.log_offsets(admin, self.topic, BUNDLES)
                self._read_from(admin, self._start if app_id is None else max(self._start, end - TAIL))
            else:
                self._read_forward(admin)
            while (low := self._low) is not None and low > self._start and not self._covers(app_id, batch_id):
                self._start = _wire.log_offsets(admin, self.topic, BUNDLES)[0]
                span = 0 if app_id is None else max(TAIL, 2 * (self._next - low))
                self._read_from(admin, max(self._start, self._next - span) if span else self._start)

    def _covers(self, app_id: str | None, batch_id: int | None) -> bool:
        if app_id is None:
            return False
        mine = self._mine(app_id)
        return bool(mine) and (batch_id is None or min(mine) <= batch_id)

    def _read_from(self, admin: Any, low: int) -> None:
        """Forget what was read and read from offset ``low`` to the end."""
        self._by_tag = {}
        self._low = self._next = low
        self._read_forward(admin)

    def _read_forward(self, admin: Any) -> None:
        part = _wire.read_log(admin, self.topic, BUNDLES, self._next)
        for record in part.committed:
            self._apply(record)
        # an open transaction's records are read again next time, when its marker is there
        # (committed records after it are applied twice: harmless)
        first_open = min((rs[0].offset for rs in part.open.values() if rs), default=None)
        self._next = max(self._next, part.high_watermark if first_open is None else first_open)

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
        """Every app_id with a bundle in the view (after ``refresh(admin)``: every app_id with a kept bundle)."""
        return {b.batch.app_id for found in self._by_tag.values() for b in found.values()}

    def _mine(self, app_id: str) -> dict[int, Bundle]:
        """The app_id's bundles (exactly its own: the tag's hash could collide, the app_id cannot)."""
        found = self._by_tag.get(app_tag(app_id), {})
        return {n: b for n, b in found.items() if b.batch.app_id == app_id}

    def bundle(self, app_id: str, batch_id: int) -> Bundle | None:
        return self._mine(app_id).get(batch_id)

    def bundles(self, app_id: str) -> list[Bundle]:
        """The app_id's bundles in the view, oldest batch first."""
        mine = self._mine(app_id)
        return [mine[n] for n in sorted(mine)]

    def last(self, app_id: str) -> Bundle | None:
        mine = self._mine(app_id)
        return mine[max(mine)] if mine else None


MARKER_SLACK_MS = 30_000
"""How far before an open transaction's start its markers are looked for: records carry the writer's clock,
the transaction's start the broker's (a marker not found so is looked for in the whole partition)."""


def read_markers(admin: Any, topic: str, since_ms: int | None = None) -> tuple[dict[int, list[Marker]], list[Marker]]:
    """Markers of open transactions (by producer id) and of finished ones, in log order.

    ``since_ms``: only what was written after then (less ``MARKER_SLACK_MS``); every marker of a
    transaction that began after ``since_ms`` is among them. None: the whole partition.
    """
    start = 0 if since_ms is None else _wire.log_offsets(admin, topic, MARKERS, since_ms - MARKER_SLACK_MS)[2]
    part = _wire.read_log(admin, topic, MARKERS, start)
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
