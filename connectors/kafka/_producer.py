"""The kafka-python producer internals the sink leans on (kafka-python is pinned to 3.0.x for them).

A transactional KafkaProducer keeps its producer id and epoch in its transaction manager, with
no public accessor; its ``abort_transaction()`` waits without a bound; it cannot be told that
its transaction was committed by an EndTxn it did not send; and its cluster metadata ignores its
``retry_backoff_ms``. Each of those is one function here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["abort_within", "mark_committed", "open_producer", "producer_ids"]


def open_producer(**kwargs: Any) -> Any:
    """A KafkaProducer whose metadata refreshes back off its ``retry_backoff_ms``, as its other requests do.

    kafka-python 3.0 builds a client's cluster metadata with a fixed 100 ms between refreshes. A new producer
    refreshes at start, so its first send to a topic waited up to 100 ms for the topic's metadata, and its first
    look at a second topic as long again: some 150 ms of every participant's ``begin`` and first ``write``
    (the "begun" marker, then the data topic), against a few ms of round trips."""
    from kafka import KafkaProducer

    producer = KafkaProducer(**kwargs)
    config = getattr(getattr(producer, "_metadata", None), "config", None)
    if isinstance(config, dict) and "retry_backoff_ms" in config and "retry_backoff_ms" in kwargs:
        config["retry_backoff_ms"] = kwargs["retry_backoff_ms"]
    return producer


def producer_ids(producer: Any) -> tuple[int, int]:
    """The producer id and epoch a transactional producer writes with."""
    pe = producer._transaction_manager.producer_id_and_epoch
    return int(pe.producer_id), int(pe.epoch)


def abort_within(producer: Any, timeout_ms: int) -> None:
    """Abort the producer's open transaction, waiting at most ``timeout_ms``."""
    result = producer._transaction_manager.begin_abort()
    producer._sender.wakeup()
    result.wait(timeout_ms=timeout_ms)


def mark_committed(producer: Any) -> None:
    """Tell the producer its transaction was committed (by an EndTxn sent elsewhere): ready for the next."""
    from kafka.producer.transaction_manager import TransactionState

    manager = producer._transaction_manager
    manager._transition_to(TransactionState.COMMITTING_TRANSACTION)
    manager._complete_transaction()
