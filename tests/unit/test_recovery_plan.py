"""The recovery planner (eosink.recovery): each decision, its reason, no side effects, and that the
Coordinator executes exactly the plan it would print (``eosink recover --dry-run``).

Crashes are fault points fired inside a MiniSpark run against the reference sink and a fake
Spark checkpoint; the restarted driver is planned first, then started.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from unit_conftest import APP, VARIANTS, MiniSpark, Variant, batches_for, db_query

from eosink import faults
from eosink.connectors.reference import ReferenceSink
from eosink.contract import BatchRef, Committable, TaskRef
from eosink.errors import ConfigurationError
from eosink.recovery import Action, RecoveryPlan, plan_recovery

TWO_PC, TXID, IDEMPOTENT = VARIANTS[0], VARIANTS[1], VARIANTS[2]


def crashed(tmp_path: Path, variant: Variant, spec: str) -> MiniSpark:
    """Four batches; the fault ``spec`` kills the driver; a new (unstarted) driver is ready."""
    ms = MiniSpark(tmp_path, variant, batches_for(variant, 4))
    faults.configure(spec)
    ms.crash()
    ms.restart()
    return ms


def plan_of(ms: MiniSpark) -> RecoveryPlan:
    c = ms.coordinator
    return plan_recovery(c.sink, c.app_id, c.strategy, c.checkpoint)


def snapshot(ms: MiniSpark) -> dict[str, Any]:
    """Everything recovery could change: sink tables, in-doubt list, manifests."""
    return {
        "txns": db_query(ms.db, "SELECT * FROM txns ORDER BY 1"),
        "bundles": db_query(ms.db, "SELECT * FROM bundles ORDER BY 1, 2"),
        "epochs": db_query(ms.db, "SELECT * FROM epochs ORDER BY 1"),
        "in_doubt": ms.reader().recover(APP),
        "manifests": {b: ms.ckpt.spark().read_manifest(APP, b) for b in ms.ckpt.spark().manifest_batches(APP)},
    }


def stray_attempt(ms: MiniSpark, batch_id: int, epoch: int) -> Committable:
    """A prepared attempt of ``batch_id`` nobody recorded (a lost speculative task)."""
    sink = ReferenceSink(ms.db)
    try:
        txn = sink.begin(TaskRef(BatchRef(APP, batch_id), epoch, 9, f"stray-{uuid.uuid4().hex[:8]}"))
        sink.write(txn, pa.RecordBatch.from_pylist(ms.batches[batch_id].rows[:2]))
        return sink.pre_commit(txn)
    finally:
        sink.close()


def execute_matches(ms: MiniSpark, plan: RecoveryPlan) -> None:
    """Starting the driver executes ``plan`` (the same decisions), then a full run is exact."""
    ms.coordinator.start()
    assert ms.coordinator.last_recovery == plan
    ms.run()
    ms.assert_exact()


def test_nothing_in_doubt_plans_nothing(tmp_path: Path) -> None:
    ms = MiniSpark(tmp_path, TWO_PC, batches_for(TWO_PC, 2))
    ms.run()
    plan = plan_of(ms)
    assert plan.empty and plan.batches == ()
    assert (plan.app_id, plan.strategy, plan.last_batch_id) == (APP, "2pc", 1)


def test_2pc_batch_spark_committed_rolls_forward(tmp_path: Path) -> None:
    """Crash at F5 (commits/1 exists, not committed in the sink). Pass: roll-forward of the manifest's
    committables, Spark said so; nothing to abort; executing it commits without replaying batch 1."""
    ms = crashed(tmp_path, TWO_PC, "F5@1:raise")
    manifest = ms.ckpt.spark().read_manifest(APP, 1)
    assert manifest is not None
    plan = plan_of(ms)
    (b,) = plan.batches
    assert (b.batch_id, b.action, b.spark_committed, b.has_manifest) == (1, Action.ROLL_FORWARD, True, True)
    assert "commit log holds batch 1" in b.reason
    assert manifest is not None and b.commit == manifest.committables
    assert b.bundle == manifest.bundle
    assert b.abort == () and {c.id for c in b.candidates} == {c.id for c in b.commit}
    assert plan.last_batch_id == 0
    execute_matches(ms, plan)
    assert ms.stats.recovered_forward == 1 and ms.processed == [0, 1, 2, 3]  # batch 1 never replayed


def test_2pc_batch_spark_did_not_commit_is_aborted(tmp_path: Path) -> None:
    """Crash at F4 under 2PC (manifest, no commits/1). Pass: abort every committable; Spark replays it."""
    ms = crashed(tmp_path, TWO_PC, "F4@1:raise")
    plan = plan_of(ms)
    (b,) = plan.batches
    assert (b.action, b.spark_committed, b.commit, b.bundle) == (Action.ABORT, False, (), None)
    assert "does not hold batch 1" in b.reason and "replays" in b.reason
    assert {c.id for c in b.abort} == {c.id for c in b.in_doubt} and len(b.abort) == 3
    execute_matches(ms, plan)
    assert ms.stats.recovered_aborted == 1 and ms.stats.orphans_aborted == 3


@pytest.mark.parametrize("variant", [TXID, IDEMPOTENT], ids=lambda v: v.id)
def test_inline_strategies_roll_forward_once_the_manifest_exists(tmp_path: Path, variant: Variant) -> None:
    """Crash at F4 under txid-check / idempotent: the strategy commits whatever Spark says."""
    ms = crashed(tmp_path, variant, "F4@1:raise")
    plan = plan_of(ms)
    (b,) = plan.batches
    assert (b.action, b.spark_committed) == (Action.ROLL_FORWARD, False)
    assert f"the {variant.make().name} strategy commits" in b.reason
    assert len(b.commit) == 3 and b.abort == ()
    execute_matches(ms, plan)
    assert ms.stats.recovered_forward == 1


def test_roll_forward_also_aborts_attempts_outside_the_manifest(tmp_path: Path) -> None:
    """A stray prepared attempt of the rolled-forward batch is in ``abort``, never in ``commit``."""
    ms = crashed(tmp_path, TXID, "F4@1:raise")
    stray = stray_attempt(ms, 1, epoch=1)
    (b,) = plan_of(ms).batches
    assert b.action is Action.ROLL_FORWARD
    assert [c.id for c in b.abort] == [stray.id] and stray.id not in {c.id for c in b.commit}
    execute_matches(ms, plan_of(ms))
    assert ms.stats.orphans_aborted == 1


@pytest.mark.parametrize("variant", [TWO_PC, TXID], ids=lambda v: v.id)
def test_prepared_work_without_manifest_is_aborted_as_leftovers(tmp_path: Path, variant: Variant) -> None:
    """Crash at F3 (prepared, no manifest): the batch never reached its decision; Spark replays it."""
    ms = crashed(tmp_path, variant, "F3@1:raise")
    plan = plan_of(ms)
    (b,) = plan.batches
    assert (b.action, b.has_manifest, b.spark_committed) == (Action.ABORT_LEFTOVERS, False, None)
    assert "no manifest" in b.reason
    assert len(b.abort) == 3 and b.commit == ()
    execute_matches(ms, plan)
    assert (ms.stats.recovered_forward, ms.stats.recovered_aborted, ms.stats.orphans_aborted) == (0, 0, 3)


@pytest.mark.parametrize("variant", [TWO_PC, TXID], ids=lambda v: v.id)
def test_committed_batch_with_a_stale_manifest_plans_nothing_but_its_removal(tmp_path: Path, variant: Variant) -> None:
    """Crash at F8 (bundle written, manifest not yet removed): nothing to commit or abort."""
    ms = crashed(tmp_path, variant, "F8@1:raise")
    plan = plan_of(ms)
    (b,) = plan.batches
    assert (b.action, b.has_manifest, b.abort, b.commit) == (Action.NOTHING, True, (), ())
    assert "already committed" in b.reason and plan.last_batch_id == 1
    execute_matches(ms, plan)
    assert ms.stats.recovered_forward == ms.stats.recovered_aborted == ms.stats.orphans_aborted == 0


def test_committed_batch_with_a_stray_attempt_aborts_only_the_stray(tmp_path: Path) -> None:
    """Bundle present plus an unrecorded prepared attempt: only that attempt is aborted, never the
    manifest's (committed) committables."""
    ms = crashed(tmp_path, TXID, "F8@1:raise")
    stray = stray_attempt(ms, 1, epoch=1)
    (b,) = plan_of(ms).batches
    assert (b.action, [c.id for c in b.abort]) == (Action.ABORT_LEFTOVERS, [stray.id])
    assert "already committed" in b.reason
    execute_matches(ms, plan_of(ms))


