"""A judge of what a Kafka sink made visible, that shares no client code with it.

:class:`CommittedReader` reads the sink's topic and its bundles (the progress topic's partition 0) as a
``read_committed`` consumer of confluent-kafka (librdkafka, C), while eosink writes with kafka-python; a
bug in one client's transaction handling cannot hide itself from the other. It polls during a run and after
it, and reports in a :class:`KafkaVerdict`:

* **lost** and **duplicated** rows, against the rows the test expects, as a fresh reader finds them from the
  partitions' start once every writer is done;
* **vanished** rows: read during the run, not found by that fresh read (a committed record a failover took
  back, as a leader elected without it does);
* **torn batches**: a batch's bundle visible while fewer rows are (the bundle is committed after the batch's
  data transactions, so a reader that sees it must see all of them; a record of an attempt that never
  committed shows up as a duplicate or a stranger row); each finding names every data partition's last
  stable offset, high watermark, read position and leader;
* **stuck partitions**: a last stable offset still below the high watermark when every writer is done and
  every fault healed (a hanging transaction: ``read_committed`` readers of the partition wait for ever).

It needs the ``kafka-readers`` extra (``pip install eosink[kafka-readers]``); the tests and the chaos
harness use it as their independent reader.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eosink._audit import ReadVerdict, keyed, tally
from eosink._polling import BackgroundPoll

__all__ = ["CommittedReader", "KafkaVerdict", "canonical"]

BUNDLES = 0
"""The progress topic's partition of bundles (``eosink.connectors.kafka._progress``)."""


def canonical(value: bytes | str) -> str:
    """A JSON record value in one spelling (sorted keys), so the same row compares equal however it was written."""
    return json.dumps(json.loads(value), sort_keys=True)


@dataclass
class KafkaVerdict(ReadVerdict):
    """What the ``read_committed`` reader found (:class:`~eosink._audit.ReadVerdict`), and what only a Kafka reader
    sees."""

    bundles: list[int] = field(default_factory=list)
    truncated: list[str] = field(default_factory=list)
    """Partitions whose log ended, after the run, below an offset this reader had read (a failover took it back)."""
    stuck: dict[str, int] = field(default_factory=dict)
    """Per partition still behind: high watermark minus last stable offset."""

    @property
    def problems(self) -> list[str]:
        found = super().problems
        found += [f"truncated: {t}" for t in self.truncated]
        found += [f"last stable offset stuck on {p} ({lag} records behind)" for p, lag in sorted(self.stuck.items())]
        return found


