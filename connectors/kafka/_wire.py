"""The Kafka requests the sink sends itself, through kafka-python's admin client.

kafka-python has no call to end another process's transaction, nor to read a partition's log
with its transaction markers. Both are plain protocol requests, sent here on the admin client's
connections (its ``_manager``: the one private member the connector leans on, which is why
kafka-python is pinned to 3.0.x and ``tests/connectors/kafka`` exercises every call here against
a real broker):

* :func:`end_txn` — ``EndTxn`` (v3, classic transactions) for a transactional id, with the
  producer id and epoch that wrote it: how the coordinator commits or aborts a participant's
  transaction, as the producer itself would;
* :func:`describe` — ``DescribeTransactions`` for one id, None when the broker does not know it;
* :func:`log_offsets` — ``ListOffsets``: where a partition's log starts and ends, and the first
  offset at or after a time (through the admin client's public call);
* :func:`read_log` — ``Fetch`` at ``read_uncommitted`` with the raw record batches: which
  producer wrote each record and where each transaction ended (commit or abort markers), so
  a reader can tell committed, aborted and open records apart anywhere in the log (a
  ``read_committed`` consumer stops at the first open transaction);
* :func:`setting_of` — a broker setting out of ``DescribeConfigs``' answer.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["LogRecord", "Partition", "TxnState", "describe", "end_txn", "log_offsets", "read_log", "setting_of"]

# Error codes of EndTxn (kafka/errors.py names them too).
NONE = 0
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
CONCURRENT_TRANSACTIONS = 51
PRODUCER_FENCED = 90
_RETRY = {COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS}
_FETCH_RETRY_S = 10.0
"""How long a Fetch answered with a retriable error (no leader yet, leader moved) is asked again."""


@dataclass(frozen=True)
class TxnState:
    """What the transaction coordinator knows of a transactional id."""

    state: str
    """``Empty``, ``Ongoing``, ``PrepareCommit``, ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``, ..."""
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_ms: int
    """When its current transaction began (Unix ms), -1 when none is open."""
    partitions: frozenset[tuple[str, int]]

    def wrote(self, producer_id: int, producer_epoch: int) -> bool:
        """Whether its current (or last) transaction is the one this producer id and epoch wrote."""
        return (self.producer_id, self.producer_epoch) == (producer_id, producer_epoch)


def end_txn(admin: Any, txid: str, producer_id: int, producer_epoch: int, commit: bool, timeout_s: float) -> int:
    """Send EndTxn until the coordinator decides (retrying its "busy" answers); the final error code.

    0 means the transaction is now committing (or aborting) or had already done so the same way;
    48 (invalid state) that it ended the other way or is not open; 47/90 (fenced) that the id has
    a newer producer epoch since; 49 that the coordinator does not know the producer.
    """
    from kafka.protocol.metadata import CoordinatorType
    from kafka.protocol.producer.transaction import EndTxnRequest

    async def once(refresh: bool) -> int:
        if refresh:
            admin._manager.cluster.remove_coordinator(txid, CoordinatorType.TRANSACTION)
        node = await admin._find_coordinator_id(txid, key_type=CoordinatorType.TRANSACTION)
        request = EndTxnRequest(
            transactional_id=txid,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            committed=commit,
            max_version=3,
        )
        response = await admin._manager.send(request, node_id=node)
        return int(response.error_code)

    deadline = time.monotonic() + timeout_s
    delay, refresh = 0.01, False
    while True:
        code = int(admin._manager.run(once, refresh))
        if code not in _RETRY or time.monotonic() > deadline:
            return code
        refresh = code in (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE)
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def describe(admin: Any, txid: str) -> TxnState | None:
    """The coordinator's view of ``txid``; None when it knows no such transactional id."""
    from kafka.errors import TransactionalIdNotFoundError

    try:
        found = admin.describe_transactions([txid])
    except TransactionalIdNotFoundError:
        return None
    d = found.get(txid)
    if d is None:
        return None
    return TxnState(
        state=d.state.value if hasattr(d.state, "value") else str(d.state),
        producer_id=int(d.producer_id),
        producer_epoch=int(d.producer_epoch),
        timeout_ms=int(d.transaction_timeout_ms),
        start_ms=int(d.transaction_start_time_ms),
        partitions=frozenset((tp.topic, tp.partition) for tp in d.topic_partitions),
    )


