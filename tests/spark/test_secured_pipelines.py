"""Real Spark queries into the secured servers, as the least-privileged writer, SIGKILLed and restarted.

The writer holds exactly the documented grants (``eosink.connectors.<sink>.grants``) over TLS; one
kill-and-restart per strategy; no secret anywhere in what the driver, its executors and their
Python workers printed. Needs ``eosink services up --secure`` (``make test-secured`` starts them).
S3 and Delta: the MinIO writer users over ``https://`` (the CA through ``EOSINK_S3_CA_BUNDLE``); HDFS:
the driver and its executors as the ordinary user ``writer`` (``HADOOP_USER_NAME``), which owns only
the target. The checkpoints are local.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from eosink.connectors.delta import DeltaConfig
from eosink.connectors.delta.testing import SecureDeltaS3Harness
from eosink.connectors.hdfs.testing import as_superuser
from eosink.connectors.kafka import KafkaConfig
from eosink.connectors.kafka.grants import writer_acls
from eosink.connectors.kafka.testing import SecureKafkaHarness
from eosink.connectors.postgres import PostgresConfig
from eosink.connectors.postgres.grants import writer_grants
from eosink.connectors.postgres.testing import SecurePostgresHarness
from eosink.connectors.s3 import S3Config
from eosink.connectors.s3.testing import BUCKET, SecureS3Harness
from eosink.contracts.secrets import assert_secret_free
from eosink.services import get_service
from eosink.services.kafka_secure import SecureKafkaEndpoint
from eosink.services.minio_secure import SecureS3Endpoint
from eosink.services.postgres_secure import SecurePostgresEndpoint, secure_url

from .conftest import Run, assert_clean, assert_killed
from .test_delta_pipeline import DeltaPipeline
from .test_hdfs_pipeline import HdfsPipeline
from .test_kafka_pipeline import KafkaPipeline
from .test_postgres_pipeline import PgPipeline
from .test_s3_pipeline import S3Pipeline

pytestmark = pytest.mark.spark

PG = SecurePostgresHarness()
KAFKA = SecureKafkaHarness()
S3 = SecureS3Harness()
DELTA = SecureDeltaS3Harness()


@dataclass
class SecurePgPipeline(PgPipeline):
    """The driver connects as the writer (``sslmode=verify-full``); the test reads back as the administrator."""

    writer_url: str = field(default="", repr=False)

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "EOSINK_TEST_PG_URL": self.writer_url}


@pytest.fixture
def secure_pg(tmp_path: Path, driver_java_opts: str) -> Iterator[tuple[SecurePgPipeline, SecurePostgresEndpoint]]:
    endpoint = get_service("postgres-secure").endpoint()
    assert isinstance(endpoint, SecurePostgresEndpoint)
    tag = uuid.uuid4().hex[:10]
    pipeline = SecurePgPipeline(
        tmp_path,
        java_opts=driver_java_opts,
        url=endpoint.url,
        writer_url=endpoint.writer_url(),
        table=f"secpg_{tag}",
        control_schema=f"secpg_{tag}_ctl",
    )
    config = PostgresConfig(
        pipeline.writer_url, pipeline.table, control_schema=pipeline.control_schema, create_table=True
    )
    for grant in writer_grants(config, endpoint.writer, endpoint.dbname):
        PG.admin().execute(grant.statement)
    yield pipeline, endpoint
    pipeline.close()
    PG.drop(pipeline.control_schema, [sql.Identifier(pipeline.table)])


# (strategy, fault point): one kill each; make test runs the 2pc one (test-secured), test-full the others.
KILLS = [("2pc", "F5"), pytest.param("txid-check", "F4", marks=pytest.mark.full)]
KILLS.append(pytest.param("idempotent", "F2", marks=pytest.mark.full))
KAFKA_KILLS = [("2pc", "F5"), pytest.param("txid-check", "F6", marks=pytest.mark.full)]
KAFKA_KILLS.append(pytest.param("idempotent", "F2", marks=pytest.mark.full))


def _kill_and_restart(p: Any, point: str, secrets: list[str]) -> None:
    """SIGKILL at ``point`` of batch 1, a restart from the checkpoint: exact, and no secret in what it printed."""
    runs: list[Run] = [p.run(f"{point}@1:kill")]
    assert_killed(runs[0], point)
    runs.append(p.run())
    assert_clean(runs[-1])
    p.assert_exact()
    for run in runs:
        assert_secret_free(run.output, secrets)


WRONG = "not-the-writer-password-7"


def _refused_then_landed(p: Any, secrets: list[str], nothing_visible: Any, fix: Any) -> None:
    """A real Spark query with a wrong password: it stops with AuthenticationError, nothing of it is visible
    and no secret (the wrong one or the right one) is in anything the driver, its executors or their Python
    workers printed; with the password fixed, a restart from the same checkpoint lands every row once."""
    refused = p.run()
    assert refused.returncode != 0 and refused.error_kind == "AuthenticationError", refused.output[-3000:]
    assert_secret_free(refused.output, [WRONG, *secrets])
    assert nothing_visible()
    fix()
    landed = p.run()
    assert_clean(landed)
    p.assert_exact()
    assert_secret_free(landed.output, secrets)


@pytest.mark.parametrize(("variant", "point"), KILLS)
def test_postgres_kill_and_restart_as_the_least_privileged_writer(
    secure_pg: tuple[SecurePgPipeline, SecurePostgresEndpoint], variant: str, point: str
) -> None:
    p, endpoint = secure_pg
    p.variant = variant
    _kill_and_restart(p, point, [endpoint.writer_password])


@pytest.mark.full
def test_postgres_with_a_wrong_password_stops_then_lands_once_fixed(
    secure_pg: tuple[SecurePgPipeline, SecurePostgresEndpoint],
) -> None:
    p, endpoint = secure_pg
    right = p.writer_url
    p.writer_url = secure_url(endpoint.writer, WRONG, endpoint.port, endpoint.ca, endpoint.dbname)

    def fix() -> None:
        p.writer_url = right

    _refused_then_landed(p, [endpoint.writer_password], lambda: not p.found(), fix)


@dataclass
class SecureKafkaPipeline(KafkaPipeline):
    """The driver produces as the writer over SASL_SSL; the test reads back as the administrator."""

    secured: SecureKafkaEndpoint | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    """The writer's password the driver is given (None: the right one)."""

    def environment(self) -> dict[str, str]:
        assert self.secured is not None
        writer = self.secured
        password = writer.writer_password if self.password is None else self.password
        options = json.dumps(writer.client_options(writer.writer, password))
        return {**super().environment(), "EOSINK_TEST_KAFKA_OPTIONS": options}  # never in argv: a password

    def config(self) -> KafkaConfig:
        assert self.secured is not None
        plain = super().config()
        return KafkaConfig(
            plain.bootstrap_servers,
            topic=plain.topic,
            progress_topic=plain.progress_topic,
            transactional_id_prefix=plain.transactional_id_prefix,
            producer_options=self.secured.admin_options(),
        )

    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            assert self.secured is not None
            self._admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap, client_id="eosink-spark-test", **self.secured.admin_options()
            )
        return self._admin


