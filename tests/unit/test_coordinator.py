"""Protocol-level tests of the Coordinator against the real ReferenceSink: the failure matrix F1-F13.

No Spark: :class:`conftest.MiniSpark` plays Spark's part (offsets log, foreachBatch, commit
log, replay of uncommitted batches after a restart). Each crash is an InjectedFault raised
at a fault point; the driver is then replaced by a new Coordinator and a new sink object on
the same SQLite file and checkpoint directory, as a restarted driver would be.

"Exact" below means :meth:`conftest.MiniSpark.assert_exact`: the visible rows are the
multiset of every batch's rows (generated keys ignored), every batch has exactly one bundle
whose fingerprint is the batch's, nothing is prepared or in doubt, and no manifest is left.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from unit_conftest import (
    APP,
    FAST,
    NON_2PC,
    VARIANTS,
    FakeCheckpoint,
    MemoryBatch,
    MiniSpark,
    Variant,
    batches_for,
    canon,
    db_query,
    make_rows,
    wait_until,
)

from eosink import faults
from eosink.checkpoint import SparkCheckpoint
from eosink.connectors.reference import ReferenceSink
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, TaskRef
from eosink.coordinator import CommitPolicy, Coordinator
from eosink.errors import (
    AmbiguousCommitError,
    CheckpointMismatchError,
    CommitAbortedError,
    ConfigurationError,
    FencedError,
    NonDeterministicReplayError,
    PreparedWorkLostError,
    TransientError,
)
from eosink.fingerprint import COUNT_ONLY, FINGERPRINT_VERSION
from eosink.keys import KEY_COLUMN
from eosink.spark import BatchWriter
from eosink.strategies import Idempotent, TwoPhaseCommit, TxidCheck, resolve_strategy


def mini(tmp_path: Path, variant: Variant, n: int = 4, **kwargs: Any) -> MiniSpark:
    return MiniSpark(tmp_path, variant, batches_for(variant, n), **kwargs)


def txn_states(db: Path, batch_id: int) -> Counter[str]:
    return Counter(s for (s,) in db_query(db, "SELECT state FROM txns WHERE batch_id = ?", batch_id))


# -- happy path ------------------------------------------------------------------------------


def test_happy_path_every_batch_lands_exactly_once(tmp_path: Path, variant: Variant) -> None:
    """Four batches without faults land exactly once.

    Pass: exact; one bundle per batch carrying epoch 1, the checkpoint's query id and the
    strategy name; batches_committed == 4; nothing skipped, aborted or recovered.
    """
    ms = mini(tmp_path, variant)
    ms.run()
    ms.assert_exact()
    st = ms.stats
    assert st.batches_committed == 4
    assert (st.replays_skipped, st.orphans_aborted, st.recovered_forward, st.recovered_aborted) == (0, 0, 0, 0)
    assert len(st.commit_latency_ms) == 4
    reader = ms.reader()
    for b in reader.bundles(APP):
        assert (b.epoch, b.checkpoint_id, b.strategy) == (1, ms.ckpt.query_id, variant.make().name)
    if variant.generated_keys:  # every row carries its own generated key
        keys = [r[KEY_COLUMN] for r in reader.rows(APP)]
        assert len(set(keys)) == len(keys) == sum(len(b.rows) for b in ms.batches)
    reader.close()


def test_visibility_follows_the_strategy(tmp_path: Path, variant: Variant) -> None:
    """2PC makes a batch visible only after Spark's commit log; the other strategies inside foreachBatch.

    Pass: right after process(0) (no commits/0 yet) the batch is invisible under 2PC and
    visible otherwise; after commits/0 + commit_ready it is visible exactly once.
    """
    ms = mini(tmp_path, variant, n=1)
    ms.ckpt.write_offsets(0)
    ms.coordinator.process(0, ms.batches[0])
    if variant.two_pc:
        assert ms.visible() == Counter()
        assert ms.coordinator.commit_ready() == 0  # Spark has not committed the batch
        assert ms.visible() == Counter()
    else:
        assert ms.visible() == ms.expected()
    ms.ckpt.write_commit(0)
    assert ms.coordinator.commit_ready() == (1 if variant.two_pc else 0)
    ms.assert_exact()


def test_empty_batch_gets_a_bundle(tmp_path: Path, variant: Variant) -> None:
    """A batch without rows still records its bundle, so a later replay of it is recognised.

    Pass: exact, batch 1's bundle has an empty fingerprint and no committables.
    """
    batches = batches_for(variant, 3)
    batches[1] = MemoryBatch([])
    ms = MiniSpark(tmp_path, variant, batches)
    ms.run()
    ms.assert_exact()
    bundle = ms.reader().bundles(APP)[1]
    assert (bundle.fingerprint, bundle.committables) == (Fingerprint(), ())


def test_real_watcher_commits_when_the_commit_log_appears(tmp_path: Path) -> None:
    """With the real background watcher, a 2PC batch is committed soon after commits/N appears.

    Pass: the batch stays invisible without commits/0, becomes visible (bounded poll, 10 s)
    once commits/0 exists, without the test calling commit_ready; close() then commits the
    next batch whose commit file exists.
    """
    variant = VARIANTS[0]
    batches = batches_for(variant, 2)
    ckpt = FakeCheckpoint(tmp_path / "checkpoint")
    coordinator = Coordinator(ReferenceSink(tmp_path / "sink.db"), APP, TwoPhaseCommit(), ckpt.spark(), FAST)
    reader = ReferenceSink(tmp_path / "sink.db")
    try:
        ckpt.write_offsets(0)
        coordinator.process(0, batches[0])
        assert reader.fetch_last_bundle(APP) is None
        ckpt.write_commit(0)
        assert wait_until(lambda: reader.fetch_last_bundle(APP) is not None)
        assert coordinator.stats.batches_committed == 1
        ckpt.write_offsets(1)
        coordinator.process(1, batches[1])
        ckpt.write_commit(1)
    finally:
        coordinator.close()
    assert [b.batch.batch_id for b in reader.bundles(APP)] == [0, 1]
    assert canon(reader.rows(APP)) == canon([r for b in batches for r in b.rows])
    reader.close()


# -- F1, F3, F4, F8: crash at batch 1, restart --------------------------------------------------


@pytest.mark.parametrize("point", ["F1", "F3", "F4", "F8"])
def test_crash_at_batch_1_then_restart_is_exact(tmp_path: Path, variant: Variant, point: str) -> None:
    """F1 before begin, F3 after pre_commit, F4 after recording the manifest, F8 after commit.

    Pass: the fault fires at batch 1; after a restart the replay leaves the sink exact; Spark
    replays batch 1 unless its commit log holds it (2PC at F8); the recovery counters say what
    recovery did: F3 aborts prepared leftovers, F4 rolls forward (inline strategies) or aborts
    (2PC), F8 skips the replay of a committed batch (inline strategies).
    """
    ms = mini(tmp_path, variant)
    faults.configure(f"{point}@1:raise")
    err = ms.crash()
    assert f"{point} " in str(err) and "batch 1" in str(err)
    ms.restart()
    ms.run()
    ms.assert_exact()
    st = ms.stats
    replayed = not (variant.two_pc and point == "F8")
    assert ms.processed == ([0, 1, 1, 2, 3] if replayed else [0, 1, 2, 3])
    if point == "F3":  # prepared leftovers without a manifest are aborted (idempotent work is visible already)
        assert (st.orphans_aborted >= 1) if variant.transactional else (st.orphans_aborted == 0)
        assert (st.recovered_forward, st.recovered_aborted) == (0, 0)
    if point == "F4":
        assert (st.recovered_forward, st.recovered_aborted) == ((0, 1) if variant.two_pc else (1, 0))
        assert st.replays_skipped == (0 if variant.two_pc else 1)
    if point == "F8":
        assert st.replays_skipped == (0 if variant.two_pc else 1)
        assert st.recovered_forward == 0


def test_f5_2pc_recovery_rolls_forward_a_batch_spark_committed(tmp_path: Path) -> None:
    """F5: the driver dies after commits/1 exists but before the sink commit (2PC only).

    Pass: after the crash batch 1 is invisible; after a restart recovery commits it
    (recovered_forward == 1), Spark does not replay it (processed once), and the sink is exact.
    """
    ms = mini(tmp_path, VARIANTS[0])
    faults.configure("F5@1:raise")
    ms.crash()
    assert ms.ckpt.has_commit(1)
    assert ms.visible() == ms.expected(upto=1)
    ms.restart()
    ms.run()
    assert ms.processed == [0, 1, 2, 3]
    assert ms.stats.recovered_forward == 1
    ms.assert_exact()


def test_f5_2pc_close_commits_what_spark_committed_when_no_batch_runs(tmp_path: Path) -> None:
    """F5 at the last batch, then a restart that finds no new input (``availableNow``): foreachBatch is never
    called, so start-time recovery never runs; ``close()`` commits the batch Spark's log holds, without fencing.
    """
    ms = mini(tmp_path, VARIANTS[0])
    faults.configure("F5@3:raise")
    ms.crash()
    assert ms.ckpt.has_commit(3)
    assert ms.visible() == ms.expected(upto=3)
    idle = ms.new_coordinator()
    idle.finish_spark_committed()  # what BatchWriter.close() does first
    idle.close()
    assert idle.epoch is None and idle.stats.recovered_forward == 1
    ms.assert_exact()


def test_f5_2pc_batchwriter_close_commits_what_spark_committed(tmp_path: Path) -> None:
    """The same through the public surface: ``BatchWriter.close()`` of a writer that processed no
    batch creates its coordinator and commits the batch Spark's log holds (no Spark needed for that)."""
    ms = mini(tmp_path, VARIANTS[0])
    faults.configure("F5@3:raise")
    ms.crash()
    ms.coordinator.sink.close()
    faults.configure(None)
    writer = BatchWriter(ReferenceSink(ms.db), app_id=APP, strategy="2pc", checkpoint_location=ms.ckpt.root)
    writer.close()
    assert writer.stats.recovered_forward == 1
    ms.assert_exact()


