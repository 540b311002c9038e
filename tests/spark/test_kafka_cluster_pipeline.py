"""A Spark pipeline into a three-node Kafka cluster (:class:`~eosink.services.kafka_cluster.KafkaCluster`) whose
nodes fail while it runs.

The driver reaches every node through the node's fault proxy; the checks read the topic with a consumer of their
own. Each test fails a node once the pipeline has committed its second batch, lets the same run go on to its
end (the query must ride out the failover by itself), brings the node back, and checks every row once, one bundle
per batch and no transaction left open. Under 2pc and txid-check a ``read_committed`` reader of another client
library (:class:`~eosink.connectors.kafka.audit.CommittedReader`) also polls throughout: no batch torn (its bundle
visible before all its rows), no row twice, and no last stable offset stuck once the node is back.
"""

from __future__ import annotations

import signal
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eosink._procs import is_stopped, kill_session, signal_session
from eosink.connectors.kafka.audit import CommittedReader, KafkaVerdict
from eosink.services.kafka_cluster import KafkaCluster, kafka_request

from .conftest import assert_clean, finish_with_restarts, wait_for
from .test_kafka_pipeline import PARTITIONS, KafkaPipeline

pytestmark = [pytest.mark.spark, pytest.mark.full, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(Path(tmp_path_factory.mktemp("kafka-cluster")), txn_state_partitions=1) as c:
        yield c


@pytest.fixture
def pipeline(tmp_path: Path, driver_java_opts: str, cluster: KafkaCluster) -> Iterator[KafkaPipeline]:
    p = KafkaPipeline(
        tmp_path,
        java_opts=driver_java_opts,
        bootstrap=cluster.bootstrap_servers,
        topic=f"sparkcluster_{uuid.uuid4().hex[:10]}",
        files=6,
    )
    cluster.create_topic(p.topic, partitions=PARTITIONS)
    yield p
    p.close()


SETTLE_S = 120.0
"""How long the last stable offsets may take to catch up once the node is back."""


def _row(value: dict[str, Any]) -> tuple[Any, ...]:
    """What names an input row in a record's JSON (as ``KafkaPipeline.expected`` counts them)."""
    return (value["id"], value["account"], value["amount"])


def _fail_mid_stream(
    p: KafkaPipeline,
    cluster: KafkaCluster,
    fail: Callable[[], Callable[[], None]],
    at: str | None = None,
    *,
    env: dict[str, str] | None = None,
) -> None:
    """Run the pipeline and ``fail()`` a node (it returns how to bring it back): after batch 1's bundle, the run
    going on by itself; or (``at``, a fault point) with the driver frozen at that step of batch 1 (SIGSTOP of its
    session), thawed once the node failed, and restarted from its checkpoint if it stopped with an eosink error.
    Bring the node back once the run ended; check."""
    verdict = _failed_run(p, cluster, fail, at, env=env, settle_s=SETTLE_S)
    assert verdict.bundles == p.bundles(), verdict
    found = verdict.problems if p.strategy != "idempotent" else [x for x in verdict.problems if "duplicated" not in x]
    assert found == [], verdict  # idempotent: a replay rewrites the same keys (consumers keep the last)


def _failed_run(
    p: KafkaPipeline,
    cluster: KafkaCluster,
    fail: Callable[[], Callable[[], None]],
    at: str | None,
    *,
    env: dict[str, str] | None,
    settle_s: float,
) -> KafkaVerdict:
    """The run of :func:`_fail_mid_stream`; the reader's verdict (and, for the sink itself, ``env`` None, the
    rows checked exact)."""
    reader = CommittedReader(cluster.direct_bootstrap, p.topic, PARTITIONS, p.progress_topic, p.app_id).start()
    try:
        proc = p.start(None if at is None else f"{at}@1:stop", env=env)
        try:
            if at is None:
                wait_for(lambda: len(p.bundles()) >= 2, 300, "batch 1's bundle")
            else:
                wait_for(lambda: at in p.fired(), 300, f"{at} to fire")
                wait_for(lambda: is_stopped(proc.pid), 30, "the driver to stop")
            committed = len(p.bundles())  # read before the node fails: a read right after may meet it dying
            back = fail()
            assert proc.poll() is None and committed < p.files, "the run ended before the node failed"
            if at is not None:
                signal_session(proc.pid, signal.SIGCONT)
        except BaseException:
            kill_session(proc.pid)
            proc.wait()
            raise
        try:
            if at is None:
                assert_clean(p.finish(proc))
            else:
                finish_with_restarts(p, proc, env)
        finally:
            back()
        p.reconnect()
        if env is None:
            p.assert_exact()
        return reader.verdict(p.expected(), settle_s=settle_s, key=_row)
    finally:
        reader.close()


@pytest.mark.parametrize("strategy", ["2pc", "txid-check", "idempotent"])
@pytest.mark.parametrize("role", ["coordinator", "leader"])
def test_a_node_killed_mid_stream_then_restarted_is_exact(
    pipeline: KafkaPipeline, cluster: KafkaCluster, role: str, strategy: str
) -> None:
    """The transaction coordinator (the leader of the one ``__transaction_state`` partition), or the leader of the
    topic's partition 0, SIGKILLed after batch 1's bundle, and restarted once the run ended."""
    pipeline.strategy = strategy

    _fail_mid_stream(pipeline, cluster, _killer(cluster, role, pipeline.topic))


# The steps of batch 1's commit a node is killed at, with the driver frozen there: mid-write (F2, in a
# participant), after the participants' pre_commit (F3), after Spark's commit log before the sink's commit (F5,
# 2pc only), mid-commit (F6: participants committed, the bundle not yet) and after the commit (F8); at each, the
# leader of the topic's partition 0 or the transaction coordinator, under each strategy.
STEP_POINTS = ("F2", "F3", "F5", "F6", "F8")
STEPS = [
    pytest.param(strategy, point, role, id=f"{strategy}-{point}-{role}")
    for strategy in ("2pc", "txid-check", "idempotent")
    for point in STEP_POINTS
    if point != "F5" or strategy == "2pc"
    for role in ("leader", "coordinator")
]


@pytest.mark.parametrize(("strategy", "point", "role"), STEPS)
def test_a_node_killed_at_a_step_of_the_commit_is_exact(
    pipeline: KafkaPipeline, cluster: KafkaCluster, strategy: str, point: str, role: str
) -> None:
    pipeline.strategy = strategy
    _fail_mid_stream(pipeline, cluster, _killer(cluster, role, pipeline.topic), at=point)


def _killer(cluster: KafkaCluster, role: str, topic: str) -> Callable[[], Callable[[], None]]:
    """SIGKILL the transaction coordinator or the leader of ``topic``'s partition 0; how to bring it back."""
    synced = "__transaction_state" if role == "coordinator" else topic

    def kill() -> Callable[[], None]:
        node = cluster.coordinator() if role == "coordinator" else cluster.leader(topic, 0)
        cluster.kill(node)
        return lambda: (cluster.start_node(node), cluster.wait_in_sync(synced))

    return kill


@pytest.mark.parametrize("strategy", ["2pc", "txid-check", "idempotent"])
@pytest.mark.parametrize(("role", "point"), [("leader", "F2"), ("coordinator", "F6")])
def test_a_node_paused_at_a_step_of_the_commit_is_exact(
    pipeline: KafkaPipeline, cluster: KafkaCluster, strategy: str, role: str, point: str
) -> None:
    """A zombie at a step of batch 1's commit: the leader of partition 0 mid-write (F2), or the transaction
    coordinator mid-commit (F6), SIGSTOPped with the driver frozen there, and resumed once the run ended (past its
    session timeout the controller moved its partitions; resumed, it still believes it leads them until it
    learns otherwise)."""
    pipeline.strategy = strategy

    def pause() -> Callable[[], None]:
        node = cluster.coordinator() if role == "coordinator" else cluster.leader(pipeline.topic, 0)
        synced = "__transaction_state" if role == "coordinator" else pipeline.topic
        cluster.pause(node)
        return lambda: (cluster.resume(node), cluster.wait_in_sync(synced))

    _fail_mid_stream(pipeline, cluster, pause, at=point)


CUT_S = 20.0
"""How long a node's proxy refuses the pipeline's clients (past their 4 s request timeout, many times over)."""


@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
@pytest.mark.parametrize(("role", "point"), [("leader", "F2"), ("coordinator", "F6")])
def test_a_node_cut_from_its_clients_at_a_step_of_the_commit_is_exact(
    pipeline: KafkaPipeline, cluster: KafkaCluster, strategy: str, role: str, point: str
) -> None:
    """A network partition between the pipeline and one node, which stays in the cluster (it still leads): the
    leader of partition 0 mid-write (F2), or the transaction coordinator mid-commit (F6), refuses every client
    connection for 20 s, with the driver frozen at that step while the cut begins. Pass: the run, restarted if it
    stopped with an eosink error, ends exact; nothing torn, no offset stuck."""
    pipeline.strategy = strategy
    pipeline.producer_options = {"request_timeout_ms": REQUEST_TIMEOUT_MS}

    def cut() -> Callable[[], None]:
        proxy = cluster.proxy(cluster.coordinator() if role == "coordinator" else cluster.leader(pipeline.topic, 0))
        proxy.refuse()
        healed = threading.Timer(CUT_S, proxy.passthrough)  # the partition's length, not a synchronisation
        healed.start()

        def back() -> None:
            healed.join()
            proxy.passthrough()

        return back

    _fail_mid_stream(pipeline, cluster, cut, at=point)


@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
def test_a_partition_leader_paused_past_its_session_timeout_then_resumed_is_exact(
    pipeline: KafkaPipeline, cluster: KafkaCluster, strategy: str
) -> None:
    pipeline.strategy = strategy

    def pause() -> Callable[[], None]:
        node = cluster.leader(pipeline.topic, 0)
        cluster.pause(node)
        return lambda: (cluster.resume(node), cluster.wait_in_sync(pipeline.topic))

    _fail_mid_stream(pipeline, cluster, pause)


# Requests held or replies lost at a step of batch 1's commit, the driver frozen there while the fault is armed
# at a node's proxy: the commit's first EndTxn (at the coordinator) held past the clients' request timeout and
# delivered once later transactions reuse its transactional ids (KAFKA-17754's shape), or its reply lost; a
# participant's first Produce (at the leader of partition 0) held past its attempt's failure and abort.
REQUEST_TIMEOUT_MS = 4000
"""The driver's and the participants' clients give up on a request after 4 s."""
HOLD_S = 12.0
"""A held request arrives 8 s after its client gave up."""
TXN_TIMEOUT_MS = 60_000
"""A transaction left open is aborted by its coordinator after 60 s: ``SETTLE_S`` is two of them."""
REQUEST_FAULTS = [
    pytest.param("EndTxn", "held", "coordinator", "F3", id="end-txn-held"),
    pytest.param("EndTxn", "reply-lost", "coordinator", "F3", id="end-txn-reply-lost"),
    pytest.param("Produce", "held", "leader", "F1", id="produce-held"),
]


@pytest.mark.parametrize("strategy", ["2pc", "txid-check", "idempotent"])
@pytest.mark.parametrize(("api", "fault", "role", "point"), REQUEST_FAULTS)
def test_a_request_held_or_its_reply_lost_at_a_step_of_the_commit_is_exact(
    pipeline: KafkaPipeline, cluster: KafkaCluster, strategy: str, api: str, fault: str, role: str, point: str
) -> None:
    """Pass: the held request was delivered (after the batches went on) or the reply was cut, and the run is
    exact: every row once, one bundle per batch, nothing torn, no last stable offset stuck, nothing in doubt."""
    pipeline.strategy = strategy

    _fail_mid_stream(pipeline, cluster, _request_fault(pipeline, cluster, api, fault, role), at=point)


def _request_fault(
    p: KafkaPipeline, cluster: KafkaCluster, api: str, fault: str, role: str
) -> Callable[[], Callable[[], None]]:
    """Arm the fault on the proxy of the coordinator or of the leader of ``p``'s partition 0, with the pipeline's
    clients set to give up before a held request arrives; how to check that it happened and disarm it."""
    p.producer_options = {"request_timeout_ms": REQUEST_TIMEOUT_MS}
    p.extra_args = ["--txn-timeout-ms", str(TXN_TIMEOUT_MS)]

    def arm() -> Callable[[], None]:
        proxy = cluster.proxy(cluster.coordinator() if role == "coordinator" else cluster.leader(p.topic, 0))
        if fault == "held":
            proxy.hold_request(kafka_request(api), HOLD_S)
        else:
            proxy.cut_after_request(kafka_request(api))

        def check() -> None:
            try:
                if fault == "held":
                    assert proxy.wait_for_held(HOLD_S + 60), f"the held {api} was never delivered"
                else:
                    assert proxy.wait_for_cut(1), f"no {api} reply was cut"
            finally:
                proxy.passthrough()

        return check

    return arm


LEFTOVER_KEEPING = {"EOSINK_TEST_SINK_CLASS": "kafka_mutants:LeftoverKeepingKafkaSink"}
"""The sink as it was before its commit ended failed attempts' transactions (the negative control)."""


def _failed_attempt(p: KafkaPipeline, cluster: KafkaCluster, settle_s: float, env: dict[str, str] | None = None) -> Any:
    """Run the pipeline with a task attempt of batch 1 failing after it wrote (F2, in an executor: its transaction
    is left open, as a killed executor's would be; Spark retries the task under another pool slot); the reader's
    verdict (and, for the sink itself, the rows checked exact: the mutant's leftover hides some until it times
    out)."""
    reader = CommittedReader(cluster.direct_bootstrap, p.topic, PARTITIONS, p.progress_topic, p.app_id).start()
    try:
        run = p.run("F2@1:raise", env=env)
        assert_clean(run)
        assert "F2" in run.faults_fired
        if env is None:
            p.assert_exact()
        return reader.verdict(p.expected(), settle_s=settle_s, key=_row)
    finally:
        reader.close()


@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
def test_a_task_attempt_failed_mid_write_holds_no_batch_back(
    pipeline: KafkaPipeline, cluster: KafkaCluster, strategy: str
) -> None:
    """Pass: the failed attempt's open transaction is aborted by the batch's commit before its bundle, so no reader
    ever sees batch 1's bundle before all its rows (the leftover would hold back the last stable offset of its
    partitions, for the 15 minutes of the pipeline's transaction timeout), and no offset stays stuck."""
    pipeline.strategy = strategy
    verdict = _failed_attempt(pipeline, cluster, SETTLE_S)
    assert verdict.problems == [], verdict
    assert verdict.bundles == pipeline.bundles(), verdict


def test_negative_control_a_commit_that_keeps_the_leftover_tears_the_batch(
    pipeline: KafkaPipeline, cluster: KafkaCluster
) -> None:
    """The reader's teeth for the test above: the same run with the sink as it was. Pass: the run ends cleanly and
    the reader saw batch 1 torn (its bundle before all its rows) and an offset stuck."""
    pipeline.strategy = "txid-check"
    verdict = _failed_attempt(pipeline, cluster, 10.0, LEFTOVER_KEEPING)
    assert verdict.torn and verdict.stuck, verdict


@pytest.mark.parametrize(("strategy", "point"), [("2pc", "F5"), ("txid-check", "F3")])
def test_a_dead_drivers_late_end_txn_meets_the_next_driver_is_exact(
    pipeline: KafkaPipeline, cluster: KafkaCluster, strategy: str, point: str
) -> None:
    """The driver frozen before batch 1's commit (2pc: after Spark's commit log; txid-check: after the
    participants' pre_commit) while the coordinator's proxy is armed to hold the next EndTxn; thawed, it sends
    its commit's first EndTxn, which is held, and is SIGKILLed. The next driver starts from the checkpoint, settles
    batch 1 (its recovery) and is frozen once batch 2's participants have their transactions open on the same
    transactional ids (F3): only then does the dead driver's EndTxn reach the coordinator. Pass: every row once,
    one bundle per batch, nothing torn, no offset stuck."""
    p = pipeline
    p.strategy = strategy
    p.producer_options = {"request_timeout_ms": REQUEST_TIMEOUT_MS}
    p.extra_args = ["--txn-timeout-ms", str(TXN_TIMEOUT_MS)]
    reader = CommittedReader(cluster.direct_bootstrap, p.topic, PARTITIONS, p.progress_topic, p.app_id).start()
    proxy = cluster.proxy(cluster.coordinator())
    try:
        proc = p.start(f"{point}@1:stop")
        try:
            _frozen_at(p, proc, 1)
            proxy.hold_request(kafka_request("EndTxn"), 600)
            signal_session(proc.pid, signal.SIGCONT)
            wait_for(lambda: proxy.stats.holding == 1, 120, "the commit's EndTxn to be held")
        finally:
            kill_session(proc.pid)
            proc.wait()
        proc = p.start("F3@2:stop")
        try:
            _frozen_at(p, proc, 2)
            assert proxy.stats.holding == 1, "the dead driver's EndTxn arrived before batch 2 began"
            proxy.release_held()
            assert proxy.wait_for_held(30), "the dead driver's EndTxn was never delivered"
            signal_session(proc.pid, signal.SIGCONT)
        except BaseException:
            kill_session(proc.pid)
            proc.wait()
            raise
        finally:
            proxy.passthrough()
        finish_with_restarts(p, proc)
        p.reconnect()
        p.assert_exact()
        verdict = reader.verdict(p.expected(), settle_s=SETTLE_S, key=_row)
    finally:
        reader.close()
    assert verdict.problems == [], verdict
    assert verdict.bundles == p.bundles(), verdict


def _frozen_at(p: KafkaPipeline, proc: Any, fired: int) -> None:
    """Wait until the run ``proc`` of ``p`` has fired its stop fault (the ``fired``-th of ``p``'s fault log) and
    its session is stopped."""
    wait_for(lambda: len(p.fired()) >= fired, 300, f"fault {fired} to fire")
    wait_for(lambda: is_stopped(proc.pid), 30, "the driver to stop")
