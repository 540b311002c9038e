"""HDFS with permissions checked, written by an ordinary user that owns only its target directory.

Run with ``HADOOP_USER_NAME`` set to that user (``make test-secured`` uses ``writer``): hdfs-native
takes one user per process, so every HDFS client of this process is the writer, and what an
administrator does (directories, owners, modes) goes through WebHDFS as the superuser.

* the contract suite as the writer (its namespaces under ``/eosink-secured/<user>``, which the
  superuser made and handed over);
* each documented permission (:func:`eosink.connectors.hdfs.grants.writer_permissions`) withheld in
  turn: the query stops with a :class:`PermissionDeniedError` naming it, nothing is visible; given,
  a restart lands every batch once.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.connectors.hdfs.grants import writer_permissions
from eosink.connectors.hdfs.testing import SecureHdfsHarness, as_superuser
from eosink.contracts import contract_tests
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver, canon, make_rows
from eosink.errors import PermissionDeniedError

from ._operations import leave_in_doubt, status_and_recover

HARNESS = SecureHdfsHarness()
TestSecureHdfsContract = contract_tests(HARNESS, name="TestSecureHdfsContract")

APP = "app_secured"
USER = os.environ.get("HADOOP_USER_NAME", "")


@pytest.fixture
def base() -> Iterator[str]:
    """A directory of the superuser's (mode 755) for one test; removed afterwards."""
    path = f"/eosink-secured-admin/{uuid.uuid4().hex[:10]}"
    as_superuser(path, "MKDIRS", permission="755")
    yield path
    as_superuser(path, "DELETE", method="DELETE", recursive="true")


def _batches() -> list[MemoryBatch]:
    return [MemoryBatch(make_rows(b), participants=2) for b in range(2)]


@pytest.mark.parametrize("left_out", [p.name for p in writer_permissions(HdfsConfig("hdfs://h:1/a/b"), "w")])
def test_each_documented_permission_is_needed(base: str, tmp_path: Path, left_out: str) -> None:
    HARNESS.root()  # checks that this process writes as an ordinary user
    target = f"{base}/events"
    config = HdfsConfig(f"{HARNESS.url()}{target}", user=USER)
    (needed,) = [p for p in writer_permissions(config, USER) if p.name == left_out]
    as_superuser(target, "MKDIRS", permission="755")
    if left_out != "target-owner":
        as_superuser(target, "SETOWNER", owner=USER)
    if left_out == "parents-traverse":
        as_superuser(base, "SETPERMISSION", permission="700")
    batches = _batches()
    driver = SparkOrderDriver(tmp_path, VARIANTS[0], config, HdfsSink, APP)
    try:
        err = driver.fail(batches, PermissionDeniedError)
        assert isinstance(err, PermissionDeniedError) and err.permission == needed.permission, err
        assert err.fix and needed.command in err.fix
        if left_out == "parents-traverse":
            as_superuser(base, "SETPERMISSION", permission="755")
        else:
            as_superuser(target, "SETOWNER", owner=USER)
        assert read_committed(config, APP).num_rows == 0
        driver.restart()
        driver.run(batches)
    finally:
        driver.close()
    assert canon(read_committed(config, APP).to_pylist()) == canon([r for b in batches for r in b.rows])


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