def test_f5_2pc_close_of_an_idle_writer_leaves_a_newer_writers_batch_alone(tmp_path: Path) -> None:
    """The same, but a newer writer fenced the app_id meanwhile: the idle writer's close() commits nothing
    (the manifest's epoch is fenced) and the newer writer's recovery completes the batch."""
    ms = mini(tmp_path, VARIANTS[0])
    faults.configure("F5@3:raise")
    ms.crash()
    ReferenceSink(ms.db).fence(APP)  # a newer writer took over
    idle = ms.new_coordinator()
    idle.finish_spark_committed()
    idle.close()
    assert idle.stats.recovered_forward == 0
    assert ms.visible() == ms.expected(upto=3)
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_f6_partial_non_atomic_commit_is_completed(tmp_path: Path, variant: Variant) -> None:
    """F6 with ReferenceSink(atomic=False): the driver dies after one participant's work was published.

    Pass: before the restart a transactional batch is partly visible (non-atomic, as declared);
    after the restart recovery completes it (recovered_forward == 1) and the sink is exact.
    """
    ms = mini(tmp_path, variant, sink_factory=lambda p: ReferenceSink(p, atomic=False))
    faults.configure("F6@1:raise")
    ms.crash()
    if variant.transactional:
        assert ms.expected(upto=1) < ms.visible() < ms.expected(upto=2)
    ms.restart()
    ms.run()
    assert ms.stats.recovered_forward == 1
    ms.assert_exact()


def test_f7_lost_commit_reply_is_resolved_without_restart(tmp_path: Path, variant: Variant) -> None:
    """F7: the commit reached the sink but its reply was lost (AmbiguousCommitError).

    Pass: no restart; the coordinator asks commit_status and learns COMMITTED
    (ambiguous_commits == ambiguous_resolved_committed == 1, no recommit); exact.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F7@1:ambiguous")
    ms.run()
    st = ms.stats
    assert (st.ambiguous_commits, st.ambiguous_resolved_committed, st.ambiguous_recommitted) == (1, 1, 0)
    assert st.batches_committed == 4
    ms.assert_exact()


def test_f9_crash_during_recovery(tmp_path: Path, variant: Variant) -> None:
    """F9: crash at F4 of batch 1, then crash again during the recovery of the restarted driver.

    Pass: the second driver raises from the F9 point while recovering; a third driver
    finishes the job and the sink is exact.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F4@1:raise")
    ms.crash()
    assert ms.ckpt.spark().manifest_batches(APP) == [1]
    ms.restart("F9:raise")
    err = ms.crash()
    assert "F9" in str(err)
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_f9_crash_in_the_middle_of_a_roll_forward(tmp_path: Path, variant: Variant) -> None:
    """F9 (harder): the restarted driver dies mid-commit (F6) while rolling batch 1 forward.

    First crash: F5 for 2PC (so Spark has committed batch 1), F4 otherwise; the sink is
    non-atomic so the roll-forward can stop half-way. Pass: a third driver completes the
    half-published batch (recovered_forward == 1) and the sink is exact.
    """
    ms = mini(tmp_path, variant, sink_factory=lambda p: ReferenceSink(p, atomic=False))
    faults.configure("F5@1:raise" if variant.two_pc else "F4@1:raise")
    ms.crash()
    ms.restart("F6@1:raise")
    err = ms.crash()
    assert "F6" in str(err)
    ms.restart()
    ms.run()
    assert ms.stats.recovered_forward == 1
    ms.assert_exact()