@dataclass(frozen=True)
class LogRecord:
    """One data record of a partition's log, with the producer that wrote it."""

    offset: int
    producer_id: int
    transactional: bool
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_ms: int


@dataclass(frozen=True)
class Partition:
    """A partition's log between two offsets, its transactions resolved by their markers.

    ``committed`` holds the records of committed transactions and non-transactional records,
    in log order; ``open`` the records of transactions with no marker yet, per producer id;
    ``high_watermark`` and ``last_stable_offset`` as the broker gave them.
    """

    committed: tuple[LogRecord, ...]
    open: dict[int, tuple[LogRecord, ...]]
    high_watermark: int
    last_stable_offset: int


def log_offsets(admin: Any, topic: str, partition: int, at_ms: int | None = None) -> tuple[int, int, int]:
    """``(log start, high watermark, first offset whose timestamp is >= at_ms)`` of a partition.

    The third is the high watermark when ``at_ms`` is None or no record is that new.
    """
    from kafka.protocol.consumer.offsets import OffsetSpec, OffsetTimestamp
    from kafka.structs import TopicPartition

    tp = TopicPartition(topic, partition)
    found = admin.list_partition_offsets({tp: OffsetSpec.EARLIEST})
    start = int(found[tp].offset)
    end = int(admin.list_partition_offsets({tp: OffsetSpec.LATEST})[tp].offset)
    at = end
    if at_ms is not None:
        offset = int(admin.list_partition_offsets({tp: OffsetTimestamp(max(0, at_ms))})[tp].offset)
        at = end if offset < 0 else max(start, offset)
    return start, end, at


def _batches(
    admin: Any, topic: str, partition: int, start: int, max_wait_s: float, decode: bool, marks: list[int]
) -> Iterator[tuple[Any, list[LogRecord]]]:
    """Every record batch of a partition from ``start`` to its high watermark, with its records from
    ``start`` on (none when not ``decode``); ``marks`` ends as the last fetch's high watermark and last
    stable offset."""
    offset = start
    deadline = time.monotonic() + max_wait_s
    while True:
        hw, lso, batches = _fetch(admin, topic, partition, offset, decode)
        marks[:] = [hw, lso]
        for batch, records in batches:
            yield batch, records
            offset = max(offset, batch.next_offset)
        if offset >= hw or not batches:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {topic}/{partition} did not reach offset {hw} in {max_wait_s:.0f} s")


def _committed(marker_batch: Any) -> bool:
    marker = next(iter(marker_batch), None)
    return marker is not None and not marker.abort


def read_log(admin: Any, topic: str, partition: int, start: int = 0, max_wait_s: float = 30.0) -> Partition:
    """Read ``topic``'s ``partition`` from ``start`` to its high watermark (read_uncommitted).

    Aborted transactions' records are dropped, committed ones kept; records whose transaction
    has no marker yet are returned apart (``open``).
    """
    committed: list[LogRecord] = []
    pending: dict[int, list[LogRecord]] = {}
    marks = [-1, -1]
    for batch, records in _batches(admin, topic, partition, start, max_wait_s, True, marks):
        if batch.is_control_batch:
            done = pending.pop(batch.producer_id, [])
            if _committed(batch):
                committed.extend(done)
        elif batch.is_transactional:
            pending.setdefault(batch.producer_id, []).extend(records)
        else:
            committed.extend(records)
    return Partition(tuple(committed), {pid: tuple(rs) for pid, rs in pending.items()}, marks[0], marks[1])


def count_committed(admin: Any, topic: str, partition: int, max_wait_s: float = 60.0) -> int:
    """How many committed records ``partition`` holds, counted from the record batches' headers (no
    record is decoded): what a benchmark checks after writing millions of unkeyed records."""
    committed = 0
    pending: dict[int, int] = {}
    for batch, _ in _batches(admin, topic, partition, 0, max_wait_s, False, []):
        if batch.is_control_batch:
            done = pending.pop(batch.producer_id, 0)
            committed += done if _committed(batch) else 0
        else:
            count = batch.next_offset - batch.base_offset
            if batch.is_transactional:
                pending[batch.producer_id] = pending.get(batch.producer_id, 0) + count
            else:
                committed += count
    return committed


