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
* ``nothing``: only a stale manifest of a committed batch is removed.

:meth:`eosink.coordinator.Coordinator.recover` executes such a plan; ``eosink recover
--dry-run`` prints it. Planning never writes: with a sink whose ``recover`` and
``fetch_last_bundle`` are read-only, it has no side effect.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from eosink.checkpoint import SparkCheckpoint
from eosink.contract import Bundle, Committable, Sink
from eosink.strategies import Strategy

__all__ = ["Action", "BatchPlan", "RecoveryPlan", "plan_recovery"]


class Action(enum.Enum):
    """What recovery does with one in-doubt batch."""

    ROLL_FORWARD = "roll-forward"
    ABORT = "abort"
    ABORT_LEFTOVERS = "abort-leftovers"
    NOTHING = "nothing"


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

    @property
    def rows(self) -> int:
        """Rows the batch's committed (or, if none, aborted) committables hold, as far as they say."""
        return sum(c.rows for c in (self.commit or self.abort))

    def to_json(self) -> dict[str, Any]:
        return {
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
    batch_ids = sorted(set(in_doubt) | set(checkpoint.manifest_batches(app_id)))
    plans = tuple(_plan_batch(app_id, b, in_doubt.get(b, []), last, strategy, checkpoint) for b in batch_ids)
    return RecoveryPlan(app_id, strategy.name, None if last is None else last.batch.batch_id, plans)


def _plan_batch(
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