# -- F2: crash mid-write ----------------------------------------------------------------------


def test_f2_mid_write_leftovers_are_invisible_and_cleaned(tmp_path: Path, variant: Variant) -> None:
    """F2: a participant dies after writing part of its share.

    Pass: transactional strategies show nothing of batch 1 and leave an open attempt with
    staged rows, which the restart's fence aborts and deletes; the idempotent strategy may show
    some of batch 1's rows but never a duplicate. After the restart: exact, no staged rows,
    no open attempts.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F2@1:raise")
    ms.crash()
    if variant.transactional:
        assert ms.visible() == ms.expected(upto=1)
        assert txn_states(ms.db, 1)["open"] == 1
        assert db_query(ms.db, "SELECT count(*) FROM staged")[0][0] > 0
    else:
        assert not ms.visible() - ms.expected(upto=2)
        assert ms.visible() != ms.expected(upto=1)  # the leftover is there, and harmless
    ms.restart()
    ms.run()
    ms.assert_exact()
    assert db_query(ms.db, "SELECT count(*) FROM staged")[0][0] == 0
    assert db_query(ms.db, "SELECT count(*) FROM txns WHERE state = 'open'")[0][0] == 0


# -- F10: zombie writer -----------------------------------------------------------------------


class _Gate:
    def __init__(self) -> None:
        self.armed = False
        self.entered = threading.Event()
        self.release = threading.Event()


class GateSink(ReferenceSink):
    """ReferenceSink whose commit, once armed, waits for a signal before doing anything."""

    def __init__(self, path: Path, gate: _Gate) -> None:
        super().__init__(path)
        self.gate = gate

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        if self.gate.armed:
            self.gate.entered.set()
            assert self.gate.release.wait(30), "the test never released the zombie"
        super().commit(batch, committables, bundle)


def test_f10_zombie_driver_is_fenced(tmp_path: Path, variant: Variant) -> None:
    """F10: driver A (epoch 1) is frozen with batch 1 recorded but not committed; driver B takes over.

    A is frozen for real: 2PC keeps batch 1 pending; the inline strategies block A's thread
    inside its commit call. B (epoch 2) recovers and finishes batches 1-3; then A resumes.
    Pass: A's commit raises FencedError, A's next batch is refused at begin with FencedError,
    and the sink holds every batch exactly once.
    """
    gate = _Gate()
    ms = mini(tmp_path, variant, sink_factory=lambda p: GateSink(p, gate))
    ms.run_batch(0)
    a = ms.coordinator
    ms.ckpt.write_offsets(1)
    errors: list[BaseException] = []
    thread = None
    if variant.two_pc:
        a.process(1, ms.batches[1])  # recorded, pending until Spark's commit log holds it
    else:
        gate.armed = True

        def zombie() -> None:
            try:
                a.process(1, ms.batches[1])
            except BaseException as exc:
                errors.append(exc)

        thread = threading.Thread(target=zombie, daemon=True)
        thread.start()
        assert gate.entered.wait(30)
    ms.sink_factory = ReferenceSink
    ms.coordinator = b = ms.new_coordinator()  # A's process lives on: no close, no restart
    ms.run()
    assert (a.epoch, b.epoch) == (1, 2)
    if variant.two_pc:
        assert b.stats.recovered_aborted == 1
        with pytest.raises(FencedError):
            a.commit_ready()
    else:
        assert b.stats.recovered_forward == 1 and b.stats.replays_skipped == 1
        gate.release.set()
        assert thread is not None
        thread.join(30)
        assert not thread.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], FencedError), errors
    gate.armed = False
    with pytest.raises(FencedError):
        a.process(4, MemoryBatch(make_rows(4)))
    ms.assert_exact()


def test_f10_2pc_zombie_after_spark_committed(tmp_path: Path) -> None:
    """F10 (2PC): Spark's commit log holds batch 1 but A has not committed it; B starts.

    Pass: B rolls batch 1 forward (recovered_forward == 1) without replaying it; A's late
    commit_ready raises FencedError; exact.
    """
    ms = mini(tmp_path, VARIANTS[0])
    ms.run_batch(0)
    a = ms.coordinator
    ms.ckpt.write_offsets(1)
    a.process(1, ms.batches[1])
    ms.ckpt.write_commit(1)  # A's watcher has not run yet
    ms.coordinator = b = ms.new_coordinator()
    ms.run()
    assert b.stats.recovered_forward == 1
    assert ms.processed == [0, 2, 3]
    with pytest.raises(FencedError):
        a.commit_ready()
    ms.assert_exact()


# -- F11: task retries and speculative duplicates -----------------------------------------------


def _first_nonempty_share(variant: Variant, batch: MemoryBatch) -> int:
    return next(i for i, s in enumerate(batch.shares(by_hash=variant.generated_keys)) if s)


def test_f11_losing_speculative_attempt_is_aborted(tmp_path: Path, variant: Variant) -> None:
    """F11: a duplicate attempt of a participant pre-commits, but its committable never reaches the driver.

    Pass: transactional strategies abort it (orphans_aborted == 1; its txn 'aborted'); for the
    idempotent strategy its rows were upserts of the same keys (nothing to abort); in every
    case the sink is exact and recover() is empty.
    """
    batches = batches_for(variant)
    batches[1].speculative = {_first_nonempty_share(variant, batches[1]): 1}
    ms = MiniSpark(tmp_path, variant, batches)
    ms.run()
    ms.assert_exact()
    if variant.transactional:
        assert ms.stats.orphans_aborted == 1
        assert txn_states(ms.db, 1)["aborted"] == 1
    else:
        assert ms.stats.orphans_aborted == 0


def test_f11_task_failing_after_pre_commit_then_retried(tmp_path: Path, variant: Variant) -> None:
    """F11: an attempt fails right after pre_commit and Spark retries the task.

    Pass: the retry's committable is used, the failed attempt's prepared work is aborted
    (transactional: orphans_aborted == 1) and never visible; exact.
    """
    batches = batches_for(variant)
    batches[1].task_retries = 1
    ms = MiniSpark(tmp_path, variant, batches)
    faults.configure("F11@1:raise")
    ms.run()
    assert batches[1].attempts == len([s for s in batches[1].shares(by_hash=variant.generated_keys) if s]) + 1
    assert ms.stats.orphans_aborted == (1 if variant.transactional else 0)
    ms.assert_exact()


def test_f11_failed_attempt_fails_the_batch_and_is_aborted(tmp_path: Path, variant: Variant) -> None:
    """F11: a participant fails after pre_commit and the batch fails (no task retry).

    Pass: the coordinator aborts every prepared attempt of the batch before re-raising
    (recover() empty, nothing of batch 1 visible for transactional strategies); after a
    restart the sink is exact.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F11@1:raise")
    ms.crash()
    assert ms.coordinator.sink.recover(APP) == []
    if variant.transactional:
        assert ms.stats.orphans_aborted >= 1
        assert ms.visible() == ms.expected(upto=1)
    ms.restart()
    ms.run()
    ms.assert_exact()


