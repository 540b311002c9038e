"""A Spark pipeline into a three-node Kafka cluster (:class:`~eosink.services.kafka_cluster.KafkaCluster`) whose
nodes fail while it runs.

The driver reaches every node through the node's fault proxy; the checks read the topic with a consumer of their
own. Each test fails a node once the pipeline has committed its second batch, lets the same run go on to its
end (the query must ride out the failover by itself), brings the node back, and checks every row once, one bundle
per batch and no transaction left open.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from eosink._procs import kill_session
from eosink.services.kafka_cluster import KafkaCluster

from .conftest import assert_clean, wait_for
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


def _fail_mid_stream(p: KafkaPipeline, cluster: KafkaCluster, fail: Callable[[], Callable[[], None]]) -> None:
    """Run the pipeline; after batch 1's bundle, ``fail()`` a node (it returns how to bring it back); let the run
    end; bring the node back; check."""
    proc = p.start()
    try:
        wait_for(lambda: len(p.bundles()) >= 2, 300, "batch 1's bundle")
        back = fail()
        assert proc.poll() is None and len(p.bundles()) < p.files, "the run ended before the node failed"
    except BaseException:
        kill_session(proc.pid)
        proc.wait()
        raise
    try:
        run = p.finish(proc)
    finally:
        back()
    assert_clean(run)
    p.reconnect()
    p.assert_exact()


@pytest.mark.parametrize("strategy", ["2pc", "txid-check", "idempotent"])
def test_the_transaction_coordinator_killed_mid_stream_then_restarted_is_exact(
    pipeline: KafkaPipeline, cluster: KafkaCluster, strategy: str
) -> None:
    pipeline.strategy = strategy

    def kill() -> Callable[[], None]:
        node = cluster.coordinator()
        cluster.kill(node)
        return lambda: (cluster.start_node(node), cluster.wait_in_sync("__transaction_state"))

    _fail_mid_stream(pipeline, cluster, kill)


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
