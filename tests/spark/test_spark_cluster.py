"""Spark pipelines on a standalone cluster (:class:`~eosink.services.spark_standalone.SparkStandalone`: a master and
two one-core workers, each a JVM of its own, the executors in JVMs the workers start), not ``local[...]``, into each
sink: PostgreSQL, Kafka, S3 and Delta (on MinIO), HDFS.

The drivers are ``sink_driver.py`` run with ``--master spark://...``; the cluster's settings (one executor per
worker, this Python on the executors) and the test's own (speculation) reach them through
``PYSPARK_SUBMIT_ARGS``. Fault points armed in the driver reach the executors through ``spark.executorEnv``.

Speculation: the first attempt of a participant of batch 1 to finish its pre_commit sleeps there
(``F11@1:slow``: prepared, then a straggler), Spark runs a copy of the task on the other worker, the copy wins and
Spark kills the straggler. Pass: the executors' logs say an attempt was killed because another succeeded, every
row is in the target once, and nothing the losing attempt prepared is left, each sink's way, read with a client of
the test's own (:func:`leftovers`): no prepared transaction, staged row or txns row still 'prepared' (PostgreSQL);
no open transaction of the app (Kafka); no incomplete upload and no upload intent (S3); no file in the app's
pending or staging directories (HDFS); no pending manifest, writing marker or data file the log does not list
(Delta).
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql

from eosink.connectors.s3.testing import BUCKET
from eosink.services.hdfs import HdfsEndpoint
from eosink.services.spark_standalone import SparkStandalone

from .conftest import Pipeline, assert_clean, assert_killed, wait_for
from .test_delta_pipeline import _pipeline as delta_pipeline_on
from .test_hdfs_pipeline import ROOT, HdfsPipeline, hdfs
from .test_kafka_pipeline import KafkaPipeline, kafka_bootstrap
from .test_postgres_pipeline import HARNESS, PgPipeline, pg_url
from .test_s3_pipeline import _pipeline as s3_pipeline_on

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

__all__ = ["hdfs", "kafka_bootstrap", "pg_url"]  # the sinks' pipelines' fixtures: the servers' endpoints

SINKS = ("postgres", "kafka", "s3", "hdfs", "delta")
STRATEGIES = ("2pc", "txid-check")
QUICK = ("postgres", "2pc")
"""make test's scenario: speculation into PostgreSQL under 2pc (test-postgres runs it); the rest is test-full's."""

SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.minTaskRuntime": "1s",
}
"""A straggler gets a copy once half of its stage's tasks are done and it has run 1.5 times their median."""
LOST_TO_A_COPY = "another attempt succeeded"
"""What an executor logs when Spark kills a task attempt because a copy of it finished first."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    with SparkStandalone(Path(tmp_path_factory.mktemp("spark-standalone"))) as made:
        yield made


def _submit_args(conf: dict[str, str]) -> str:
    return " ".join(f"--conf {shlex.quote(f'{k}={v}')}" for k, v in conf.items()) + " pyspark-shell"


# -- a pipeline into each sink, on the cluster -----------------------------------------------------------------


@dataclass
class OnCluster:
    """A sink's pipeline whose driver runs against the standalone cluster."""

    sink: str
    pipeline: Pipeline
    cleanup: Callable[[], None]

    def use(self, strategy: str) -> Pipeline:
        """The pipeline, set to write with ``strategy``."""
        p = self.pipeline
        p.strategy = strategy
        if isinstance(p, PgPipeline):
            p.variant = strategy
        return p


def _postgres(request: pytest.FixtureRequest, root: Path, java_opts: str) -> tuple[Pipeline, Callable[[], None]]:
    tag = uuid.uuid4().hex[:10]
    p = PgPipeline(
        root, java_opts=java_opts, url=request.getfixturevalue("pg_url"), table=f"sparkcl_{tag}",
        control_schema=f"sparkcl_{tag}_ctl",
    )  # fmt: skip

    def cleanup() -> None:
        p.close()
        HARNESS.drop(p.control_schema, [sql.Identifier(p.table)])

    return p, cleanup


def _kafka(request: pytest.FixtureRequest, root: Path, java_opts: str) -> tuple[Pipeline, Callable[[], None]]:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    p = KafkaPipeline(root, java_opts=java_opts, bootstrap=bootstrap, topic=f"sparkcl_{uuid.uuid4().hex[:10]}")
    p.create_topic()
    return p, p.close


def _s3(request: pytest.FixtureRequest, root: Path, java_opts: str) -> tuple[Pipeline, Callable[[], None]]:
    p = s3_pipeline_on(root, java_opts, request.getfixturevalue("minio"))
    return p, p.close


def _hdfs(request: pytest.FixtureRequest, root: Path, java_opts: str) -> tuple[Pipeline, Callable[[], None]]:
    directory = f"{ROOT}/cl-{uuid.uuid4().hex[:10]}"
    p = HdfsPipeline(root, java_opts=java_opts, cluster=request.getfixturevalue("hdfs"), directory=directory)
    return p, p.close