# -- F13: replays with different data ---------------------------------------------------------


@pytest.mark.parametrize("variant", NON_2PC, ids=[v.id for v in NON_2PC])
def test_f13_divergent_replay_of_a_committed_batch_is_detected(tmp_path: Path, variant: Variant) -> None:
    """F13: batch 1 was committed (crash at F8), and Spark's replay of it brings different data.

    Pass: NonDeterministicReplayError with batch_id == 1 and a fix; the replay writes nothing
    (only fingerprinted), and the sink still holds the original batch 1.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F8@1:raise")
    ms.crash()
    before = ms.visible()
    assert before == ms.expected(upto=2)
    ms.batches[1] = changed = MemoryBatch(make_rows(1, duplicate=not variant.user_keys, salt="x"))
    ms.restart()
    with pytest.raises(NonDeterministicReplayError) as info:
        ms.run()
    assert info.value.batch_id == 1
    assert "Batch 1" in str(info.value) and "Fix:" in str(info.value)
    assert (changed.writes, changed.fingerprints) == (0, 1)
    assert ms.visible() == before


@pytest.mark.parametrize("variant", NON_2PC, ids=[v.id for v in NON_2PC])
def test_f13_identical_replay_is_skipped_whatever_its_partitioning(tmp_path: Path, variant: Variant) -> None:
    """F13 control: the replay of committed batch 1 has the same rows, re-ordered and re-partitioned.

    Pass: the replay is skipped (replays_skipped == 1, nothing written); exact.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F8@1:raise")
    ms.crash()
    ms.batches[1] = same = MemoryBatch(list(reversed(ms.batches[1].rows)), participants=5, chunk=1)
    ms.restart()
    ms.run()
    assert ms.stats.replays_skipped == 1
    assert same.writes == 0
    ms.assert_exact()


@pytest.mark.parametrize("changed", [False, True], ids=["same", "changed"])
def test_f13_replay_of_a_bundle_from_an_older_release_compares_in_its_version(tmp_path: Path, changed: bool) -> None:
    """Batch 1's bundle holds a version-1 fingerprint, as a release before fingerprint versions wrote it; the
    driver restarts on this release and Spark replays batch 1.

    Pass: the replay is fingerprinted in version 1: the same rows are skipped, different rows raise
    NonDeterministicReplayError; a comparison in the current version would call the same rows different.
    """
    variant = NON_2PC[0]
    ms = mini(tmp_path, variant)
    faults.configure("F8@1:raise")
    ms.crash()
    old = ms.batches[1].expected_fingerprint(1)
    (stored,) = db_query(ms.db, "SELECT bundle FROM bundles WHERE batch_id = 1")
    bundle = json.loads(stored[0])
    assert bundle["fingerprint"]["version"] == FINGERPRINT_VERSION != 1
    bundle["fingerprint"] = old.to_json()
    conn = sqlite3.connect(ms.db)
    with conn:
        conn.execute("UPDATE bundles SET bundle = ? WHERE batch_id = 1", (json.dumps(bundle),))
    conn.close()
    if changed:
        ms.batches[1] = MemoryBatch(make_rows(1, duplicate=not variant.user_keys, salt="x"))
    ms.restart()
    if changed:
        with pytest.raises(NonDeterministicReplayError):
            ms.run()
        return
    writes = ms.batches[1].writes
    ms.run()
    assert ms.stats.replays_skipped == 1 and ms.batches[1].writes == writes
    ms.assert_exact()


def test_2pc_bundles_hold_the_row_count_and_a_rewound_replay_keeps_the_commit(tmp_path: Path) -> None:
    """Two-phase commit fingerprints rows by count only (it commits after Spark's commit log, so Spark does not
    replay a batch it committed). Then Spark's commit log loses batch 3 (a rewound checkpoint) and Spark
    replays it with other rows.

    Pass: every bundle is count-only with its batch's row count; the replay is skipped without a fingerprint
    pass and without NonDeterministicReplayError, and the sink keeps the rows it committed. Negative control:
    the same replay under txid-check (hashed fingerprints) raises NonDeterministicReplayError.
    """
    ms = mini(tmp_path, VARIANTS[0])
    ms.run()
    bundles = ms.reader().bundles(ms.app_id)
    assert [b.fingerprint for b in bundles] == [Fingerprint(len(b.rows), version=COUNT_ONLY) for b in ms.batches]
    committed = ms.visible()
    (ms.ckpt.root / "commits" / "3").unlink()
    ms.batches[3] = MemoryBatch(make_rows(3, salt="x"))
    ms.restart()
    ms.run()
    assert ms.stats.replays_skipped == 1
    assert ms.batches[3].writes == 0 and ms.batches[3].fingerprints == 0
    assert ms.visible() == committed

    control = mini(tmp_path / "control", NON_2PC[0])
    control.run()
    (control.ckpt.root / "commits" / "3").unlink()
    control.batches[3] = MemoryBatch(make_rows(3, duplicate=not NON_2PC[0].user_keys, salt="x"))
    control.restart()
    with pytest.raises(NonDeterministicReplayError):
        control.run()


