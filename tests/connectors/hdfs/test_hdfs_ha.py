"""The HDFS sink on an HA name service (:class:`~eosink.services.hdfs_ha.HdfsHaCluster`: two NameNodes sharing
their edit log through three JournalNodes) that fails over in the middle of a commit.

The sink reaches ``hdfs://ns1`` through ``HdfsConfig(namenodes=...)``, each NameNode behind a fault proxy. Every
test is judged by :class:`~eosink.connectors.hdfs.audit.WebHdfsReader` (WebHDFS at both NameNodes, no hdfs-native),
polling while the batches run and after: no row lost or duplicated, none gone after it was read, no batch torn.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink
from eosink.connectors.hdfs.audit import WebHdfsReader, canonical
from eosink.connectors.hdfs.testing import COMMIT_REQUEST_MARKER
from eosink.contract import BatchRef, CommitStatus, Committable
from eosink.contracts._mini import VARIANTS, MemoryBatch, NoWatcherCoordinator, SparkOrderDriver, batches_for
from eosink.coordinator import CommitPolicy
from eosink.services.hdfs_ha import HdfsHaCluster

APP = "ha-app"
PATIENT = CommitPolicy(resolve_timeout_s=120.0, transient_timeout_s=60.0, backoff_s=0.05, max_backoff_s=1.0)
"""Retries that outlast a failover (the contract tests' policy gives up after 50 ms)."""


@pytest.fixture(scope="module")
def ha(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HdfsHaCluster]:
    with HdfsHaCluster(Path(tmp_path_factory.mktemp("hdfs-ha"))) as cluster:
        yield cluster


@pytest.fixture
def config(ha: HdfsHaCluster) -> Iterator[HdfsConfig]:
    """A fresh target on the name service, with nn0 active; the NameNodes both running again afterwards."""
    if ha.state()[0] == "stopped":
        ha.start_namenode(0)
    if ha.active() != 0:
        ha.failover(0)
    yield HdfsConfig(f"{ha.url}/eosink-tests/ha-{uuid.uuid4().hex[:10]}", namenodes=ha.namenodes())
    for nn, state in ha.state().items():
        if state == "stopped":
            ha.start_namenode(nn)


class _Driver(SparkOrderDriver[HdfsConfig]):
    """The contract's Spark-order driver with retries that outlast a failover."""

    def _new(self) -> NoWatcherCoordinator:
        sink = self.make_sink(self.config)
        return NoWatcherCoordinator(sink, self.app_id, self.variant.make(), self.ckpt.spark(), PATIENT)


class _FailingOverSink(HdfsSink):
    """The sink whose first ``commit_status`` (the coordinator asking after the lost reply) meets a failover: the
    active NameNode is killed, and the standby made active, right before it."""

    cluster: HdfsHaCluster | None = None
    killed: int | None = None

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        if self.killed is None and self.cluster is not None:
            type(self).killed = self.cluster.kill_active()
        return super().commit_status(batch, committables)


def _reader(ha: HdfsHaCluster, config: HdfsConfig) -> WebHdfsReader:
    urls = [f"http://127.0.0.1:{ha.http_port(nn)}/webhdfs/v1" for nn in (0, 1)]
    return WebHdfsReader(urls, config.path).start()


def _expected(work: Sequence[MemoryBatch]) -> Counter[str]:
    return Counter(canonical(row) for batch in work for row in batch.rows)


def test_a_namenode_failover_at_the_commits_rename_under_2pc_is_exact(
    ha: HdfsHaCluster, config: HdfsConfig, tmp_path: Path
) -> None:
    """Batch 1's deciding rename (staging onto the batch's directory) reaches the active NameNode and its reply is
    lost; the coordinator asks commit_status, and right then the active NameNode is killed and the standby made
    active. Pass: the new active NameNode has the rename (the shared edit log), commit_status finds the batch
    committed through it, batch 2 commits there, and the reader finds every row once."""
    variant = next(v for v in VARIANTS if v.id == "2pc")
    _FailingOverSink.cluster, _FailingOverSink.killed = ha, None
    driver = _Driver(tmp_path, variant, config, _FailingOverSink, APP)
    reader = _reader(ha, config)
    work = batches_for(variant, 3)
    try:
        _FailingOverSink.cluster = None
        driver.run(work[:1])
        active = ha.active()
        _FailingOverSink.cluster = ha
        ha.proxy(active).cut_after_request(COMMIT_REQUEST_MARKER)
        driver.run(work)
        assert ha.proxy(active).stats.cuts == 1
        assert _FailingOverSink.killed == active and ha.active() == 1 - active
    finally:
        driver.close()
    verdict = reader.verdict(_expected(work))
    assert not verdict.problems, verdict
    assert verdict.rows == sum(len(b.rows) for b in work)
