"""Prepared work that vanishes after Spark's commit log holds its batch: detected, stopped, rewound.

Spark will never run such a batch again, so continuing would lose its rows silently (Flink's sinks
log a warning and go on). eosink stops with PreparedWorkLostError before anything of a later batch
is written, at every place it can learn it (the 2PC commit, recovery at start, a writer's close),
and ``eosink.rewind`` makes Spark run the batch again. Protocol level, against the reference sink.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from pathlib import Path

import pytest
from unit_conftest import APP, FAST, VARIANTS, MiniSpark, Variant, batches_for, db_query

from eosink import faults
from eosink.connectors.reference import ReferenceSink
from eosink.contract import BatchRef
from eosink.coordinator import Coordinator
from eosink.errors import CommittedWorkLostError, ConfigurationError, PreparedWorkLostError
from eosink.rewind import new_lease, plan_rewind, rewind
from eosink.spark import BatchWriter

TWO_PC = VARIANTS[0]
INLINE = [v for v in VARIANTS if not v.two_pc]


def _mini(tmp_path: Path, variant: Variant = TWO_PC, n: int = 3) -> MiniSpark:
    return MiniSpark(tmp_path, variant, batches_for(variant, n))


def _vanish(ms: MiniSpark, batch_id: int) -> list[str]:
    """Abort batch ``batch_id``'s prepared work behind eosink's back (a timeout, ROLLBACK PREPARED by hand)."""
    reader = ms.reader()
    try:
        gone = [c for c in reader.recover(APP) if c.batch.batch_id == batch_id]
        reader.abort(gone)
        return [c.id for c in gone]
    finally:
        reader.close()


def _lose_at_f5(tmp_path: Path) -> tuple[MiniSpark, list[str]]:
    """2PC: crash at F5 of batch 1 (Spark committed it, the sink did not), then batch 1's work vanishes."""
    ms = _mini(tmp_path)
    faults.configure("F5@1:raise")
    ms.crash()
    _died(ms)
    gone = _vanish(ms, 1)
    assert gone
    ms.restart()
    return ms, gone


def _died(ms: MiniSpark) -> None:
    """The crashed driver's process is gone: its lease names a dead process, as after a SIGKILL."""
    spark = ms.ckpt.spark()
    lease = spark.read_lease(APP)
    if lease is not None:
        spark.write_lease(APP, {**lease, "pid": _dead_pid()})


def _rows_of(ms: MiniSpark, batch_id: int) -> int:
    return int(db_query(ms.db, "SELECT count(*) FROM data WHERE app_id = ? AND batch_id = ?", APP, batch_id)[0][0])


# -- detect ----------------------------------------------------------------------------------------


def test_the_error_names_the_app_the_batch_its_committables_the_likely_cause_and_the_fix(tmp_path: Path) -> None:
    """Pass: at restart, PreparedWorkLostError (a CommitAbortedError) carrying app_id, batch and committables,
    the sink's likely cause, and the rewind command with the checkpoint location."""
    ms, gone = _lose_at_f5(tmp_path)
    with pytest.raises(PreparedWorkLostError) as err:
        ms.run()
    e = err.value
    assert (e.app_id, e.batch_id) == (APP, 1) and set(e.committables) == set(gone)
    assert "Batch 1 of app_id 'payments' is lost" in e.problem and gone[0] in e.problem
    assert ReferenceSink.lost_work_hint in e.problem
    assert e.fix is not None and "eosink recover --rewind" in e.fix and str(ms.ckpt.root) in e.fix
    assert ms.processed == [0, 1, 2] and _rows_of(ms, 1) == 0