def test_f13_2pc_divergent_replay_is_harmless(tmp_path: Path) -> None:
    """F13 under 2PC: the batch was only prepared (crash at F4), and the replay has different data.

    Pass: the prepared original is aborted; the sink holds batches 0, 2, 3 and the replayed
    batch 1 exactly once, and none of the original batch 1's rows.
    """
    variant = VARIANTS[0]
    ms = mini(tmp_path, variant)
    original = ms.expected(upto=2) - ms.expected(upto=1)
    faults.configure("F4@1:raise")
    ms.crash()
    ms.batches[1] = MemoryBatch(make_rows(1, salt="x"))
    ms.restart()
    ms.run()
    ms.assert_exact()
    assert not ms.visible() & original


# -- new checkpoint guard ---------------------------------------------------------------------


@pytest.mark.parametrize("asked", [0, 10])
def test_new_checkpoint_meeting_committed_batches_is_refused(tmp_path: Path, variant: Variant, asked: int) -> None:
    """A new checkpoint (new query id) asks to write into an app_id with batches 0-3 committed.

    Pass: CheckpointMismatchError (a ConfigurationError naming both query ids) before anything
    is written; the sink content is unchanged.
    """
    ms = mini(tmp_path, variant)
    ms.run()
    other = FakeCheckpoint(tmp_path / "checkpoint2")
    c2 = ms.new_coordinator(other)
    other.write_offsets(asked)
    batch = MemoryBatch(make_rows(asked))
    with pytest.raises(CheckpointMismatchError) as info:
        c2.process(asked, batch)
    assert isinstance(info.value, ConfigurationError)
    assert ms.ckpt.query_id in str(info.value) and other.query_id in str(info.value)
    assert batch.writes == 0
    ms.assert_exact()


@pytest.mark.parametrize("metadata", [True, False], ids=["same-checkpoint", "checkpoint-without-metadata"])
def test_batch_id_older_than_the_last_committed_is_refused(tmp_path: Path, variant: Variant, metadata: bool) -> None:
    """Spark asks for batch 2 while the sink has batch 3 committed (rolled-back or unidentifiable checkpoint).

    Pass: CheckpointMismatchError before anything is written (a checkpoint Spark has not
    created yet is refused as new, before fencing); content unchanged.
    """
    ms = mini(tmp_path, variant)
    ms.run()
    ckpt = ms.ckpt if metadata else FakeCheckpoint(tmp_path / "bare", metadata=False)
    c2 = ms.new_coordinator(ckpt)
    batch = MemoryBatch(make_rows(2))
    with pytest.raises(CheckpointMismatchError, match="batch 2" if metadata else "is new"):
        c2.process(2, batch)
    assert batch.writes == 0
    ms.assert_exact()


# -- strategies and capabilities --------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cls"),
    [("2pc", TwoPhaseCommit), ("txid-check", TxidCheck), ("idempotent", Idempotent), (" 2PC ", TwoPhaseCommit)],
)
def test_resolve_strategy_accepts_the_three_names(name: str, cls: type) -> None:
    """resolve_strategy maps each documented name (case and blanks ignored) to its class.

    Pass: the right class; a Strategy object is returned unchanged.
    """
    assert type(resolve_strategy(name)) is cls
    obj = Idempotent(["id"])
    assert resolve_strategy(obj) is obj


@pytest.mark.parametrize("name", ["two-phase", "", "exactly-once", "txid"])
def test_resolve_strategy_rejects_other_names(name: str) -> None:
    """Any other name is a ConfigurationError that lists the valid names.

    Pass: ConfigurationError mentioning 'txid-check'.
    """
    with pytest.raises(ConfigurationError, match="txid-check"):
        resolve_strategy(name)


class NoKeysSink(ReferenceSink):
    """A ReferenceSink that does not declare supports_keys."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.capabilities = replace(self.capabilities, supports_keys=False)


@pytest.mark.parametrize("strategy", [Idempotent(), Idempotent(["id"]), "idempotent"])
def test_idempotent_needs_supports_keys(tmp_path: Path, strategy: Any) -> None:
    """A sink without supports_keys rejects the idempotent strategy, naming the missing capability.

    Pass: ConfigurationError from Strategy.check and from BatchWriter, both naming
    'supports_keys' and suggesting the strategies the sink does support.
    """
    sink = NoKeysSink(tmp_path / "s.db")
    with pytest.raises(ConfigurationError, match="supports_keys") as info:
        resolve_strategy(strategy).check(sink.capabilities, "NoKeysSink")
    assert "2pc" in str(info.value) and "txid-check" in str(info.value)
    with pytest.raises(ConfigurationError, match="supports_keys"):
        BatchWriter(sink, app_id=APP, strategy=strategy, checkpoint_location=str(tmp_path / "c"))
    TwoPhaseCommit().check(sink.capabilities, "NoKeysSink")  # the others are fine
    TxidCheck().check(sink.capabilities, "NoKeysSink")


def test_idempotent_key_columns_accepts_a_single_string() -> None:
    """Idempotent("id") means one key column, not the characters 'i' and 'd'.

    Pass: upsert_keys == ("id",), no generated keys; without columns the generated key column is used.
    """
    assert Idempotent("id").upsert_keys() == ("id",)
    assert not Idempotent("id").generates_keys()
    assert Idempotent().upsert_keys() == (KEY_COLUMN,) and Idempotent().generates_keys()


# -- resolution of commits --------------------------------------------------------------------


class ScriptedSink(ReferenceSink):
    """A ReferenceSink whose first ``fail`` commits misbehave in a scripted way."""

    how = "lost-request"

    def __init__(self, path: Path, fail: int = 1) -> None:
        super().__init__(path)
        self.fail = fail
        self.commit_calls = 0
        self.status_calls = 0

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        self.commit_calls += 1
        if self.fail <= 0:
            super().commit(batch, committables, bundle)
            return
        self.fail -= 1
        if self.how == "lost-request":
            raise AmbiguousCommitError("Connection cut before the COMMIT reached the store.", "Ask commit_status.")
        if self.how == "lost-reply":
            super().commit(batch, committables, bundle)
            raise AmbiguousCommitError("Connection cut after the COMMIT reached the store.", "Ask commit_status.")
        if self.how == "transient":
            raise TransientError("The store is down.", "Retry.")
        raise AssertionError(self.how)

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        self.status_calls += 1
        return super().commit_status(batch, committables)


class LostReplySink(ScriptedSink):
    how = "lost-reply"


class FlakySink(ScriptedSink):
    how = "transient"


class StuckSink(ScriptedSink):
    """Every commit is lost and the sink never decides."""

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        self.status_calls += 1
        return CommitStatus.IN_PROGRESS


class VanishedSink(ScriptedSink):
    """The first commit is lost and the sink says the batch's work is gone."""

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        self.status_calls += 1
        return CommitStatus.ABORTED


