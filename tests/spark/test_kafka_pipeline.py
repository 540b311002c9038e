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
import os
import random
import signal
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from eosink.checkpoint import SparkCheckpoint
from eosink.connectors.kafka import KafkaConfig
from eosink.connectors.kafka.admin import KafkaAdmin
from eosink.connectors.kafka.testing import by_key, read_topic
from eosink.errors import ServiceError
from eosink.services import get_service

from .conftest import (
    DATASOURCE_KILLS,
    Pipeline,
    assert_clean,
    assert_killed,
    assert_start_mistakes_stop_before_spark,
    assert_stopped_as_lost,
    assert_zombie_fenced,
    closed_port,
    fault_point_cases,
    kill_through_the_data_source,
    rewind_batch_1,
    rows_of_files,
    run_and_kill,
    wait_for,
)

pytestmark = pytest.mark.spark

SINK_DRIVER = Path(__file__).with_name("sink_driver.py")
PARTITIONS = 2
STRATEGIES = ["2pc", "txid-check", "idempotent"]
COMMON_POINTS = ["F1", "F2", "F3", "F4", "F6", "F8"]
# make test: one kill-and-restart per strategy. 2pc at F5: batch 1's transactions are prepared and
# Spark's commit log holds it, so only the restart's recovery can commit them (EndTxn from the ids
# the checkpoint's manifest kept). txid-check mid-commit: some participants committed, the bundle
# not yet. idempotent mid-write: a replay writes the same keys again.
QUICK = {("txid-check", "F6")}  # 2pc kills into Kafka run in make test-fanout and test-secured


def _cases() -> list[Any]:
    return fault_point_cases(STRATEGIES, COMMON_POINTS, QUICK, matrix=True)


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
    producer_options: dict[str, Any] = field(default_factory=dict)
    """The driver's KafkaConfig.producer_options (through the environment, as TLS settings come)."""
    _admin: Any = field(default=None, repr=False)

    def environment(self) -> dict[str, str]:
        env = {**super().environment(), "EOSINK_TEST_KAFKA_BOOTSTRAP": self.bootstrap}
        if self.producer_options:
            env["EOSINK_TEST_KAFKA_OPTIONS"] = json.dumps(self.producer_options)
        return env

    def command(self, mode: str, master: str) -> list[str]:
        return [
            *(str(SINK_DRIVER), "--sink", "kafka"),
            *("--input", str(self.input), "--checkpoint", self.checkpoint_location()),
            *("--target", self.topic, "--namespace", self.topic, "--app-id", self.app_id),
            *("--strategy", self.strategy, "--master", master, "--stats-out", str(self.root / "stats.json")),
            *("--way", self.way),
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

    def reconnect(self) -> None:
        """Drop the test's admin client: one that lived through a broker outage may keep every node in
        backoff (kafka-python then finds no node for a metadata request), so the next read opens a new one."""
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None

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
        assert p.found() == rows_of_files(p, {0}), "a killed batch's records became visible before its commit"
        if point in ("F3", "F4", "F5"):
            assert p.in_doubt(), "the killed batch's prepared transactions are not listed as in doubt"
    assert_clean(p.run())
    p.assert_exact()


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "seed"), [("2pc", 1), ("txid-check", 1), ("idempotent", 2)])
def test_random_kills_then_restart_is_exact(kafka_pipeline: KafkaPipeline, strategy: str, seed: int) -> None:
    """Seeded random-moment SIGKILLs of the driver's group (after a random number of committed batches, plus a
    random delay), restarts until the input is exhausted.

    Pass: a read_committed consumer sees every input record once (by key under idempotent), one bundle
    per batch, no transaction left open.
    """
    p = kafka_pipeline
    p.strategy = strategy
    p.files = 5
    p.__post_init__()  # rewrite the input: five batches
    rng = random.Random(seed)
    runs = [run_and_kill(p, p.bundles, rng.randint(0, 2), rng.uniform(0, 1.5)) for _ in range(2)]
    runs.append(p.run())
    assert_clean(runs[-1])
    assert any(r.returncode == -signal.SIGKILL for r in runs), "no run was killed: the test proved nothing"
    p.assert_exact()


