"""Records into a kafka-python producer as whole record batches, framed in bulk from Arrow arrays.

``KafkaProducer.send`` costs about 100 µs a record in Python (serialisers, partitioner, locks,
a future per record), several times the cost of the bytes themselves. A participant's records
are all known when ``write`` is called, so this module groups them by partition and frames each
group straight into v2 record batches (the wire format of KIP-98: attributes, zig-zag varint
deltas, key, value, headers) with array operations: the varints of every length and offset
delta at once in numpy, each record's fields joined by Arrow's element-wise kernel, a batch one
slice of the joined buffer. No Python object is made per record. The finished batches go to the
producer's accumulator; its own sender still does everything that makes delivery exactly-once:
producer id, epoch and sequence numbers are stamped when a batch is drained (with its CRC32C,
in C), partitions are added to the transaction, and retries keep their sequence. The
accumulator, ``ProducerBatch`` and ``MemoryRecordsBuilder`` are kafka-python internals (pinned
to 3.0.x for them, see ``_producer``).

Each batch reports its outcome once, for all its records; ``BulkSender.check`` fails a
participant whose records were not all acknowledged, whatever the reason.
"""

from __future__ import annotations

import collections
import functools
import random
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from eosink.connectors.kafka._records import Records, lengths
from eosink.errors import TransientError

__all__ = ["BulkSender", "fill_builder", "frame", "varints"]

_MAX_QUEUED_BYTES = 64 << 20
"""Encoded bytes handed to the producer and not yet acknowledged before ``send`` waits."""

_BINARY = pa.binary()
_ZERO_ZERO = b"\x00\x00"  # a record's attributes and timestamp delta (always 0)
_NO_HEADERS = b"\x00"


@functools.cache
def _constant(value: bytes) -> Any:
    """A binary scalar, made at first use: pyarrow imports pandas (seconds) to make one, and every ``eosink``
    command imports this module through the Kafka profile."""
    return pa.scalar(value, _BINARY)


def _empty() -> Any:
    return _constant(b"")


_MOST_VARINT_BYTES = 5  # a record's lengths and deltas are 32-bit
I64 = npt.NDArray[np.int64]


def _zigzag(values: I64) -> npt.NDArray[np.uint64]:
    return ((values << 1) ^ (values >> 63)).astype(np.uint64)


def varint_sizes(values: I64) -> I64:
    """Bytes of each value's zig-zag varint."""
    z = _zigzag(values)
    n = np.ones(len(z), dtype=np.int64)
    for k in range(1, _MOST_VARINT_BYTES):
        n += z >= np.uint64(1 << (7 * k))
    return n


