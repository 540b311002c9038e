"""Real Spark streaming queries writing Parquet files into a real HDFS (the harness's MiniDFSCluster), SIGKILLed
and restarted.

The HDFS counterpart of ``test_s3_pipeline.py``: ``sink_driver.py --sink hdfs`` runs in a session of its
own and writes through :class:`~eosink.connectors.hdfs.HdfsSink` (executors stream Arrow batches into
files under hidden attempt directories; the driver collects only committables). Each test kills the
driver's whole process group at a named fault point of batch 1 (or at random moments, or freezes it),
restarts it on the same checkpoint, and reads the target back two ways: through the batch records
(:func:`~eosink.connectors.hdfs.read_committed`: exactly the input rows, one record per batch of
Spark's commit log) and as a reader that lists the directory (what a plain ``spark.read.parquet``
sees: under 2pc and txid-check the same rows). No prepared work of the app is left behind. Every test
has a target directory of its own.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink, committed_batches, read_committed
from eosink.connectors.hdfs.admin import HdfsAdmin
from eosink.connectors.hdfs.testing import files_under, listed_rows, remove
from eosink.errors import ServiceError
from eosink.services import get_service
from eosink.services.hdfs import HdfsEndpoint

from .conftest import (
    DATASOURCE_KILLS,
    Pipeline,
    assert_clean,
    assert_killed,
    assert_random_kills_exact,
    assert_start_mistakes_stop_before_spark,
    assert_stopped_as_lost,
    assert_zombie_fenced,
    closed_port,
    fault_point_cases,
    kill_through_the_data_source,
    rewind_batch_1,
    rows_of_files,
)

pytestmark = pytest.mark.spark

SINK_DRIVER = Path(__file__).with_name("sink_driver.py")
STRATEGIES = ["2pc", "txid-check", "idempotent"]
# HdfsSink passes F6 after gathering the first participant's files into the batch's staging directory (2pc,
# txid-check), or, idempotent, once the batch's visible files are checked and before its record is written.
COMMON_POINTS = ["F1", "F2", "F3", "F4", "F6", "F8"]
# make test: one kill-and-restart per strategy. 2pc at F5 with the checkpoint on HDFS
# (test_a_checkpoint_on_hdfs_...): batch 1 is prepared and in Spark's commit log, so only the
# restart's recovery can commit it. txid-check mid-gather: some files staged, the rename not yet.
# idempotent mid-write: a replay writes the same file names again.
QUICK: set[tuple[str, str]] = set()  # make test: the 2pc kill, checkpoint on HDFS (below), and chaos
ROOT = "/eosink-spark"


def _cases() -> list[Any]:
    return fault_point_cases(STRATEGIES, COMMON_POINTS, QUICK)


@pytest.fixture(scope="session")
def hdfs() -> HdfsEndpoint:
    """The HDFS service's endpoint; a missing cluster fails the test (never a skip)."""
    try:
        endpoint: HdfsEndpoint = get_service("hdfs").endpoint()
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    return endpoint


@dataclass
class HdfsPipeline(Pipeline):
    """A :class:`Pipeline` whose driver writes Parquet files into one HDFS directory."""

    files: int = 3
    cluster: Any = None  # the HdfsEndpoint the driver and the checks use
    directory: str = ""  # the target's path in the cluster

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.cluster.env()}

    def command(self, mode: str, master: str) -> list[str]:
        return [
            *(str(SINK_DRIVER), "--sink", "hdfs"),
            *("--input", str(self.input), "--checkpoint", self.checkpoint_location()),
            *("--target", self.directory, "--namespace", "-", "--app-id", self.app_id),
            *("--strategy", self.strategy, "--master", master, "--stats-out", str(self.root / "stats.json")),
            *("--way", self.way),
        ]

    def config(self) -> HdfsConfig:
        return HdfsConfig(f"{self.cluster.url.rstrip('/')}{self.directory}")

    # -- reading HDFS back ------------------------------------------------------------------------

    def found(self) -> Counter[tuple[Any, ...]]:
        """The rows a reader of the batch records sees."""
        rows = read_committed(self.config(), self.app_id).to_pylist()
        return Counter((r["id"], r["account"], r["amount"]) for r in rows)

    def listed(self) -> Counter[tuple[Any, ...]]:
        """The rows a reader that lists the target sees (every file outside hidden names)."""
        return Counter((r["id"], r["account"], r["amount"]) for r in listed_rows(self.config()))

    def bundles(self) -> list[int]:
        return [r.bundle.batch.batch_id for _, r in committed_batches(self.config(), self.app_id)]

    def in_doubt(self) -> list[str]:
        apps = HdfsAdmin(self.config()).status(self.app_id).apps
        return [w.id for a in apps for w in a.in_doubt]

    def close(self) -> None:
        remove(self.config().target_url)
        if self.checkpoint_uri:
            remove(self.checkpoint_uri)