@pytest.mark.full
def test_a_transaction_the_broker_expired_stops_the_query_and_a_rewind_lands_it_once(
    kafka_pipeline: KafkaPipeline,
) -> None:
    """2pc with a 10 s transaction timeout, SIGKILLed at F5 of batch 1 (Spark committed it, the sink did
    not); the driver stays down until the broker has aborted batch 1's transactions.

    Pass: the restart stops with PreparedWorkLostError (exit 3) naming batch 1, the broker's
    transaction timeout and the rewind, with nothing of batch 1 visible; ``eosink recover --rewind``
    prints its plan and changes nothing, ``--yes`` carries it out; the next restart completes and the
    topic holds exactly the input rows, one bundle per batch, no transaction left open.
    """
    p = kafka_pipeline
    p.strategy = "2pc"
    p.extra_args = ["--txn-timeout-ms", "10000"]
    assert_killed(p.run("F5@1:kill"), "F5")
    assert p.in_doubt(), "batch 1's transactions should be open after a kill at F5"
    wait_for(lambda: not p.in_doubt(), 90, "the broker to abort batch 1's expired transactions")
    stopped = p.run()
    assert_stopped_as_lost(stopped)
    assert "transaction.timeout.ms" in stopped.stderr or "transaction_timeout_ms" in stopped.stderr
    assert p.found() == rows_of_files(p, {0}), "the query went on past the lost batch"
    cli = [
        *("recover", "--sink", "kafka", "--bootstrap-servers", p.bootstrap, "--topic", p.topic),
        *("--progress-topic", p.progress_topic, "--transactional-id-prefix", p.topic),
        *("--app-id", p.app_id, "--checkpoint", str(p.checkpoint), "--rewind"),
    ]
    rewind_batch_1(p.checkpoint, cli, dict(os.environ))
    assert_clean(p.run())
    p.assert_exact()


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "point"), [("2pc", "F4"), ("txid-check", "F1")])
def test_a_zombie_driver_is_fenced(kafka_pipeline: KafkaPipeline, strategy: str, point: str) -> None:
    """F10: the old driver is frozen (SIGSTOP of its whole session) at ``point`` of batch 1, a new driver
    takes over and finishes, then the old one is thawed (SIGCONT).

    Pass: the new driver ends cleanly with the topic exact; the zombie stops with FencedError (the
    writer epoch, or the producer epoch of its bundle transaction), or on Spark's own
    concurrent-writer check, and the topic is still exact afterwards.
    """
    p = kafka_pipeline
    p.strategy = strategy
    assert_zombie_fenced(p, point)


@pytest.mark.full
@pytest.mark.parametrize(("strategy", "point"), DATASOURCE_KILLS)
def test_kill_through_the_data_source_then_restart_is_exact(
    kafka_pipeline: KafkaPipeline, strategy: str, point: str
) -> None:
    """Kafka through ``writeStream.format("eosink")``: the driver's process group SIGKILLed at ``point`` of
    batch 1 (F5: when batch 2 is planned), then restarted from the checkpoint.

    Pass: the kill happened; the restart ends cleanly; a read_committed consumer sees every input record once
    (keyed by whole rows under idempotent: identical input rows are one key), one bundle per batch, no
    transaction left open.
    """
    kill_through_the_data_source(kafka_pipeline, strategy, point)
    kafka_pipeline.assert_exact()


@pytest.mark.full
def test_two_hundred_batches_through_the_data_source_keep_a_bounded_pool_of_transactional_ids(
    tmp_path: Path, driver_java_opts: str, kafka_bootstrap: str
) -> None:
    """200 real micro-batches through ``format("eosink")`` (txid-check, two participants a batch), which fences
    at every batch: the app_id ends with at most participants x slots + 2 transactional ids on the broker (fence,
    bundles, one per participant slot; was two per batch), and every record once.

    Pass: the ids are the fence's, the bundles' and ``p<n>.a0`` of the participants; exact.
    """
    p = KafkaPipeline(
        tmp_path,
        files=200,
        rows_per_file=60,  # about 3 KB a file: two participants a batch (spark.sql.files.maxPartitionBytes=2048)
        strategy="txid-check",
        way="datasource",
        java_opts=driver_java_opts,
        bootstrap=kafka_bootstrap,
        topic=f"sparkkafka_{uuid.uuid4().hex[:10]}",
    )
    p.create_topic()
    try:
        assert_clean(p.finish(p.start(), timeout_s=1800))  # about 1-2 s a batch here: planning and commit workers
        found, expected = p.found(), p.expected()
        assert found == expected, f"lost={dict(expected - found)} duplicated={dict(found - expected)}"
        last = SparkCheckpoint(p.checkpoint).last_committed()  # Spark keeps the newest 100 entries of its log
        assert p.bundles() == list(range(200)) and last == 199, (p.bundles()[-3:], last)
        assert not p.in_doubt()
        ids = KafkaAdmin(p.config()).transactional_ids(p.app_id)
        data = [i for i in ids if not i.endswith((".fence", ".bundles"))]
        participants = {i.rsplit(".", 2)[-2] for i in data}
        assert len(participants) >= 2, ids  # the bound below is not met by one participant alone
        assert len(ids) <= len(participants) * 1 + 2, ids
    finally:
        p.close()


@pytest.mark.full
def test_start_time_mistakes_stop_before_spark_starts_and_the_fixed_start_lands_every_row_once(
    kafka_pipeline: KafkaPipeline,
) -> None:
    """A missing topic, then unreachable brokers, through ``writer.start(...)`` (see the helper)."""
    p = kafka_pipeline
    topic, p.topic, p.way = p.topic, f"{p.topic}_missing", "start"
    try:
        run = p.run(args=["--transient-timeout-s", "3"])
        assert run.error_kind == "ConfigurationError" and f"{p.topic!r} does not exist" in run.stderr, run.stderr
        assert not (p.checkpoint / "metadata").exists(), "Spark started the query"
    finally:
        with contextlib.suppress(Exception):
            p.admin().delete_topics([p.progress_topic])  # setup made the missing topic's progress topic first
        p.topic = topic
    down = f"127.0.0.1:{closed_port()}"
    assert_start_mistakes_stop_before_spark(
        p, {"unreachable": ({"EOSINK_TEST_KAFKA_BOOTSTRAP": down}, "TransientError")}
    )