def test_the_2pc_commit_after_spark_committed_stops_before_the_next_batch_writes(tmp_path: Path) -> None:
    """The commit-log trigger finds batch 1's work gone. Pass: commit_ready raises PreparedWorkLostError, and
    batch 2's process raises it again before writing anything (no row, no prepared work of batch 2)."""
    ms = _mini(tmp_path)
    ms.run_batch(0)
    ms.ckpt.write_offsets(1)
    ms.coordinator.process(1, ms.batches[1])  # recorded; its commit waits for Spark's commit log
    _vanish(ms, 1)
    ms.ckpt.write_commit(1)
    with pytest.raises(PreparedWorkLostError, match="Batch 1 of app_id"):
        ms.coordinator.commit_ready()
    ms.ckpt.write_offsets(2)
    with pytest.raises(PreparedWorkLostError, match="Batch 1 of app_id"):
        ms.coordinator.process(2, ms.batches[2])
    assert _rows_of(ms, 2) == 0 and not [c for c in ms.reader().recover(APP) if c.batch.batch_id == 2]


def test_a_commit_that_failed_in_the_background_for_lost_work_is_raised_by_close(tmp_path: Path) -> None:
    """The query's last batch: its commit, run by the commit-log watcher's thread once Spark committed it, finds
    the work gone, and no next batch is there to report it. Pass: close() raises PreparedWorkLostError (the
    driver exits with it) instead of only logging it."""
    ms = _mini(tmp_path)
    ms.run_batch(0)
    driver = Coordinator(ReferenceSink(ms.db), APP, TWO_PC.make(), ms.ckpt.spark(), FAST)  # with its watcher
    try:
        ms.ckpt.write_offsets(1)
        driver.process(1, ms.batches[1])
        _vanish(ms, 1)
        ms.ckpt.write_commit(1)  # the watcher's thread commits batch 1 now, and fails
        with pytest.raises(PreparedWorkLostError):  # what the thread met, for whoever waits on it
            driver.flush(5)
    finally:
        with pytest.raises(PreparedWorkLostError, match="Batch 1 of app_id"):
            driver.close()


def test_a_writer_that_processed_no_batch_checks_at_close(tmp_path: Path) -> None:
    """A restart that finds no new input never calls foreachBatch: close() makes the same check.

    Pass: BatchWriter.close() raises PreparedWorkLostError naming batch 1, under 2pc and, for a
    sink that lost a committed batch, under txid-check."""
    ms, _ = _lose_at_f5(tmp_path / "2pc")
    writer = BatchWriter(ReferenceSink(ms.db), app_id=APP, strategy="2pc", checkpoint_location=ms.ckpt.root)
    with pytest.raises(PreparedWorkLostError, match="Batch 1 of app_id"):
        writer.close()
    inline = _mini(tmp_path / "txid", INLINE[0])
    inline.run()
    _lose_last_committed_batch(inline)
    writer = BatchWriter(
        ReferenceSink(inline.db), app_id=APP, strategy="txid-check", checkpoint_location=inline.ckpt.root
    )
    with pytest.raises(PreparedWorkLostError, match="Batch 2 of app_id"):
        writer.close()


def _lose_last_committed_batch(ms: MiniSpark) -> None:
    """The sink loses its newest committed batch (restored from an older backup): rows and bundle."""
    with sqlite3.connect(ms.db) as conn:
        conn.execute("DELETE FROM data WHERE app_id = ? AND batch_id = 2", (APP,))
        conn.execute("DELETE FROM bundles WHERE app_id = ? AND batch_id = 2", (APP,))


