"""Real Spark streaming queries writing into a Delta table on MinIO, SIGKILLed and restarted.

``sink_driver.py --sink delta`` runs in a session of its own and writes through
:class:`~eosink.connectors.delta.DeltaSink` (executors write Parquet files into the table's directory;
the driver collects only committables and makes one Delta commit per batch). Each test kills the driver's
whole process group at a named fault point of batch 1, restarts it on the same checkpoint, and reads the
table back as any Delta reader does (its current snapshot): exactly the input rows, one eosink commit per
batch of Spark's commit log, nothing left in doubt. Every test has a table of its own.
"""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.delta import DeltaConfig
from eosink.connectors.delta.admin import DeltaAdmin
from eosink.connectors.delta.readers import committed_batches
from eosink.connectors.delta.testing import read_table
from eosink.connectors.s3.testing import BUCKET, S3Harness, empty_prefix
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
# DeltaSink passes F6 once the batch's files are checked, before the log entry is written.
COMMON_POINTS = ["F1", "F2", "F3", "F4", "F6", "F8"]
# make test: one kill-and-restart per strategy: 2pc at F5 (batch 1 in Spark's commit log, its files prepared:
# only the restart's recovery can commit it); txid-check at F6 (checked, not committed); idempotent at F4
# (files prepared, the MERGE not made: the replay writes them again under new names).
QUICK = {("2pc", "F5")}  # and the chaos schedule; the other strategies' kills in test-delta-full


def _cases() -> list[Any]:
    return fault_point_cases(STRATEGIES, COMMON_POINTS, QUICK)


@dataclass
class DeltaPipeline(Pipeline):
    """A :class:`Pipeline` whose driver writes into one Delta table on MinIO."""

    files: int = 3
    store: Any = None  # the S3Endpoint the driver and the checks use
    prefix: str = ""

    def harness(self) -> S3Harness:
        return S3Harness(endpoint=self.store)

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.store.env(), "EOSINK_TEST_S3_BUCKET": BUCKET}

    def command(self, mode: str, master: str) -> list[str]:
        return [
            *(str(SINK_DRIVER), "--sink", "delta"),
            *("--input", str(self.input), "--checkpoint", self.checkpoint_location()),
            *("--target", self.prefix, "--namespace", self.prefix, "--app-id", self.app_id),
            *("--strategy", self.strategy, "--master", master, "--stats-out", str(self.root / "stats.json")),
            *("--way", self.way),
        ]

    def config(self) -> DeltaConfig:
        return DeltaConfig.on_endpoint(f"s3://{BUCKET}/{self.prefix}", self.store)

    def found(self) -> Counter[tuple[Any, ...]]:
        """The rows a Delta reader sees: the table's current snapshot."""
        return Counter((r["id"], r["account"], r["amount"]) for r in read_table(self.config()))

    def bundles(self) -> list[int]:
        """The batches the log holds eosink commits of, oldest first."""
        return committed_batches(self.config(), self.app_id)

    def in_doubt(self) -> list[str]:
        apps = DeltaAdmin(self.config()).status(self.app_id).apps
        return [w.id for a in apps for w in a.in_doubt]

    def close(self) -> None:
        empty_prefix(self.harness().client(), BUCKET, self.prefix)


def _pipeline(tmp_path: Path, java_opts: str, store: S3Endpoint) -> DeltaPipeline:
    p = DeltaPipeline(tmp_path, java_opts=java_opts, store=store, prefix=f"sparkdelta-{uuid.uuid4().hex[:10]}")
    p.harness().ensure_bucket()
    return p


@pytest.fixture
def delta_pipeline(tmp_path: Path, driver_java_opts: str, minio: S3Endpoint) -> Iterator[DeltaPipeline]:
    pipeline = _pipeline(tmp_path, driver_java_opts, minio)
    yield pipeline
    pipeline.close()


@pytest.mark.parametrize(("strategy", "point"), _cases())
def test_kill_at_fault_point_then_restart_is_exact(delta_pipeline: DeltaPipeline, strategy: str, point: str) -> None:
    """SIGKILL of the driver's process group at ``point`` of batch 1, then a restart from the checkpoint.

    Pass: killed at F2 to F6, nothing of batch 1 is visible to a Delta reader yet, and its prepared work is
    listed as in doubt from F3 on; after the restart the table holds exactly the input rows, one eosink
    commit per batch Spark committed, nothing in doubt.
    """
    p = delta_pipeline
    p.strategy = strategy
    assert_killed(p.run(f"{point}@1:kill"), point)
    if point in ("F2", "F3", "F4", "F5", "F6"):
        assert p.found() == rows_of_files(p, {0}), "a killed batch's rows became visible"
        if point in ("F3", "F4", "F5", "F6"):
            assert p.in_doubt(), "the killed batch's prepared work is not listed as in doubt"
    assert_clean(p.run())
    p.assert_exact()


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "seed"), [("2pc", 1), ("txid-check", 1), ("idempotent", 2)])
def test_random_kills_then_restart_is_exact(delta_pipeline: DeltaPipeline, strategy: str, seed: int) -> None:
    """Seeded random-moment SIGKILLs of the driver's group, restarts until the input is exhausted.

    Pass: exact, one eosink commit per batch, nothing in doubt, and the concurrent Delta reader never saw
    part of a batch (every strategy: each batch is one Delta commit).
    """
    assert_random_kills_exact(delta_pipeline, strategy, seed, delta_pipeline.found)


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "point"), [("2pc", "F4"), ("txid-check", "F1"), ("idempotent", "F3")])
def test_a_zombie_driver_is_fenced(delta_pipeline: DeltaPipeline, strategy: str, point: str) -> None:
    """F10: the old driver is frozen (SIGSTOP of its whole session) at ``point`` of batch 1, a new driver
    takes over and finishes, then the old one is thawed (SIGCONT).

    Pass: the new driver ends cleanly and the table is exact; the zombie stops with FencedError (the
    table's epoch txn moved on: its commit, made at one version, is checked against it) or on Spark's own
    concurrent-writer check; still exact afterwards.
    """
    p = delta_pipeline
    p.strategy = strategy
    assert_zombie_fenced(p, point)