@pytest.fixture
def hdfs_pipeline(tmp_path: Path, driver_java_opts: str, hdfs: HdfsEndpoint) -> Iterator[HdfsPipeline]:
    pipeline = HdfsPipeline(
        tmp_path, java_opts=driver_java_opts, cluster=hdfs, directory=f"{ROOT}/t-{uuid.uuid4().hex[:10]}"
    )
    yield pipeline
    pipeline.close()


@pytest.mark.parametrize(("strategy", "point"), _cases())
def test_kill_at_fault_point_then_restart_is_exact(hdfs_pipeline: HdfsPipeline, strategy: str, point: str) -> None:
    """SIGKILL of the driver's process group at ``point`` of batch 1, then a restart from the checkpoint.

    Pass: a reader of the batch records sees exactly the input rows, one record per batch, nothing left
    in doubt. Under 2pc and txid-check, killed at F2 to F6, nothing of batch 1 is visible yet, not even
    to a reader that lists the directory, and its prepared work is listed as in doubt from F3 on; after
    the restart the listing reader sees exactly the input rows too.
    """
    p = hdfs_pipeline
    p.strategy = strategy
    assert_killed(p.run(f"{point}@1:kill"), point)
    if strategy != "idempotent" and point in ("F2", "F3", "F4", "F5", "F6"):
        assert p.found() == p.listed() == rows_of_files(p, {0}), "a killed batch's rows became visible"
        if point in ("F3", "F4", "F5", "F6"):
            assert p.in_doubt(), "the killed batch's prepared work is not listed as in doubt"
    assert_clean(p.run())
    p.assert_exact()
    if strategy != "idempotent":
        assert p.listed() == p.expected(), "a failed attempt's file is visible to a reader listing the directory"


