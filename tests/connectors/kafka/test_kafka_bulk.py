"""Bulk-framed record batches: byte for byte what kafka-python builds, and every record accounted for."""

from __future__ import annotations

import collections
import threading
from typing import Any

import pytest
from kafka.partitioner.default import murmur2
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

from eosink.connectors.kafka._bulk import BulkSender, fill_builder, frame, varints
from eosink.connectors.kafka._records import Record, Records
from eosink.errors import TransientError

NOW = 1_790_000_000_123

RECORDS = [
    Record("t", b"v", b"k", None, None),
    Record("t", b"x" * 300, None, None, None),  # multi-byte varints, a null key
    Record("t", b"", b"k" * 200, [("h", b"1"), ("n", None), ("\u00e9", b"\x00" * 130)], None),
    *(Record("t", f"value {i}".encode(), f"{i}".encode(), None, None) for i in range(200)),
]


def _built(builder: Any) -> bytes:
    builder.close()
    return bytes(builder.buffer())


def _theirs(records: list[Record], compression: int = 0) -> bytes:
    builder = MemoryRecordsBuilder(2, compression, 1 << 22)
    for r in records:
        assert builder.append(NOW, r.key, r.value, r.headers or []) is not None
    return _built(builder)


def _ours(records: list[Record], compression: int = 0, limit: int = 1 << 22) -> list[bytes]:
    out = []
    for data, count, largest in frame(Records.of(records), limit):
        builder = MemoryRecordsBuilder(2, compression, 1 << 22)
        fill_builder(builder, data, count, NOW)
        assert largest <= limit
        out.append(_built(builder))
    return out


def test_varints_are_kafkas_zigzag_varints() -> None:
    import numpy as np
    from kafka.record.util import encode_varint

    values = [0, 1, -1, 63, -64, 64, 8191, 8192, -8193, 2**20, 2**31 - 1, -(2**31)]
    expected = []
    for v in values:
        out = bytearray()
        encode_varint(v, out.append)
        expected.append(bytes(out))
    assert varints(np.array(values, dtype=np.int64)).to_pylist() == expected


def test_a_bulk_batch_is_byte_for_byte_the_batch_kafka_python_builds() -> None:
    assert _ours(RECORDS) == [_theirs(RECORDS)]


def test_batches_split_at_the_limit_each_byte_for_byte_kafka_pythons() -> None:
    """Records over many batches: each batch restarts its offset deltas, as its own builder would."""
    records = [*RECORDS, *(Record("t", b"y" * (i * 37 % 500), None, None, None) for i in range(300))]
    ours = _ours(records, limit=4096)
    assert len(ours) > 10
    decoded = [rec for built in ours for batch in MemoryRecords(built) for rec in batch]
    assert [(d.key, d.value) for d in decoded] == [(r.key, r.value) for r in records]
    start = 0
    for built in ours:
        count = sum(1 for batch in MemoryRecords(built) for _ in batch)
        assert len(built) <= 4096 + 61 and built == _theirs(records[start : start + count])
        start += count


def test_a_compressed_bulk_batch_decodes_to_its_records() -> None:
    (ours,) = _ours(RECORDS, compression=1)  # gzip
    decoded = [rec for batch in MemoryRecords(ours) for rec in batch]
    assert [(d.offset, d.key, d.value, d.timestamp) for d in decoded] == [
        (i, r.key, r.value, NOW) for i, r in enumerate(RECORDS)
    ]
    assert [list(d.headers) for d in decoded][2] == [("h", b"1"), ("n", None), ("\u00e9", b"\x00" * 130)]


class _Producer:
    """The parts of a KafkaProducer the bulk sender uses, with batches completed by the test."""

    def __init__(self, partitions: int = 3, batch_size: int = 4096) -> None:
        self.partitions = set(range(partitions))
        self._transaction_manager = None
        self._sender = type("S", (), {"wakeup": lambda self: None})()
        counter = type("C", (), {"increment": lambda self: None, "decrement": lambda self: None})()
        batches: collections.defaultdict[Any, collections.deque[Any]] = collections.defaultdict(collections.deque)
        incomplete: list[Any] = []
        self._accumulator = type(
            "A",
            (),
            {
                "config": {"batch_size": batch_size, "message_version": 2, "compression_attrs": 0},
                "_batches": batches,
                "_incomplete": type("I", (), {"add": lambda self, b: incomplete.append(b)})(),
                "_appends_in_progress": counter,
                "_tp_lock": lambda self, tp: threading.Lock(),
            },
        )()
        self.incomplete = incomplete

    def partitions_for(self, topic: str) -> set[int]:
        return self.partitions

    def records(self) -> dict[int, list[tuple[bytes | None, bytes | None]]]:
        out: dict[int, list[tuple[bytes | None, bytes | None]]] = {}
        for batch in self.incomplete:
            for b in MemoryRecords(_built(batch.records)):
                out.setdefault(batch.topic_partition.partition, []).extend((r.key, r.value) for r in b)
        return out


def test_keyed_records_go_where_kafkas_default_partitioner_puts_them_in_order() -> None:
    producer = _Producer(partitions=5, batch_size=512)
    records = [Record("t", f"{i}".encode(), f"key-{i % 40}".encode(), None, None) for i in range(400)]
    BulkSender(producer, lambda exc: None).send(Records.of(records))
    assert len(producer.incomplete) > 5 and all(b.records._builder.size() <= 512 for b in producer.incomplete)
    sent = producer.records()
    for partition, rows in sent.items():
        for key, _ in rows:
            assert key is not None and (murmur2(key) & 0x7FFFFFFF) % 5 == partition
    assert sorted(v for rows in sent.values() for _, v in rows) == sorted(r.value for r in records)
    for rows in sent.values():  # each key's records keep their order
        values = [int(v or b"") for _, v in rows]
        assert values == sorted(values)


def test_unkeyed_records_and_explicit_partitions_are_all_sent_once() -> None:
    producer = _Producer(partitions=3)
    records = [Record("t", f"{i}".encode(), None, None, 2 if i % 7 == 0 else None) for i in range(1000)]
    BulkSender(producer, lambda exc: None).send(Records.of(records))
    sent = producer.records()
    assert sorted(int(v or b"") for rows in sent.values() for _, v in rows) == list(range(1000))
    assert all(int(v or b"") % 7 != 0 for p, rows in sent.items() if p != 2 for _, v in rows)


def test_check_fails_unless_every_record_was_acknowledged() -> None:
    producer = _Producer(partitions=1, batch_size=1024)
    errors: list[BaseException] = []
    sender = BulkSender(producer, errors.append)
    sender.send(Records.of([Record("t", b"x" * 100, None, None, 0) for _ in range(30)]))
    first, *rest = producer.incomplete
    assert rest, "30 records of 100 bytes need more than one 1 KiB batch"
    for batch in rest:
        batch.produce_future.success((0, -1, None))
    with pytest.raises(TransientError, match=rf"acknowledged {30 - first.record_count} of 30 records"):
        sender.check("pre_commit of batch 1")  # the first batch never completed
    boom = RuntimeError("NotLeaderForPartition")
    first.produce_future.success((-1, -1, lambda index: boom))  # how a failed batch reports
    assert errors == [boom]
    with pytest.raises(TransientError):
        sender.check("pre_commit of batch 1")
