"""Real Spark streaming queries writing into a Delta table on MinIO, SIGKILLed and restarted.

``sink_driver.py --sink delta`` runs in a session of its own and writes through
:class:`~eosink.connectors.delta.DeltaSink` (executors write Parquet files into the table's directory;
the driver collects only committables and makes one Delta commit per batch). Each test kills the driver's
whole process group at a named fault point of batch 1, restarts it on the same checkpoint, and reads the
table back as any Delta reader does (its current snapshot): exactly the input rows, one eosink commit per
batch of Spark's commit log, nothing left in doubt. Every test has a table of its own.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.delta import DeltaConfig, _log
from eosink.connectors.delta.admin import DeltaAdmin
from eosink.connectors.delta.testing import read_table
from eosink.connectors.s3.testing import BUCKET, S3Harness, empty_prefix
from eosink.errors import ServiceError
from eosink.services import get_service
from eosink.services.minio import S3Endpoint

from .conftest import Pipeline, assert_clean, assert_killed

pytestmark = pytest.mark.spark

SINK_DRIVER = Path(__file__).with_name("sink_driver.py")
STRATEGIES = ["2pc", "txid-check"]
# DeltaSink passes F6 once the batch's files are checked, before the log entry is written.
COMMON_POINTS = ["F1", "F2", "F3", "F4", "F6", "F8"]
# make test: one kill-and-restart per strategy: 2pc at F5 (batch 1 in Spark's commit log, its files prepared:
# only the restart's recovery can commit it); txid-check at F6 (checked, not committed).
QUICK = {("2pc", "F5"), ("txid-check", "F6")}


def _cases() -> list[Any]:
    cases = [(s, p) for s in STRATEGIES for p in COMMON_POINTS] + [("2pc", "F5")]
    return [pytest.param(s, p, marks=() if (s, p) in QUICK else pytest.mark.full, id=f"{s}-{p}") for s, p in cases]


@pytest.fixture(scope="session")
def minio() -> S3Endpoint:
    """The MinIO service's endpoint; a missing server fails the test (never a skip)."""
    try:
        endpoint: S3Endpoint = get_service("minio").endpoint()
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)
    return endpoint


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
            *("--input", str(self.input), "--checkpoint", str(self.checkpoint)),
            *("--target", self.prefix, "--namespace", self.prefix, "--app-id", self.app_id),
            *("--strategy", self.strategy, "--master", master, "--stats-out", str(self.root / "stats.json")),
            *("--way", self.way),
        ]

    def config(self) -> DeltaConfig:
        ep = self.store
        return DeltaConfig(
            f"s3://{BUCKET}/{self.prefix}",
            endpoint_url=ep.endpoint_url,
            access_key_id=ep.access_key,
            secret_access_key=ep.secret_key,
            region=ep.region,
        )

    def found(self) -> Counter[tuple[Any, ...]]:
        """The rows a Delta reader sees: the table's current snapshot."""
        return Counter((r["id"], r["account"], r["amount"]) for r in read_table(self.config()))

    def bundles(self) -> list[int]:
        """The batches the log holds eosink commits of, oldest first."""
        config = self.config()
        table = _log.load(config.table, config.delta_options())
        if table is None:
            return []
        return sorted(int(m["batch"]) for _, m in _log.eosink_commits(table, self.app_id))

    def in_doubt(self) -> list[str]:
        apps = DeltaAdmin(self.config()).status(self.app_id).apps
        return [w.id for a in apps for w in a.in_doubt]

    def assert_exact(self) -> None:
        expected, found = self.expected(), self.found()
        lost, duplicated = expected - found, found - expected
        assert not lost and not duplicated, f"lost={dict(lost)} duplicated={dict(duplicated)}"
        assert self.bundles() == self.spark_committed(), f"eosink commits of batches {self.bundles()}"
        assert not self.in_doubt(), f"work left in doubt: {self.in_doubt()}"

    def close(self) -> None:
        empty_prefix(self.harness().client(), BUCKET, self.prefix)


@pytest.fixture
def delta_pipeline(tmp_path: Path, driver_java_opts: str, minio: S3Endpoint) -> Iterator[DeltaPipeline]:
    pipeline = DeltaPipeline(
        tmp_path, java_opts=driver_java_opts, store=minio, prefix=f"sparkdelta-{uuid.uuid4().hex[:10]}"
    )
    pipeline.harness().ensure_bucket()
    yield pipeline
    pipeline.close()


def _rows_of_files(p: DeltaPipeline, files: set[int]) -> Counter[tuple[Any, ...]]:
    return Counter({row: n for row, n in p.expected().items() if row[0] // 10_000 in files})


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
        assert p.found() == _rows_of_files(p, {0}), "a killed batch's rows became visible"
        if point in ("F3", "F4", "F5", "F6"):
            assert p.in_doubt(), "the killed batch's prepared work is not listed as in doubt"
    assert_clean(p.run())
    p.assert_exact()