def test_planning_has_no_side_effects(tmp_path: Path) -> None:
    """Planning twice, for every kind of batch, changes nothing and plans the same."""
    ms = crashed(tmp_path, TWO_PC, "F4@1:raise")
    stray_attempt(ms, 3, epoch=1)  # a batch without manifest, too
    before = snapshot(ms)
    first = plan_of(ms)
    assert [b.action for b in first.batches] == [Action.ABORT, Action.ABORT_LEFTOVERS]
    assert plan_of(ms) == first
    assert snapshot(ms) == before
    assert ms.coordinator.epoch is None


def test_damaged_manifest_fails_planning_before_anything_changes(tmp_path: Path) -> None:
    """A damaged manifest of a later batch stops recovery before an earlier batch is touched."""
    ms = crashed(tmp_path, TWO_PC, "F4@1:raise")
    stray_attempt(ms, 0, epoch=1)  # batch 0 would be touched first
    manifests = ms.ckpt.root / "eosink"
    (path,) = manifests.glob("*/1.json")
    txns, in_doubt = db_query(ms.db, "SELECT * FROM txns ORDER BY 1"), ms.reader().recover(APP)
    path.write_text("{not json")
    with pytest.raises(ConfigurationError, match="damaged"):
        ms.coordinator.recover()
    assert db_query(ms.db, "SELECT * FROM txns ORDER BY 1") == txns
    assert ms.reader().recover(APP) == in_doubt and any(c.batch.batch_id == 0 for c in in_doubt)


def test_plan_json_names_actions_and_ids(tmp_path: Path) -> None:
    ms = crashed(tmp_path, TWO_PC, "F5@1:raise")
    doc = plan_of(ms).to_json()
    assert doc["app_id"] == APP and doc["strategy"] == "2pc" and doc["last_batch_id"] == 0
    (b,) = doc["batches"]
    assert b["action"] == "roll-forward" and b["spark_committed"] is True and b["manifest"] is True
    assert len(b["commit"]) == 3 and b["abort"] == []
    assert b["rows"] == len(ms.batches[1].rows)


def test_f9_still_fires_after_the_first_planned_batch(tmp_path: Path) -> None:
    """F9 fires once the first batch of the plan was executed, not before."""
    ms = crashed(tmp_path, TWO_PC, "F4@1:raise")
    stray_attempt(ms, 3, epoch=1)
    faults.configure("F9:raise")
    with pytest.raises(Exception, match="F9"):
        ms.coordinator.start()
    faults.configure(None)
    remaining = plan_of(ms)
    assert [b.batch_id for b in remaining.batches] == [3]  # batch 1 was resolved before F9 fired
