"""Real Spark streaming queries, SIGKILLed at each fault point and restarted from the checkpoint.

Each test runs ``driver.py`` in a session of its own (driver Python, its JVM, and Spark's
Python worker daemon, which sits in a process group of its own), SIGKILLs every process of the
session at a named fault point, restarts the job on the same checkpoint and reference sink, and
checks the sink holds exactly the input rows, once. ``spark.driver.maxResultSize=1m`` is set in
every run: the driver never collects rows.

``make test`` runs the cases that prove what only a real Spark shows (an executor-side kill, a
task retry after pre_commit, a frozen driver, a divergent replay, a typed error out of the
executors); the per-strategy kill-and-restart proof is each production sink's own (e.g.
``test_postgres_pipeline.py``), and the demo and chaos-quick show lost COMMIT replies and the
plain baseline. Everything else runs in ``make test-full``.
"""

from __future__ import annotations

import pytest

from .conftest import AtomicityReader, Pipeline, assert_clean, assert_killed, assert_zombie_fenced

pytestmark = pytest.mark.spark

STRATEGIES = ["2pc", "txid-check", "idempotent"]
# fault points every strategy passes through; F5 only exists for 2PC (commit after Spark's commit log)
COMMON_POINTS = ["F1", "F2", "F3", "F4", "F6", "F8"]
QUICK = {("2pc", "F2")}  # an executor-side kill: the whole driver dies mid-write


