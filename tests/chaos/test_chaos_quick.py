"""The chaos harness end to end, against a private server of the sink and real Spark drivers.

``make test-SINK-full`` runs one schedule of its sink (2pc: two kills, a task failure, a lost COMMIT
reply and a sink restart, five faults), and ``make test-fanout-full`` one into PostgreSQL then Kafka
as a fan-out (per sink exact, and the order between them kept). The ``full`` tests check the
harness's whole mode against PostgreSQL: schedules per strategy (``EOSINK_CHAOS_SCHEDULES``, 1 by
default, ``EOSINK_CHAOS_JOBS`` at a time; ``make chaos-full`` runs 3, two at a time), the plain
``foreachBatch`` baseline under the same kills, and the non-deterministic mode. The harness runs
once (a module fixture, its report kept at ``EOSINK_CHAOS_REPORT`` when set); each test checks
one part of its report.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from eosink._procs import spark_cds_options
from eosink.chaos.oracle import Workload
from eosink.chaos.report import format_table
from eosink.chaos.runner import run_chaos

pytestmark = [pytest.mark.spark, pytest.mark.timeout(2400)]

SEED = 7
SINKS = ["postgres", "kafka", "s3", "hdfs", "delta", pytest.param("postgres+kafka", id="fanout")]
"""Each sink (``make test-SINK-full`` selects its own by name), and a fan-out: PostgreSQL then Kafka in one
query (``make test-fanout-full``, by ``fanout``)."""
SCHEDULES = int(os.environ.get("EOSINK_CHAOS_SCHEDULES", "1"))


def _run(sink: str, work: Path, schedules: int = 1, **kw: Any) -> dict[str, Any]:
    if shutil.which("java") is None:
        pytest.fail("Spark needs Java 17+ on PATH (make java)", pytrace=False)
    result = run_chaos(
        sink,
        seed=SEED,
        schedules=schedules,
        workload=Workload(files=8, rows=12, keys=4, seed=SEED),
        workdir=work,
        java_opts=spark_cds_options(),
        kills=2,
        say=lambda text: print(text, flush=True),
        **kw,
    )
    (work / "report.json").write_text(json.dumps(result, indent=2, default=str))
    print(format_table(result))
    return result


@pytest.mark.parametrize("sink", SINKS)
def test_one_schedule_of_five_faults_is_exactly_once(tmp_path: Path, sink: str) -> None:
    """One 2pc schedule (two kills, a task failure, a lost COMMIT reply, a sink restart) against ``sink``.

    Pass: every fault injected, nothing lost or duplicated, the oracle's verdict exact, nothing
    left in doubt, and the concurrent reader never saw part of a batch.
    """
    report = _run(sink, tmp_path, strategies=["2pc"], modes=["eosink"])
    s = _schedule(report, "2pc", "eosink")
    assert s["ok"], f"{s['failure']}\nreplay: eosink chaos --sink {sink} --seed {SEED} --strategy 2pc"
    assert s["faults_injected"] >= 5 and s["crashes"] >= 2, [r["injected"] for r in s["runs"]]
    assert s["lost"] == 0 and s["duplicated"] == 0
    assert s["verdict"]["ok"] and s["verdict"]["found"] == s["verdict"]["expected"] > 0
    assert not any(s["leftovers"].values()), s["leftovers"]
    assert s["reader_polls"] > 0 and s["partial_reads"] == 0
    assert s["order_breaks"] == 0, "a later sink showed a batch the one before it did not hold"


@pytest.mark.full
def test_a_replicated_postgresql_fails_over_exactly_once_or_detected_and_rewound(tmp_path: Path) -> None:
    """txid-check on a replicated PostgreSQL (``--topology replicated``), one schedule under each replication mode:
    two kills, a task failure, a lost COMMIT reply, and a failover one batch after the promoted standby's link
    was cut.

    Pass: every fault injected, the failover among them; under ``sync`` no loss at all; under ``async`` every
    batch the failover dropped detected (CommittedWorkLostError) and landed again by a rewind; in the end
    nothing lost or duplicated, nothing in doubt, no partial read.
    """
    report = _run("postgres", tmp_path, strategies=["txid-check"], modes=["eosink"], topology="replicated")
    assert report["topology"] == "replicated"
    by_mode = {s["replication"]: s for s in report["schedules"]}
    assert set(by_mode) == {"sync", "async"}
    for mode, s in by_mode.items():
        replay = f"eosink chaos --sink postgres --topology replicated --replication {mode} --seed {SEED}"
        assert s["ok"], f"{s['failure']}\nreplay: {replay}"
        assert s["failovers"] >= 1, [r["injected"] for r in s["runs"]]
        assert s["lost"] == 0 and s["duplicated"] == 0 and s["partial_reads"] == 0
        assert s["rewinds"] == s["losses_detected"]
    assert by_mode["sync"]["losses_detected"] == 0


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The harness's whole mode against PostgreSQL, ``SCHEDULES`` per strategy (make chaos-full)."""
    jobs = int(os.environ.get("EOSINK_CHAOS_JOBS", "1"))
    result = _run("postgres", tmp_path_factory.mktemp("chaos"), schedules=SCHEDULES, jobs=jobs)
    if out := os.environ.get("EOSINK_CHAOS_REPORT"):
        Path(out).write_text(json.dumps(result, indent=2, default=str))
    return result


