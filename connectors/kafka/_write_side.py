"""The participant side of KafkaSink (executors): ``begin``, ``write``, ``pre_commit``.

Each transactional participant attempt is one transactional producer::

    begin(task)        the writer epoch is checked (FencedError); a producer with the attempt's
                       transactional id (a pool slot, see ``_names``) is initialised, which
                       fences an older producer of the same id, and the epoch is checked again
                       (a writer fenced meanwhile stops); its transaction begins with a
                       "begun" marker in the progress topic (acknowledged before any data record
                       is sent, so a transaction with data always has a marker)
    write(txn, batch)  every row of the Arrow batch becomes a record, checked before any is sent
                       (SchemaError / BadRecordError); the records are sent in the transaction
    pre_commit(txn)    the epoch is checked again; a "prepared" marker (with the row count) is
                       sent; everything is flushed and acknowledged. The transaction stays open:
                       the producer is closed without ending it, and its committable keeps the
                       transactional id, producer id and epoch the coordinator commits it with

The idempotent strategy writes without a transaction (an idempotent producer, records keyed
by the upsert key columns): its records are visible once acknowledged, and a replay writes the
same keys again (consumers keep the last per key, as compaction does).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eosink.connectors.kafka import _wire
from eosink.connectors.kafka._base import _SinkBase
from eosink.connectors.kafka._bulk import BulkSender
from eosink.connectors.kafka._names import TxnName, app_tag, committable_id, task_slot
from eosink.connectors.kafka._producer import abort_within, open_producer, producer_ids
from eosink.connectors.kafka._progress import MARKERS, marker_record
from eosink.connectors.kafka._records import Records, to_records
from eosink.connectors.kafka._two_phase import initialise, keeps_prepared
from eosink.contract import Committable, TaskRef
from eosink.errors import BadRecordError, EosinkError, TransientError

__all__ = ["_Txn", "_WriteSide"]

log = logging.getLogger("eosink.kafka")

_MAX_SLOTS = 16


@dataclass
class _Txn:
    """One participant attempt's producer and what it sent; lives only in the writing process."""

    task: TaskRef
    producer: Any
    txid: str | None
    keys: tuple[str, ...]
    rows: int = 0
    topics: set[str] = field(default_factory=set)
    error: BaseException | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    sender: BulkSender = field(init=False)

    def __post_init__(self) -> None:
        self.sender = BulkSender(self.producer, self.fail)

    def fail(self, exc: BaseException) -> None:
        """A record's send failed (called from the producer's I/O thread)."""
        with self._lock:
            if self.error is None:
                self.error = exc