@pytest.mark.parametrize("variant", INLINE, ids=[v.id for v in INLINE])
def test_inline_strategies_detect_a_committed_batch_the_sink_lost(tmp_path: Path, variant: Variant) -> None:
    """txid-check and idempotent commit before Spark's commit log: a commit-log entry beyond the sink's
    newest bundle, with no manifest, means the sink lost a batch it had committed. Pass: the next start
    stops with PreparedWorkLostError naming that batch."""
    ms = _mini(tmp_path, variant)
    ms.run()
    _lose_last_committed_batch(ms)
    ms.restart()
    with pytest.raises(PreparedWorkLostError, match="Batch 2 of app_id 'payments' is lost") as err:
        ms.run()
    assert "newest bundle" in err.value.problem and "batch 1" in err.value.problem


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.id for v in VARIANTS])
def test_a_running_writer_stops_at_its_next_commit_when_the_sink_lost_a_committed_batch(
    tmp_path: Path, variant: Variant
) -> None:
    """A failover to a standby that lacked the newest batch, while the query runs: the writer's next commit is
    refused by the sink (the batch it follows is gone) before it becomes visible.

    How: batches 0-2 run; the sink loses batch 2 (rows and bundle); the same writer processes batch 3.
    Pass: CommittedWorkLostError (a PreparedWorkLostError) naming batch 2, with the rewind command and the
    checkpoint; nothing of batch 3 visible (under idempotent, whose participants upsert as they write, they
    check the batch their task follows before the first row: a rewind may plan batch 3 anew, over other
    input, so rows of the first try would stay); after the rewind the restart lands every batch exactly once.
    """
    ms = _mini(tmp_path, variant, n=4)
    for batch_id in range(3):
        ms.run_batch(batch_id)
    _lose_last_committed_batch(ms)
    with pytest.raises(CommittedWorkLostError) as err:
        ms.run_batch(3)
    e = err.value
    assert isinstance(e, PreparedWorkLostError) and (e.app_id, e.batch_id, e.batches) == (APP, 2, (2,))
    assert "Batch 2 of app_id 'payments' is lost" in e.problem and "although it was committed" in e.problem
    assert e.fix is not None and "eosink recover --rewind" in e.fix and str(ms.ckpt.root) in e.fix
    assert _rows_of(ms, 3) == 0
    _died(ms)
    ms.restart()
    with pytest.raises(CommittedWorkLostError, match="Batch 2 of app_id"):
        ms.run()
    plan = _plan(ms)
    assert plan.batch_id == 2
    rewind(ms.ckpt.spark(), plan)
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_a_lost_batch_whose_participants_work_survived_is_lost_not_a_leftover(tmp_path: Path) -> None:
    """A failover to a standby that received batch 2's participant work but not its commit: the prepared work
    is there, its manifest and bundle are not, and Spark's commit log holds the batch.

    Pass: recovery plans batch 2 as lost (so the rewind finds it), not as leftovers of a batch Spark replays.
    """
    from eosink.contract import TaskRef
    from eosink.recovery import Action

    ms = _mini(tmp_path, INLINE[0])
    ms.run()
    _lose_last_committed_batch(ms)
    sink = ReferenceSink(ms.db)
    txn = sink.begin(TaskRef(BatchRef(APP, 2), 1, 0, "survivor"))
    sink.pre_commit(txn)  # batch 2's participant work, as the standby received it
    ms.restart()
    plan = ms.coordinator.recovery_plan()
    assert [(b.batch_id, b.action) for b in plan.batches] == [(2, Action.LOST)], plan.to_json()
    assert plan.batches[0].lost_batches == (2,)


