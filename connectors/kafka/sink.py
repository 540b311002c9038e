"""KafkaSink: exactly-once writes into Kafka topics (kafka-python), every strategy.

Kafka has no durable prepare: a transaction lives in the producer that opened it. So a
participant's ``pre_commit`` flushes its transaction and leaves it open, and the coordinator
later ends it with the producer id and epoch that wrote it (EndTxn), from its own process: the
way Flink's KafkaSink resumes a transaction. The contract maps onto Kafka like this::

    setup(app_id)          the progress topic (created if missing: 2 partitions, compacted), the
                           sink's topic (created with create_topic=True), the transaction
                           timeout against the brokers' transaction.max.timeout.ms, and whether
                           the brokers keep prepared transactions (KIP-939, ``_two_phase``)
    fence(app_id)          a producer with the app_id's fence id is initialised: the broker bumps
                           its epoch, which is the writer epoch (``current_epoch``: producer id and
                           epoch of that id, asked of the transaction coordinator); the bundle
                           producer is initialised too (fencing a zombie's), and a crashed writer's
                           unprepared transactions of older epochs are aborted
    begin, write,          participants (executors): one transactional producer per attempt,
    pre_commit             its transaction flushed and left open (``_write_side``)
    commit, abort,         the coordinator (driver): EndTxn per participant transaction, then the
    commit_status,         bundle in its own transaction; statuses from the progress topic and the
    recover,               transaction coordinator; in-doubt work from ListTransactions and the
    fetch_last_bundle      participants' markers (``_commit_side``)

Batches are not atomic for readers: a read_committed consumer sees a batch participant by
participant (a batch written by one participant is one transaction, so it appears whole). The
bundle is written after every participant's transaction committed, so it exists only for whole
batches. Under the idempotent strategy records are written without a transaction, keyed by
the upsert key columns: after a crash mid-batch the replay writes the same keys again, so the
log holds duplicates that compaction (or a consumer keeping the last record per key) removes.

The sink pickles to its configuration alone; clients and producers are opened lazily per
process. ``close()`` closes them without ending any transaction (prepared work stays open).
"""

from __future__ import annotations

import logging
import threading
from contextlib import AbstractContextManager, suppress
from typing import Any

import pyarrow as pa

from eosink._extras import require
from eosink.connectors.kafka import _wire
from eosink.connectors.kafka._clients import drop_admin, shared_admin
from eosink.connectors.kafka._commit_side import _CommitSide
from eosink.connectors.kafka._errors import permission_denied, translated
from eosink.connectors.kafka._names import BUNDLE_CLIENT_ID, bundle_key, bundle_txid, fence_txid
from eosink.connectors.kafka._producer import mark_committed, producer_ids
from eosink.connectors.kafka._progress import (
    BUNDLES,
    MARKERS,
    WINDOW,
    ProgressView,
    bundle_record,
    ensure_progress_topic,
)
from eosink.connectors.kafka._records import check_schema
from eosink.connectors.kafka._two_phase import keeps_prepared
from eosink.connectors.kafka._write_side import _Txn, _WriteSide
from eosink.connectors.kafka.config import KafkaConfig
from eosink.contract import Bundle, Capabilities, Sink
from eosink.errors import AmbiguousCommitError, ConfigurationError, FencedError, TransientError

__all__ = ["KafkaSink"]

log = logging.getLogger("eosink.kafka")

_BUNDLE_TIMEOUT_MS = 60_000
"""A bundle transaction lasts milliseconds; one left open by a dead driver is aborted by the broker
after this (or at once by the next ``fence``); less where the brokers allow less (``transaction_timeout_ms``)."""


