"""Counting committed records from record batch headers (``_wire.count_committed``), against a real broker.

The benchmark checks millions of unkeyed records this way instead of decoding each. The count
must agree with the decoding reader (``_wire.read_log``) whatever the log holds: plain records,
committed and aborted transactions, compressed batches, and a transaction still open.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.kafka import _wire
from eosink.contracts.harness import Namespace

from .conftest import HARNESS


def _producer(**kw: Any) -> Any:
    from kafka import KafkaProducer

    return KafkaProducer(bootstrap_servers=HARNESS.bootstrap(), **kw)


def _transaction(topic: str, sends: dict[int, int], end: str, **kw: Any) -> Any:
    """Send ``sends[p]`` records to each partition ``p`` in one transaction, then commit, abort or leave it open."""
    producer = _producer(transactional_id=f"count-{uuid.uuid4().hex[:8]}", **kw)
    producer.init_transactions()
    producer.begin_transaction()
    for partition, count in sends.items():
        for i in range(count):
            producer.send(topic, value=f"{end}-{i}".encode(), partition=partition)
    producer.flush()
    if end == "commit":
        producer.commit_transaction()
    elif end == "abort":
        producer.abort_transaction()
    return producer


def test_the_header_count_agrees_with_the_decoding_reader(ns: Namespace) -> None:
    """Pass: partition 0 holds 7 plain records, 5 committed (lz4) and 4 aborted; partition 1 holds 3 committed
    and 2 of an open transaction. Both readers find 12 and 3 committed records; after the open transaction
    commits, both find 5 in partition 1."""
    HARNESS.create_topics(ns)
    topic, admin = HARNESS.topic(ns), HARNESS.admin()
    plain = _producer(acks="all")
    for i in range(7):
        plain.send(topic, value=b"plain-%d" % i, partition=0)
    plain.flush()
    plain.close()
    _transaction(topic, {0: 5, 1: 3}, "commit", compression_type="lz4").close()
    _transaction(topic, {0: 4}, "abort").close()
    still_open = _transaction(topic, {1: 2}, "open")
    try:
        counts = [_wire.count_committed(admin, topic, p) for p in (0, 1)]
        decoded = [len(_wire.read_log(admin, topic, p).committed) for p in (0, 1)]
        assert counts == decoded == [12, 3]
        still_open.commit_transaction()
        # The broker writes the commit marker after commit_transaction returns: wait for it, then compare.
        assert _wire.await_markers(admin, topic, 1), "no commit marker in partition 1 within 10 s"
        assert _wire.count_committed(admin, topic, 1) == len(_wire.read_log(admin, topic, 1).committed) == 5
    finally:
        still_open.close(timeout=10)


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Namespace]:
    made = Namespace(f"count{uuid.uuid4().hex[:8]}", tmp_path / "ns")
    yield made
    HARNESS.cleanup(made)