def test_lost_commit_request_is_recommitted(tmp_path: Path, variant: Variant) -> None:
    """The first commit raises AmbiguousCommitError before doing anything.

    Pass: commit_status says PREPARED, the coordinator commits again (ambiguous_recommitted == 1,
    two commit calls for batch 0), and the sink is exact.
    """
    ms = mini(tmp_path, variant, sink_factory=ScriptedSink)
    ms.run()
    st = ms.stats
    assert (st.ambiguous_commits, st.ambiguous_recommitted, st.ambiguous_resolved_committed) == (1, 1, 0)
    sink = ms.coordinator.sink
    assert isinstance(sink, ScriptedSink)
    assert (sink.commit_calls, sink.status_calls) == (5, 1)
    ms.assert_exact()


def test_lost_commit_reply_is_resolved_as_committed(tmp_path: Path, variant: Variant) -> None:
    """The first commit takes effect, then raises AmbiguousCommitError (reply lost).

    Pass: commit_status says COMMITTED (ambiguous_resolved_committed == 1), no second commit
    of that batch, exact.
    """
    ms = mini(tmp_path, variant, sink_factory=LostReplySink)
    ms.run()
    st = ms.stats
    assert (st.ambiguous_commits, st.ambiguous_recommitted, st.ambiguous_resolved_committed) == (1, 0, 1)
    sink = ms.coordinator.sink
    assert isinstance(sink, ScriptedSink) and sink.commit_calls == 4
    ms.assert_exact()


def test_commit_in_doubt_forever_gives_up_in_bounded_time(tmp_path: Path, variant: Variant) -> None:
    """The commit is lost and commit_status answers IN_PROGRESS forever.

    Pass: AmbiguousCommitError after resolve_timeout_s=0.3 (not before, and well within 10 s),
    having asked commit_status several times; a restarted driver with a healthy sink resolves
    the batch and the sink is exact.
    """
    policy = CommitPolicy(resolve_timeout_s=0.3, backoff_s=0.01, max_backoff_s=0.05)
    ms = mini(tmp_path, variant, sink_factory=lambda p: StuckSink(p, fail=10**6), policy=policy)
    started = time.monotonic()
    err = ms.crash(AmbiguousCommitError)
    elapsed = time.monotonic() - started
    assert 0.3 <= elapsed < 10
    assert "Fix:" in str(err)
    sink = ms.coordinator.sink
    assert isinstance(sink, StuckSink) and sink.status_calls >= 2 and sink.commit_calls == 1
    ms.sink_factory = ReferenceSink
    ms.restart()
    ms.run()
    assert ms.stats.recovered_forward == 1
    ms.assert_exact()


def test_commit_in_doubt_message_states_the_timeout(tmp_path: Path) -> None:
    """The give-up message tells how long the coordinator waited.

    Pass: the AmbiguousCommitError text contains '0.3' for resolve_timeout_s=0.3.
    """
    policy = CommitPolicy(resolve_timeout_s=0.3, backoff_s=0.01, max_backoff_s=0.05)
    ms = mini(tmp_path, VARIANTS[1], n=1, sink_factory=lambda p: StuckSink(p, fail=10**6), policy=policy)
    err = ms.crash(AmbiguousCommitError)
    assert "0.3" in str(err)


def test_transient_commit_failures_are_retried(tmp_path: Path, variant: Variant) -> None:
    """The first two commits raise TransientError (nothing applied), the third succeeds.

    Pass: batch 0 is committed after 3 calls, with no ambiguity counted; exact.
    """
    # FAST gives up 50 ms after the first failure: on a loaded machine the second came later than that
    policy = replace(FAST, transient_timeout_s=10.0)
    ms = mini(tmp_path, variant, sink_factory=lambda p: FlakySink(p, fail=2), policy=policy)
    ms.run()
    sink = ms.coordinator.sink
    assert isinstance(sink, FlakySink) and sink.commit_calls == 4 + 2
    assert ms.stats.ambiguous_commits == 0 and ms.stats.batches_committed == 4
    ms.assert_exact()


def test_transient_commit_failures_are_bounded(tmp_path: Path) -> None:
    """A sink that stays down: the commit is retried for transient_timeout_s, then TransientError.

    Pass: TransientError that says how often it was tried, after several commit calls and no sooner than the
    bound; nothing visible.
    """
    ms = mini(tmp_path, VARIANTS[1], n=1, sink_factory=lambda p: FlakySink(p, fail=10**6))
    started = time.monotonic()
    err = ms.crash(TransientError)
    assert time.monotonic() - started >= FAST.transient_timeout_s
    sink = ms.coordinator.sink
    assert isinstance(sink, FlakySink) and sink.commit_calls > 2
    assert ms.visible() == Counter()
    assert "The store is down" in str(err)


class DownForAWhileSink(ReferenceSink):
    """Every driver-side call fails with TransientError until ``up_at`` (monotonic), as a server restarting;
    the next ``refuse_begins`` participant begins fail alike."""

    def __init__(self, path: Path, down_s: float = 0.0) -> None:
        super().__init__(path)
        self.up_at = 0.0
        self.down_s = down_s
        self.refuse_begins = 0
        self.failures: Counter[str] = Counter()

    def go_down(self) -> None:
        self.up_at = time.monotonic() + self.down_s

    def _gate(self, what: str) -> None:
        if time.monotonic() < self.up_at:
            self.failures[what] += 1
            raise TransientError(f"The store is restarting ({what}).", "Retry.")

    def setup(self, app_id: str) -> None:
        self._gate("setup")
        super().setup(app_id)

    def fence(self, app_id: str) -> int:
        self._gate("fence")
        return super().fence(app_id)

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        self._gate("fetch_last_bundle")
        return super().fetch_last_bundle(app_id)

    def recover(self, app_id: str) -> list[Committable]:
        self._gate("recover")
        return super().recover(app_id)

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        self._gate("commit")
        super().commit(batch, committables, bundle)

    def begin(self, task: TaskRef) -> Any:
        if self.refuse_begins > 0:
            self.refuse_begins -= 1
            self.failures["begin"] += 1
            raise TransientError("The store is restarting (begin).", "Retry.")
        return super().begin(task)