@pytest.fixture
def secure_kafka(tmp_path: Path, driver_java_opts: str) -> Iterator[tuple[SecureKafkaPipeline, SecureKafkaEndpoint]]:
    endpoint = get_service("kafka-secure").endpoint()
    assert isinstance(endpoint, SecureKafkaEndpoint)
    pipeline = SecureKafkaPipeline(
        tmp_path / "job",
        java_opts=driver_java_opts,
        bootstrap=endpoint.bootstrap_servers,
        topic=f"sec_{uuid.uuid4().hex[:8]}",
        secured=endpoint,
    )
    pipeline.create_topic()
    writer = f"User:{endpoint.writer}"
    KAFKA.allow([a.acl(writer) for a in writer_acls(pipeline.config())], writer)
    yield pipeline, endpoint
    pipeline.close()


@pytest.mark.parametrize(("strategy", "point"), KAFKA_KILLS)
def test_kafka_kill_and_restart_as_the_least_privileged_writer(
    secure_kafka: tuple[SecureKafkaPipeline, SecureKafkaEndpoint], strategy: str, point: str
) -> None:
    p, endpoint = secure_kafka
    p.strategy = strategy
    _kill_and_restart(p, point, [endpoint.writer_password])


@pytest.mark.full
def test_kafka_with_a_wrong_password_stops_then_lands_once_fixed(
    secure_kafka: tuple[SecureKafkaPipeline, SecureKafkaEndpoint],
) -> None:
    p, endpoint = secure_kafka
    p.password = WRONG

    def fix() -> None:
        p.password = None

    _refused_then_landed(p, [endpoint.writer_password], lambda: not p.found(), fix)