class KafkaSink(_WriteSide, _CommitSide, Sink[_Txn]):
    """An exactly-once sink for Kafka topics (see the module docstring).

    ``KafkaSink(KafkaConfig(...))`` or ``KafkaSink("host:9092", topic="events", **options)``.
    Picklable with no open client; safe to share between threads.
    """

    lost_work_hint = (
        "the broker aborted the batch's transactions before eosink committed them: they stayed open longer than "
        "transaction_timeout_ms (the driver was down, or Spark took that long to commit the batch), or a producer "
        "was initialised with one of their transactional ids, or someone aborted them (kafka-transactions.sh)."
    )

    def __init__(self, config: KafkaConfig | str, /, **options: Any) -> None:
        require("Kafka", "kafka", "kafka")
        if isinstance(config, str):
            config = KafkaConfig(config, **options)
        elif options:
            raise ConfigurationError("Pass either a KafkaConfig or bootstrap_servers and options.", "Use one form.")
        self.config = config
        self.capabilities = Capabilities(
            supports_prepare=True,
            supports_txid_status=True,
            supports_keys=True,
            atomic_batch_visibility=False,
            supports_recover=True,
            begin_before_rows=True,  # a transaction's begin is several round trips; an empty one commits two markers
        )
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.RLock()
        self._live = set()
        self._bundle_producers: dict[str, Any] = {}
        self._view = ProgressView(self.config.progress_topic)

    def __repr__(self) -> str:
        return f"KafkaSink({self.config!r})"

    __str__ = __repr__

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}  # clients never travel

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]

    # -- clients and errors -------------------------------------------------------------------

    def _admin(self, client_id: str = "eosink") -> Any:
        """This process's admin client for the sink's settings and ``client_id`` (shared, see ``_clients``)."""
        return shared_admin(self.config.client_kwargs(client_id=client_id))

    def _errors(self, what: str) -> AbstractContextManager[None]:
        """kafka-python errors inside become eosink errors (the connector's one translator); the shared admin
        client is dropped first, so that a retry starts on fresh connections."""
        return translated(self.config, what, on_error=self._drop_admin)

    def _drop_admin(self) -> None:
        drop_admin(self.config.client_kwargs(client_id="eosink"))

    def close(self) -> None:
        """Close this sink's producers, ending no transaction (admin clients are the process's, kept)."""
        with self._lock:
            producers = list(self._live) + list(self._bundle_producers.values())
            self._live.clear()
            self._bundle_producers.clear()
        for producer in producers:
            _quietly(producer.close, timeout=0)

    # -- setup and fencing ----------------------------------------------------------------------

    def preflight(
        self, schema: pa.Schema | None, *, strategy: str, upsert_keys: tuple[str, ...] | None, transactional: bool
    ) -> None:
        """The stream's columns checked as a batch's are (the topic and the brokers were checked by ``setup``)."""
        if schema is not None:
            check_schema(schema, self.config.value_format, self.config.topic, tuple(upsert_keys or ()))

    def setup(self, app_id: str) -> None:
        """Create the progress topic (and the sink's topic, if asked); check the transaction timeout."""
        with self._errors("setup"):
            admin = self._admin()
            ensure_progress_topic(admin, self.config.progress_topic)
            if self.config.topic is not None:
                self._ensure_topic(admin, self.config.topic)
            self._check_timeout(admin)
            if keeps_prepared(admin, self.config.bootstrap_servers, refresh=True):
                log.info(
                    "eosink: the brokers at %s keep prepared transactions until they are ended (two-phase commit, "
                    "KIP-939): a 2pc batch waits for its commit however long the driver is down",
                    self.config.bootstrap_servers,
                )

    def _ensure_topic(self, admin: Any, topic: str) -> None:
        from kafka.errors import TopicAlreadyExistsError, TopicAuthorizationFailedError, UnknownTopicOrPartitionError

        try:
            described = [t for t in admin.describe_topics([topic]) if t.get("name") == topic]
        except UnknownTopicOrPartitionError:
            described = []
        codes = {int(t.get("error_code") or 0) for t in described}
        if TopicAuthorizationFailedError.errno in codes:  # not allowed to see it: it may well exist
            where = f"setup on Kafka at {self.config.bootstrap_servers}"
            raise permission_denied(self.config, where, f"describing topic {topic!r} was refused", topic=topic)
        if 0 in codes:
            return
        if not self.config.create_topic:
            raise ConfigurationError(
                f"The topic {topic!r} does not exist on Kafka at {self.config.bootstrap_servers}.",
                "Create it (kafka-topics.sh --create), or pass KafkaConfig(create_topic=True, topic_partitions=N).",
            )
        with suppress(TopicAlreadyExistsError):
            admin.create_topics(
                {topic: {"num_partitions": self.config.topic_partitions, "replication_factor": -1}},
                wait_for_metadata=True,
            )

    def _check_timeout(self, admin: Any) -> None:
        answer = next(_wire.broker_settings(admin, "transaction.max.timeout.ms"), None)  # the first that answers
        limit = None if answer is None else _int(answer)
        if limit is not None and self.config.transaction_timeout_ms > limit:
            raise ConfigurationError(
                f"transaction_timeout_ms={self.config.transaction_timeout_ms} is above the brokers' "
                f"transaction.max.timeout.ms={limit}: the broker would refuse every transaction.",
                f"Pass KafkaConfig(transaction_timeout_ms=<= {limit}), or raise transaction.max.timeout.ms on "
                "the brokers (two-phase commit keeps a batch's transactions open until Spark's checkpoint "
                "holds it, so allow for your longest batch and a driver restart).",
            )

    def fence(self, app_id: str) -> int:
        """Initialise the app_id's fence producer; its new producer id and epoch are the new writer epoch."""
        prefix = self.config.transactional_id_prefix
        txid = fence_txid(prefix, app_id)
        with self._errors(f"fence({app_id!r})"):
            producer = self._producer(client_id="eosink-fence", transactional_id=txid)
            try:
                producer.init_transactions()
            finally:
                self._drop(producer)
            epoch = self.current_epoch(app_id)
            bundles = self._bundle_producer(app_id, renew=True)  # a zombie's bundle producer is fenced from now on
            self._prove_progress_writable(app_id, bundles)
            self._abort_unprepared(app_id, epoch)
        return epoch

    def _prove_progress_writable(self, app_id: str, producer: Any) -> None:
        """One record to the progress topic's markers partition, in a transaction that is aborted (no reader sees
        it): a writer that may not write the progress topic stops here, before any batch, and not after the
        idempotent strategy's records became visible."""
        producer.begin_transaction()
        try:
            producer.send(self.config.progress_topic, key=b"eosink-probe", value=b"", partition=MARKERS).get(
                timeout=self.config.transaction_timeout_ms / 1000
            )
        except BaseException:
            self._forget_bundle_producer(app_id)  # its transaction is in an error state: a new one next time
            raise
        producer.abort_transaction()

    def current_epoch(self, app_id: str) -> int:
        """The newest writer epoch of ``app_id``: 1 + (producer id << 16 | epoch) of its fence id; 0 unfenced."""
        state = _wire.describe(self._admin(), fence_txid(self.config.transactional_id_prefix, app_id))
        return 0 if state is None else 1 + (state.producer_id << 16 | state.producer_epoch)

    def _check_epoch(self, app_id: str, epoch: int, what: str) -> None:
        current = self.current_epoch(app_id)
        if current > epoch:
            raise FencedError(
                f"{what} of {app_id!r} at epoch {epoch} was fenced: a newer writer holds epoch {current}.",
                "Stop this older writer; only the newest may commit.",
            )

    def _abort_unprepared(self, app_id: str, epoch: int) -> None:
        """Abort what crashed writers of older epochs left open before they prepared it (prepared work is in
        doubt: recovery decides)."""
        self._end_unprepared(app_id, lambda marker, state: marker.epoch < epoch)

    # -- the bundle transaction -----------------------------------------------------------------

    def _bundle_producer(self, app_id: str, *, renew: bool = False) -> Any:
        with self._lock:
            producer = self._bundle_producers.pop(app_id, None) if renew else self._bundle_producers.get(app_id)
        if producer is not None and renew:
            _quietly(producer.close, timeout=0)
            producer = None
        if producer is None:
            producer = self._producer(
                client_id=BUNDLE_CLIENT_ID,
                transactional_id=bundle_txid(self.config.transactional_id_prefix, app_id),
                transaction_timeout_ms=min(_BUNDLE_TIMEOUT_MS, self.config.transaction_timeout_ms),
            )
            try:
                producer.init_transactions()
            except BaseException:
                self._drop(producer)
                raise
            with self._lock:
                self._live.discard(producer)
                self._bundle_producers[app_id] = producer
        return producer

    def _forget_bundle_producer(self, app_id: str) -> None:
        with self._lock:
            producer = self._bundle_producers.pop(app_id, None)
        if producer is not None:
            _quietly(producer.close, timeout=0)

    def _write_bundle(self, bundle: Bundle) -> None:
        """The bundle (and a tombstone of the one WINDOW batches back) in the app_id's bundle transaction.

        The transaction is ended with EndTxn sent by the bundle client (``BUNDLE_CLIENT_ID``): the
        batch's commit request. Its lost reply is AmbiguousCommitError (``commit_status`` tells).
        Another process that committed for this app_id (a recovery) initialised the bundle
        producer after ours: ours is fenced, and is renewed once unless a newer writer holds the
        app_id.
        """
        for attempt in (1, 2):
            try:
                self._try_bundle(bundle)
                return
            except _BundleFenced:
                self._forget_bundle_producer(bundle.batch.app_id)
                if attempt == 2 or self.current_epoch(bundle.batch.app_id) > bundle.epoch:
                    raise FencedError(
                        f"The bundle of batch {bundle.batch} was not committed: a newer writer holds "
                        f"{bundle.batch.app_id!r} (its bundle producer was initialised by another process).",
                        "Stop this older writer; only the newest may commit.",
                    ) from None

    def _try_bundle(self, bundle: Bundle) -> None:
        from kafka.errors import InvalidProducerEpochError, ProducerFencedError

        app = bundle.batch.app_id
        producer = self._bundle_producer(app)
        errors: list[BaseException] = []
        try:
            producer.begin_transaction()
            key, value = bundle_record(bundle)
            topic = self.config.progress_topic
            producer.send(topic, value=value, key=key, partition=BUNDLES).add_errback(errors.append)
            old = bundle.batch.batch_id - WINDOW
            if old >= 0:
                producer.send(topic, value=None, key=bundle_key(app, old), partition=BUNDLES).add_errback(errors.append)
            producer.flush(timeout=_BUNDLE_TIMEOUT_MS / 1000)
            if errors:
                raise errors[0]
            pid, epoch = producer_ids(producer)
        except (ProducerFencedError, InvalidProducerEpochError):
            raise _BundleFenced() from None
        except BaseException as exc:
            self._forget_bundle_producer(app)  # its transaction, if open, is aborted by the next one
            if "ProducerFenced" in repr(exc):
                raise _BundleFenced() from None
            raise
        txid = bundle_txid(self.config.transactional_id_prefix, app)
        try:
            code = _wire.end_txn(self._admin(BUNDLE_CLIENT_ID), txid, pid, epoch, True, timeout_s=30)
        except Exception as exc:
            self._forget_bundle_producer(app)
            drop_admin(self.config.client_kwargs(client_id=BUNDLE_CLIENT_ID))
            self.config.scrub_chain(exc)
            raise AmbiguousCommitError(
                f"The commit of batch {bundle.batch}'s bundle was sent, and its reply lost: {type(exc).__name__}: "
                f"{self.config.scrub(str(exc))}.",
                "eosink asks commit_status and retries; nothing to do by hand.",
            ) from None
        if code in (_wire.PRODUCER_FENCED, _wire.INVALID_PRODUCER_EPOCH):
            raise _BundleFenced()
        if code != _wire.NONE:
            self._forget_bundle_producer(app)
            raise TransientError(
                f"The bundle transaction of batch {bundle.batch} ended with error code {code}.",
                "eosink retries the commit.",
            )
        mark_committed(producer)

    def _bundle_committing(self, app_id: str) -> bool:
        state = _wire.describe(self._admin(), bundle_txid(self.config.transactional_id_prefix, app_id))
        return state is not None and state.state == "PrepareCommit"


class _BundleFenced(Exception):
    """The bundle producer was fenced by a newer one of the same transactional id."""


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _quietly(fn: Any, *args: Any, **kwargs: Any) -> None:
    try:
        fn(*args, **kwargs)
    except Exception as exc:
        log.debug("eosink: %s: %s", getattr(fn, "__qualname__", fn), exc)