def _delta(request: pytest.FixtureRequest, root: Path, java_opts: str) -> tuple[Pipeline, Callable[[], None]]:
    p = delta_pipeline_on(root, java_opts, request.getfixturevalue("minio"))
    return p, p.close


PIPELINES = {"postgres": _postgres, "kafka": _kafka, "s3": _s3, "hdfs": _hdfs, "delta": _delta}
"""Each sink's pipeline, asking only for its own server (a test into PostgreSQL needs no Kafka)."""


@pytest.fixture
def on_cluster(
    request: pytest.FixtureRequest, tmp_path: Path, driver_java_opts: str, cluster: SparkStandalone
) -> Iterator[OnCluster]:
    """The pipeline into the sink named by the test's ``on_cluster`` parameter, its master the cluster's."""
    sink = str(request.param)
    p, cleanup = PIPELINES[sink](request, tmp_path, driver_java_opts)
    p.master = cluster.master_url
    try:
        yield OnCluster(sink, p, cleanup)
    finally:
        cleanup()
        if p.checkpoint_uri.startswith("hdfs://"):
            from eosink.connectors.hdfs.testing import remove

            remove(p.checkpoint_uri)


def _cases(quick: tuple[str, str] | None = None) -> list[Any]:
    """(sink, strategy) for every sink and strategy; ``quick`` runs in make test, the rest only in test-full."""
    return [
        pytest.param(
            sink, strategy, id=f"{sink}-{strategy}", marks=() if (sink, strategy) == quick else pytest.mark.full
        )
        for sink in SINKS
        for strategy in STRATEGIES
    ]


# -- what a losing attempt may leave, each sink's way ----------------------------------------------------------


def _kafka_left(p: Any) -> list[str]:
    """The app's open transactions, from the test's own admin client (ListTransactions on every broker)."""
    listed = p.admin().list_transactions(state_filters=["Ongoing", "PrepareCommit", "PrepareAbort"])
    return sorted(t.transactional_id for ts in listed.values() for t in ts if t.transactional_id.startswith(p.topic))


def _s3_left(p: Any) -> list[str]:
    """Incomplete uploads under the prefix, and upload intents (``_eosink/<app>/uploads/``) still there."""
    pages = p.harness().client().get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{p.prefix}/_eosink/")
    keys = [str(o["Key"]) for page in pages for o in page.get("Contents", [])]
    return [*p.uploads(), *(k for k in keys if "/uploads/" in k)]


def _hdfs_left(p: Any) -> list[str]:
    """Files in the apps' pending and staging directories (prepared attempts, batches being gathered)."""
    from eosink.connectors.hdfs.testing import files_under

    apps = f"{p.config().target_url.rstrip('/')}/_eosink/apps"
    return [f for f in files_under(apps) if "/pending/" in f or "/staging/" in f]


def _delta_left(p: Any) -> list[str]:
    """Pending manifests and writing markers under ``_eosink/``, and data files that the log does not list."""
    from deltalake import DeltaTable

    config = p.config()
    table = config.table.rstrip("/") + "/"
    uris = DeltaTable(config.table, storage_options=config.delta_options()).file_uris()
    listed = {uri[len(table) :] for uri in uris if uri.startswith(table)}
    client = p.harness().client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=f"{p.prefix}/")
    keys = [str(o["Key"])[len(p.prefix) + 1 :] for page in pages for o in page.get("Contents", [])]
    manifests = [k for k in keys if k.startswith("_eosink/") and ("/pending/" in k or "/writing/" in k)]
    unlisted = [k for k in keys if k.endswith(".parquet") and not k.startswith("_") and k not in listed]
    return [*manifests, *unlisted]


def _postgres_left(p: Any) -> list[str]:
    """Prepared transactions, staged rows, and txns rows still 'prepared'."""
    staged = [f"{p.staged()} staged rows"] if p.staged() else []
    return [*p.prepared(), *staged, *(["a txns row 'prepared'"] * p.txn_states()["prepared"])]


LEFT: dict[str, Callable[[Any], list[str]]] = {
    "postgres": _postgres_left,
    "kafka": _kafka_left,
    "s3": _s3_left,
    "hdfs": _hdfs_left,
    "delta": _delta_left,
}


def leftovers(case: OnCluster) -> list[str]:
    """What the sink still holds of attempts that did not win (after the query ended)."""
    return LEFT[case.sink](case.pipeline)


# -- speculation (make test: into PostgreSQL under 2pc) ---------------------------------------------------------


@pytest.mark.parametrize(("on_cluster", "strategy"), _cases(QUICK), indirect=["on_cluster"])
def test_speculation_a_prepared_straggler_loses_to_its_copy_and_leaves_nothing(
    on_cluster: OnCluster, cluster: SparkStandalone, strategy: str
) -> None:
    p = on_cluster.use(strategy)
    killed_before = cluster.executor_log_text().count(LOST_TO_A_COPY)
    run = p.run("F11@1:slow", env={"PYSPARK_SUBMIT_ARGS": _submit_args({**cluster.spark_conf(), **SPECULATION})})
    assert_clean(run)
    assert "F11" in run.faults_fired, "no participant of batch 1 straggled: the test proved nothing"
    assert cluster.executor_log_text().count(LOST_TO_A_COPY) > killed_before, (
        "no attempt was killed for a copy that won: Spark ran no speculative copy"
    )
    p.assert_exact()
    assert not leftovers(on_cluster), f"the losing attempt left work behind: {leftovers(on_cluster)}"