# -- S3, Delta on S3, HDFS: every strategy's kill in test-secured-full ---------------------------------------------

FILE_KILLS = [pytest.param(*case, marks=pytest.mark.full) for case in [("2pc", "F5"), ("txid-check", "F4")]]
FILE_KILLS.append(pytest.param("idempotent", "F2", marks=pytest.mark.full))


def _writer_store(endpoint: SecureS3Endpoint, access_key: str, secret: str) -> dict[str, str]:
    """The ``EOSINK_S3_*`` variables the driver builds its sink from: the writer's keys and the CA."""
    return {
        "EOSINK_S3_ENDPOINT": endpoint.endpoint_url,
        "EOSINK_S3_ACCESS_KEY": access_key,
        "EOSINK_S3_SECRET_KEY": secret,
        "EOSINK_S3_REGION": endpoint.region,
        "EOSINK_S3_CA_BUNDLE": endpoint.ca,
    }


def _objects(p: Any) -> list[str]:
    """Every key under pipeline ``p``'s prefix (read with the root credentials)."""
    pages = p.harness().client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{p.prefix}/")
    return [str(o["Key"]) for page in pages for o in page.get("Contents", [])]


@dataclass
class SecureS3Pipeline(S3Pipeline):
    """The driver writes as the secured MinIO's writer user; the test reads back with the root credentials."""

    secret: str | None = field(default=None, repr=False)
    """The writer's secret key the driver is given (None: the right one)."""

    def harness(self) -> Any:
        return S3

    def environment(self) -> dict[str, str]:
        ep = S3.endpoint()
        secret = ep.writer_secret if self.secret is None else self.secret
        return {**super().environment(), **_writer_store(ep, ep.writer, secret)}

    def config(self) -> S3Config:
        return S3.config(self.prefix)


@pytest.mark.parametrize(("strategy", "point"), FILE_KILLS)
def test_s3_kill_and_restart_as_the_least_privileged_writer(
    tmp_path: Path, driver_java_opts: str, strategy: str, point: str
) -> None:
    ep = S3.endpoint()
    S3.ensure_bucket()  # the driver's writer may not create it
    prefix = f"{S3.prefix_root}/spark-{uuid.uuid4().hex[:10]}"
    p = SecureS3Pipeline(tmp_path, java_opts=driver_java_opts, store=ep, prefix=prefix, strategy=strategy)
    try:
        _kill_and_restart(p, point, [ep.writer_secret, ep.secret_key])
    finally:
        p.close()


@pytest.mark.full
def test_s3_with_a_wrong_secret_stops_then_lands_once_fixed(tmp_path: Path, driver_java_opts: str) -> None:
    ep = S3.endpoint()
    S3.ensure_bucket()
    prefix = f"{S3.prefix_root}/spark-{uuid.uuid4().hex[:10]}"
    p = SecureS3Pipeline(tmp_path, java_opts=driver_java_opts, store=ep, prefix=prefix, secret=WRONG)

    def fix() -> None:
        p.secret = None

    try:
        _refused_then_landed(p, [ep.writer_secret, ep.secret_key], lambda: not _objects(p), fix)
    finally:
        p.close()


@dataclass
class SecureDeltaPipeline(DeltaPipeline):
    """The driver writes the table as the Delta writer user of the secured MinIO; the test reads back as it too."""

    secret: str | None = field(default=None, repr=False)
    """The writer's secret key the driver is given (None: the right one)."""

    def environment(self) -> dict[str, str]:
        secret = DELTA.writer_secret if self.secret is None else self.secret
        return {**super().environment(), **_writer_store(DELTA.endpoint(), DELTA.writer, secret)}

    def config(self) -> DeltaConfig:
        return DELTA.config(self.prefix)


@pytest.mark.parametrize(("strategy", "point"), FILE_KILLS)
def test_delta_kill_and_restart_as_the_least_privileged_writer(
    tmp_path: Path, driver_java_opts: str, strategy: str, point: str
) -> None:
    ep = DELTA.endpoint()
    prefix = f"{DELTA.prefix_root}/spark-{uuid.uuid4().hex[:10]}"
    p = SecureDeltaPipeline(tmp_path, java_opts=driver_java_opts, store=ep, prefix=prefix, strategy=strategy)
    try:
        _kill_and_restart(p, point, [DELTA.writer_secret, ep.secret_key])
    finally:
        p.close()