def test_a_checkpoint_on_hdfs_carries_2pc_through_a_kill_at_f5(hdfs_pipeline: HdfsPipeline) -> None:
    """2pc with ``checkpointLocation`` on HDFS (``hdfs://``), SIGKILLed at F5 of batch 1 (in Spark's commit
    log there, its files prepared and invisible), then restarted.

    Pass: nothing of batch 1 visible after the kill, to either reader; after the restart exact, with
    Spark's commit log and eosink's manifests on HDFS (read through the connector's checkpoint file
    system) and nothing written to a local checkpoint.
    """
    p = hdfs_pipeline
    p.strategy = "2pc"
    p.checkpoint_uri = f"{p.cluster.url.rstrip('/')}{p.directory}-checkpoint"
    root = f"{p.directory}-checkpoint"
    assert_killed(p.run("F5@1:kill"), "F5")
    assert p.found() == p.listed() == rows_of_files(p, {0}), "batch 1's rows became visible before its commit"
    assert p.in_doubt(), "the killed batch's prepared work is not listed as in doubt"
    written = files_under(p.checkpoint_uri)
    assert f"{root}/commits/1" in written
    assert any(path.endswith("/1.json") and "/eosink/" in path for path in written), written
    assert_clean(p.run())
    p.assert_exact()
    assert f"{root}/commits/{p.files - 1}" in files_under(p.checkpoint_uri)
    assert not p.checkpoint.exists()


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "seed"), [("2pc", 1), ("txid-check", 1), ("2pc", 2), ("idempotent", 2)])
def test_random_kills_then_restart_is_exact(hdfs_pipeline: HdfsPipeline, strategy: str, seed: int) -> None:
    """Seeded random-moment SIGKILLs of the driver's group, restarts until the input is exhausted.

    Pass: exact, one record per batch, nothing in doubt, and under 2pc and txid-check a concurrent
    reader that lists the directory never saw part of a batch.
    """
    assert_random_kills_exact(hdfs_pipeline, strategy, seed, hdfs_pipeline.listed)


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "point"), [("2pc", "F4"), ("txid-check", "F1")])
def test_a_zombie_driver_is_fenced(hdfs_pipeline: HdfsPipeline, strategy: str, point: str) -> None:
    """F10: the old driver is frozen (SIGSTOP of its whole session) at ``point`` of batch 1, a new driver
    takes over and finishes, then the old one is thawed (SIGCONT).

    Pass: the new driver ends cleanly and the target is exact; the zombie stops with FencedError (a newer
    epoch file exists) or on Spark's own concurrent-writer check; still exact afterwards.
    """
    p = hdfs_pipeline
    p.strategy = strategy
    assert_zombie_fenced(p, point)


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "point"), DATASOURCE_KILLS)
def test_kill_through_the_data_source_then_restart_is_exact(
    hdfs_pipeline: HdfsPipeline, strategy: str, point: str
) -> None:
    """HDFS through ``writeStream.format("eosink")``: the driver's process group SIGKILLed at ``point`` of
    batch 1 (F5: when batch 2 is planned), then restarted from the checkpoint.

    Pass: the kill happened; the restart ends cleanly; a reader of the batch records sees every input
    row once (each distinct row once under idempotent's whole-row keys), one record per batch Spark
    committed, nothing in doubt.
    """
    kill_through_the_data_source(hdfs_pipeline, strategy, point)
    hdfs_pipeline.assert_exact()


@pytest.mark.full
def test_pending_work_a_cleanup_job_deleted_stops_the_query_and_a_rewind_lands_the_batch_once(
    hdfs_pipeline: HdfsPipeline,
) -> None:
    """2pc SIGKILLed at F5 of batch 1 (Spark committed it, the sink did not); then a cleanup job deletes the
    app's pending and staging directories, the prepared files with them.

    Pass: the restart stops with PreparedWorkLostError (exit 3) naming batch 1 and the rewind, with
    nothing of batch 1 visible to either reader; ``eosink recover --rewind`` prints its plan and changes
    nothing, ``--yes`` carries it out; the next restart completes and the target is exact.
    """
    p = hdfs_pipeline
    p.strategy = "2pc"
    assert_killed(p.run("F5@1:kill"), "F5")
    assert p.in_doubt(), "batch 1's prepared work should be there after a kill at F5"
    sink = HdfsSink(p.config())
    for path in (sink._pending(p.app_id), sink._staging(p.app_id)):
        sink.fs.delete(path)
    assert_stopped_as_lost(p.run())
    assert p.found() == p.listed() == rows_of_files(p, {0}), "the query went on past the lost batch"
    cli = [
        *("recover", "--sink", "hdfs", "--url", p.config().target_url, "--app-id", p.app_id),
        *("--checkpoint", str(p.checkpoint), "--rewind"),
    ]
    rewind_batch_1(p.checkpoint, cli, {**os.environ, **p.environment()})
    assert_clean(p.run())
    p.assert_exact()


@pytest.mark.full
def test_start_time_mistakes_stop_before_spark_starts_and_the_fixed_start_lands_every_row_once(
    hdfs_pipeline: HdfsPipeline,
) -> None:
    """An unreachable NameNode, through ``writer.start(...)`` (see the helper)."""
    down = f"hdfs://127.0.0.1:{closed_port()}"
    assert_start_mistakes_stop_before_spark(
        hdfs_pipeline, {"unreachable": ({"EOSINK_HDFS_URL": down}, "TransientError")}
    )
