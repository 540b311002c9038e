"""Records into a kafka-python producer as whole record batches, encoded in bulk.

``KafkaProducer.send`` costs about 100 µs a record in Python (serialisers, partitioner, locks,
a future per record), several times the cost of the bytes themselves. A participant's records
are all known when ``write`` is called, so this module groups them by partition, encodes each
group straight into v2 record batches (the wire format of KIP-98: attributes, zig-zag varint
deltas, key, value, headers) and hands the finished batches to the producer's accumulator.
The producer's own sender still does everything that makes delivery exactly-once: producer id,
epoch and sequence numbers are stamped when a batch is drained, partitions are added to the
transaction, and retries keep their sequence. The accumulator, ``ProducerBatch`` and
``MemoryRecordsBuilder`` are kafka-python internals (pinned to 3.0.x for them, see ``_producer``).

Each batch reports its outcome once, for all its records; ``BulkSender.check`` fails a
participant whose records were not all acknowledged, whatever the reason.
"""

from __future__ import annotations

import collections
import functools
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from eosink.connectors.kafka._records import Record
from eosink.errors import TransientError

__all__ = ["BulkSender", "encode_record", "fill_builder"]

_MAX_QUEUED_BYTES = 64 << 20
"""Encoded bytes handed to the producer and not yet acknowledged before ``send`` waits."""