def await_markers(admin: Any, topic: str, partition: int, within_s: float = 10.0) -> bool:
    """Wait, at most ``within_s``, until ``partition`` holds no transaction without its marker.

    A producer's commit returns once the coordinator has decided; the broker writes the markers
    into the partitions just after. A check that counts right after a commit waits here first.
    False when a transaction is still open at the bound (a zombie's, say): the count then leaves it out.
    """
    deadline = time.monotonic() + within_s
    delay = 0.02
    while True:
        end = log_offsets(admin, topic, partition)[1]
        hw, lso, _ = _fetch(admin, topic, partition, end, False)  # at the end: the offsets, no records
        if lso >= hw:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.5)


def _fetch(
    admin: Any, topic: str, partition: int, offset: int, decode: bool = True
) -> tuple[int, int, list[tuple[Any, list[LogRecord]]]]:
    from kafka.errors import for_code
    from kafka.protocol.consumer.fetch import FetchRequest
    from kafka.record.memory_records import MemoryRecords
    from kafka.structs import TopicPartition

    async def once() -> Any:
        leaders = await admin._async_get_leader_for_partitions([TopicPartition(topic, partition)])
        node = next(iter(leaders))
        Topic = FetchRequest.FetchTopic
        request = FetchRequest(
            replica_id=-1,
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=32 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=[
                Topic(
                    topic=topic,
                    partitions=[
                        Topic.FetchPartition(
                            partition=partition,
                            current_leader_epoch=-1,
                            fetch_offset=offset,
                            log_start_offset=-1,
                            partition_max_bytes=16 << 20,
                        )
                    ],
                )
            ],
            forgotten_topics_data=[],
            rack_id="",
            max_version=11,
        )
        return await admin._manager.send(request, node_id=node)

    # A partition's leader can answer "not leader" or "unknown" for a moment after the topic is
    # created or its leadership moves: ask again (with fresh metadata) for a bounded while.
    deadline = time.monotonic() + _FETCH_RETRY_S
    delay = 0.05
    while True:
        response = admin._manager.run(once)
        data = response.responses[0].partitions[0]
        if not data.error_code:
            break
        error = for_code(data.error_code)
        if not getattr(error, "retriable", False) or time.monotonic() > deadline:
            raise error(f"Fetch of {topic}/{partition} at offset {offset} failed")
        time.sleep(delay)
        delay = min(delay * 2, 0.5)
    out: list[tuple[Any, list[LogRecord]]] = []
    raw = data.records
    if raw:
        records = MemoryRecords(bytes(raw) if not isinstance(raw, bytes) else raw)
        while (batch := records.next_batch()) is not None:
            if batch.magic < 2:
                continue
            if batch.is_control_batch or not decode:
                out.append((batch, []))
                continue
            rows = [
                LogRecord(
                    r.offset,
                    batch.producer_id,
                    bool(batch.is_transactional),
                    r.key,
                    r.value,
                    tuple(r.headers or ()),
                    r.timestamp,
                )
                for r in batch
                if r.offset >= offset
            ]
            out.append((batch, rows))
    return int(data.high_watermark), int(data.last_stable_offset), out


def records_of(partition: Partition) -> Iterator[LogRecord]:
    """The committed records of ``partition``, in log order."""
    yield from partition.committed


def broker_settings(admin: Any, name: str) -> Iterator[str | None]:
    """Broker setting ``name`` of each listed broker that answers, in turn (the caller stops when it knows enough).

    A node that died stays listed until the controller fences it, and a client that no longer has it in its
    metadata cannot ask it (UnknownBrokerIdError): it is passed over. The last such error when none answered."""
    from kafka.admin import ConfigResource, ConfigResourceType
    from kafka.errors import KafkaConnectionError, KafkaTimeoutError, NodeNotReadyError, UnknownBrokerIdError

    unreachable: Exception | None = None
    answered = False
    for broker in [b["broker_id"] for b in admin.describe_cluster().get("brokers", [])]:
        try:
            found = admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, str(broker), [name])], config_filter="all"
            )
        except (UnknownBrokerIdError, NodeNotReadyError, KafkaConnectionError, KafkaTimeoutError) as exc:
            unreachable = exc
            continue
        answered = True
        yield setting_of(found, name)
    if unreachable is not None and not answered:
        raise unreachable


def setting_of(found: Any, name: str) -> str | None:
    """A broker setting's value (as text) out of the admin client's ``describe_configs`` answer, however nested."""
    stack = [found]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if name in item:
                value = item[name]
                value = value.get("value", value.get("config_value")) if isinstance(value, dict) else value
                return None if value is None else str(value)
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return None