class _WriteSide(_SinkBase):
    """``begin``, ``write`` and ``pre_commit`` of :class:`KafkaSink` (a mixin)."""

    _live: set[Any]
    """Producers of this sink object with an unfinished attempt (closed, without ending their
    transaction, by ``close``: what a crash leaves)."""

    def begin(self, task: TaskRef) -> _Txn:
        """Check the epoch; open a producer (transactional unless ``task.transactional`` is False)."""
        app = task.batch.app_id
        keys = tuple(task.upsert_keys or ())
        with self._errors(f"begin of {task.batch} participant {task.participant}"):
            self._check_epoch(app, task.epoch, "begin")
            if not task.transactional:
                producer = self._producer(client_id="eosink-writer")
                return _Txn(task, producer, None, keys)
            txid = self._free_txid(task)
            producer = self._initialised(txid, task.strategy == "2pc")
            try:
                # The id is shared by every writer epoch: a writer fenced between the check above and the
                # initialisation stops here, aborting only what it just began (see _names).
                self._check_epoch(app, task.epoch, "begin")
                producer.begin_transaction()
                key, value = marker_record(txid, task.batch, task.epoch, task.participant, task.attempt, "begun", 0)
                producer.send(self.config.progress_topic, value=value, key=key, partition=MARKERS).get(
                    timeout=self.config.transaction_timeout_ms / 1000
                )
            except BaseException:
                self._abandon(producer)
                raise
            return _Txn(task, producer, txid, keys)

    def write(self, txn: _Txn, data: pa.RecordBatch) -> None:
        """Send every row of ``data`` as a record of the attempt's transaction."""
        where = f"{txn.task.batch} participant {txn.task.participant}"
        try:
            records = to_records(
                data,
                value_format=self.config.value_format,
                default_topic=self.config.topic,
                upsert_keys=txn.keys,
                limit=self.config.record_limit,
                where=where,
            )
            with self._errors(f"write of {where}"):
                self._check_partitions(txn.producer, records, where)
                txn.sender.send(records)
                txn.rows += len(records)
                txn.topics.update(_topic_names(records))
            if txn.error is not None:
                self._raise_send_error(txn, where)
        except BaseException:
            self._abandon(txn.producer, txn.txid is not None)
            raise

    def pre_commit(self, txn: _Txn) -> Committable:
        """Flush the attempt's records (and, transactional, its "prepared" marker); leave the transaction open."""
        task = txn.task
        where = f"{task.batch} participant {task.participant}"
        try:
            with self._errors(f"pre_commit of {where}"):
                self._check_epoch(task.batch.app_id, task.epoch, "pre_commit")
                if txn.txid is not None:
                    key, value = marker_record(
                        txn.txid, task.batch, task.epoch, task.participant, task.attempt, "prepared", txn.rows
                    )
                    txn.producer.send(self.config.progress_topic, value=value, key=key, partition=MARKERS).add_errback(
                        txn.fail
                    )
                txn.producer.flush(timeout=self.config.transaction_timeout_ms / 1000)
            if txn.error is not None:
                self._raise_send_error(txn, where)
            txn.sender.check(f"pre_commit of {where}")
        except BaseException:
            self._abandon(txn.producer, txn.txid is not None)
            raise
        if txn.txid is None:
            ident = f"{self.config.transactional_id_prefix}.{app_tag(task.batch.app_id)}.idem.p{task.participant}"
            return Committable(
                task.batch, task.epoch, task.participant, f"{ident}.{task.attempt}", rows=txn.rows, payload={}
            )
        pid, epoch = producer_ids(txn.producer)
        self._drop(txn.producer)  # the transaction stays open: the coordinator ends it by id and epoch
        return Committable(
            task.batch,
            task.epoch,
            task.participant,
            committable_id(txn.txid, pid, epoch),
            rows=txn.rows,
            payload={
                "txid": txn.txid,
                "producer_id": pid,
                "producer_epoch": epoch,
                "attempt": task.attempt,
                "topics": sorted(txn.topics),
            },
        )

    # -- helpers ---------------------------------------------------------------------------------

    def _producer(self, **settings: Any) -> Any:
        kwargs = self.config.producer_kwargs(**settings)
        kwargs.setdefault("allow_auto_create_topics", self.config.create_topic)
        producer = open_producer(**kwargs)
        self._live.add(producer)
        return producer

    def _initialised(self, txid: str, two_phase: bool) -> Any:
        """A producer of ``txid`` with its transactions initialised; under two-phase commit, where the brokers
        allow it, with prepared transactions they keep until ended (KIP-939, see ``_two_phase``)."""
        from kafka.errors import TransactionalIdAuthorizationFailedError

        two_phase = two_phase and keeps_prepared(self._admin(), self.config.bootstrap_servers)
        producer = self._producer(
            client_id="eosink-writer", transactional_id=txid, transaction_timeout_ms=self.config.transaction_timeout_ms
        )
        try:
            initialise(producer, two_phase)
            return producer
        except TransactionalIdAuthorizationFailedError:
            self._drop(producer)
            if not two_phase:
                raise
        except BaseException:
            self._drop(producer)
            raise
        log.warning(
            "eosink: the brokers allow two-phase commit (KIP-939) but refused it for %s (is the writer missing the "
            "TWO_PHASE_COMMIT ACL?); its transactions time out after transaction_timeout_ms as usual",
            txid,
        )
        producer = self._producer(
            client_id="eosink-writer", transactional_id=txid, transaction_timeout_ms=self.config.transaction_timeout_ms
        )
        try:
            initialise(producer, False)
        except BaseException:
            self._drop(producer)
            raise
        return producer

    def _drop(self, producer: Any) -> None:
        """Close ``producer`` at once, ending nothing: an open transaction stays open (as after a crash)."""
        self._live.discard(producer)
        try:
            producer.close(timeout=0)
        except Exception as exc:  # closing must not hide the error that made us close
            log.debug("eosink: closing a Kafka producer: %s", exc)

    def _free_txid(self, task: TaskRef) -> str:
        """The attempt's pool slot's transactional id, passing over slots with a transaction still open."""
        for retry in range(_MAX_SLOTS):
            name = TxnName(app_tag(task.batch.app_id), task.participant, task_slot(retry))
            txid = name.txid(self.config.transactional_id_prefix)
            state = _wire.describe(self._admin(), txid)
            if state is None or state.state not in ("Ongoing", "PrepareCommit", "PrepareAbort"):
                return txid
            log.info("eosink: transactional id %s has an open transaction; %s takes another", txid, task.attempt)
        raise TransientError(
            f"Participant {task.participant} of {task.batch}: the first {_MAX_SLOTS} transactional ids of its pool "
            "all have open transactions.",
            "Let recovery settle in-doubt work (restart the query, or eosink recover), then retry.",
        )

    def _abandon(self, producer: Any, transactional: bool = True) -> None:
        """After a failure: abort the attempt's transaction (best effort, so that it does not hold back
        read_committed consumers until the broker's timeout), then close the producer."""
        if transactional:
            try:
                abort_within(producer, 10_000)
            except Exception as exc:
                log.debug("eosink: aborting a failed attempt's transaction: %s", exc)
        self._drop(producer)

    def _check_partitions(self, producer: Any, records: Records, where: str) -> None:
        """BadRecordError for a record whose topic or partition does not exist (before anything is sent)."""
        wanted: dict[str, set[int | None]] = {}
        if records.partitions is None:
            wanted = {topic: {None} for topic in _topic_names(records)}
        else:
            topics = records.topics if records.topics is not None else pa.nulls(len(records), pa.string())
            pairs = pa.StructArray.from_arrays(
                [pc.fill_null(topics, records.topic or ""), records.partitions], ["t", "p"]
            )
            for pair in pc.unique(pairs).to_pylist():
                wanted.setdefault(pair["t"], set()).add(pair["p"])
        for topic, partitions in wanted.items():
            known = producer.partitions_for(topic)
            if not known:
                raise BadRecordError(
                    f"{where}: topic {topic!r} does not exist.",
                    "Create it first, or pass KafkaConfig(create_topic=True) to let the sink create the sink's topic.",
                )
            bad = sorted(p for p in partitions if p is not None and p not in known)
            if bad:
                raise BadRecordError(
                    f"{where}: topic {topic!r} has partitions 0-{max(known)}; rows name partition(s) {bad}.",
                    "Use partition numbers below the topic's partition count, or leave partition null.",
                )

    def _raise_send_error(self, txn: _Txn, where: str) -> None:
        from eosink.connectors.kafka._errors import translate

        error = txn.error
        assert error is not None
        self.config.scrub_chain(error)
        translated = error if isinstance(error, EosinkError) else translate(self.config, error, f"sending {where}")
        raise translated from None


def _topic_names(records: Records) -> set[str]:
    """The topics ``records`` go to."""
    if records.topics is None:
        return {records.topic} if records.topic is not None else set()
    names = set(pc.unique(records.topics.drop_null()).to_pylist())
    return names | ({records.topic} if records.topic is not None and records.topics.null_count else set())
