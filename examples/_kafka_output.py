"""The output side the Kafka examples share: what a ``read_committed`` consumer reads from a topic."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def count_committed(bootstrap: str, topic: str, identity: Callable[[dict[str, Any]], Any]) -> tuple[int, int]:
    """(records, distinct identities) a read_committed consumer reads from ``topic``'s JSON values."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        seen: list[Any] = []
        while any(consumer.position(p) < ends[p] for p in parts):
            for records in consumer.poll(timeout_ms=1000).values():
                seen.extend(identity(json.loads(r.value)) for r in records)
        return len(seen), len(set(seen))
    finally:
        consumer.close()