@pytest.mark.parametrize("variant", INLINE, ids=[v.id for v in INLINE])
def test_what_cannot_be_detected_a_table_emptied_under_its_bundles(tmp_path: Path, variant: Variant) -> None:
    """The documented limit: rows deleted while the bundles stay look committed. Pass: the start goes on."""
    ms = _mini(tmp_path, variant)
    ms.run()
    with sqlite3.connect(ms.db) as conn:
        conn.execute("DELETE FROM data WHERE app_id = ?", (APP,))
    ms.restart()
    ms.run()  # not detected: the bundles say every batch landed


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.id for v in VARIANTS])
def test_a_sink_that_lost_every_bundle_is_told_from_a_new_app_id(tmp_path: Path, variant: Variant) -> None:
    """A sink that lost every batch of the app_id (a failover right after the first commits, a restore from before
    them) looks like an app_id new to the checkpoint, but for the record of the first commit the checkpoint keeps.

    Pass: the restart stops with CommittedWorkLostError naming every batch Spark committed; after the rewind,
    exact. An app_id that never committed starts as before (no record, nothing lost)."""
    ms = _mini(tmp_path, variant)
    ms.run()
    assert ms.ckpt.spark().read_first_commit(APP) == 0
    with sqlite3.connect(ms.db) as conn:
        conn.execute("DELETE FROM data WHERE app_id = ?", (APP,))
        conn.execute("DELETE FROM bundles WHERE app_id = ?", (APP,))
    _died(ms)
    ms.restart()
    with pytest.raises(CommittedWorkLostError) as err:
        ms.run()
    assert err.value.batches == (0, 1, 2) and "Batches 0 to 2 of app_id" in err.value.problem
    rewind(ms.ckpt.spark(), _plan(ms))
    ms.restart()
    ms.run()
    ms.assert_exact()
    fresh = _mini(tmp_path / "fresh", variant)
    assert fresh.ckpt.spark().read_first_commit(APP) is None


# -- rewind ----------------------------------------------------------------------------------------------


def _plan(ms: MiniSpark):  # type: ignore[no-untyped-def]
    coordinator = ms.new_coordinator()
    last = coordinator.sink.fetch_last_bundle(APP)
    return plan_rewind(ms.ckpt.spark(), coordinator.recovery_plan(), None if last is None else last.batch.batch_id)


def test_a_rewind_to_the_lost_batch_lands_it_exactly_once(tmp_path: Path) -> None:
    """Pass: the plan moves commits/1 and batch 1's manifest (offsets stay); after the rewind Spark runs batch 1
    again, then batch 2, and every row is in the sink once; what moved and why is recorded beside it."""
    ms, _ = _lose_at_f5(tmp_path)
    plan = _plan(ms)
    assert (plan.batch_id, plan.commits, plan.offsets, plan.manifests) == (1, (1,), (), (1,))
    record = rewind(ms.ckpt.spark(), plan)
    assert not ms.ckpt.has_commit(1) and (ms.ckpt.root / "offsets" / "1").exists()
    saved = json.loads((ms.ckpt.root / Path(*record)).read_text())
    assert saved["batch_id"] == 1 and saved["commits"] == [1] and "prepared work" in saved["reason"]
    assert (ms.ckpt.root / Path(*plan.backup) / "commits" / "1").exists()
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_a_rewind_also_moves_the_offsets_spark_planned_after_the_lost_batch(tmp_path: Path) -> None:
    """Spark resumes at the newest offsets entry: batch 2's, planned when batch 1's loss stopped the query,
    must go too, or Spark would run batch 2 and skip batch 1. Pass: offsets/2 moved aside; exact."""
    ms = _mini(tmp_path)
    ms.run_batch(0)
    ms.ckpt.write_offsets(1)
    ms.coordinator.process(1, ms.batches[1])
    _vanish(ms, 1)
    ms.ckpt.write_commit(1)
    ms.ckpt.write_offsets(2)
    with pytest.raises(PreparedWorkLostError):
        ms.coordinator.process(2, ms.batches[2])
    plan = _plan(ms)
    assert (plan.commits, plan.offsets) == ((1,), (2,))
    rewind(ms.ckpt.spark(), plan)
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_a_good_checkpoint_is_never_rewound(tmp_path: Path) -> None:
    """Pass: a checkpoint whose every committed batch is in the sink is refused, and nothing moves."""
    ms = _mini(tmp_path)
    ms.run()
    before = sorted(p.name for p in (ms.ckpt.root / "commits").iterdir())
    with pytest.raises(ConfigurationError, match="Nothing of app_id 'payments' is lost"):
        _plan(ms)
    assert sorted(p.name for p in (ms.ckpt.root / "commits").iterdir()) == before


