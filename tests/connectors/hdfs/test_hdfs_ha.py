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
from eosink.contracts._mini import VARIANTS, MemoryBatch, PatientDriver, batches_for, first_status_meets
from eosink.services.hdfs_ha import HdfsHaCluster

APP = "ha-app"


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
    killed: list[int] = []
    failing_over = first_status_meets(HdfsSink, lambda: killed.append(ha.kill_active()))
    driver = PatientDriver(tmp_path, variant, config, failing_over, APP)
    reader = _reader(ha, config)
    work = batches_for(variant, 3)
    try:
        driver.run(work[:1])  # no lost reply: commit_status is not asked
        active = ha.active()
        ha.proxy(active).cut_after_request(COMMIT_REQUEST_MARKER)
        driver.run(work)
        assert ha.proxy(active).stats.cuts >= 1
        assert killed == [active] and ha.active() == 1 - active
    finally:
        driver.close()
    verdict = reader.verdict(_expected(work))
    assert not verdict.problems, verdict
    assert verdict.rows == sum(len(b.rows) for b in work)