def varints(values: I64) -> pa.Array:
    """Kafka's zig-zag varints (signed, as record fields are) of ``values``, as a binary array."""
    z = _zigzag(values)
    sizes = varint_sizes(values)
    shifts = np.arange(0, 7 * _MOST_VARINT_BYTES, 7, dtype=np.uint64)
    groups = ((z[:, None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    position = np.arange(_MOST_VARINT_BYTES)
    groups |= np.where(position < sizes[:, None] - 1, 0x80, 0).astype(np.uint8)  # "more bytes follow"
    data = groups[position < sizes[:, None]]
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(_BINARY, len(values), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _header_sections(headers: pa.Array) -> pa.Array:
    """Each record's headers as the wire has them: their count, then each key and value."""
    entries = headers.values.flatten()
    keys, values = entries[0].cast(_BINARY), entries[1]
    value_lengths = np.where(values.is_valid().to_numpy(zero_copy_only=False), lengths(values), -1)
    encoded = pc.binary_join_element_wise(
        varints(lengths(keys)),
        pc.fill_null(keys, _empty()),
        varints(value_lengths),
        pc.fill_null(values, _empty()),
        _empty(),
    )
    joined = pc.binary_join(pa.ListArray.from_arrays(headers.offsets, encoded), _empty())
    counts = pc.fill_null(pc.list_value_length(headers), 0).cast(pa.int64()).to_numpy(zero_copy_only=False)
    return pc.binary_join_element_wise(varints(counts), pc.fill_null(joined, _empty()), _empty())


def frame(records: Records, limit: int) -> Iterator[tuple[bytes, int, int]]:
    """The records (all of one partition) as the record sections of v2 batches of at most ``limit`` bytes:
    ``(bytes, record count, largest record)`` per batch, each batch's offset deltas from 0."""
    n = len(records)
    values = records.values
    value_lengths = lengths(values)
    if records.keys is None:
        key_lengths = np.full(n, -1, dtype=np.int64)
        keys: Any = _empty()
    else:
        key_lengths = np.where(records.keys.is_valid().to_numpy(zero_copy_only=False), lengths(records.keys), -1)
        keys = pc.fill_null(records.keys, _empty())
    headers: Any = _constant(_NO_HEADERS) if records.headers is None else _header_sections(records.headers)
    header_lengths = 1 if records.headers is None else lengths(headers)
    fixed = (
        2 + varint_sizes(key_lengths) + np.maximum(key_lengths, 0) + varint_sizes(value_lengths) + value_lengths
    ) + header_lengths
    # Batches first (sizes counted with the largest offset delta and length a batch can need), then the deltas.
    bound = np.cumsum(fixed + 2 * 3)
    starts = [0]
    while True:
        taken = int(np.searchsorted(bound, (bound[starts[-1] - 1] if starts[-1] else 0) + limit, side="right"))
        nxt = max(taken, starts[-1] + 1)
        if nxt >= n:
            break
        starts.append(nxt)
    first = np.zeros(n, dtype=np.int64)
    first[starts] = starts
    np.maximum.accumulate(first, out=first)
    deltas = np.arange(n, dtype=np.int64) - first
    body = fixed + varint_sizes(deltas)
    joined = pc.binary_join_element_wise(
        varints(body), _constant(_ZERO_ZERO), varints(deltas), varints(key_lengths), keys,
        varints(value_lengths), values, headers, _empty(),
    )  # fmt: skip
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)[joined.offset : joined.offset + n + 1]
    data = joined.buffers()[2]
    sizes = body + varint_sizes(body)
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else n
        chunk = data[int(offsets[start]) : int(offsets[end])].to_pybytes()
        yield chunk, end - start, int(sizes[start:end].max())


def fill_builder(builder: Any, records: bytes, count: int, now_ms: int) -> None:
    """Put ``count`` records framed by :func:`frame` into an empty ``MemoryRecordsBuilder``, as its
    ``append`` would have, timestamped ``now_ms``."""
    inner = builder._builder
    assert inner._num_records == 0, "fill_builder needs an empty builder"
    inner._buffer += records
    inner._first_timestamp = inner._max_timestamp = now_ms
    inner._last_offset = count - 1
    inner._num_records = count
    builder._next_offset = count


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

    def send(self, records: Records) -> None:
        """Hand every record to the producer (keyed records to murmur2's partition, as Kafka's default)."""
        if not self._usable:  # a broker too old for v2 batches: one send per record
            for r in records.rows():
                self._producer.send(
                    r.topic, value=r.value, key=r.key, headers=r.headers, partition=r.partition
                ).add_errback(self._on_error)
            return
        from kafka.record.default_records import DefaultRecordBatchBuilder

        now_ms = int(time.time() * 1000)
        limit = self._batch_size - DefaultRecordBatchBuilder.HEADER_STRUCT.size
        for tp, group in self._by_partition(records):
            for data, count, largest in frame(group, limit):
                self._enqueue(tp, data, count, largest, now_ms)
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

    def _by_partition(self, records: Records) -> Iterator[tuple[Any, Records]]:
        """The records of each partition, in their order."""
        from kafka import TopicPartition

        from eosink.connectors.kafka._murmur2 import partitions_of

        n = len(records)
        if records.topics is None:
            names, topic_of = [records.topic], np.zeros(n, dtype=np.int64)
        else:
            encoded = pc.dictionary_encode(pc.fill_null(records.topics, records.topic or ""))
            names = encoded.dictionary.to_pylist()
            topic_of = encoded.indices.cast(pa.int64()).to_numpy(zero_copy_only=False)
        if records.partitions is None:
            partition = np.full(n, -1, dtype=np.int64)
        else:
            partition = pc.fill_null(records.partitions, -1).cast(pa.int64()).to_numpy(zero_copy_only=False).copy()
        keyed = (
            records.keys.is_valid().to_numpy(zero_copy_only=False) if records.keys is not None else np.zeros(n, bool)
        )
        for t, topic in enumerate(names):
            mine = topic_of == t
            choose = mine & (partition < 0)
            if not choose.any():
                continue
            known = np.array(sorted(self._producer.partitions_for(topic)), dtype=np.int64)
            with_key = np.flatnonzero(choose & keyed)
            if len(with_key):  # Kafka's default partitioner: murmur2 of the key
                assert records.keys is not None
                partition[with_key] = known[partitions_of(records.keys.take(with_key), len(known))]
            spread = np.flatnonzero(choose & ~keyed)
            if len(spread):  # unkeyed records fill whole batches, one partition after another from a random start
                typical = int(np.median(lengths(records.values.take(spread[:100])))) + 16
                per_batch = max(1, self._batch_size // typical)
                start = random.randrange(len(known))
                partition[spread] = known[(start + np.arange(len(spread)) // per_batch) % len(known)]
        group = topic_of * (1 << 32) + partition
        order = np.argsort(group, kind="stable")
        ordered = group[order]
        bounds = np.flatnonzero(np.diff(ordered)) + 1
        for rows in np.split(order, bounds):
            if len(rows):
                i = int(rows[0])
                yield TopicPartition(names[int(topic_of[i])], int(partition[i])), records.take(pa.array(rows))

    def _enqueue(self, tp: Any, data: bytes, count: int, largest: int, now_ms: int) -> None:
        from kafka.producer.producer_batch import ProducerBatch
        from kafka.record.memory_records import MemoryRecordsBuilder

        producer = self._producer
        acc = producer._accumulator
        manager = producer._transaction_manager
        if manager is not None and manager.is_transactional():
            manager.maybe_add_partition_to_transaction(tp)
        builder = MemoryRecordsBuilder(acc.config["message_version"], acc.config["compression_attrs"], self._batch_size)
        fill_builder(builder, data, count, now_ms)
        batch = ProducerBatch(tp, builder)
        batch.max_record_size = largest
        size = len(data)
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