def test_refused_when_the_sink_already_holds_a_later_batch() -> None:
    """Pass: batch 1 lost but batch 2 in the sink: refused, naming both."""
    from eosink.recovery import Action, BatchPlan, RecoveryPlan

    lost = RecoveryPlan(APP, "2pc", 2, (BatchPlan(1, Action.LOST, "gone", True, True),))
    with pytest.raises(ConfigurationError, match=r"holds batch 2 .* after the lost batch 1"):
        plan_rewind(None, lost, 2)  # type: ignore[arg-type]


def test_refused_while_a_driver_of_the_app_id_runs(tmp_path: Path) -> None:
    """The lease the coordinator writes at start names its process. Pass: a lease of a live process of this
    host is refused; one of another host too (it cannot be checked); one of a dead process is stale: the
    rewind goes on and removes it."""
    ms, _ = _lose_at_f5(tmp_path)
    spark = ms.ckpt.spark()
    spark.write_lease(APP, new_lease(9))  # this very process: alive
    with pytest.raises(ConfigurationError, match="runs on this checkpoint: pid"):
        _plan(ms)
    spark.write_lease(APP, {**new_lease(9), "host": "elsewhere.example"})
    with pytest.raises(ConfigurationError, match="may still run") as err:
        _plan(ms)
    assert err.value.fix is not None and "lease.json" in err.value.fix
    spark.write_lease(APP, {**new_lease(9), "pid": _dead_pid()})
    plan = _plan(ms)
    assert plan.lease is not None
    rewind(spark, plan)
    assert spark.read_lease(APP) is None


def _dead_pid() -> int:
    pid = os.getpid()
    while os.path.exists(f"/proc/{pid}"):
        pid += 7919
    return pid


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("stray", "holds 'notes.txt', which is no Spark log entry"),
        ("version", "of log version 'v2'"),
        ("offsets", "has no entry 1"),
        ("metadata", "no Spark metadata file"),
    ],
)
def test_refused_when_the_layout_is_not_understood(tmp_path: Path, damage: str, message: str) -> None:
    """Pass: an unknown file in the commit log, a log version other than v1, no offsets of the lost batch,
    or no query id: each refused, saying what, and nothing moved."""
    ms, _ = _lose_at_f5(tmp_path)
    root = ms.ckpt.root
    if damage == "stray":
        (root / "commits" / "notes.txt").write_text("hello")
    elif damage == "version":
        (root / "commits" / "1").write_text('v2\n{"nextBatchWatermarkMs":0}\n')
    elif damage == "offsets":
        (root / "offsets" / "1").rename(root / "offsets-1.bak")
    else:
        (root / "metadata").write_text("{}\n")
    coordinator = ms.new_coordinator()
    from eosink.recovery import plan_recovery

    recovery = plan_recovery(coordinator.sink, APP, coordinator.strategy, ms.ckpt.spark())
    with pytest.raises(ConfigurationError, match="Refusing to rewind") as err:
        plan_rewind(ms.ckpt.spark(), recovery, 0)
    assert message in err.value.problem
    assert ms.ckpt.has_commit(1)


def test_the_lease_is_released_at_close_and_never_a_newer_drivers(tmp_path: Path) -> None:
    """Pass: a coordinator's start writes the lease (this process, its epoch); close removes it; a newer
    driver's lease is left alone by an older coordinator's close."""
    ms = _mini(tmp_path)
    ms.run()
    spark = ms.ckpt.spark()
    lease = spark.read_lease(APP)
    assert lease is not None and lease["pid"] == os.getpid() and lease["host"] == socket.gethostname()
    newer = {**lease, "epoch": lease["epoch"] + 1}
    spark.write_lease(APP, newer)
    ms.coordinator.close()
    assert spark.read_lease(APP) == newer
    spark.write_lease(APP, lease)
    other = ms.new_coordinator()
    other.start()
    other.close()
    assert spark.read_lease(APP) is None