@pytest.mark.full
@pytest.mark.parametrize("on_cluster", SINKS, indirect=True)
def test_the_leftover_check_flags_what_a_killed_driver_prepared_and_recovery_clears_it(
    on_cluster: OnCluster, cluster: SparkStandalone
) -> None:
    """The negative control of :func:`leftovers`: the driver SIGKILLed at F3 of batch 1 under 2pc (every participant
    prepared, nothing recorded) leaves prepared work that the check must see; the restart's recovery aborts it and
    the check then finds nothing."""
    p = on_cluster.use("2pc")
    env = {"PYSPARK_SUBMIT_ARGS": _submit_args(cluster.spark_conf())}
    assert_killed(p.run("F3@1:kill", env=env), "F3")
    assert leftovers(on_cluster), "the check saw nothing of a killed batch's prepared work: it proves nothing"
    assert_clean(p.run(env=env))
    p.assert_exact()
    assert not leftovers(on_cluster), f"recovery left prepared work behind: {leftovers(on_cluster)}"


# -- test-spark-cluster: a lost executor, a lost worker, a drained worker, a lost driver ------------------------


def _straggler(p: Pipeline) -> int:
    """The PID of the task attempt that the ``slow`` fault holds (its Python worker), once it fired."""
    wait_for(lambda: any(line.split()[2:3] == ["slow"] for line in _fault_lines(p)), 300, "the slow fault to fire")
    return next(int(line.split()[3]) for line in _fault_lines(p) if line.split()[2:3] == ["slow"])


def _fault_lines(p: Pipeline) -> list[str]:
    return p.fault_log.read_text().splitlines() if p.fault_log.exists() else []


def _put_back(cluster: SparkStandalone) -> None:
    """Every worker running and alive again (a killed one started, a decommissioned one replaced)."""
    states = cluster.worker_states()
    for worker in cluster.workers:
        if worker.proc is None or states.get(worker.index) != "ALIVE":
            if worker.proc is not None:
                cluster.kill_worker(worker.index)
            cluster.start_worker(worker.index)


FAULTS = {
    "executor": "SIGKILL of the straggler's executor (its JVM and Python workers)",
    "worker": "SIGKILL of the straggler's worker with everything it runs, started again after",
    "decommission": "the straggler's worker decommissioned (SIGPWR): drained while the batch runs",
}


@pytest.mark.full
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize(("on_cluster", "strategy"), _cases(), indirect=["on_cluster"])
def test_a_lost_or_drained_executor_mid_write_is_exact(
    on_cluster: OnCluster, cluster: SparkStandalone, strategy: str, fault: str
) -> None:
    """A participant of batch 1 is held mid-write (``F2@1:slow``, its attempt open with rows in it); then
    (``fault``) its executor is SIGKILLed, or its whole worker (started again at once), or its worker is
    decommissioned. Spark runs the task again on the other worker. Pass: the run ends by itself, every row once,
    nothing the lost attempt wrote is left in doubt."""
    p = on_cluster.use(strategy)
    proc = p.start("F2@1:slow", env={"PYSPARK_SUBMIT_ARGS": _submit_args(cluster.spark_conf())})
    try:
        pid = _straggler(p)
        index = cluster.worker_of(pid)
        if fault == "executor":
            cluster.kill_executor(index, pid)
        elif fault == "worker":
            cluster.kill_worker(index)
            cluster.start_worker(index)
        else:
            cluster.decommission_worker(index)
            cluster.wait_worker_state(index, "DECOMMISSIONED", 60)
        run = p.finish(proc)
    finally:
        _put_back(cluster)
    assert_clean(run)
    p.assert_exact()


@pytest.mark.full
@pytest.mark.parametrize(("on_cluster", "strategy"), _cases(), indirect=["on_cluster"])
def test_the_driver_killed_and_restarted_with_its_checkpoint_on_hdfs_is_exact(
    on_cluster: OnCluster, cluster: SparkStandalone, hdfs: HdfsEndpoint, strategy: str
) -> None:
    """The driver SIGKILLed at F5 of batch 1 (2pc: in Spark's commit log, not committed) or F3 (txid-check:
    prepared), its executors gone with the application; a new driver on the same cluster and the same checkpoint on
    HDFS. Pass: exact, and nothing written to a local checkpoint."""
    p = on_cluster.use(strategy)
    p.checkpoint_uri = f"{hdfs.url.rstrip('/')}{ROOT}/cl-{uuid.uuid4().hex[:10]}-checkpoint"
    point = "F5" if strategy == "2pc" else "F3"
    env = {"PYSPARK_SUBMIT_ARGS": _submit_args(cluster.spark_conf())}
    assert_killed(p.run(f"{point}@1:kill", env=env), point)
    assert_clean(p.run(env=env))
    p.assert_exact()
    assert not p.checkpoint.exists(), "a local checkpoint was written"