@pytest.mark.full
@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
def test_a_store_crashed_mid_batch_then_restarted_is_exact(
    tmp_path: Path, driver_java_opts: str, private_minio: MinioServer, strategy: str
) -> None:
    """A private MinIO is SIGKILLed and restarted while the driver is frozen mid-write of batch 1 (F2).

    Pass: the thawed driver either finishes or stops with an eosink error; restarts from the
    checkpoint (at most two) end cleanly, and the table is exact with nothing in doubt.
    """
    p = _pipeline(tmp_path / "job", driver_java_opts, private_minio.endpoint)
    p.strategy = strategy
    assert_store_crash_mid_batch_exact(p, private_minio)


@pytest.mark.full
def test_prepared_files_deleted_stop_the_query_and_a_rewind_lands_the_batch_once(
    delta_pipeline: DeltaPipeline,
) -> None:
    """2pc SIGKILLed at F5 of batch 1 (Spark committed it, the sink did not); then the batch's prepared data
    files are deleted, as a VACUUM with a too short retention does.

    Pass: the restart stops with PreparedWorkLostError (exit 3) naming batch 1 and the rewind, with
    nothing of batch 1 visible; ``eosink recover --rewind`` prints its plan and changes nothing,
    ``--yes`` carries it out; the next restart completes and the table is exact.
    """
    p = delta_pipeline
    p.strategy = "2pc"
    assert_killed(p.run("F5@1:kill"), "F5")
    s3 = p.harness().client()
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{p.prefix}/").get("Contents", [])
    committed = {a["path"] for a in _added(p)}
    doomed = [
        o["Key"] for o in listed if o["Key"].endswith(".parquet") and o["Key"][len(p.prefix) + 1 :] not in committed
    ]
    assert doomed, "batch 1's prepared files should be there after a kill at F5"
    for key in doomed:
        s3.delete_object(Bucket=BUCKET, Key=key)
    stopped = p.run()
    assert_stopped_as_lost(stopped)
    assert p.found() == rows_of_files(p, {0}), "the query went on past the lost batch"
    cli = [
        *("recover", "--sink", "delta", "--table", f"s3://{BUCKET}/{p.prefix}", "--app-id", p.app_id),
        *("--checkpoint", str(p.checkpoint), "--rewind"),
    ]
    printed = rewind_batch_1(p.checkpoint, cli, {**os.environ, **p.store.env()})
    assert_clean(p.run())
    p.assert_exact()
    assert p.store.secret_key not in printed + stopped.stderr


def _added(p: DeltaPipeline) -> list[dict[str, Any]]:
    from deltalake import DeltaTable

    config = p.config()
    table = DeltaTable(config.table, storage_options=config.delta_options())
    return list(pa.table(table.get_add_actions(flatten=True)).to_pylist())  # deltalake 1.x: an arro3 table


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "point"), DATASOURCE_KILLS)
def test_kill_through_the_data_source_then_restart_is_exact(
    delta_pipeline: DeltaPipeline, strategy: str, point: str
) -> None:
    """Delta through ``writeStream.format("eosink")``: the driver's process group SIGKILLed at ``point`` of
    batch 1 (F5: when batch 2 is planned), then restarted from the checkpoint.

    Pass: the kill happened; the restart ends cleanly; a Delta reader sees every input row once (each
    distinct row once under idempotent's whole-row keys), one eosink commit per batch Spark committed,
    nothing in doubt.
    """
    kill_through_the_data_source(delta_pipeline, strategy, point)
    delta_pipeline.assert_exact()


@pytest.mark.full
def test_start_time_mistakes_stop_before_spark_starts_and_the_fixed_start_lands_every_row_once(
    delta_pipeline: DeltaPipeline,
) -> None:
    """An unreachable store and a wrong secret key, through ``writer.start(...)`` (see the helper)."""
    down = f"http://127.0.0.1:{closed_port()}"
    assert_start_mistakes_stop_before_spark(
        delta_pipeline,
        {
            "unreachable": ({"EOSINK_S3_ENDPOINT": down}, "TransientError"),
            "wrong-secret": ({"EOSINK_S3_SECRET_KEY": "not-the-secret-key"}, "AuthenticationError"),
        },
    )
