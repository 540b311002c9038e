"""The Kafka sink on a three-node cluster (:class:`~eosink.services.kafka_cluster.KafkaCluster`): requests delayed
past their timeout, arriving after the sink moved on.

KAFKA-17754's shape: under the classic transaction protocol (EndTxn <= v3, what eosink sends) a producer keeps
its id and epoch across transactions, so an EndTxn delayed in the network can end a *later* transaction of the
same producer. eosink's answer (docs/design.md): a data transaction's id is initialised again (a new epoch)
at every ``begin``, and the bundle producer is replaced after any EndTxn whose reply did not come; a stale
EndTxn then carries an old epoch and is refused. These tests hold the commit's EndTxn at the coordinator's
proxy for longer than the client waits, let the batches go on, and check every batch once when it lands; one makes
it land inside the next transaction of its id; others lose an EndTxn's reply (the coordinator also SIGKILLed or
paused once it decided the commit), or hold a Produce past its transaction's abort.

Every test is judged by :class:`~eosink.connectors.kafka.audit.CommittedReader` (confluent-kafka, a client eosink
does not write with), polling while the batches run and after: no row lost or duplicated, no batch torn, no
last stable offset stuck. ``test_the_reader_flags_*`` are its negative controls; ``test_negative_control_*`` runs a
mutant sink that the reader must catch.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from eosink.connectors.kafka import KafkaConfig, KafkaSink, _wire
from eosink.connectors.kafka._names import COMMIT_REQUEST
from eosink.connectors.kafka._producer import mark_committed, open_producer
from eosink.connectors.kafka.admin import KafkaAdmin
from eosink.connectors.kafka.audit import CommittedReader, KafkaVerdict
from eosink.contract import Committable
from eosink.contracts._mini import VARIANTS, SparkOrderDriver, wait_until
from eosink.errors import EosinkError, InjectedFault
from eosink.services.kafka_cluster import KafkaCluster, kafka_request
from eosink.services.proxy import FaultProxy, RequestMatch

from ...spark.kafka_mutants import AbortingOnTimeoutKafkaSink
from .test_kafka_bad_input import APP, Driver, batches, expected

pytestmark = [pytest.mark.full, pytest.mark.timeout(600)]

TRANSACTIONAL = [v for v in VARIANTS if v.id in ("2pc", "txid-check")]
END_TXNS = [("bundle EndTxn", COMMIT_REQUEST), ("first EndTxn", kafka_request("EndTxn"))]
"""The commit's EndTxn requests: the bundle's (the batch's commit point), and the first participant's."""
HOLD_S = 12.0
REQUEST_TIMEOUT_MS = 4000
"""The sink's clients give up on a request after 4 s: a held EndTxn is past its timeout for 8 s more."""
TRANSACTION_TIMEOUT_MS = 60_000
"""A transaction left open is aborted by its coordinator after 60 s; the reader waits two of them for a stuck
last stable offset to move."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(Path(tmp_path_factory.mktemp("kafka-cluster")), txn_state_partitions=1) as c:
        yield c


def _config(cluster: KafkaCluster, topic: str, *, create: bool = True) -> KafkaConfig:
    if create:
        cluster.create_topic(topic, partitions=2)
    return KafkaConfig(
        cluster.bootstrap_servers,
        topic=topic,
        value_format="json",
        progress_topic=f"{topic}_progress",
        transactional_id_prefix=topic,
        producer_options={"request_timeout_ms": REQUEST_TIMEOUT_MS},
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
    )


def _reader(cluster: KafkaCluster, config: KafkaConfig) -> CommittedReader:
    """The independent judge, polling from before the first batch (the progress topic exists once the fence ran)."""
    assert config.topic is not None
    return CommittedReader(cluster.direct_bootstrap, config.topic, 2, config.progress_topic, APP).start()


def _run_through(driver: Driver, work: list[Any], starts: int = 3) -> None:
    """Run every batch, starting the query again when it stops (as Spark's restart would)."""
    for _ in range(starts):
        try:
            driver.run(work)
            return
        except EosinkError:
            driver.restart()
    pytest.fail(f"the query did not get through its batches in {starts} starts")


def _judge(cluster: KafkaCluster, config: KafkaConfig, reader: CommittedReader, work: list[Any]) -> KafkaVerdict:
    """The reader's verdict (last stable offsets given two transaction timeouts), the bundles once each, and no
    transaction of the app left open."""
    try:
        verdict = reader.verdict(expected(work), settle_s=2 * TRANSACTION_TIMEOUT_MS / 1000)
    finally:
        reader.close()
    assert verdict.problems == [], verdict
    assert verdict.bundles == list(range(len(work)))
    assert [b.batch.batch_id for b in KafkaAdmin(config).bundles(APP)] == list(range(len(work)))
    admin = cluster.admin()
    try:
        open_txns = [
            t.transactional_id
            for ts in admin.list_transactions().values()
            for t in ts
            if t.transactional_id.startswith(config.transactional_id_prefix)
            and getattr(_wire.describe(admin, t.transactional_id), "state", None) in ("Ongoing", "PrepareCommit")
        ]
    finally:
        admin.close()
    assert not open_txns, f"transactions left open: {open_txns}"
    return verdict


def _scenario(
    tmp_path: Path,
    cluster: KafkaCluster,
    variant: object,
    batches_n: int,
    node: Callable[[KafkaConfig], int],
    fault: Callable[[FaultProxy], None],
    after: Callable[[FaultProxy], None],
    sink: type[KafkaSink] | None = None,
) -> KafkaVerdict:
    """A first batch on a fresh topic; then ``fault`` armed on the proxy of ``node`` (of the config), every batch
    run through it, ``after`` checked; the batches run once more (nothing left to do); then the verdict, judged
    (:func:`_judge`) for the sink itself, returned as read for a mutant ``sink``."""
    config = _config(cluster, f"k_{uuid.uuid4().hex[:8]}")
    proxy = cluster.proxy(node(config))
    work = batches(batches_n)
    driver = SparkOrderDriver(tmp_path, variant, config, sink or KafkaSink, APP)  # type: ignore[arg-type]
    reader = None
    try:
        driver.run(work[:1])  # the fence and a first batch, on a cluster that just made the topic
        reader = _reader(cluster, config)
        fault(proxy)
        _run_through(driver, work)  # type: ignore[arg-type]
        after(proxy)
        driver.run(work)  # type: ignore[arg-type]  # after the late request: nothing left to do, nothing changed
    finally:
        proxy.passthrough()
        driver.close()
    assert reader is not None
    if sink is None:
        return _judge(cluster, config, reader, work)
    try:
        return reader.verdict(expected(work), settle_s=2 * TRANSACTION_TIMEOUT_MS / 1000)
    finally:
        reader.close()


def _coordinator(cluster: KafkaCluster) -> Callable[[KafkaConfig], int]:
    return lambda _: cluster.coordinator()


def _went_on_while_held(what: str) -> Callable[[FaultProxy], None]:
    def check(proxy: FaultProxy) -> None:
        assert proxy.stats.holding == 1, f"every batch waited for the held {what}: nothing went on past it"
        assert proxy.wait_for_held(HOLD_S + 30), f"the {what} was never delivered"

    return check


@pytest.mark.parametrize("variant", TRANSACTIONAL, ids=lambda v: v.id)
@pytest.mark.parametrize(("held", "match"), END_TXNS, ids=["bundle", "participant"])
def test_an_end_txn_delayed_past_its_timeout_cannot_end_a_later_transaction(
    tmp_path: Path, cluster: KafkaCluster, variant: object, held: str, match: RequestMatch
) -> None:
    """Batch 1's commit has its EndTxn (the bundle's, or the first participant's) held at the coordinator for 12 s;
    the client gives up after 4 s, the query retries (restarting if it stopped), and batches 2 to 4 go on, reusing
    the same transactional ids. Pass: every batch was done while the request was still held, and it was delivered
    after; every row is visible once, each batch's bundle once, and no transaction of the app is left open."""
    _scenario(
        tmp_path,
        cluster,
        variant,
        5,
        _coordinator(cluster),
        lambda proxy: proxy.hold_request(match, HOLD_S),
        _went_on_while_held(held),
    )


class EpochKeepingKafkaSink(KafkaSink):
    """The negative control of the test below: KafkaSink without a new producer epoch per transaction. A
    participant keeps its transactional id's producer (its producer id and epoch) for the id's next transaction,
    as a classic-protocol writer that reuses ids without re-initialising them does: KAFKA-17754's shape."""

    kept: ClassVar[dict[str, Any]] = {}
    """Producers whose transaction a pre_commit left for the driver to end, by transactional id."""

    def __init__(self, config: KafkaConfig) -> None:
        super().__init__(config)
        self._precommitting: Any = None

    def _initialised(self, txid: str, two_phase: bool) -> Any:
        producer = self.kept.pop(txid, None)
        if producer is None:
            return super()._initialised(txid, two_phase)
        mark_committed(producer)  # the driver's EndTxn ended its last transaction; no InitProducerId
        self._live.add(producer)
        return producer

    def _drop(self, producer: Any) -> None:
        if producer is self._precommitting:
            self._live.discard(producer)  # kept open by pre_commit below
            return
        super()._drop(producer)

    def pre_commit(self, txn: Any) -> Committable:
        self._precommitting = txn.producer
        try:
            made = super().pre_commit(txn)
        except BaseException:
            self._precommitting = None
            self._drop(txn.producer)
            raise
        self._precommitting = None
        if txn.txid is not None:
            self.kept[txn.txid] = txn.producer
        return made


def _failing_once_the_end_txn_lands(base: type[KafkaSink], proxy: FaultProxy) -> type[KafkaSink]:
    """``base``, whose first attempt of batch 2's participant 0 waits, once its rows are acknowledged in its
    open transaction, until the held EndTxn has reached the coordinator; then it fails (Spark retries the task)."""
    fired: list[bool] = []

    class Interleaved(base):  # type: ignore[misc,valid-type]
        def write(self, txn: Any, data: Any) -> None:
            super().write(txn, data)
            if (txn.task.batch.batch_id, txn.task.participant) != (2, 0) or fired:
                return
            fired.append(True)
            txn.producer.flush(timeout=30)
            assert proxy.wait_for_held(HOLD_S + 30), "the held EndTxn was never delivered"
            raise InjectedFault("participant 0 of batch 2 fails after the stale EndTxn reached the coordinator")

    return Interleaved


def _stale_end_txn_inside_a_later_transaction(
    tmp_path: Path, cluster: KafkaCluster, variant: object, sink: type[KafkaSink]
) -> KafkaVerdict:
    """Batch 1's first participant EndTxn held at the coordinator 12 s (the driver gives up after 4 s and
    commits it again); batch 2's participant 0 begins on the same transactional id (the pool's first slot), writes,
    and waits until the held EndTxn lands inside its open transaction; then its attempt fails and is retried.
    The reader's verdict once every batch ran."""
    config = _config(cluster, f"k_{uuid.uuid4().hex[:8]}")
    proxy = cluster.proxy(cluster.coordinator())
    work = batches(4)
    work[2].task_retries = 1
    made = _failing_once_the_end_txn_lands(sink, proxy)
    driver = SparkOrderDriver(tmp_path, variant, config, made, APP)  # type: ignore[arg-type]
    reader = None
    try:
        driver.run(work[:1])
        reader = _reader(cluster, config)
        proxy.hold_request(kafka_request("EndTxn"), HOLD_S)
        _run_through(driver, work)  # type: ignore[arg-type]
        assert proxy.stats.requests_held, "no EndTxn was held"
    finally:
        proxy.passthrough()
        driver.close()
        EpochKeepingKafkaSink.kept.clear()
    try:
        return reader.verdict(expected(work), settle_s=2 * TRANSACTION_TIMEOUT_MS / 1000)
    finally:
        reader.close()


@pytest.mark.parametrize("variant", TRANSACTIONAL, ids=lambda v: v.id)
def test_an_end_txn_delivered_inside_the_next_transaction_of_its_id_ends_nothing(
    tmp_path: Path, cluster: KafkaCluster, variant: object
) -> None:
    """KAFKA-17754 itself: the stale EndTxn(commit) of batch 1 reaches the coordinator while batch 2's first
    attempt has an open transaction under the same transactional id. Pass: it carries an old epoch and is refused,
    so the failed attempt's rows are never visible; every row once, nothing torn or stuck."""
    verdict = _stale_end_txn_inside_a_later_transaction(tmp_path, cluster, variant, KafkaSink)
    assert verdict.problems == [], verdict
    assert verdict.bundles == [0, 1, 2, 3], verdict


def test_negative_control_an_id_reused_without_a_new_epoch_is_committed_by_the_stale_end_txn(
    tmp_path: Path, cluster: KafkaCluster
) -> None:
    """The teeth of the test above: the same run with :class:`EpochKeepingKafkaSink`. Pass: the stale EndTxn
    committed the failed attempt's open transaction, and the reader flags its rows duplicated (the retry wrote
    them again)."""
    verdict = _stale_end_txn_inside_a_later_transaction(tmp_path, cluster, TRANSACTIONAL[1], EpochKeepingKafkaSink)
    assert verdict.duplicated > 0, verdict


@pytest.mark.parametrize("variant", TRANSACTIONAL, ids=lambda v: v.id)
@pytest.mark.parametrize(("lost", "match"), END_TXNS, ids=["bundle", "participant"])
def test_an_end_txn_whose_reply_is_lost_is_settled_from_what_the_cluster_holds(
    tmp_path: Path, cluster: KafkaCluster, variant: object, lost: str, match: RequestMatch
) -> None:
    """Batch 1's commit sends its EndTxn (the bundle's, or the first participant's); the coordinator ends the
    transaction, and its reply never reaches the sink (the connection is cut). Pass: the query settles the
    commit from the cluster's own records (the bundle, the transaction's state) and goes on; every batch once."""

    def was_cut(proxy: FaultProxy) -> None:
        assert proxy.wait_for_cut(5), f"no {lost} was cut"

    _scenario(
        tmp_path, cluster, variant, 4, _coordinator(cluster), lambda proxy: proxy.cut_after_request(match), was_cut
    )


def test_negative_control_an_end_txn_whose_reply_is_lost_taken_for_a_failed_commit_is_written_twice(
    tmp_path: Path, cluster: KafkaCluster
) -> None:
    """The teeth of the test above: its run (the first participant's EndTxn reply lost, txid-check) with
    :class:`AbortingOnTimeoutKafkaSink`, which aborts after a commit that got no answer and gives the batch up.
    Pass: the mutant gave a transaction up, and the reader flags the replayed participant's rows duplicated (the
    coordinator had committed them)."""
    AbortingOnTimeoutKafkaSink.aborted.clear()
    verdict = _scenario(
        tmp_path,
        cluster,
        TRANSACTIONAL[1],
        4,
        _coordinator(cluster),
        lambda proxy: proxy.cut_after_request(kafka_request("EndTxn")),
        lambda proxy: None,
        AbortingOnTimeoutKafkaSink,
    )
    assert AbortingOnTimeoutKafkaSink.aborted, "the mutant never gave a commit up"
    assert verdict.duplicated > 0, verdict


def _coordinator_lost_once_it_decided(
    cluster: KafkaCluster, how: str
) -> tuple[Callable[[FaultProxy], None], Callable[[FaultProxy], None]]:
    """The fault and its check for a coordinator that fails as it commits: every EndTxn reaching it has its reply
    dropped, and once the first one was answered (the commit decided and in its log) the node is SIGKILLed
    (``kill``) or SIGSTOPped past its session timeout (``pause``), from another thread while the batches go on;
    the check brings it back and waits for the transaction log to be in sync again."""
    node = cluster.coordinator()
    failed: list[int] = []

    def fail_when_decided(proxy: FaultProxy) -> None:
        if proxy.wait_for_cut(120):
            (cluster.kill if how == "kill" else cluster.pause)(node)
            failed.append(node)

    worker: list[threading.Thread] = []

    def arm(proxy: FaultProxy) -> None:
        proxy.cut_after_request(kafka_request("EndTxn"), times=1000)
        worker.append(threading.Thread(target=fail_when_decided, args=(proxy,), daemon=True))
        worker[0].start()

    def back(proxy: FaultProxy) -> None:
        worker[0].join(150)
        proxy.passthrough()
        assert failed == [node], "no EndTxn reached the coordinator: it was never failed"
        if how == "kill":
            cluster.start_node(node)
        else:
            cluster.resume(node)
        cluster.wait_in_sync("__transaction_state")

    return arm, back


@pytest.mark.parametrize("variant", TRANSACTIONAL, ids=lambda v: v.id)
@pytest.mark.parametrize("how", ["kill", "pause"])
def test_a_coordinator_lost_as_it_answers_the_commit_is_settled_by_the_next_one(
    tmp_path: Path, cluster: KafkaCluster, variant: object, how: str
) -> None:
    """Batch 1's first EndTxn is decided by the transaction coordinator, whose reply is lost; the coordinator is
    then SIGKILLed, or paused past its session timeout (a zombie), and the controller moves the transaction log to
    another node. Pass: the sink asks the new coordinator, which holds the decided commit; every batch once, nothing
    torn or stuck, no transaction left open."""
    arm, back = _coordinator_lost_once_it_decided(cluster, how)
    _scenario(tmp_path, cluster, variant, 4, _coordinator(cluster), arm, back)


@pytest.mark.parametrize("how", ["kill", "pause"])
def test_negative_control_a_commit_given_up_when_its_coordinator_is_lost_is_written_twice(
    tmp_path: Path, cluster: KafkaCluster, how: str
) -> None:
    """The teeth of the test above: the same run (txid-check) with :class:`AbortingOnTimeoutKafkaSink`. Pass: the
    reader flags the replayed participant's rows duplicated (the old coordinator had decided its commit, and the
    new one completed it)."""
    AbortingOnTimeoutKafkaSink.aborted.clear()
    arm, back = _coordinator_lost_once_it_decided(cluster, how)
    verdict = _scenario(
        tmp_path, cluster, TRANSACTIONAL[1], 4, _coordinator(cluster), arm, back, AbortingOnTimeoutKafkaSink
    )
    assert AbortingOnTimeoutKafkaSink.aborted, "the mutant never gave a commit up"
    assert verdict.duplicated > 0, verdict


@pytest.mark.parametrize("variant", TRANSACTIONAL, ids=lambda v: v.id)
def test_a_produce_held_past_its_transactions_abort_then_delivered_changes_nothing(
    tmp_path: Path, cluster: KafkaCluster, variant: object
) -> None:
    """A participant's Produce to the leader of partition 0 is held 12 s: the sink's client gives up after 4 s,
    the attempt fails and its transaction is aborted, the batch is written again, and later batches go on; then
    the held Produce arrives. Pass: the batches went on while it was held; it adds nothing a read_committed
    reader sees (its transaction is over, its epoch old), every batch once, and no last stable offset stays
    stuck."""
    _scenario(
        tmp_path,
        cluster,
        variant,
        4,
        lambda config: cluster.leader(str(config.topic), 0),
        lambda proxy: proxy.hold_request(kafka_request("Produce"), HOLD_S),
        _went_on_while_held("Produce"),
    )


class NonIdempotentKafkaSink(KafkaSink):
    """The negative control of the held Produce: the idempotent strategy's writes (no transaction) from a producer
    without the brokers' idempotence (no producer id, no sequence numbers), as an at-least-once writer's. Its client
    resends a Produce that timed out, and a broker cannot tell the stale copy that arrives later from a new one."""

    def _producer(self, **settings: Any) -> Any:
        if "transactional_id" in settings:
            return super()._producer(**settings)

        producer = open_producer(**{**self.config.producer_kwargs(**settings), "enable_idempotence": False})
        self._live.add(producer)
        return producer


def test_negative_control_a_produce_held_past_its_timeout_without_idempotence_lands_twice(
    tmp_path: Path, cluster: KafkaCluster
) -> None:
    """The teeth of the test above: the same held Produce under the idempotent strategy (no transaction) with
    :class:`NonIdempotentKafkaSink`. Pass: once the held Produce is delivered the reader sees more rows than
    before (the stale request was appended beside its resent copy), and flags them duplicated."""
    idempotent = next(v for v in VARIANTS if v.id == "idempotent-generated")
    config = _config(cluster, f"k_{uuid.uuid4().hex[:8]}")
    assert config.topic is not None
    proxy = cluster.proxy(cluster.leader(config.topic, 0))
    work = batches(4)
    driver = SparkOrderDriver(tmp_path, idempotent, config, NonIdempotentKafkaSink, APP)
    reader = None
    try:
        driver.run(work[:1])
        reader = _reader(cluster, config)
        proxy.hold_request(kafka_request("Produce"), HOLD_S)
        _run_through(driver, work)  # type: ignore[arg-type]
        assert proxy.stats.holding == 1, "every batch waited for the held Produce: nothing went on past it"
        reader.poll()
        before = sum(reader.seen.values())
        assert proxy.wait_for_held(HOLD_S + 30), "the Produce was never delivered"

        def grew() -> bool:
            assert reader is not None
            reader.poll()
            return sum(reader.seen.values()) > before

        assert wait_until(grew, 30), f"the held Produce added nothing visible ({before} rows before and after)"
    finally:
        proxy.passthrough()
        driver.close()
    try:
        # the idempotent strategy adds its key to each record: rows are named by their id
        ids = Counter(r["id"] for b in work for r in b.rows)
        verdict = reader.verdict(ids, settle_s=10.0, key=lambda value: value["id"])
    finally:
        reader.close()
    assert verdict.lost == 0 and verdict.duplicated > 0, verdict


# -- the reader's negative controls ----------------------------------------------------------------------------


def test_the_reader_flags_lost_duplicated_torn_and_hanging_writes(cluster: KafkaCluster) -> None:
    """Negative controls of :class:`CommittedReader`, one per finding, written past the sink with kafka-python:
    a batch's bundle committed while one of its rows is not (torn), a row written twice (duplicated), a row never
    written (lost), and a transaction left open (a stuck last stable offset). Pass: each is reported."""
    from kafka import KafkaProducer

    from eosink.connectors.kafka._progress import BUNDLES, TOPIC_CONFIG

    topic = f"kn_{uuid.uuid4().hex[:8]}"
    progress = f"{topic}_progress"
    cluster.create_topic(topic, partitions=2)
    admin = cluster.admin()
    try:
        admin.create_topics({progress: {"num_partitions": 2, "replication_factor": 3, "configs": TOPIC_CONFIG}})
    finally:
        admin.close()
    rows = [json.dumps({"id": i}, sort_keys=True) for i in range(4)]
    bundle = {"app_id": APP, "bundle": {"batch": {"app_id": APP, "batch_id": 0}, "fingerprint": {"rows": 4}}}
    reader = CommittedReader(cluster.direct_bootstrap, topic, 2, progress, APP)
    committed = KafkaProducer(bootstrap_servers=cluster.direct_bootstrap, transactional_id=f"{topic}-ok")
    hanging = KafkaProducer(
        bootstrap_servers=cluster.direct_bootstrap, transactional_id=f"{topic}-open", transaction_timeout_ms=600_000
    )
    try:
        committed.init_transactions()
        committed.begin_transaction()
        for row in (rows[0], rows[1], rows[1]):  # rows[2] and rows[3] are never written
            committed.send(topic, value=row.encode(), partition=0)
        committed.send(progress, key=b"bundle|0", value=json.dumps(bundle).encode(), partition=BUNDLES)
        committed.commit_transaction()
        hanging.init_transactions()
        hanging.begin_transaction()
        hanging.send(topic, value=rows[3].encode(), partition=1).get(timeout=30)
        hanging.flush()
        reader.poll()
        verdict = reader.verdict(Counter(rows[:3]), settle_s=3.0)
    finally:
        reader.close()
        committed.close(timeout=5)
        hanging.close(timeout=0)  # its transaction stays open until the broker's timeout
    assert verdict.lost == 1 and verdict.duplicated == 1, verdict
    assert verdict.torn and "3 rows are visible" in verdict.torn[0], verdict
    assert f"{topic}[1]" in verdict.stuck, verdict
    assert len(verdict.problems) == 4


def test_negative_control_a_failover_to_a_replica_left_behind_takes_committed_batches_back(
    tmp_path: Path, cluster: KafkaCluster
) -> None:
    """The reader's teeth for a partition leader's death: a topic that allows what the cluster's own forbid
    (two replicas, ``min.insync.replicas=1``, unclean leader election). Its follower is killed; batches 1 and 2
    commit on the leader alone; the leader is killed and the follower, left behind, started again: the controller
    elects it. Pass: the reader read both batches during the run, and flags their 12 rows (at least) gone after,
    and lost."""
    leader, follower = sorted(cluster.running())[:2]
    topic = f"ku_{uuid.uuid4().hex[:8]}"
    admin = cluster.admin()
    try:
        admin.create_topics(
            {
                topic: {
                    "assignments": {0: [leader, follower], 1: [leader, follower]},
                    "configs": {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
                }
            },
            wait_for_metadata=True,
        )
    finally:
        admin.close()

    def placed(lead: int, isr: list[int] | None = None) -> Callable[[], bool]:
        """Whether both partitions are led by ``lead`` (with ``isr`` in sync), as the running nodes tell."""

        def check() -> bool:
            try:
                parts = cluster.partitions(topic)
            except Exception:  # a node starting or just killed
                return False
            return len(parts) == 2 and all(p[0] == lead and isr in (None, p[1]) for p in parts.values())

        return check

    assert wait_until(placed(leader, sorted([leader, follower])), 60), cluster.partitions(topic)
    config = _config(cluster, topic, create=False)
    work = batches(3)
    driver = Driver(tmp_path, TRANSACTIONAL[1], config)  # type: ignore[arg-type]
    reader = None
    try:
        driver.run(work[:1])
        reader = _reader(cluster, config)
        cluster.kill(follower)
        assert wait_until(placed(leader, [leader]), 60), f"the follower stayed in sync: {cluster.partitions(topic)}"
        driver.run(work)  # batches 1 and 2, on the leader alone
        driver.close()
        reader.poll()
        assert sum(reader.seen.values()) == 18, reader.seen
        cluster.kill(leader)
        cluster.start_node(follower)
        assert wait_until(placed(follower), 60), f"the follower was not elected: {cluster.partitions(topic)}"
        verdict = reader.verdict(expected(work), settle_s=10.0)
    finally:
        driver.close()
        if reader is not None:
            reader.close()
        for node in (follower, leader):
            cluster.start_node(node)
        cluster.wait_in_sync("__transaction_state")
    # the 12 rows of batches 1 and 2 at least (a follower restarted after a SIGKILL may also come back without
    # batch 0's, from the high watermark it last checkpointed); each one read during the run, its log cut below
    assert verdict.lost >= 12 and verdict.vanished == verdict.lost and verdict.truncated, verdict
