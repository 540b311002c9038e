"""Real Spark streaming queries writing Parquet objects into a real S3 store (MinIO), SIGKILLed and restarted.

The S3 counterpart of ``test_postgres_pipeline.py``: ``sink_driver.py --sink s3`` runs in a
session of its own and writes through :class:`~eosink.connectors.s3.S3Sink` (executors stream
Arrow batches into multipart uploads; the driver collects only committables,
``spark.driver.maxResultSize=1m``). Each test kills the driver's whole process group at a named
fault point of batch 1 (or at random moments, or freezes it, or crashes the store), restarts it on
the same checkpoint, and reads the prefix back two ways: as a reader of the commit markers
(:func:`~eosink.connectors.s3.read_committed`: exactly the input rows, one marker per batch of
Spark's commit log) and as a reader that lists the prefix (what a plain ``spark.read.parquet``
sees). No incomplete upload of the app is left behind. Every test has a prefix of its own.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from eosink.checkpoint import SparkCheckpoint
from eosink.connectors.s3 import S3Config, committed_markers, read_committed
from eosink.connectors.s3.admin import S3Admin
from eosink.connectors.s3.testing import BUCKET, S3Harness, empty_prefix, incomplete_uploads, listed_parquet
from eosink.services.minio import MinioServer, S3Endpoint

from .conftest import (
    DATASOURCE_KILLS,
    Pipeline,
    assert_clean,
    assert_killed,
    assert_random_kills_exact,
    assert_start_mistakes_stop_before_spark,
    assert_stopped_as_lost,
    assert_store_crash_mid_batch_exact,
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
# S3Sink passes F6 between completing the batch's uploads and creating its commit marker.
COMMON_POINTS = ["F1", "F2", "F3", "F4", "F6", "F8"]
# make test: one kill-and-restart per strategy. 2pc at F5 with the checkpoint on S3
# (test_a_checkpoint_on_s3_...): batch 1's uploads are prepared (incomplete) and Spark's commit log
# holds it, so only the restart's recovery can complete them from the upload ids the manifest kept.
# txid-check mid-commit: some objects complete, the marker not yet. idempotent mid-write: a replay
# writes the same object names again.
QUICK: set[tuple[str, str]] = set()  # make test: the 2pc kill, checkpoint on S3 (below), and chaos


def _cases() -> list[Any]:
    return fault_point_cases(STRATEGIES, COMMON_POINTS, QUICK)


@dataclass
class S3Pipeline(Pipeline):
    """A :class:`Pipeline` whose driver writes Parquet objects under one prefix."""

    files: int = 3
    store: Any = None  # the S3Endpoint the driver and the checks use
    prefix: str = ""
    _harness: Any = field(default=None, repr=False)

    def harness(self) -> S3Harness:
        if self._harness is None:
            self._harness = S3Harness(endpoint=self.store)
        harness: S3Harness = self._harness
        return harness

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.store.env(), "EOSINK_TEST_S3_BUCKET": BUCKET}

    def command(self, mode: str, master: str) -> list[str]:
        return [
            *(str(SINK_DRIVER), "--sink", "s3"),
            *("--input", str(self.input), "--checkpoint", self.checkpoint_location()),
            *("--target", self.prefix, "--namespace", self.prefix, "--app-id", self.app_id),
            *("--strategy", self.strategy, "--master", master, "--stats-out", str(self.root / "stats.json")),
            *("--way", self.way),
        ]

    def config(self) -> S3Config:
        return self.harness().config(self.prefix)

    def spark_checkpoint(self) -> SparkCheckpoint:
        if not self.checkpoint_uri:
            return super().spark_checkpoint()
        from eosink.connectors.s3.checkpoint_fs import register

        register(BUCKET, self.config().connection())
        return SparkCheckpoint(self.checkpoint_uri)

    # -- reading S3 back --------------------------------------------------------------------------

    def found(self, app_id: str | None = None) -> Counter[tuple[Any, ...]]:
        """The rows a reader of the commit markers sees."""
        table: Any = read_committed(self.config(), app_id or self.app_id)
        return Counter((r["id"], r["account"], r["amount"]) for r in table.to_pylist())

    def listed(self) -> Counter[tuple[Any, ...]]:
        """The rows a reader that lists the prefix sees (every complete object outside ``_eosink/``)."""
        table = listed_parquet(self.harness().client(), BUCKET, self.prefix)
        return Counter((r["id"], r["account"], r["amount"]) for r in (table.to_pylist() if table is not None else []))

    def bundles(self) -> list[int]:
        return [m.batch_id for m in committed_markers(self.config(), self.app_id)]

    def in_doubt(self) -> list[str]:
        apps = S3Admin(self.config()).status(self.app_id).apps
        return [w.id for a in apps for w in a.in_doubt]

    def uploads(self) -> list[str]:
        s3 = self.harness().client()
        return [str(u["Key"]) for u in incomplete_uploads(s3, BUCKET, self.prefix)]

    def assert_exact(self) -> None:
        super().assert_exact()
        assert not self.uploads(), f"incomplete uploads left behind: {self.uploads()}"

    def close(self) -> None:
        empty_prefix(self.harness().client(), BUCKET, self.prefix)


def _pipeline(tmp_path: Path, java_opts: str, store: S3Endpoint) -> S3Pipeline:
    p = S3Pipeline(tmp_path, java_opts=java_opts, store=store, prefix=f"sparks3-{uuid.uuid4().hex[:10]}")
    p.harness().ensure_bucket()
    return p


@pytest.fixture
def s3_pipeline(tmp_path: Path, driver_java_opts: str, minio: S3Endpoint) -> Iterator[S3Pipeline]:
    pipeline = _pipeline(tmp_path, driver_java_opts, minio)
    yield pipeline
    pipeline.close()


@pytest.mark.parametrize(("strategy", "point"), _cases())
def test_kill_at_fault_point_then_restart_is_exact(s3_pipeline: S3Pipeline, strategy: str, point: str) -> None:
    """SIGKILL of the driver's process group at ``point`` of batch 1, then a restart from the checkpoint.

    Pass: a reader of the commit markers sees exactly the input rows, one marker per batch, no
    upload left incomplete. Under 2pc, killed at or before F5 (prepared, or just in Spark's commit
    log), nothing of batch 1 is visible yet, not even to a reader that lists the prefix (its
    uploads are incomplete) and the prepared uploads are listed as in doubt; under txid-check a
    marker reader sees batch 0 only.
    """
    p = s3_pipeline
    p.strategy = strategy
    assert_killed(p.run(f"{point}@1:kill"), point)
    if strategy != "idempotent" and point in ("F2", "F3", "F4", "F5"):
        assert p.found() == rows_of_files(p, {0}), "a killed batch's rows became visible before its marker"
        if strategy == "2pc":
            assert p.listed() == rows_of_files(p, {0}), "a prepared object became visible before its commit"
        if point in ("F3", "F4", "F5"):
            assert p.in_doubt(), "the killed batch's prepared uploads are not listed as in doubt"
    assert_clean(p.run())
    p.assert_exact()
    if strategy != "idempotent":
        assert p.listed() == p.expected(), "a failed attempt's object is visible to a reader listing the prefix"


def test_a_checkpoint_on_s3_carries_2pc_through_a_kill_at_f5(s3_pipeline: S3Pipeline) -> None:
    """2pc with ``checkpointLocation`` on S3 (``s3a://``), SIGKILLed at F5 of batch 1 (in Spark's commit log
    there, its uploads still incomplete), then restarted.

    Pass: nothing of batch 1 visible after the kill, to either reader; after the restart exact, with
    Spark's commit log and eosink's manifests on S3 (read through the connector's checkpoint file
    system) and nothing written to a local checkpoint.
    """
    p = s3_pipeline
    p.strategy = "2pc"
    p.checkpoint_uri = f"s3a://{BUCKET}/{p.prefix}-checkpoint"
    s3 = p.harness().client()
    root = f"{p.prefix}-checkpoint"

    def keys() -> list[str]:
        return [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{root}/").get("Contents", [])]

    try:
        assert_killed(p.run("F5@1:kill"), "F5")
        assert p.found() == p.listed() == rows_of_files(p, {0}), "batch 1's rows became visible before its commit"
        assert p.in_doubt(), "the killed batch's prepared uploads are not listed as in doubt"
        assert f"{root}/commits/1" in keys() and any(k.endswith("/1.json") and "/eosink/" in k for k in keys())
        assert_clean(p.run())
        p.assert_exact()
        assert f"{root}/commits/{p.files - 1}" in keys(), keys()
        assert not p.checkpoint.exists()
    finally:
        empty_prefix(s3, BUCKET, root)


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "seed"), [("2pc", 1), ("txid-check", 1), ("2pc", 2), ("idempotent", 2)])
def test_random_kills_then_restart_is_exact(s3_pipeline: S3Pipeline, strategy: str, seed: int) -> None:
    """Seeded random-moment SIGKILLs of the driver's group, restarts until the input is exhausted.

    Pass: exact, one marker per batch, no upload left, and under 2pc and txid-check the concurrent
    reader of the commit markers never saw part of a batch.
    """
    assert_random_kills_exact(s3_pipeline, strategy, seed, s3_pipeline.found)


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "point"), [("2pc", "F4"), ("txid-check", "F1")])
def test_a_zombie_driver_is_fenced(s3_pipeline: S3Pipeline, strategy: str, point: str) -> None:
    """F10: the old driver is frozen (SIGSTOP of its whole session) at ``point`` of batch 1, a new driver
    takes over and finishes, then the old one is thawed (SIGCONT).

    Pass: the new driver ends cleanly and the prefix is exact; the zombie stops with FencedError (its
    epoch object was replaced) or on Spark's own concurrent-writer check; still exact afterwards.
    """
    p = s3_pipeline
    p.strategy = strategy
    assert_zombie_fenced(p, point)


@pytest.mark.full
@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
def test_a_store_crashed_mid_batch_then_restarted_is_exact(
    tmp_path: Path, driver_java_opts: str, private_minio: MinioServer, strategy: str
) -> None:
    """A private MinIO is SIGKILLed and restarted while the driver is frozen mid-write of batch 1 (F2).

    Pass: the thawed driver either finishes or stops with an eosink error; restarts from the
    checkpoint (at most two) end cleanly, and the prefix is exact with no upload left.
    """
    p = _pipeline(tmp_path / "job", driver_java_opts, private_minio.endpoint)
    p.strategy = strategy
    assert_store_crash_mid_batch_exact(p, private_minio)


@pytest.mark.full
def test_uploads_a_lifecycle_rule_aborted_stop_the_query_and_a_rewind_lands_the_batch_once(
    s3_pipeline: S3Pipeline,
) -> None:
    """2pc SIGKILLed at F5 of batch 1 (Spark committed it, the sink did not); then every incomplete upload of
    the prefix is aborted, as a bucket's lifecycle rule for incomplete uploads does.

    Pass: the restart stops with PreparedWorkLostError (exit 3) naming batch 1 and the rewind, with
    nothing of batch 1 visible; ``eosink recover --rewind`` prints its plan and changes nothing,
    ``--yes`` carries it out; the next restart completes and the prefix is exact.
    """
    p = s3_pipeline
    p.strategy = "2pc"
    assert_killed(p.run("F5@1:kill"), "F5")
    s3 = p.harness().client()
    uploads = incomplete_uploads(s3, BUCKET, p.prefix)
    assert uploads, "batch 1's prepared uploads should be there after a kill at F5"
    for u in uploads:
        s3.abort_multipart_upload(Bucket=BUCKET, Key=u["Key"], UploadId=u["UploadId"])
    stopped = p.run()
    assert_stopped_as_lost(stopped)
    assert p.found() == p.listed() == rows_of_files(p, {0}), "the query went on past the lost batch"
    cli = [
        *("recover", "--sink", "s3", "--bucket", BUCKET, "--prefix", p.prefix, "--app-id", p.app_id),
        *("--checkpoint", str(p.checkpoint), "--rewind"),
    ]
    printed = rewind_batch_1(p.checkpoint, cli, {**os.environ, **p.store.env()})
    assert_clean(p.run())
    p.assert_exact()
    assert p.store.secret_key not in printed + stopped.stderr


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "point"), DATASOURCE_KILLS)
def test_kill_through_the_data_source_then_restart_is_exact(s3_pipeline: S3Pipeline, strategy: str, point: str) -> None:
    """S3 through ``writeStream.format("eosink")``: the driver's process group SIGKILLed at ``point`` of
    batch 1 (F5: when batch 2 is planned), then restarted from the checkpoint.

    Pass: the kill happened; the restart ends cleanly; a reader of the commit markers sees every input
    row once (each distinct row once under idempotent's whole-row keys), one marker per batch Spark
    committed, no upload in doubt or left incomplete.
    """
    kill_through_the_data_source(s3_pipeline, strategy, point)
    s3_pipeline.assert_exact()


@pytest.mark.full
def test_start_time_mistakes_stop_before_spark_starts_and_the_fixed_start_lands_every_row_once(
    s3_pipeline: S3Pipeline,
) -> None:
    """An unreachable store and a wrong secret key, through ``writer.start(...)`` (see the helper)."""
    down = f"http://127.0.0.1:{closed_port()}"
    assert_start_mistakes_stop_before_spark(
        s3_pipeline,
        {
            "unreachable": ({"EOSINK_S3_ENDPOINT": down}, "TransientError"),
            "wrong-secret": ({"EOSINK_S3_SECRET_KEY": "not-the-secret-key"}, "AuthenticationError"),
        },
    )