@functools.lru_cache(maxsize=65_536)
def _varint(value: int) -> bytes:
    """Kafka's zig-zag varint (signed, as record fields are)."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append(0x80 | (v & 0x7F))
        v >>= 7
    out.append(v)
    return bytes(out)


_NULL = _varint(-1)


def _field(data: bytes | None) -> bytes:
    return _NULL if data is None else _varint(len(data)) + data


def encode_record(offset_delta: int, record: Record) -> bytes:
    """One record of a v2 batch with a timestamp delta of 0: its length, then its body."""
    if record.headers:
        parts = [_varint(len(record.headers))]
        for name, value in record.headers:
            parts.append(_field(name.encode()))
            parts.append(_field(value))
        headers = b"".join(parts)
    else:
        headers = b"\x00"
    body = b"".join((b"\x00\x00", _varint(offset_delta), _field(record.key), _field(record.value), headers))
    return _varint(len(body)) + body


def fill_builder(builder: Any, encoded: Sequence[bytes], now_ms: int) -> None:
    """Put records made by :func:`encode_record` (offset deltas 0, 1, ...) into an empty
    ``MemoryRecordsBuilder``, as its ``append`` would have, timestamped ``now_ms``."""
    inner = builder._builder
    assert inner._num_records == 0, "fill_builder needs an empty builder"
    inner._buffer += b"".join(encoded)
    inner._first_timestamp = inner._max_timestamp = now_ms
    inner._last_offset = len(encoded) - 1
    inner._num_records = len(encoded)
    builder._next_offset = len(encoded)


class BulkSender:
    """Sends a participant's records through ``producer`` in whole batches; counts what was acknowledged."""

    def __init__(self, producer: Any, on_error: Callable[[BaseException], None]) -> None:
        self._producer = producer
        self._on_error = on_error
        self._lock = threading.Lock()
        self._sent = 0
        self._acked = 0
        self._queued: collections.deque[tuple[Any, int]] = collections.deque()
        self._queued_bytes = 0
        acc = producer._accumulator
        self._batch_size = int(acc.config["batch_size"])
        self._usable = acc.config["message_version"] >= 2

    def send(self, records: Sequence[Record]) -> None:
        """Hand every record to the producer (keyed records to murmur2's partition, as Kafka's default)."""
        if not self._usable:  # a broker too old for v2 batches: one send per record
            for r in records:
                self._producer.send(
                    r.topic, value=r.value, key=r.key, headers=r.headers, partition=r.partition
                ).add_errback(self._on_error)
            return
        now_ms = int(time.time() * 1000)
        for tp, group in self._by_partition(records).items():
            self._send_partition(tp, group, now_ms)
        self._producer._sender.wakeup()

    def check(self, where: str) -> None:
        """After a flush: TransientError unless every record sent was acknowledged."""
        with self._lock:
            sent, acked = self._sent, self._acked
        if acked != sent:
            raise TransientError(
                f"{where}: the broker acknowledged {acked} of {sent} records.",
                "Retry the task; its transaction is aborted and nothing of it becomes visible.",
            )

    # -- helpers ---------------------------------------------------------------------------------

    def _by_partition(self, records: Sequence[Record]) -> dict[Any, list[Record]]:
        from kafka import TopicPartition

        from eosink.connectors.kafka._murmur2 import partitions_of

        groups: dict[Any, list[Record]] = {}
        spread: dict[str, list[Record]] = {}
        keyed: dict[str, list[Record]] = {}
        for r in records:
            if r.partition is not None:
                groups.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
            elif r.key is None:
                spread.setdefault(r.topic, []).append(r)
            else:
                keyed.setdefault(r.topic, []).append(r)
        for topic, with_keys in keyed.items():
            # Kafka's default partitioner: murmur2 of the key, hashed for all of a topic's keys at once.
            known = sorted(self._producer.partitions_for(topic))
            indexes = partitions_of([r.key for r in with_keys if r.key is not None], len(known))
            for r, index in zip(with_keys, indexes.tolist(), strict=True):
                groups.setdefault(TopicPartition(topic, known[index]), []).append(r)
        for topic, unkeyed in spread.items():
            # Unkeyed records fill whole batches, one partition after another from a random start.
            known = sorted(self._producer.partitions_for(topic))
            start = random.randrange(len(known))
            per_batch = max(1, self._batch_size // max(1, unkeyed[0].size + 16))
            for i in range(0, len(unkeyed), per_batch):
                tp = TopicPartition(topic, known[(start + i // per_batch) % len(known)])
                groups.setdefault(tp, []).extend(unkeyed[i : i + per_batch])
        return groups

    def _send_partition(self, tp: Any, records: list[Record], now_ms: int) -> None:
        from kafka.record.default_records import DefaultRecordBatchBuilder

        limit = self._batch_size - DefaultRecordBatchBuilder.HEADER_STRUCT.size
        encoded: list[bytes] = []
        size = 0
        for r in records:
            data = encode_record(len(encoded), r)
            if encoded and size + len(data) > limit:
                self._enqueue(tp, encoded, size, now_ms)
                encoded, size = [], 0
                data = encode_record(0, r)
            encoded.append(data)
            size += len(data)
        if encoded:
            self._enqueue(tp, encoded, size, now_ms)

    def _enqueue(self, tp: Any, encoded: list[bytes], size: int, now_ms: int) -> None:
        from kafka.producer.producer_batch import ProducerBatch
        from kafka.record.memory_records import MemoryRecordsBuilder

        producer = self._producer
        acc = producer._accumulator
        manager = producer._transaction_manager
        if manager is not None and manager.is_transactional():
            manager.maybe_add_partition_to_transaction(tp)
        builder = MemoryRecordsBuilder(acc.config["message_version"], acc.config["compression_attrs"], self._batch_size)
        fill_builder(builder, encoded, now_ms)
        batch = ProducerBatch(tp, builder)
        batch.max_record_size = max(map(len, encoded))
        count = len(encoded)
        batch.produce_future.add_callback(self._done, count, size)
        batch.produce_future.add_errback(self._failed, size)
        with self._lock:
            self._sent += count
            self._queued.append((batch.produce_future, size))
            self._queued_bytes += size
        acc._appends_in_progress.increment()
        try:
            with acc._tp_lock(tp):
                acc._batches[tp].append(batch)
                acc._incomplete.add(batch)
        finally:
            acc._appends_in_progress.decrement()
        self._wait_for_room()

    def _done(self, count: int, size: int, result: tuple[Any, Any, Any]) -> None:
        """A batch's outcome (called on the producer's I/O thread); failures come with an exception function."""
        errors = result[2]
        if errors is not None:
            self._failed(size, errors(0))
            return
        with self._lock:
            self._acked += count
            self._queued_bytes -= size

    def _failed(self, size: int, exc: BaseException) -> None:
        with self._lock:
            self._queued_bytes -= size
        self._on_error(exc)

    def _wait_for_room(self) -> None:
        """Wait for the oldest batches while too many bytes are waiting for their acknowledgement."""
        while True:
            with self._lock:
                while self._queued and self._queued[0][0].is_done:
                    self._queued.popleft()
                if self._queued_bytes <= _MAX_QUEUED_BYTES or not self._queued:
                    return
                oldest = self._queued[0][0]
            self._producer._sender.wakeup()
            oldest.wait(1.0)
