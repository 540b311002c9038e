"""The three-node Kafka cluster of the failover tests: sized as production runs it, and every fault it offers works.

One cluster for the module (three JVMs take about 15 s to start); each test leaves every node running. A
transaction is checked with kafka-python's own producer and a ``read_committed`` consumer through the proxies.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from eosink.services.kafka_cluster import KafkaCluster, kafka_request

pytestmark = [pytest.mark.full, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(Path(tmp_path_factory.mktemp("kafka-cluster")), txn_state_partitions=1) as c:
        yield c


@pytest.fixture
def topic(cluster: KafkaCluster) -> str:
    name = f"kc_{uuid.uuid4().hex[:8]}"
    cluster.create_topic(name, partitions=1)
    return name


def _commit_one(cluster: KafkaCluster, topic: str, value: bytes, **producer: object) -> None:
    p = KafkaProducer(
        bootstrap_servers=cluster.live_bootstrap,  # not a paused node's proxy: its bootstrap would time out
        transactional_id=f"kc-{uuid.uuid4().hex[:8]}",
        acks="all",
        request_timeout_ms=30_000,
        **producer,
    )
    try:
        p.init_transactions()
        p.begin_transaction()
        p.send(topic, value).get(timeout=30)
        p.commit_transaction()
    finally:
        p.close(timeout=5)


def _committed(cluster: KafkaCluster, topic: str) -> list[bytes]:
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.direct_bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        seen: list[bytes] = []
        for _ in range(60):
            if consumer.position(tp) >= end:
                break
            for records in consumer.poll(timeout_ms=500).values():
                seen.extend(r.value for r in records)
        return seen
    finally:
        consumer.close()


def test_the_cluster_is_sized_as_production_runs_kafka(cluster: KafkaCluster, topic: str) -> None:
    """Pass: three brokers; the topic on all three in sync; one transaction coordinator; the settings asked for."""
    assert cluster.brokers() == [1, 2, 3]
    assert cluster.partitions(topic)[0][1] == [1, 2, 3]
    assert cluster.coordinator() in (1, 2, 3)
    config = (cluster.root / "node-1.properties").read_text()
    for setting in (
        "min.insync.replicas=2",
        "unclean.leader.election.enable=false",
        "transaction.state.log.replication.factor=3",
        "transaction.state.log.min.isr=2",
        "transaction.state.log.num.partitions=1",
    ):
        assert setting in config
    _commit_one(cluster, topic, b"first")
    assert _committed(cluster, topic) == [b"first"]


def test_a_killed_leader_is_replaced_and_rejoins_after_its_restart(cluster: KafkaCluster, topic: str) -> None:
    """Pass: with the partition's leader SIGKILLed, another node leads it and a transaction commits (two in sync);
    restarted, the node is back in the ISR."""
    leader = cluster.leader(topic)
    cluster.kill(leader)
    try:
        cluster.wait_in_sync(topic)
        assert cluster.leader(topic) != leader
        _commit_one(cluster, topic, b"without-the-old-leader")
    finally:
        cluster.start_node(leader)
    cluster.wait_for_brokers(3)
    cluster.wait_in_sync(topic)
    assert cluster.partitions(topic)[0][1] == [1, 2, 3]
    assert _committed(cluster, topic) == [b"without-the-old-leader"]


def test_a_paused_coordinator_is_fenced_and_another_node_coordinates(cluster: KafkaCluster, topic: str) -> None:
    """Pass: the coordinator SIGSTOPped past the session timeout is fenced (out of the transaction log's ISR);
    another node then coordinates and a transaction commits; resumed, the node is back in sync."""
    coordinator = cluster.coordinator()
    cluster.pause(coordinator)
    try:
        cluster.wait_in_sync("__transaction_state")
        assert cluster.coordinator() != coordinator
        assert coordinator not in cluster.partitions("__transaction_state")[0][1]
        _commit_one(cluster, topic, b"while-paused")
    finally:
        cluster.resume(coordinator)
    cluster.wait_in_sync("__transaction_state")
    assert coordinator in cluster.partitions("__transaction_state")[0][1]
    assert _committed(cluster, topic) == [b"while-paused"]


def test_an_end_txn_held_at_the_coordinator_arrives_late(cluster: KafkaCluster, topic: str) -> None:
    """Pass: the commit's EndTxn, held 3 s at the coordinator's proxy, is delivered; the transaction commits."""
    proxy = cluster.proxy(cluster.coordinator())
    proxy.hold_request(kafka_request("EndTxn"), 3.0)
    try:
        _commit_one(cluster, topic, b"late")
        assert proxy.wait_for_held(10.0)
        assert len(proxy.stats.requests_held) == 1
    finally:
        proxy.passthrough()
    assert _committed(cluster, topic) == [b"late"]


def test_a_node_cut_from_its_clients_is_reached_again_after_passthrough(cluster: KafkaCluster, topic: str) -> None:
    """Pass: with the leader's proxy refusing, a producer's send to it fails in time; after passthrough it commits."""
    proxy = cluster.proxy(cluster.leader(topic))
    proxy.refuse()
    try:
        with pytest.raises(Exception):  # noqa: B017 - kafka-python raises a timeout or a connection error
            _commit_one(cluster, topic, b"refused", max_block_ms=5000, request_timeout_ms=5000)
    finally:
        proxy.passthrough()
    _commit_one(cluster, topic, b"after")
    assert _committed(cluster, topic) == [b"after"]


# -- the service -------------------------------------------------------------------------------------------


def test_the_cluster_service_is_started_only_when_named() -> None:
    """``eosink services up`` with no names leaves the Kafka cluster out; named, it is chosen."""
    from eosink.services import cli

    assert "kafka-cluster" not in cli.selected([], secure=False)
    assert cli.selected(["kafka-cluster"], secure=False) == ["kafka-cluster"]


def test_the_cluster_as_a_service_fails_a_node_over_through_its_control_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    """``eosink services up|check|down kafka-cluster`` in a subprocess work; through the control socket the
    coordinator is SIGKILLed, another node coordinates, the node starts again and the proxies answer; only the
    listed operations are taken; down leaves no node running, and a control call after it says the supervisor is
    not running."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    from eosink._procs import is_alive
    from eosink._waiting import wait_until
    from eosink.errors import ServiceError
    from eosink.services._process import Proc
    from eosink.services.kafka_cluster_service import PIDS, KafkaClusterControl, KafkaClusterService

    shared = os.environ.get("EOSINK_CACHE")
    cache = Path(tempfile.mkdtemp(prefix="eosink-kc-"))  # short: the control socket's path must fit
    monkeypatch.setenv("EOSINK_CACHE", str(cache))
    env = {**os.environ, "EOSINK_CACHE": str(cache)}
    if shared and (Path(shared) / "services" / "kafka").is_dir():  # the Kafka jars already fetched
        (cache / "services").mkdir(parents=True)
        os.symlink(Path(shared) / "services" / "kafka", cache / "services" / "kafka")

    def services(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "eosink.cli", "services", *args, "kafka-cluster"]
        return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=400, check=False)

    service = KafkaClusterService()
    try:
        up = services("up")
        assert up.returncode == 0, up.stderr
        check = services("check")
        assert check.returncode == 0, check.stdout + check.stderr
        assert "ok    kafka-cluster: brokers [1, 2, 3] through their proxies" in check.stdout, check.stdout
        control = KafkaClusterControl(service.endpoint())
        assert oct(os.stat(control.endpoint.control).st_mode & 0o777) == "0o600"
        recorded = json.loads((service.data / PIDS).read_text())
        nodes = [Proc(int(pid), int(start)) for pid, start in recorded.values()]
        assert control.running() == control.nodes == [1, 2, 3]
        supervisor = service.pid()
        old = control.coordinator()
        control.kill(old)
        assert old not in control.running()
        assert wait_until(lambda: _coordinates_elsewhere(control, old), 60, max_interval_s=1.0)
        control.start_node(old)
        control.wait_in_sync("__transaction_state")
        assert control.proxy(old).stats.connections >= 0
        with pytest.raises(ServiceError, match="Unknown operation 'close'"):
            control.request("close")  # only the listed operations: not every method of the cluster
        with pytest.raises(ServiceError, match="kill needs node_id"):
            control.request("kill")
        down = services("down")
        assert down.returncode == 0, down.stderr
        assert supervisor is not None and not is_alive(supervisor)
        assert not any(node.alive() for node in nodes)
        with pytest.raises(ServiceError, match="not running"):
            control.running()
    finally:
        services("down")
        shutil.rmtree(cache, ignore_errors=True)


def _coordinates_elsewhere(control: object, old: int) -> bool:
    try:
        return control.coordinator() != old  # type: ignore[attr-defined,no-any-return]
    except Exception:  # the dead node may still be named for a moment, or none at all
        return False