@pytest.mark.full
def test_delta_with_a_wrong_secret_stops_then_lands_once_fixed(tmp_path: Path, driver_java_opts: str) -> None:
    ep = DELTA.endpoint()
    prefix = f"{DELTA.prefix_root}/spark-{uuid.uuid4().hex[:10]}"
    p = SecureDeltaPipeline(tmp_path, java_opts=driver_java_opts, store=ep, prefix=prefix, secret=WRONG)

    def fix() -> None:
        p.secret = None

    try:
        _refused_then_landed(p, [DELTA.writer_secret, ep.secret_key], lambda: not _objects(p), fix)
    finally:
        p.close()


HDFS_WRITER = "writer"


@dataclass
class SecureHdfsPipeline(HdfsPipeline):
    """The driver and its executors write as the ordinary user ``writer``; the test reads back as the superuser."""

    def environment(self) -> dict[str, str]:
        return {**super().environment(), "HADOOP_USER_NAME": HDFS_WRITER}


@pytest.mark.parametrize(("strategy", "point"), FILE_KILLS)
def test_hdfs_kill_and_restart_as_the_least_privileged_writer(
    tmp_path: Path, driver_java_opts: str, strategy: str, point: str
) -> None:
    """The target is made by the superuser and handed to the writer (the documented permissions); its
    parent stays the superuser's, mode 755."""
    base = f"/eosink-secured-admin/spark-{uuid.uuid4().hex[:10]}"
    target = f"{base}/events"
    as_superuser(base, "MKDIRS", permission="755")
    as_superuser(target, "MKDIRS", permission="755")
    as_superuser(target, "SETOWNER", owner=HDFS_WRITER)
    cluster = get_service("hdfs").endpoint()
    p = SecureHdfsPipeline(tmp_path, java_opts=driver_java_opts, cluster=cluster, directory=target)
    try:
        p.strategy = strategy
        _kill_and_restart(p, point, [])
        assert p.listed() == p.found(), "a listing reader sees other rows than the batch records name"
    finally:
        as_superuser(base, "DELETE", method="DELETE", recursive="true")


@pytest.mark.full
def test_hdfs_checkpoint_on_hdfs_owned_by_the_writer(tmp_path: Path, driver_java_opts: str) -> None:
    """2pc with ``checkpointLocation`` on HDFS, in a directory the superuser made and handed to the writer (the
    documented permissions: the target and the checkpoint directory, each the writer's; their parent the
    superuser's, mode 755), SIGKILLed at F5 of batch 1 (in Spark's commit log, its files prepared), restarted.

    Pass: exact after the restart; Spark's commit log and eosink's directory are in the HDFS checkpoint, and
    everything in it is the writer's (Spark's HDFS client and eosink's wrote it as the writer)."""
    base = f"/eosink-secured-admin/spark-{uuid.uuid4().hex[:10]}"
    target, checkpoint = f"{base}/events", f"{base}/checkpoint"
    as_superuser(base, "MKDIRS", permission="755")
    for path in (target, checkpoint):
        as_superuser(path, "MKDIRS", permission="755")
        as_superuser(path, "SETOWNER", owner=HDFS_WRITER)
    cluster = get_service("hdfs").endpoint()
    p = SecureHdfsPipeline(tmp_path, java_opts=driver_java_opts, cluster=cluster, directory=target)
    p.checkpoint_uri = f"{cluster.url.rstrip('/')}{checkpoint}"
    try:
        p.strategy = "2pc"
        _kill_and_restart(p, "F5", [])
        owners = _owners_under(checkpoint)
        assert f"{checkpoint}/commits/{p.files - 1}" in owners, sorted(owners)
        assert any("/eosink/" in path for path in owners), sorted(owners)  # eosink's manifests' directory
        assert set(owners.values()) == {HDFS_WRITER}, owners
        assert not p.checkpoint.exists()
    finally:
        as_superuser(base, "DELETE", method="DELETE", recursive="true")


def _owners_under(root: str) -> dict[str, str]:
    """Every file and directory under ``root`` (WebHDFS, as the superuser), with its owner."""
    found: dict[str, str] = {}
    stack = [root]
    while stack:
        path = stack.pop()
        for status in as_superuser(path, "LISTSTATUS", method="GET")["FileStatuses"]["FileStatus"]:
            child = f"{path}/{status['pathSuffix']}"
            found[child] = status["owner"]
            if status["type"] == "DIRECTORY":
                stack.append(child)
    return found
