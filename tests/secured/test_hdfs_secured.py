"""HDFS with permissions checked, written by an ordinary user that owns only its target directory.

Run with ``HADOOP_USER_NAME`` set to that user (``make test-secured`` uses ``writer``): hdfs-native
takes one user per process, so every HDFS client of this process is the writer, and what an
administrator does (directories, owners, modes) goes through WebHDFS as the superuser.

* the contract suite as the writer (its namespaces under ``/eosink-secured/<user>``, which the
  superuser made and handed over);
* each documented permission (:func:`eosink.connectors.hdfs.grants.writer_permissions`, and
  :func:`eosink.connectors.delta.grants.writer_permissions` for a Delta table) withheld in turn: the
  query stops with a :class:`PermissionDeniedError` naming it, nothing is visible; given, a restart
  lands every batch once;
* ``eosink status`` and ``eosink recover`` as the writer.

HDFS's simple authentication takes the user's name on trust, and its RPC here is plaintext: there is no
password to get wrong and no certificate to check (Kerberos and wire encryption are out of scope: see
docs/security.md).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.delta import DeltaConfig, DeltaSink
from eosink.connectors.delta import grants as delta_grants
from eosink.connectors.delta.testing import read_table
from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.connectors.hdfs.grants import Permission, writer_permissions
from eosink.connectors.hdfs.testing import SecureHdfsHarness, as_superuser
from eosink.contracts import contract_tests
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver, canon, make_rows
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.errors import PermissionDeniedError
from eosink.services import get_service
from eosink.services.hdfs import HdfsServer

from ._operations import leave_in_doubt, status_and_recover

HARNESS = SecureHdfsHarness()
TestSecureHdfsContract = contract_tests(HARNESS, name="TestSecureHdfsContract")

APP = "app_secured"
USER = os.environ.get("HADOOP_USER_NAME", "")


@dataclass(frozen=True)
class Cluster:
    url: str
    webhdfs_url: str

    def admin(self, path: str, op: str, method: str = "PUT", **params: str) -> Any:
        return as_superuser(path, op, method, webhdfs_url=self.webhdfs_url, **params)


@pytest.fixture(scope="module")
def private_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Delta's tables live on a cluster with HDFS's default num-committed-allowed (0), which delta-rs needs
    (docs/connectors/delta.md, "On HDFS"); it checks permissions as the shared one does."""
    server = HdfsServer(tmp_path_factory.mktemp("hdfs"), close_before_report=False)
    with pytest.MonkeyPatch.context() as env:
        env.delenv("HADOOP_USER_NAME", raising=False)  # the cluster runs as this login, its superuser
        endpoint = server.start()
    try:
        yield Cluster(endpoint.url.rstrip("/"), endpoint.webhdfs_url)
    finally:
        server.stop()


@dataclass(frozen=True)
class HdfsWriter:
    """One HDFS-backed sink as the walk drives it: its config, sink, documented permissions and reader."""

    name: str

    def config(self, url: str) -> Any:
        return HdfsConfig(url, user=USER) if self.name == "hdfs" else DeltaConfig(url)

    def sink(self, config: Any) -> Any:
        if self.name == "hdfs":
            return HdfsSink(config)
        sink = DeltaSink(config)
        sink.bind_schema(CONTRACT_SCHEMA)
        return sink

    def permissions(self, path: str) -> list[Permission]:
        if self.name == "hdfs":
            return writer_permissions(HdfsConfig(f"hdfs://nn:1{path}"), USER)
        return delta_grants.writer_permissions(path, USER)

    def rows(self, config: Any) -> list[dict[str, Any]]:
        if self.name == "hdfs":
            rows: list[dict[str, Any]] = read_committed(config, APP).to_pylist()
            return rows
        return read_table(config)


def _batches() -> list[MemoryBatch]:
    return [MemoryBatch(make_rows(b), participants=2) for b in range(2)]


# Delta's walk starts a NameNode of its own: in test-secured-full only.
WALK = [
    pytest.param(kind, p.name, marks=[pytest.mark.full] if kind == "delta" else [])
    for kind in ("hdfs", "delta")
    for p in HdfsWriter(kind).permissions("/a/b")
]


@pytest.mark.parametrize(("kind", "left_out"), WALK)
def test_each_documented_permission_is_needed(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, left_out: str
) -> None:
    """The HDFS sink (on the shared cluster) and Delta tables (on a private one): without ``left_out`` the query
    stops with PermissionDeniedError naming it and its ``hdfs dfs`` command, nothing is visible; given, a
    restart lands every batch once."""
    HARNESS.root()  # checks that this process writes as an ordinary user
    if kind == "hdfs":
        ep = get_service("hdfs").endpoint()
        cluster = Cluster(ep.url.rstrip("/"), ep.webhdfs_url)
    else:
        cluster = request.getfixturevalue("private_cluster")
    writer = HdfsWriter(kind)
    base = f"/eosink-secured-admin/{uuid.uuid4().hex[:10]}"
    target = f"{base}/events"
    (needed,) = [p for p in writer.permissions(target) if p.name == left_out]
    config = writer.config(f"{cluster.url}{target}")
    cluster.admin(base, "MKDIRS", permission="755")
    cluster.admin(target, "MKDIRS", permission="755")
    if left_out != "target-owner":
        cluster.admin(target, "SETOWNER", owner=USER)
    if left_out == "parents-traverse":
        cluster.admin(base, "SETPERMISSION", permission="700")
    batches = _batches()
    driver = SparkOrderDriver(tmp_path, VARIANTS[0], config, writer.sink, APP)
    try:
        err = driver.fail(batches, PermissionDeniedError)
        assert isinstance(err, PermissionDeniedError) and err.permission == needed.permission, err
        assert err.fix and needed.command in err.fix
        if left_out == "parents-traverse":
            cluster.admin(base, "SETPERMISSION", permission="755")
        else:
            cluster.admin(target, "SETOWNER", owner=USER)
        assert writer.rows(config) == []
        driver.restart()
        driver.run(batches)
        assert canon(writer.rows(config)) == canon([r for b in batches for r in b.rows])
    finally:
        driver.close()
        cluster.admin(base, "DELETE", method="DELETE", recursive="true")


@pytest.fixture
def base() -> Iterator[str]:
    """A directory of the superuser's (mode 755) for one test; removed afterwards."""
    path = f"/eosink-secured-admin/{uuid.uuid4().hex[:10]}"
    as_superuser(path, "MKDIRS", permission="755")
    yield path
    as_superuser(path, "DELETE", method="DELETE", recursive="true")


def test_status_and_recover_as_the_writer(base: str, tmp_path: Path) -> None:
    """A 2pc batch left prepared by a dead driver: ``eosink status`` (as the writer) shows it in doubt, ``eosink
    recover --yes`` commits it, then status is clean and the rows are there once."""
    HARNESS.root()
    target = f"{base}/events"
    as_superuser(target, "MKDIRS", permission="755")
    as_superuser(target, "SETOWNER", owner=USER)
    config = HdfsConfig(f"{HARNESS.url()}{target}", user=USER)
    batch = MemoryBatch(make_rows(0), participants=2)
    driver = SparkOrderDriver(tmp_path, VARIANTS[0], config, HdfsSink, APP)
    assert driver.variant.id == "2pc"
    leave_in_doubt(driver, batch)
    env = {**os.environ, "HADOOP_USER_NAME": USER}
    status_and_recover(["--sink", "hdfs", "--url", config.target_url], env, str(driver.ckpt.root), APP, [])
    assert canon(read_committed(config, APP).to_pylist()) == canon(batch.rows)
