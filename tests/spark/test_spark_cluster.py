"""Spark pipelines on a standalone cluster (:class:`~eosink.services.spark_standalone.SparkStandalone`: a master and
two one-core workers, each a JVM of its own, the executors in JVMs the workers start), not ``local[...]``.

The drivers are ``sink_driver.py`` run with ``--master spark://...``; the cluster's settings (one executor per
worker, this Python on the executors) and the test's own (speculation) reach them through
``PYSPARK_SUBMIT_ARGS``. Fault points armed in the driver reach the executors through ``spark.executorEnv``.

Speculation: the first attempt of a participant of batch 1 to finish its pre_commit sleeps there
(``F11@1:slow``: prepared, then a straggler), Spark runs a copy of the task on the other worker, the copy wins and
Spark kills the straggler. Pass: the executors' logs say an attempt was killed because another succeeded, every
row is in the table once, and nothing the losing attempt prepared is left (no prepared transaction, no staged row,
no txns row still 'prepared').
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from psycopg import sql

from eosink.services.hdfs import HdfsEndpoint
from eosink.services.spark_standalone import SparkStandalone

from .conftest import Pipeline, assert_clean, assert_killed, wait_for
from .test_hdfs_pipeline import ROOT, HdfsPipeline, hdfs
from .test_postgres_pipeline import HARNESS, PgPipeline, pg_url

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

__all__ = ["hdfs", "pg_url"]  # the sinks' pipelines' fixtures: the servers' endpoints

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


@pytest.fixture
def pg_on_cluster(tmp_path: Path, driver_java_opts: str, pg_url: str, cluster: SparkStandalone) -> Iterator[PgPipeline]:
    tag = uuid.uuid4().hex[:10]
    p = PgPipeline(
        tmp_path,
        java_opts=driver_java_opts,
        url=pg_url,
        table=f"sparkcl_{tag}",
        control_schema=f"sparkcl_{tag}_ctl",
        master=cluster.master_url,
    )
    p.extra_env = {"PYSPARK_SUBMIT_ARGS": _submit_args({**cluster.spark_conf(), **SPECULATION})}
    yield p
    p.close()
    HARNESS.drop(p.control_schema, [sql.Identifier(p.table)])


@pytest.fixture
def hdfs_on_cluster(
    tmp_path: Path, driver_java_opts: str, hdfs: HdfsEndpoint, cluster: SparkStandalone
) -> Iterator[HdfsPipeline]:
    """An HDFS pipeline on the cluster, its checkpoint on HDFS too (the driver and the executors share no disk)."""
    directory = f"{ROOT}/cl-{uuid.uuid4().hex[:10]}"
    p = HdfsPipeline(tmp_path, java_opts=driver_java_opts, cluster=hdfs, directory=directory, master=cluster.master_url)
    p.checkpoint_uri = f"{hdfs.url.rstrip('/')}{directory}-checkpoint"
    yield p
    p.close()


def test_speculation_a_prepared_straggler_loses_to_its_copy_and_leaves_nothing_into_postgres_2pc(
    pg_on_cluster: PgPipeline, cluster: SparkStandalone
) -> None:
    p = pg_on_cluster
    p.variant = "2pc"
    killed_before = cluster.executor_log_text().count(LOST_TO_A_COPY)
    run = p.run("F11@1:slow")
    assert_clean(run)
    assert "F11" in run.faults_fired, "no participant of batch 1 straggled: the test proved nothing"
    assert cluster.executor_log_text().count(LOST_TO_A_COPY) > killed_before, (
        "no attempt was killed for a copy that won: Spark ran no speculative copy"
    )
    p.assert_exact()


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
@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_lost_or_drained_executor_mid_write_into_postgres_is_exact(
    pg_on_cluster: PgPipeline, cluster: SparkStandalone, strategy: str, fault: str
) -> None:
    """A participant of batch 1 is held mid-write (``F2@1:slow``, its transaction open with rows in it); then
    (``fault``) its executor is SIGKILLed, or its whole worker (started again at once), or its worker is
    decommissioned. Spark runs the task again on the other worker. Pass: the run ends by itself, every row once,
    nothing the lost attempt wrote is left in doubt."""
    p = pg_on_cluster
    p.variant = strategy
    env = {"PYSPARK_SUBMIT_ARGS": _submit_args(cluster.spark_conf())}
    proc = p.start("F2@1:slow", env=env)
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
@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
def test_the_driver_killed_and_restarted_with_its_checkpoint_on_hdfs_is_exact(
    hdfs_on_cluster: HdfsPipeline, cluster: SparkStandalone, strategy: str
) -> None:
    """The driver SIGKILLed at F5 of batch 1 (2pc: in Spark's commit log, not committed) or F3 (txid-check:
    prepared), its executors gone with the application; a new driver on the same cluster and the same checkpoint on
    HDFS. Pass: exact, and nothing written to a local checkpoint."""
    p = hdfs_on_cluster
    p.strategy = strategy
    point = "F5" if strategy == "2pc" else "F3"
    env = {"PYSPARK_SUBMIT_ARGS": _submit_args(cluster.spark_conf())}
    assert_killed(p.run(f"{point}@1:kill", env=env), point)
    assert_clean(p.run(env=env))
    p.assert_exact()
    assert not p.checkpoint.exists(), "a local checkpoint was written"