def test_a_participant_waits_at_begin_while_its_sink_is_down(tmp_path: Path, variant: Variant) -> None:
    """The sink goes down after the batch was planned: each participant's begin is retried (an executor-side
    wait, so a short outage does not use up Spark's task retries) and the batch lands once.

    Pass: begin refused while down, every batch committed in one run, exact.
    """
    policy = CommitPolicy(transient_timeout_s=5.0, backoff_s=0.005, max_backoff_s=0.02)
    ms = mini(tmp_path, variant, sink_factory=lambda p: DownForAWhileSink(p, down_s=0.1), policy=policy)
    sink = ms.coordinator.sink
    assert isinstance(sink, DownForAWhileSink)
    ms.ckpt.write_offsets(0)
    plan = ms.coordinator.begin_batch(0)
    assert plan is not None and plan.begin_timeout_s == 5.0 and plan.sink is sink
    sink.refuse_begins = 3
    committables = ms.batches[0].write(plan)
    assert sink.failures["begin"] > 0 and not sink.failures["commit"]
    ms.coordinator.finish_batch(0, committables)
    ms.ckpt.write_commit(0)
    ms.coordinator.commit_ready()
    ms.run()
    ms.assert_exact()


def test_a_sink_down_for_a_while_at_start_and_at_a_commit_is_ridden_out(
    tmp_path: Path, variant: Variant, caplog: pytest.LogCaptureFixture
) -> None:
    """The sink is down (TransientError on every call) when the driver starts, and again before a commit:
    setup, fetch_last_bundle, fence, recover and commit are retried until it is back, each retry logged.

    Pass: every batch committed in one run, exact; the sink refused calls while down; warnings name the retries.
    """
    policy = CommitPolicy(transient_timeout_s=5.0, backoff_s=0.005, max_backoff_s=0.02)
    ms = mini(tmp_path, variant, sink_factory=lambda p: DownForAWhileSink(p, down_s=0.1), policy=policy)
    sink = ms.coordinator.sink
    assert isinstance(sink, DownForAWhileSink)
    sink.go_down()
    with caplog.at_level("WARNING", logger="eosink"):
        ms.run()
    assert ms.stats.batches_committed == 4
    assert sink.failures["setup"] > 0, sink.failures
    assert any("retry" in r.getMessage() and "setup" in r.getMessage() for r in caplog.records)
    ms.assert_exact()


def test_a_checkpoint_store_that_fails_for_a_while_is_retried_then_gives_up(tmp_path: Path) -> None:
    """Checkpoint I/O that raises OSError is retried for ``retry_s`` (then TransientError saying how long);
    a missing file (FileNotFoundError) is not retried."""
    ckpt = SparkCheckpoint(tmp_path)
    ckpt.retry_s = 5.0
    calls = {"n": 0}

    class Flaky:
        def exists(self, path: str) -> bool:
            calls["n"] += 1
            if calls["n"] < 3:
                raise OSError("connection refused")
            return True

    ckpt._fs = Flaky()  # type: ignore[assignment]
    assert ckpt.has_commit_file(0) is True and calls["n"] == 3
    ckpt.retry_s = 0.05
    calls["n"] = -(10**6)
    with pytest.raises(TransientError, match=r"tried \d+ times"):
        ckpt.has_commit_file(0)

    class Gone:
        def exists(self, path: str) -> bool:
            calls["n"] += 1
            raise FileNotFoundError(path)

    ckpt._fs = Gone()  # type: ignore[assignment]
    calls["n"] = 0
    ckpt.retry_s = 5.0
    with pytest.raises(TransientError):
        ckpt.has_commit_file(0)
    assert calls["n"] == 1


class FlakyRecoverSink(ReferenceSink):
    """``recover()`` fails with TransientError the first ``fail`` times (a sink restarting)."""

    def __init__(self, path: Path, fail: int = 2) -> None:
        super().__init__(path)
        self.fail = fail
        self.recover_calls = 0

    def recover(self, app_id: str) -> list[Committable]:
        self.recover_calls += 1
        if self.fail > 0:
            self.fail -= 1
            raise TransientError("The store is restarting.", "Retry.")
        return super().recover(app_id)


def test_transient_failures_while_looking_for_leftover_attempts_are_retried(tmp_path: Path, variant: Variant) -> None:
    """Looking for a batch's leftover attempts (``recover``) fails twice transiently: retried, not fatal.

    Pass: every batch is committed in one run; exact.
    """
    # FAST gives up 50 ms after the first failure: two slow SQLite reads on a loaded machine took longer
    policy = replace(FAST, transient_timeout_s=10.0)
    ms = mini(tmp_path, variant, sink_factory=lambda p: FlakyRecoverSink(p, fail=0), policy=policy)
    ms.coordinator.start()  # start-time recovery has its own bound; the retries under test are per batch
    sink = ms.coordinator.sink
    assert isinstance(sink, FlakyRecoverSink)
    sink.fail = 2
    ms.run()
    assert ms.stats.batches_committed == 4 and sink.recover_calls >= 4 + 2
    ms.assert_exact()


def test_commit_found_aborted_raises(tmp_path: Path) -> None:
    """The commit is lost and commit_status says ABORTED.

    Pass: CommitAbortedError (never a blind retry: one commit call), nothing visible.
    """
    ms = mini(tmp_path, VARIANTS[1], n=1, sink_factory=VanishedSink)
    ms.crash(CommitAbortedError)
    sink = ms.coordinator.sink
    assert isinstance(sink, VanishedSink) and (sink.commit_calls, sink.status_calls) == (1, 1)
    assert ms.visible() == Counter()


# -- 2PC: batches pending in this process -----------------------------------------------------


