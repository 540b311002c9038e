"""What recovery will do, computed without doing it: the one source of truth for resolving in-doubt batches.

:func:`plan_recovery` reads the sink's in-doubt work (``Sink.recover``), its last bundle and
eosink's manifests with Spark's commit log, and decides per batch (:class:`Action`):

* ``roll-forward``: the batch has a manifest (its commit decision), no bundle yet, and the
  strategy keeps it (2PC: Spark's commit log holds it; inline strategies: always); its
  manifest committables are committed, other in-doubt attempts of the batch aborted;
* ``abort``: the batch has a manifest but Spark's commit log does not hold it (2PC): Spark
  replays it, so all its work is aborted;
* ``abort-leftovers``: no manifest (the batch never reached its commit decision; Spark replays
  it) or its bundle is already present: the in-doubt attempts are aborted;
* ``nothing``: only a stale manifest of a committed batch is removed;
* ``lost``: Spark's commit log holds the batch, so Spark will never replay it, but the sink no
  longer has its work: its prepared work is gone (``commit_status`` answers ABORTED), or the
  sink's newest bundle is of an older batch, or it holds none although the checkpoint records the
  app_id's first commit, and no manifest covers the gap (the sink lost committed batches).
  Recovery stops with :class:`~eosink.errors.PreparedWorkLostError` (its
  :class:`~eosink.errors.CommittedWorkLostError` for lost committed batches); the way back is to
  rewind the checkpoint (:mod:`eosink.rewind`).

Not detected: a table emptied under its bundles, and a sink that lost every bundle of an app_id
whose checkpoint predates the record of the first commit (it looks like an app_id new to it).

:meth:`eosink.coordinator.Coordinator.recover` executes such a plan; ``eosink recover
--dry-run`` prints it. Planning never writes: with a sink whose ``recover`` and
``fetch_last_bundle`` are read-only, it has no side effect.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

from eosink.checkpoint import SparkCheckpoint
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Sink
from eosink.errors import ConfigurationError
from eosink.strategies import STRATEGY_NAMES, Strategy, resolve_strategy

__all__ = [
    "Action",
    "BatchPlan",
    "RecoveryPlan",
    "behind_earlier_sinks",
    "plan_recovery",
    "recorded_strategy",
    "sink_behind_spark",
]


class Action(enum.Enum):
    """What recovery does with one in-doubt batch."""

    ROLL_FORWARD = "roll-forward"
    ABORT = "abort"
    ABORT_LEFTOVERS = "abort-leftovers"
    NOTHING = "nothing"
    LOST = "lost"


@dataclass(frozen=True)
class BatchPlan:
    """The decision for one batch, and why.

    ``commit`` (with ``bundle``) is committed on roll-forward; ``abort`` is aborted after it
    (or instead of it). ``candidates`` is every committable recovery knows of for the batch:
    what a roll-forward the sink refuses as aborted gives up instead (Spark replays the batch).
    ``spark_committed`` is None when recovery did not need to ask Spark's commit log.
    """

    batch_id: int
    action: Action
    reason: str
    has_manifest: bool
    spark_committed: bool | None
    commit: tuple[Committable, ...] = ()
    bundle: Bundle | None = None
    abort: tuple[Committable, ...] = ()
    candidates: tuple[Committable, ...] = ()
    in_doubt: tuple[Committable, ...] = ()
    lost_batches: tuple[int, ...] = ()
    """For a LOST plan of committed work (the sink's bundles end before Spark's commit log does): every batch
    from this one on that Spark committed and neither the sink nor a manifest holds."""

    @property
    def rows(self) -> int:
        """Rows the batch's committed (or, if none, aborted) committables hold, as far as they say."""
        return sum(c.rows for c in (self.commit or self.abort))

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "batch_id": self.batch_id,
            "action": self.action.value,
            "reason": self.reason,
            "manifest": self.has_manifest,
            "spark_committed": self.spark_committed,
            "commit": [c.id for c in self.commit],
            "abort": [c.id for c in self.abort],
            "in_doubt": [c.id for c in self.in_doubt],
            "rows": self.rows,
        }
        if self.lost_batches:
            data["lost_batches"] = list(self.lost_batches)
        return data