class CommittedReader(BackgroundPoll):
    """A ``read_committed`` confluent-kafka consumer of ``topic`` (``partitions``) and of ``app_id``'s bundles in
    ``progress_topic`` (None: a writer that keeps no bundles, such as Spark's own Kafka sink); :meth:`poll` reads what
    became visible and checks it, :meth:`start` does so in a thread."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        progress_topic: str | None,
        app_id: str,
        *,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        self.topic, self.progress_topic, self.app_id = topic, progress_topic, app_id
        # A failover's refused connections are expected here; the reader reports what it could not read itself.
        common = {"bootstrap.servers": bootstrap, "log_level": 2, "log.connection.close": False, **(options or {})}
        self._config = {
            **common,
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 1000,
        }
        self._consumer = Consumer({**self._config, "group.id": f"eosink-audit-{uuid.uuid4().hex}"})
        self._common = common
        self._admin = self._new_admin()
        self._data = [TopicPartition(topic, p) for p in range(partitions)]
        self._bundles = [] if progress_topic is None else [TopicPartition(progress_topic, BUNDLES)]
        self._consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in self._all()])
        self.seen: Counter[str] = Counter()
        self._read_to: dict[tuple[str, int], int] = {}
        self._moved_to: dict[tuple[str, int], int] = {}
        """Where :meth:`_truncated` moved the consumer (librdkafka tells no position until a message arrives)."""
        self.rows_by_bundle: dict[int, int] = {}
        self.torn: list[str] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def _new_admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient(self._common)

    def _all(self) -> list[Any]:
        return [*self._data, *self._bundles]

    # -- reading ------------------------------------------------------------------------------------

    def poll(self, timeout_s: float = 30.0) -> None:
        """Read the bundles to their last stable offset, then the data to theirs (taken after the bundles: the
        data of every bundle read is below it); then check that each bundled batch's rows are all visible."""
        with self._lock:
            self._drain(self._bundles, timeout_s)
            self._drain(self._data, timeout_s)
            bundled = sum(self.rows_by_bundle.values())
            visible = sum(self.seen.values())
            if visible >= bundled:
                return
            newest = max(self.rows_by_bundle)
            found = f"bundles up to batch {newest} count {bundled} rows, {visible} rows are visible ({self._where()})"
            if found not in self.torn:
                self.torn.append(found)

    def _where(self) -> str:
        """Each data partition as this reader sees it now: last stable offset, high watermark, its position and the
        leader it knows (what tells a transaction still open from offsets that lag after a leadership change)."""
        try:
            stable = self._offsets(self._data, "READ_COMMITTED", 10.0)
            high = self._offsets(self._data, "READ_UNCOMMITTED", 10.0)
            at = {(tp.topic, tp.partition): tp.offset for tp in self._consumer.position(self._data)}
            meta = self._admin.list_topics(self.topic, timeout=10).topics[self.topic].partitions
        except Exception as exc:  # a diagnosis only
            return f"partitions not described: {exc}"
        return "; ".join(
            f"[{tp.partition}] stable {stable[(tp.topic, tp.partition)]} high {high[(tp.topic, tp.partition)]} "
            f"read to {at.get((tp.topic, tp.partition))} leader {meta[tp.partition].leader}"
            for tp in self._data
        )

    def _drain(
        self,
        partitions: list[Any],
        timeout_s: float,
        consumer: Any = None,
        take: Callable[[Any], None] | None = None,
    ) -> None:
        """Read ``partitions`` to their last stable offsets with ``consumer`` (this reader's own by default),
        handing each message to ``take``."""
        own = consumer is None
        consumer = consumer or self._consumer
        take = take or self._take
        ends = self._stable_offsets(partitions, timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            positions = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(partitions)}
            if own:
                positions = {k: max(at, self._moved_to.get(k, 0)) for k, at in positions.items()}
            behind = [k for k, end in ends.items() if max(positions.get(k, 0), 0) < end]
            if not behind:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"read_committed reader: {behind} not read up to {ends} in {timeout_s:.0f} s")
            for message in consumer.consume(500, timeout=0.5):
                take(message)

    def read_from_start(self, timeout_s: float = 60.0) -> Counter[str]:
        """Every committed row of the topic now, read by a fresh consumer from the partitions' start."""
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        rows: Counter[str] = Counter()

        def take(message: Any) -> None:
            if message.error() is None and message.value() is not None:
                rows[canonical(message.value())] += 1

        consumer = Consumer({**self._config, "group.id": f"eosink-audit-{uuid.uuid4().hex}"})
        try:
            consumer.assign([TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING) for tp in self._data])
            self._drain(self._data, timeout_s, consumer, take)
        finally:
            consumer.close()
        return rows

    def _take(self, message: Any) -> None:
        error = message.error()
        if error is not None:
            if not error.retriable():
                self.errors.append(str(error))
            return
        self._read_to[(message.topic(), message.partition())] = message.offset() + 1
        value = message.value()
        if message.topic() == self.topic:
            if value is not None:
                self.seen[canonical(value)] += 1
            return
        if message.partition() != BUNDLES or value is None:
            return
        body = json.loads(value)
        if body.get("app_id") != self.app_id:
            return
        bundle = body["bundle"]
        batch = int(bundle["batch"]["batch_id"])
        self.rows_by_bundle[batch] = int(bundle["fingerprint"]["rows"])

    def _stable_offsets(self, partitions: list[Any], timeout_s: float) -> dict[tuple[str, int], int]:
        return self._offsets(partitions, "READ_COMMITTED", timeout_s)

    def _offsets(self, partitions: list[Any], isolation: str, timeout_s: float) -> dict[tuple[str, int], int]:
        """The partitions' latest offsets as a reader of ``isolation`` sees them. An answer from a leader that
        just lost its role (``FENCED_LEADER_EPOCH``, ``NOT_LEADER_OR_FOLLOWER`` after a failover) is asked
        again, and so is one not answered in 10 s (an admin client that still asks a dead leader), until
        ``timeout_s``."""
        from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        latest: Any = OffsetSpec.latest
        deadline = time.monotonic() + timeout_s
        wait_s = min(timeout_s, 10.0)
        while True:
            asked = {TopicPartition(tp.topic, tp.partition): latest() for tp in partitions}
            futures = self._admin.list_offsets(
                asked, isolation_level=getattr(IsolationLevel, isolation), request_timeout=wait_s
            )
            try:
                return {(tp.topic, tp.partition): int(f.result(timeout=wait_s).offset) for tp, f in futures.items()}
            except (KafkaException, TimeoutError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
                self._admin = self._new_admin()  # librdkafka keeps the leader epoch it knew: ask with fresh metadata

    # -- in the background --------------------------------------------------------------------------

    def poll_once(self) -> None:
        self.poll(timeout_s=10.0)

    def close(self) -> None:
        self.stop()
        self._consumer.close()

    # -- the verdict --------------------------------------------------------------------------------

    def stuck(self, within_s: float) -> dict[str, int]:
        """Partitions (data and bundles) whose last stable offset stays below their high watermark for
        ``within_s`` (call it once every writer is done: an open transaction left behind keeps it there)."""
        deadline = time.monotonic() + within_s
        while True:
            stable = self._offsets(self._all(), "READ_COMMITTED", 30.0)
            high = self._offsets(self._all(), "READ_UNCOMMITTED", 30.0)
            behind = {f"{t}[{p}]": high[(t, p)] - stable[(t, p)] for (t, p) in high if stable[(t, p)] < high[(t, p)]}
            if not behind or time.monotonic() > deadline:
                return behind
            time.sleep(0.5)

    def _truncated(self) -> list[str]:
        """Partitions whose log now ends below an offset this reader read. Its consumer would wait there for ever
        (its position is past the end); it is moved to the new end, the others to where they were read up to."""
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        with self._lock:
            ends = self._offsets(self._all(), "READ_UNCOMMITTED", 30.0)
            cut = {k: end for k, end in ends.items() if self._read_to.get(k, 0) > end}
            self._moved_to.update(cut)
            if cut:
                self._consumer.assign(
                    [
                        TopicPartition(t, p, cut.get((t, p), self._read_to.get((t, p), OFFSET_BEGINNING)))
                        for (t, p) in ends
                    ]
                )
            return [
                f"{t}[{p}] read up to offset {self._read_to[(t, p)]}, now ends at {end}" for (t, p), end in cut.items()
            ]

    def verdict(
        self, expected: Counter[Any], *, settle_s: float, key: Callable[[dict[str, Any]], Any] | None = None
    ) -> KafkaVerdict:
        """A last :meth:`poll` once the last stable offsets settled (at most ``settle_s``), then a read from the
        start, against the rows ``expected``: canonical JSON (see :func:`canonical`), or ``key`` of each record's
        JSON object (the columns a test's input names a row by)."""
        self.stop()
        stuck = self.stuck(settle_s)
        truncated = self._truncated()
        self.poll()
        final = keyed(self.read_from_start(), key)
        with self._lock:
            return KafkaVerdict(
                **tally(final, expected, keyed(self.seen, key)),
                bundles=sorted(self.rows_by_bundle),
                torn=list(self.torn),
                truncated=truncated,
                stuck=stuck,
            )
