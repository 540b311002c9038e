"""``writeStream.format("eosink")``: the Python data source way in, through real Spark, killed and restarted.

The same job as the kill-and-restart tests (``--mode datasource``), writing to the reference
sink through ``format("eosink")``: the same coordinator, fault points and checks.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path

import pyspark
import pytest

from eosink._procs import driver_env
from eosink.connectors.reference import ReferenceSink

from .conftest import Pipeline, assert_clean, assert_killed, assert_zombie_fenced, run_script

_PYSPARK = tuple(int(p) for p in pyspark.__version__.split(".")[:2])
pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(_PYSPARK < (4, 0), reason="Python data sources arrived in PySpark 4.0 (see the test below)"),
]

STRATEGIES = ["txid-check", "idempotent"]


def _configure(pipeline: Pipeline, strategy: str) -> None:
    pipeline.strategy = "txid-check" if strategy == "idempotent" else strategy
    if strategy == "idempotent":  # format("eosink") takes user keys only: whole rows here
        pipeline.extra_args = ["--key-columns", "id,account,amount"]


def _assert_exact(pipeline: Pipeline, strategy: str) -> None:
    """Every row once; upserted by whole-row keys, the input's identical rows are one row (the keys say so)."""
    if strategy != "idempotent":
        pipeline.assert_exact()
        return
    found = pipeline.found()
    assert set(found) == set(pipeline.expected()) and set(found.values()) == {1}, f"found {dict(found)}"
    assert [b.batch.batch_id for b in pipeline.sink().bundles(pipeline.app_id)] == pipeline.spark_committed()
    assert pipeline.sink().in_doubt_count(pipeline.app_id) == 0


@pytest.mark.full
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_clean_run_writes_every_row_once(pipeline: Pipeline, strategy: str) -> None:
    """Pass: every input row is in the sink once, one bundle per batch Spark committed, nothing in doubt."""
    _configure(pipeline, strategy)
    assert_clean(pipeline.run(mode="datasource"))
    _assert_exact(pipeline, strategy)


QUICK = ("txid-check", "F5")  # make test: one kill-and-restart through the data source
# test-full adds one for idempotent; the whole strategy x F1/F4/F5/F8 matrix through the data source runs
# against a real sink, PostgreSQL (tests/spark/test_postgres_pipeline.py), so it is not repeated here.
KILLS = [QUICK, ("idempotent", "F8")]


@pytest.mark.parametrize(
    ("strategy", "point"),
    [pytest.param(s, p, marks=() if (s, p) == QUICK else pytest.mark.full, id=f"{s}-{p}") for s, p in KILLS],
)
def test_kill_at_fault_point_then_restart_is_exact(pipeline: Pipeline, strategy: str, point: str) -> None:
    """The whole driver (JVM, its Python workers) is SIGKILLed at ``point`` of batch 1, then restarted.

    Pass: the fault fired; the restart ends cleanly; every row once (a replay of a batch the sink
    committed is fingerprinted and skipped, a prepared one recovered or rewritten).
    """
    _configure(pipeline, strategy)
    killed = pipeline.run(f"{point}@1:kill", mode="datasource")
    assert_killed(killed, point)
    assert_clean(pipeline.run(mode="datasource"))
    _assert_exact(pipeline, strategy)


@pytest.mark.full
def test_zombie_driver_is_fenced(pipeline: Pipeline) -> None:
    """F10 through format("eosink"): the driver is frozen after batch 1's manifest (F4, txid-check), a new
    driver takes over and finishes, then the old one is thawed.

    Pass: the new driver ends exact; the zombie stops with FencedError (its commit carries an older epoch)
    or on Spark's own concurrent-writer check, and changes nothing.
    """
    pipeline.strategy = "txid-check"
    assert_zombie_fenced(pipeline, "F4", mode="datasource")


# -- batch writes: df.write.format("eosink") with a batch_id --------------------------------------

JOB = Path(__file__).with_name("datasource_job.py")


def _job(tmp_path: Path, batch_id: str, rows: int, offset: int = 0, faults: str | None = None) -> tuple[int, str]:
    argv = [str(JOB), str(tmp_path / "sink.db"), "daily", batch_id, str(rows), str(offset)]
    return run_script(argv, driver_env(tmp_path / "faults.log", "", faults))


def _ids(tmp_path: Path) -> Counter[int]:
    return Counter(int(r["id"]) for r in ReferenceSink(tmp_path / "sink.db").rows("daily"))


@pytest.mark.full  # four Spark jobs (100 s): make test keeps one stream kill-and-restart through the data source
def test_a_rerun_of_a_job_is_skipped_and_a_different_one_refused(tmp_path: Path) -> None:
    """A daily job writes batch '2026-11-23', runs again with the same data, then with different data.

    Pass: the first run writes 200 rows; the rerun writes nothing (fingerprints equal); the run with other
    rows stops with NonDeterministicReplayError and writes nothing; the next day's job writes its rows.
    """
    assert _job(tmp_path, "2026-11-23", 200)[0] == 0
    assert _ids(tmp_path) == Counter(range(200))
    assert _job(tmp_path, "2026-11-23", 200)[0] == 0
    assert _ids(tmp_path) == Counter(range(200))
    code, stderr = _job(tmp_path, "2026-11-23", 201)
    assert code == 3 and "NonDeterministicReplayError" in stderr.splitlines()[-1], stderr[-3000:]
    assert _job(tmp_path, "2026-11-24", 50, offset=1000)[0] == 0
    assert _ids(tmp_path) == Counter([*range(200), *range(1000, 1050)])


@pytest.mark.full
@pytest.mark.parametrize("point", ["F2", "F4", "F8"])
def test_a_job_killed_then_rerun_lands_once(tmp_path: Path, point: str) -> None:
    """The job's whole process group is SIGKILLed at ``point`` (mid-write, after the manifest, after the
    commit), then the same job runs again.

    Pass: the kill happened; the rerun ends cleanly; every row is in the sink once, nothing in doubt.
    """
    code, stderr = _job(tmp_path, "7", 300, faults=f"{point}@7:kill")
    assert code == -signal.SIGKILL, stderr[-3000:]
    assert _job(tmp_path, "7", 300)[0] == 0
    assert _ids(tmp_path) == Counter(range(300))
    assert ReferenceSink(tmp_path / "sink.db").in_doubt_count("daily") == 0