def _schedules(report: dict[str, Any], strategy: str, mode: str) -> list[dict[str, Any]]:
    found = [s for s in report["schedules"] if s["strategy"] == strategy and s["mode"] == mode]
    assert found, f"no {strategy} {mode} schedule in the report"
    return found


def _schedule(report: dict[str, Any], strategy: str, mode: str) -> dict[str, Any]:
    return _schedules(report, strategy, mode)[0]


@pytest.mark.full
@pytest.mark.parametrize("strategy", ["2pc", "txid-check", "idempotent"])
def test_each_strategy_is_exactly_once_under_five_faults(report: dict[str, Any], strategy: str) -> None:
    runs = _schedules(report, strategy, "eosink")
    assert len(runs) == SCHEDULES
    for s in runs:
        replay = f"eosink chaos --sink postgres --seed {s['seed']} --schedules 1 --strategy {strategy}"
        assert s["ok"], f"{s['failure']}\nreplay: {replay}"
        assert s["faults_injected"] >= 5, [r["injected"] for r in s["runs"]]
        assert s["crashes"] >= 2
        assert s["lost"] == 0 and s["duplicated"] == 0
        assert s["verdict"]["ok"] and s["verdict"]["found"] == s["verdict"]["expected"] > 0
        assert not any(s["leftovers"].values()), s["leftovers"]
        assert s["reader_polls"] > 0
    row = next(r for r in report["results"] if r["strategy"] == strategy)
    assert row["atomic"] is (strategy != "idempotent")
    assert row["partial_reads"] == 0
    assert row["lost"] == row["duplicated"] == 0


@pytest.mark.full
def test_naive_baseline_shows_what_eosink_prevents(report: dict[str, Any]) -> None:
    naive = report["naive"]
    assert naive["schedules"] == SCHEDULES and naive["crashes"] >= 2 * SCHEDULES
    assert naive["lost"] + naive["duplicated"] > 0, "the plain foreachBatch writer survived the kills unharmed"


@pytest.mark.full
def test_txid_check_stops_on_a_divergent_replay_naming_the_batch(report: dict[str, Any]) -> None:
    s = _schedule(report, "txid-check", "nondeterministic")
    assert s["ok"], s["failure"]
    assert s["divergent_replays_detected"] == 1 and s["detected_batch"] is not None
    assert s["runs"][-1]["error_kind"] == "NonDeterministicReplayError"
    assert f"Batch {s['detected_batch']}" in s["runs"][-1]["error"]
    assert s["verdict"]["ok"], s["verdict"]


@pytest.mark.full
def test_2pc_stays_consistent_when_replays_differ(report: dict[str, Any]) -> None:
    s = _schedule(report, "2pc", "nondeterministic")
    assert s["ok"], s["failure"]
    assert s["crashes"] >= 2 and s["lost"] == 0 and s["duplicated"] == 0
    assert s["verdict"]["chain_breaks"] == 0 and s["verdict"]["not_an_attempt"] == 0
    assert s["partial_reads"] == 0


@pytest.mark.full
def test_report_shape(report: dict[str, Any]) -> None:
    assert report["sink"] == "postgres" and report["seed"] == SEED
    for row in report["results"]:
        for key in (
            "strategy",
            "schedules",
            "crashes",
            "ambiguous_commits",
            "replays_skipped",
            "lost",
            "duplicated",
            "partial_reads",
            "divergent_replays_detected",
        ):
            assert key in row
    assert {"schedules", "lost", "duplicated"} <= report["naive"].keys()
    assert report["failed"] == []
    json.dumps(report, default=str)