def test_input_files_are_taken_in_file_order(pipeline: Pipeline) -> None:
    """Spark's file source plans files by modification time in milliseconds: the checks that map
    file ``i`` to batch ``i`` (the atomicity readers, the oracles) hold only if those are strictly ordered."""
    paths = sorted(pipeline.input.iterdir())
    mtimes = [p.stat().st_mtime_ns // 1_000_000 for p in paths]
    assert len(paths) == pipeline.files
    assert mtimes == sorted(set(mtimes)), f"input files' times are not strictly increasing: {mtimes}"


def _cases() -> list[object]:
    cases = [(s, p) for s in STRATEGIES for p in COMMON_POINTS] + [("2pc", "F5")]
    return [pytest.param(s, p, marks=() if (s, p) in QUICK else pytest.mark.full, id=f"{s}-{p}") for s, p in cases]


@pytest.mark.parametrize(("strategy", "point"), _cases())
def test_kill_at_fault_point_then_restart_is_exact(pipeline: Pipeline, strategy: str, point: str) -> None:
    """SIGKILL of the driver's process group at ``point`` of batch 1, then a restart.

    Proves: nothing lost, nothing duplicated, one bundle per batch, nothing left in doubt; and,
    where the sink and strategy declare atomic batch visibility (atomic reference sink, 2pc or
    txid-check), a concurrent reader never saw part of a batch. F6 (mid-commit) runs against
    the non-atomic reference sink, where a commit takes several steps.
    """
    pipeline.strategy = strategy
    pipeline.atomic = point != "F6"
    with AtomicityReader(pipeline) as reader:
        assert_killed(pipeline.run(f"{point}@1:kill"), point)
        assert_clean(pipeline.run())
    pipeline.assert_exact()
    assert reader.polls > 0
    if pipeline.atomic and strategy != "idempotent":
        assert not reader.partial, reader.partial[:5]
    if point == "F6":  # the non-atomic sink showed half of batch 1 until recovery rolled it forward
        assert any(p.startswith("batch 1:") for p in reader.partial), "the reader cannot see partial batches"


@pytest.mark.full
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_kill_during_recovery_then_restart_is_exact(pipeline: Pipeline, strategy: str) -> None:
    """F9: a crash leaves in-doubt work (F4), the restart is killed in the middle of recovery, a third run finishes.

    Pass: the third run ends with exactly the input rows and nothing in doubt.
    """
    pipeline.strategy = strategy
    assert_killed(pipeline.run("F4@1:kill"), "F4")
    assert_killed(pipeline.run("F9:kill"), "F9")
    assert_clean(pipeline.run())
    pipeline.assert_exact()


@pytest.mark.full
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_lost_commit_reply_is_resolved_by_status(pipeline: Pipeline, strategy: str) -> None:
    """F7: the commit of batch 1 succeeds but its reply is lost (AmbiguousCommitError).

    Pass: the run finishes without restart, the ambiguity was counted and resolved by
    commit_status as committed (never retried blindly), and the content is exact.
    """
    pipeline.strategy = strategy
    run = pipeline.run("F7@1:ambiguous")
    assert_clean(run)
    assert "F7" in run.faults_fired
    assert run.stats is not None
    assert run.stats["ambiguous_commits"] == 1
    assert run.stats["ambiguous_resolved_committed"] == 1
    pipeline.assert_exact()


@pytest.mark.parametrize(
    "strategy", [pytest.param(s, marks=() if s == "txid-check" else pytest.mark.full) for s in STRATEGIES]
)
def test_failed_task_attempt_after_pre_commit_is_aborted(pipeline: Pipeline, strategy: str) -> None:
    """F11: a task attempt pre-commits, then fails; Spark retries the task (local[2,4]).

    Pass: the failed attempt's prepared work was aborted (counted as orphan), never became
    visible, and the content is exact.
    """
    pipeline.strategy = strategy
    run = pipeline.run("F11@1:raise")
    assert_clean(run)
    assert "F11" in run.faults_fired
    assert run.stats is not None
    if strategy != "idempotent":  # idempotent writes are visible at once and converge by key instead
        assert run.stats["orphans_aborted"] >= 1
    pipeline.assert_exact()


# The zombie is frozen in the driver's main thread where it holds none of the reference sink's
# SQLite locks (a frozen lock holder would block every writer: SQLite's property, not the
# protocol's). 2PC: after recording batch 1 (F4). txid-check and idempotent: before batch 1
# writes (F1); frozen at F4 their driver was seen holding SQLite's WAL write lock (open: see the
# testing docs). The 2PC zombie-after-Spark-commit case (F5) is covered at protocol level in
# tests/unit/test_coordinator.py.
ZOMBIE_POINT = {"2pc": "F4", "txid-check": "F1", "idempotent": "F1"}


@pytest.mark.parametrize(
    "strategy", [pytest.param(s, marks=() if s == "2pc" else pytest.mark.full) for s in STRATEGIES]
)
def test_zombie_driver_is_fenced(pipeline: Pipeline, strategy: str) -> None:
    """F10: the old driver is frozen (SIGSTOP) mid-protocol, a new driver takes over and finishes,
    then the old one is thawed (SIGCONT).

    Pass: the new driver ends cleanly with exact content; the zombie fails with FencedError
    (or stops on Spark's own concurrent-writer check) and changes nothing.
    """
    pipeline.strategy = strategy
    assert_zombie_fenced(pipeline, ZOMBIE_POINT[strategy])


@pytest.mark.parametrize("strategy", ["txid-check", pytest.param("idempotent", marks=pytest.mark.full)])
def test_divergent_replay_of_committed_batch_is_detected(pipeline: Pipeline, strategy: str) -> None:
    """F13: a non-deterministic query (rand()) is killed after committing batch 1, before Spark's
    commit log (F8); the replay computes different data.

    Pass: the restart stops with NonDeterministicReplayError, and batch 1's committed rows
    stay as they were (nothing duplicated).
    """
    pipeline.strategy = strategy
    pipeline.extra_args = ["--nondeterministic"]
    assert_killed(pipeline.run("F8@1:kill"), "F8")
    before = pipeline.sink().rows(pipeline.app_id)
    run = pipeline.run()
    assert run.returncode == 3, run.stderr[-4000:]
    assert run.error_kind == "NonDeterministicReplayError", run.stderr[-4000:]
    assert "Batch 1" in run.stderr
    assert pipeline.sink().rows(pipeline.app_id) == before


@pytest.mark.full
def test_divergent_replay_is_harmless_under_two_phase_commit(pipeline: Pipeline) -> None:
    """F13 under 2PC: a non-deterministic query is killed after preparing batch 1 (F4); the
    replay computes different values.

    Pass: the restart finishes; every input row is in the sink exactly once (with the
    replay's values): the prepared first attempt was aborted, never visible.
    """
    pipeline.extra_args = ["--nondeterministic"]
    assert_killed(pipeline.run("F4@1:kill"), "F4")
    assert_clean(pipeline.run())
    pipeline.assert_exact()
    noise = [r["noise"] for r in pipeline.sink().rows(pipeline.app_id)]
    assert len(noise) == sum(pipeline.expected().values())


@pytest.mark.full
def test_plain_foreach_batch_duplicates_under_the_same_kill(pipeline: Pipeline) -> None:
    """Baseline: a plain at-least-once foreachBatch writer killed after writing batch 1, before
    Spark's commit log, duplicates batch 1 on restart. Shows the tests can tell the difference.
    """
    assert_killed(pipeline.run("F8@1:kill", mode="naive"), "F8")
    assert_clean(pipeline.run(mode="naive"))
    rows = pipeline.sink().rows("naive")
    from collections import Counter

    found = Counter((r["id"], r["account"], r["amount"]) for r in rows)
    duplicated = found - pipeline.expected()
    assert sum(duplicated.values()) == pipeline.rows_per_file, f"duplicated: {dict(duplicated)}"


@pytest.mark.full
def test_bad_input_stops_with_a_typed_error_then_the_fixed_query_resumes_exactly(pipeline: Pipeline) -> None:
    """Bad configuration found on the executors (an idempotent key column the data lacks).

    Pass: the query stops with SchemaError (typed, raised on the driver although it was found
    in a task) naming the column, nothing became visible; after the fix (another strategy on
    the same checkpoint and app_id) the restart writes every row exactly once.
    """
    run = pipeline.run(args=["--strategy", "idempotent", "--key-columns", "no_such_column"])
    assert run.returncode == 3, run.stderr[-3000:]
    assert run.error_kind == "SchemaError", run.stderr[-3000:]
    assert "no_such_column" in run.stderr
    assert pipeline.sink().rows(pipeline.app_id) == []
    assert_clean(pipeline.run())
    pipeline.assert_exact()


@pytest.mark.full
def test_a_checkpoint_location_that_is_not_the_querys_own_is_refused_then_the_right_one_resumes(
    pipeline: Pipeline,
) -> None:
    """eosink given checkpoint A while Spark runs with checkpointLocation B (2pc).

    It used to fail at batch 1 with "Batch 0 was never committed by Spark", 0 rows visible, and
    a restart failed the same way. Pass: the query stops at batch 0 with ConfigurationError
    naming A and offsets/0; nothing visible; started again with the query's own location, every
    row lands once.
    """
    wrong = pipeline.root / "elsewhere"
    refused = pipeline.run(args=["--eosink-checkpoint", str(wrong)])
    assert refused.returncode == 3 and refused.error_kind == "ConfigurationError", refused.stderr[-3000:]
    assert str(wrong) in refused.stderr and "offsets/0" in refused.stderr
    assert pipeline.sink().rows(pipeline.app_id) == []
    assert_clean(pipeline.run())
    pipeline.assert_exact()