@dataclass(frozen=True)
class RecoveryPlan:
    """Every batch recovery of ``app_id`` touches, in the order it touches them."""

    app_id: str
    strategy: str
    last_batch_id: int | None
    batches: tuple[BatchPlan, ...]

    @property
    def empty(self) -> bool:
        """True when recovery has nothing to commit, abort or remove."""
        return not self.batches

    @property
    def lost(self) -> tuple[BatchPlan, ...]:
        """The batches Spark committed whose work the sink no longer has (oldest first)."""
        return tuple(b for b in self.batches if b.action is Action.LOST)

    def count(self, action: Action) -> int:
        return sum(1 for b in self.batches if b.action is action)

    def to_json(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "strategy": self.strategy,
            "last_batch_id": self.last_batch_id,
            "batches": [b.to_json() for b in self.batches],
        }


def plan_recovery(sink: Sink[Any], app_id: str, strategy: Strategy, checkpoint: SparkCheckpoint) -> RecoveryPlan:
    """What :meth:`Coordinator.recover <eosink.coordinator.Coordinator.recover>` would do now, without doing it.

    A damaged manifest raises here, before anything is committed or aborted.
    """
    in_doubt: dict[int, list[Committable]] = {}
    if sink.capabilities.supports_recover:
        for c in sink.recover(app_id):
            in_doubt.setdefault(c.batch.batch_id, []).append(c)
    last = sink.fetch_last_bundle(app_id)
    manifests = checkpoint.manifest_batches(app_id)
    batch_ids = sorted(set(in_doubt) | set(manifests))
    plans = [_plan_batch(sink, app_id, b, in_doubt.get(b, []), last, strategy, checkpoint) for b in batch_ids]
    gap = sink_behind_spark(app_id, last, set(manifests), checkpoint)
    if gap is not None:  # a leftover of the lost batch (its participants' work) does not make it in doubt
        plans = [b for b in plans if b.batch_id != gap.batch_id] + [gap]
    plans.sort(key=lambda b: b.batch_id)
    return RecoveryPlan(app_id, strategy.name, None if last is None else last.batch.batch_id, tuple(plans))


def behind_earlier_sinks(plan: RecoveryPlan, held: int) -> RecoveryPlan:
    """``plan`` for a fan-out's sink whose earlier sinks hold batches up to ``held`` only (:mod:`eosink.fanout`):
    a batch it would roll forward beyond that, which Spark's commit log does not hold, is aborted instead
    (Spark replays it), so that this sink never shows a batch before the sinks ahead of it."""
    batches = tuple(
        replace(
            b,
            action=Action.ABORT,
            reason=(
                f"a sink before this one in the fan-out holds batches up to {held} only: committing batch "
                f"{b.batch_id} here first would break the fan-out's order; Spark replays it"
            ),
            commit=(),
            bundle=None,
            abort=b.candidates,
        )
        if b.action is Action.ROLL_FORWARD and b.spark_committed is not True and b.batch_id > held
        else b
        for b in plan.batches
    )
    return replace(plan, batches=batches)


def sink_behind_spark(
    app_id: str, last: Bundle | None, manifests: set[int], checkpoint: SparkCheckpoint
) -> BatchPlan | None:
    """The first batch Spark committed after the sink's newest bundle that no manifest covers, if any.

    Every strategy writes a batch's bundle before Spark's commit log holds it, or (2PC) keeps its
    manifest until it does: a commit-log entry beyond the newest bundle with no manifest means the
    sink lost committed work. Without any bundle, the checkpoint's record of the app_id's first commit
    tells a sink that lost them all from an app_id new to the checkpoint (a checkpoint older than the
    record cannot tell).
    """
    first = last.batch.batch_id + 1 if last is not None else checkpoint.read_first_commit(app_id)
    if first is None:
        return None
    spark_last = checkpoint.last_committed()
    if spark_last is None or spark_last < first:
        return None
    missing = tuple(b for b in range(first, spark_last + 1) if b not in manifests)
    if not missing:
        return None
    newest = f"is of batch {last.batch.batch_id}" if last is not None else "is gone (it holds none)"
    reason = (
        f"its newest bundle of app_id {app_id!r} {newest}, and no manifest covers batch {missing[0]}: the sink "
        "lost committed work"
    )
    return BatchPlan(missing[0], Action.LOST, reason, False, True, lost_batches=missing)


