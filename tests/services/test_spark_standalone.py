"""The standalone Spark cluster of the cluster tests: a master and two one-core workers, and every fault it offers.

One cluster for the module; an application (a PySpark driver in a process of its own, kept alive until its stdin
closes) runs on it while the faults are tried: an executor SIGKILLed is replaced, a worker SIGKILLed leaves the
master's live set and comes back when started again, a worker decommissioned is drained.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosink._procs import is_alive, kill_session
from eosink._waiting import wait_until
from eosink.services.spark_standalone import SparkStandalone

pytestmark = [pytest.mark.full, pytest.mark.timeout(600)]

APP = r"""
import os, sys
from pyspark.sql import SparkSession

builder = SparkSession.builder.appName("eosink-cluster-check")
for arg in sys.argv[1:]:
    key, _, value = arg.partition("=")
    builder = builder.config(key, value)
spark = builder.getOrCreate()
pids = spark.sparkContext.parallelize(range(8), 4).map(lambda _: os.getpid()).distinct().collect()
print("ran in", len(pids), "Python workers", flush=True)
sys.stdin.read()
spark.stop()
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkStandalone]:
    with SparkStandalone(Path(tmp_path_factory.mktemp("spark-standalone"))) as made:
        yield made


@pytest.fixture
def app(cluster: SparkStandalone, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A running application holding an executor on each worker."""
    conf = {**cluster.spark_conf(), "spark.driver.host": "127.0.0.1", "spark.ui.enabled": "false"}
    log = (tmp_path / "app.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-c", APP, *(f"{k}={v}" for k, v in conf.items())],
        stdin=subprocess.PIPE,
        stdout=log,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**cluster.env(), "SPARK_LOCAL_IP": "127.0.0.1"},
    )
    try:
        ok = wait_until(lambda: all(cluster.executors(i) for i in (0, 1)) or proc.poll() is not None, 180)
        assert ok and proc.poll() is None, (tmp_path / "app.log").read_text()[-3000:]
        yield proc
    finally:
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            kill_session(proc.pid)
        log.close()
        for worker in cluster.workers:
            if worker.proc is None:
                cluster.start_worker(worker.index)


def test_two_workers_register_with_one_core_each(cluster: SparkStandalone) -> None:
    state = cluster.state()
    assert cluster.worker_states() == {0: "ALIVE", 1: "ALIVE"}, state
    assert sorted(w["cores"] for w in state["workers"] if w["state"] == "ALIVE") == [1, 1]
    assert cluster.master_url.startswith("spark://127.0.0.1:")


def test_an_executor_killed_is_replaced_on_its_worker(cluster: SparkStandalone, app: subprocess.Popen[str]) -> None:
    killed = cluster.kill_executor(0)
    assert not is_alive(killed)
    assert wait_until(lambda: any(pid != killed for pid in cluster.executors(0)), 120), "no executor replaced it"
    assert app.poll() is None


def test_a_worker_killed_leaves_the_cluster_and_rejoins_when_started(
    cluster: SparkStandalone, app: subprocess.Popen[str]
) -> None:
    executor = cluster.executors(1)[0]
    cluster.kill_worker(1)
    assert not is_alive(executor), "the worker's executor outlived it"
    assert cluster.worker_states()[1] != "ALIVE"
    cluster.start_worker(1)
    assert cluster.worker_states()[1] == "ALIVE"
    assert wait_until(lambda: bool(cluster.executors(1)), 120), "the application got no executor on the new worker"
    assert app.poll() is None


def test_a_worker_decommissioned_is_drained(cluster: SparkStandalone, app: subprocess.Popen[str]) -> None:
    cluster.decommission_worker(0)
    cluster.wait_worker_state(0, "DECOMMISSIONED", 60)
    assert app.poll() is None
    cluster.kill_worker(0)
    cluster.start_worker(0)
    assert cluster.worker_states()[0] == "ALIVE"
