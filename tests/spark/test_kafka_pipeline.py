"""Real Spark streaming queries writing into a real Kafka broker, SIGKILLed and restarted from the checkpoint.

The Kafka counterpart of ``test_postgres_pipeline.py``: ``sink_driver.py --sink kafka`` runs in a
session of its own and writes JSON records through :class:`~eosink.connectors.kafka.KafkaSink`
(executors produce from Arrow batches; the driver collects only committables,
``spark.driver.maxResultSize=1m``). Each test kills the driver's whole process group at a named
fault point of batch 1, restarts it on the same checkpoint, and reads the topic's log back the
way a ``read_committed`` consumer ends up reading it: exactly the input rows (keyed records once
per key under ``idempotent``), one bundle per batch of Spark's commit log, and no transaction of
the app left open. Every test has its own topic, progress topic and transactional-id prefix.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.kafka import KafkaConfig
from eosink.connectors.kafka.admin import KafkaAdmin
from eosink.connectors.kafka.testing import by_key, read_topic
from eosink.errors import ServiceError
from eosink.services import get_service

from .conftest import Pipeline, assert_clean, assert_killed

pytestmark = pytest.mark.spark

SINK_DRIVER = Path(__file__).with_name("sink_driver.py")
PARTITIONS = 2
STRATEGIES = ["2pc", "txid-check", "idempotent"]
COMMON_POINTS = ["F1", "F2", "F3", "F4", "F6", "F8"]
# make test: one kill-and-restart per strategy. 2pc at F5: batch 1's transactions are prepared and
# Spark's commit log holds it, so only the restart's recovery can commit them (EndTxn from the ids
# the checkpoint's manifest kept). txid-check mid-commit: some participants committed, the bundle
# not yet. idempotent mid-write: a replay writes the same keys again.
QUICK = {("2pc", "F5"), ("txid-check", "F6"), ("idempotent", "F2")}


def _cases() -> list[Any]:
    cases = [(s, p) for s in STRATEGIES for p in COMMON_POINTS] + [("2pc", "F5")]
    return [pytest.param(s, p, marks=() if (s, p) in QUICK else pytest.mark.full, id=f"{s}-{p}") for s, p in cases]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> str:
    """The Kafka service's brokers; a missing broker fails the test (never a skip)."""
    try:
        return str(get_service("kafka").endpoint().bootstrap_servers)
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)


@dataclass
class KafkaPipeline(Pipeline):
    """A :class:`Pipeline` whose driver writes JSON records into one topic."""

    files: int = 3
    bootstrap: str = ""
    topic: str = ""
    _admin: Any = field(default=None, repr=False)

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "EOSINK_TEST_KAFKA_BOOTSTRAP": self.bootstrap}

    def command(self, mode: str, master: str) -> list[str]:
        return [
            *(str(SINK_DRIVER), "--sink", "kafka"),
            *("--input", str(self.input), "--checkpoint", str(self.checkpoint)),
            *("--target", self.topic, "--namespace", self.topic, "--app-id", self.app_id),
            *("--strategy", self.strategy, "--master", master, "--stats-out", str(self.root / "stats.json")),
        ]

    @property
    def progress_topic(self) -> str:
        return f"{self.topic}_progress"

    def config(self) -> KafkaConfig:
        return KafkaConfig(
            self.bootstrap, topic=self.topic, progress_topic=self.progress_topic, transactional_id_prefix=self.topic
        )

    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="eosink-spark-test")
        return self._admin

    def create_topic(self) -> None:
        self.admin().create_topics(
            {self.topic: {"num_partitions": PARTITIONS, "replication_factor": 1}}, wait_for_metadata=True
        )

    # -- reading Kafka back -----------------------------------------------------------------------

    def found(self, app_id: str | None = None) -> Counter[tuple[Any, ...]]:
        records = read_topic(self.admin(), self.topic, PARTITIONS)
        if self.strategy == "idempotent":  # a replay rewrote the same keys: a consumer keeps the last
            records = by_key(records)
        rows = [json.loads(r.value) for r in records if r.value is not None]
        return Counter((r["id"], r["account"], r["amount"]) for r in rows)

    def bundles(self) -> list[int]:
        return [b.batch.batch_id for b in KafkaAdmin(self.config()).bundles(self.app_id)]

    def in_doubt(self) -> list[str]:
        apps = KafkaAdmin(self.config()).status(self.app_id).apps
        return [w.id for a in apps for w in a.in_doubt]

    def assert_exact(self) -> None:
        expected, found = self.expected(), self.found()
        lost, duplicated = expected - found, found - expected
        assert not lost and not duplicated, f"lost={dict(lost)} duplicated={dict(duplicated)}"
        assert self.bundles() == self.spark_committed(), f"bundles {self.bundles()}"
        assert not self.in_doubt(), f"transactions left open: {self.in_doubt()}"

    def close(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.delete_topics([self.topic, self.progress_topic])
            self._admin.close()


@pytest.fixture
def kafka_pipeline(tmp_path: Path, driver_java_opts: str, kafka_bootstrap: str) -> Iterator[KafkaPipeline]:
    pipeline = KafkaPipeline(
        tmp_path, java_opts=driver_java_opts, bootstrap=kafka_bootstrap, topic=f"sparkkafka_{uuid.uuid4().hex[:10]}"
    )
    pipeline.create_topic()
    yield pipeline
    pipeline.close()


def _rows_of_files(p: KafkaPipeline, files: set[int]) -> Counter[tuple[Any, ...]]:
    return Counter({row: n for row, n in p.expected().items() if row[0] // 10_000 in files})


@pytest.mark.parametrize(("strategy", "point"), _cases())
def test_kill_at_fault_point_then_restart_is_exact(kafka_pipeline: KafkaPipeline, strategy: str, point: str) -> None:
    """SIGKILL of the driver's process group at ``point`` of batch 1, then a restart from the checkpoint.

    Pass: the topic holds exactly the input rows, one bundle per batch, no transaction left open.
    Under 2pc and txid-check, nothing of batch 1 is visible before its commit point: killed at or
    before F5 (prepared, or just in Spark's commit log), a consumer sees batch 0 only.
    """
    p = kafka_pipeline
    p.strategy = strategy
    assert_killed(p.run(f"{point}@1:kill"), point)
    if strategy != "idempotent" and point in ("F2", "F3", "F4", "F5"):
        assert p.found() == _rows_of_files(p, {0}), "a killed batch's records became visible before its commit"
        if point in ("F3", "F4", "F5"):
            assert p.in_doubt(), "the killed batch's prepared transactions are not listed as in doubt"
    assert_clean(p.run())
    p.assert_exact()