def test_2pc_rerun_of_a_pending_batch_in_process_replaces_it(tmp_path: Path) -> None:
    """Spark runs batch 0 again in the same driver before committing it (a failed, retried batch).

    Pass: the first attempt's prepared work is aborted, the second is committed; exact.
    """
    ms = mini(tmp_path, VARIANTS[0], n=1)
    ms.ckpt.write_offsets(0)
    ms.coordinator.process(0, ms.batches[0])
    first = txn_states(ms.db, 0)
    assert first["prepared"] >= 1
    ms.run()
    states = txn_states(ms.db, 0)
    assert states["aborted"] == first["prepared"] and states["committed"] == first["prepared"]
    ms.assert_exact()


def test_2pc_next_batch_while_previous_uncommitted_by_spark_raises(tmp_path: Path) -> None:
    """Spark runs batch 1 while batch 0 is pending without commits/0: the order is broken.

    Pass: CommitAbortedError; a restarted driver aborts batch 0, Spark replays it, exact.
    """
    ms = mini(tmp_path, VARIANTS[0], n=2)
    ms.ckpt.write_offsets(0)
    ms.coordinator.process(0, ms.batches[0])
    ms.ckpt.write_offsets(1)
    with pytest.raises(CommitAbortedError):
        ms.coordinator.process(1, ms.batches[1])
    ms.restart()
    ms.run()
    assert ms.stats.recovered_aborted == 1
    ms.assert_exact()


# -- vanished prepared work -------------------------------------------------------------------


def _vanish_prepared_work(ms: MiniSpark) -> int:
    """Abort every prepared committable behind eosink's back (a transaction timeout, an admin rollback)."""
    reader = ms.reader()
    try:
        lost = reader.recover(APP)
        reader.abort(lost)
        return len(lost)
    finally:
        reader.close()


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.id for v in VARIANTS])
def test_restart_after_the_prepared_work_of_an_in_doubt_batch_vanished(tmp_path: Path, variant: Variant) -> None:
    """Crash at F4 of batch 1, then the sink loses batch 1's prepared work before the restart.

    Spark's commit log does not hold batch 1, so Spark replays it: nothing is lost if
    recovery gives the batch up instead of insisting on committing it.
    Pass: the restarted driver replays batch 1 and the sink is exact.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F4@1:raise")
    ms.crash()
    lost = _vanish_prepared_work(ms)
    assert (lost >= 1) if variant.transactional else (lost == 0)
    ms.restart()
    ms.run()
    ms.assert_exact()


def test_2pc_batch_committed_by_spark_whose_prepared_work_vanished_fails_loudly(tmp_path: Path) -> None:
    """Crash at F5 of batch 1 (Spark committed it), then the sink loses its prepared work.

    Spark will never replay batch 1, so its rows are lost: that must never pass silently.
    Pass: the restarted driver raises PreparedWorkLostError naming app and batch 1 and does not go on.
    """
    ms = mini(tmp_path, VARIANTS[0])
    faults.configure("F5@1:raise")
    ms.crash()
    assert _vanish_prepared_work(ms) >= 1
    ms.restart()
    with pytest.raises(PreparedWorkLostError, match="Batch 1 of app_id 'payments' is lost") as err:
        ms.run()
    assert (err.value.app_id, err.value.batch_id) == ("payments", 1)
    assert ms.processed == [0, 1, 2]
    assert ms.visible() == ms.expected(upto=1)


# -- a wrong checkpoint must not touch the right one's work -----------------------------------


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.id for v in VARIANTS])
@pytest.mark.parametrize("created", [True, False], ids=["spark-created-it", "before-spark-starts"])
def test_wrong_checkpoint_leaves_the_original_checkpoints_work_alone(
    tmp_path: Path, variant: Variant, created: bool
) -> None:
    """A driver crashes with batch 1 in doubt (F5 for 2PC: Spark committed it; F4 otherwise).

    Then the query is started by mistake with a new checkpoint (one Spark created, or, with
    ``BatchWriter.recover()`` before the query starts, one Spark has not created yet), is
    refused with CheckpointMismatchError, and is started again with the original checkpoint.
    Pass: the refused start changed nothing (same in-doubt work), and the restart from the
    original checkpoint ends exact.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F5@1:raise" if variant.two_pc else "F4@1:raise")
    ms.crash()
    reader = ms.reader()
    in_doubt = reader.in_doubt_count(APP)
    other = FakeCheckpoint(tmp_path / "new-checkpoint", metadata=created)
    wrong = ms.new_coordinator(other)
    with pytest.raises(CheckpointMismatchError):
        if created:
            other.write_offsets(0)
            wrong.process(0, MemoryBatch(make_rows(0)))
        else:
            wrong.start()
    assert reader.in_doubt_count(APP) == in_doubt
    reader.close()
    ms.restart()
    ms.run()
    ms.assert_exact()


# -- the same driver process runs the query again ---------------------------------------------


def _same_driver_cases() -> list[Any]:
    cases = []
    for v in VARIANTS:
        for point in ["F1", "F2", "F3", "F4", "F5", "F8"]:
            if point == "F5" and not v.two_pc:
                continue  # inline strategies never pass F5
            cases.append(pytest.param(v, point, id=f"{v.id}-{point}"))
    return cases


@pytest.mark.parametrize(("variant", "point"), _same_driver_cases())
def test_query_restarted_in_the_same_driver_after_a_failed_batch(tmp_path: Path, variant: Variant, point: str) -> None:
    """Batch 1 fails at ``point``; the user restarts the query in the same Python process.

    Classic PySpark runs foreachBatch in the driver, so the same BatchWriter, and with it the
    same Coordinator object, handles the restarted query (only Spark Connect pickles a fresh one).
    Pass: after the failure, running the batches Spark replays with the same coordinator
    leaves the sink exact.
    """
    ms = mini(tmp_path, variant)
    faults.configure(f"{point}@1:raise")
    ms.crash()
    faults.reset()
    ms.run()
    ms.assert_exact()


@pytest.mark.parametrize(
    "variant",
    VARIANTS,
    ids=[v.id for v in VARIANTS],
)
def test_recovery_failure_is_retried_by_the_same_driver(tmp_path: Path, variant: Variant) -> None:
    """F9 in the same process: recovery raises, and the restarted query reuses the coordinator.

    Pass: the next process() call recovers again (it must not assume start() completed) and
    the sink ends exact.
    """
    ms = mini(tmp_path, variant)
    faults.configure("F4@1:raise")
    ms.crash()
    ms.restart("F9:raise")
    ms.crash()
    faults.reset()
    ms.run()
    ms.assert_exact()