def _plan_batch(
    sink: Sink[Any],
    app_id: str,
    batch_id: int,
    in_doubt: list[Committable],
    last: Bundle | None,
    strategy: Strategy,
    checkpoint: SparkCheckpoint,
) -> BatchPlan:
    manifest = checkpoint.read_manifest(app_id, batch_id)
    done = last is not None and last.batch.batch_id >= batch_id
    candidates = {c.id: c for c in in_doubt}
    listed = tuple(in_doubt)
    if manifest is None or done:
        why = (
            f"batch {batch_id} is already committed (bundle present)"
            if done
            else f"batch {batch_id} has no manifest: it never reached its commit decision and Spark replays it"
        )
        if not candidates:
            return BatchPlan(
                batch_id, Action.NOTHING, f"{why}; only its manifest is removed", manifest is not None, None
            )
        work = tuple(candidates.values())
        return BatchPlan(
            batch_id,
            Action.ABORT_LEFTOVERS,
            f"{why}; its in-doubt attempts are aborted",
            manifest is not None,
            None,
            abort=work,
            candidates=work,
            in_doubt=listed,
        )
    committables, bundle = manifest.committables, manifest.bundle
    candidates.update({c.id: c for c in committables})  # sinks that cannot list in-doubt work
    spark_committed = checkpoint.is_committed(batch_id)
    every = tuple(candidates.values())
    if spark_committed and sink.commit_status(BatchRef(app_id, batch_id), committables) is CommitStatus.ABORTED:
        return BatchPlan(
            batch_id,
            Action.LOST,
            "commit_status answers aborted: its prepared work is gone",
            True,
            True,
            commit=committables,
            bundle=bundle,
            candidates=every,
            in_doubt=listed,
        )
    if strategy.rolls_forward(spark_committed):
        keep = {c.id for c in committables}
        if strategy.commits_after_spark:
            reason = f"Spark's commit log holds batch {batch_id}: it is never replayed, so it is committed"
        else:
            reason = f"the {strategy.name} strategy commits a batch once its manifest is written"
        return BatchPlan(
            batch_id,
            Action.ROLL_FORWARD,
            reason,
            True,
            spark_committed,
            commit=committables,
            bundle=bundle,
            abort=tuple(c for c in every if c.id not in keep),
            candidates=every,
            in_doubt=listed,
        )
    return BatchPlan(
        batch_id,
        Action.ABORT,
        f"Spark's commit log does not hold batch {batch_id}: Spark replays it",
        True,
        spark_committed,
        abort=every,
        candidates=every,
        in_doubt=listed,
    )


def recorded_strategy(checkpoint: SparkCheckpoint, app_id: str, given: str | None, last: str | None) -> Strategy:
    """The strategy the app_id runs with: its manifests say it; else its last bundle; else ``given``."""
    names: set[str] = set()
    for batch_id in checkpoint.manifest_batches(app_id):
        manifest = checkpoint.read_manifest(app_id, batch_id)
        if manifest is not None and manifest.bundle.strategy:
            names.add(manifest.bundle.strategy)
    recorded = sorted(names) or ([last] if last else [])
    if len(recorded) > 1:
        raise ConfigurationError(
            f"The manifests of app_id {app_id!r} name several strategies: {', '.join(recorded)}.",
            "Restore the checkpoint of this query; manifests of one query share one strategy.",
        )
    if given and recorded and recorded[0] != given:
        raise ConfigurationError(
            f"--strategy {given} contradicts the strategy {recorded[0]!r} app_id {app_id!r} writes with.",
            f"Drop --strategy (the recorded {recorded[0]!r} is used) or check --app-id and --checkpoint.",
        )
    name = given or (recorded[0] if recorded else None)
    if name is None:
        raise ConfigurationError(
            f"Cannot tell the strategy of app_id {app_id!r}: no manifest in the checkpoint names one and no "
            "batch was committed yet.",
            "Pass --strategy as given to eosink.foreach_batch (2pc, txid-check or idempotent).",
        )
    if name not in STRATEGY_NAMES:
        raise ConfigurationError(
            f"The strategy {name!r} recorded for app_id {app_id!r} is unknown to this eosink.",
            "Upgrade eosink to the version the query runs with, or pass --strategy.",
        )
    return resolve_strategy(name)
