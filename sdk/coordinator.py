"""The driver-side protocol that makes every batch land exactly once, engine-neutral.

Per batch (``process``): recover and fence once per process; commit any batch Spark has
committed meanwhile (backstop); refuse a new checkpoint meeting old batches; skip a replay
of a committed batch after comparing fingerprints; run the participants; abort work of
failed task attempts; record the batch's manifest (its commit decision) in the checkpoint;
then commit at once (txid-check, idempotent) or hand it to the watcher that commits when
Spark's commit log holds the batch (two-phase commit).

A commit whose reply is lost is resolved through ``commit_status`` within a bounded time,
never guessed and never blindly retried.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Protocol, TypeVar

import pyarrow as pa

from eosink import faults
from eosink._engine import Engine
from eosink._retry import retry_transient
from eosink._waiting import backoff_s
from eosink._watcher import CommitLogWatcher, Pending
from eosink.checkpoint import Manifest, SparkCheckpoint
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, Sink
from eosink.errors import (
    AmbiguousCommitError,
    CheckpointMismatchError,
    CommitAbortedError,
    CommittedWorkLostError,
    EosinkError,
    FencedError,
    NonDeterministicReplayError,
    PreparedWorkLostError,
    TransientError,
)
from eosink.faults import FaultPoint
from eosink.fingerprint import COUNT_ONLY
from eosink.keys import KEY_COLUMN
from eosink.participant import WritePlan
from eosink.recovery import Action, BatchPlan, RecoveryPlan, behind_earlier_sinks, plan_recovery, sink_behind_spark
from eosink.rewind import new_lease
from eosink.strategies import Strategy

__all__ = ["BatchInput", "CommitPolicy", "Coordinator", "Stats"]

_T = TypeVar("_T")
log = logging.getLogger("eosink")


class BatchInput(Protocol):
    """One batch's data as the coordinator sees it: it runs participants, never holds rows."""

    def write(self, plan: WritePlan) -> list[Committable]:
        """Run every participant of the batch; return the successful attempts' committables."""

    def fingerprint(self, version: int) -> Fingerprint:
        """Fingerprint the batch under row-hash ``version`` without writing it (replays of committed batches)."""


@dataclass(frozen=True)
class CommitPolicy:
    """Bounds for retrying transient failures and resolving ambiguous commits."""

    resolve_timeout_s: float = 120.0
    """How long a commit whose reply was lost is asked after (``commit_status``) before AmbiguousCommitError."""
    transient_timeout_s: float = 60.0
    """How long a driver-side step that fails with TransientError (a sink or the checkpoint's store down: fence,
    recover, commit, abort, fetch_last_bundle, checkpoint reads and writes) is retried before the query stops."""
    backoff_s: float = 0.2
    """The first pause between retries; doubled each time, up to ``max_backoff_s``."""
    max_backoff_s: float = 5.0
    watch_interval_s: float = 0.01
    """How often (2pc) a batch waiting for Spark's commit log looks for it."""


@dataclass
class Stats:
    """Counters of what the protocol did, per coordinator (per driver process)."""

    batches_committed: int = 0
    replays_skipped: int = 0
    ambiguous_commits: int = 0
    ambiguous_resolved_committed: int = 0
    ambiguous_recommitted: int = 0
    recovered_forward: int = 0
    recovered_aborted: int = 0
    orphans_aborted: int = 0
    commit_latency_ms: list[float] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        data["commit_latency_ms"] = [round(x, 3) for x in self.commit_latency_ms[-1000:]]
        return data


class Coordinator(Engine[BatchInput]):
    """Drives one (query, sink) pair, identified by ``app_id``, through the commit protocol."""

    watch_in_background: ClassVar[bool] = True
    """2PC: a thread commits each batch as soon as Spark's commit log holds it (see :mod:`eosink._watcher`)."""

    def __init__(
        self,
        sink: Sink[Any],
        app_id: str,
        strategy: Strategy,
        checkpoint: SparkCheckpoint,
        policy: CommitPolicy | None = None,
    ) -> None:
        self.sink = sink
        self.app_id = app_id
        self.strategy = strategy
        self.checkpoint = checkpoint
        self.policy = policy or CommitPolicy()
        checkpoint.retry_s = self.policy.transient_timeout_s
        self.stats = Stats()
        self.epoch: int | None = None
        self._checkpoint_id: str | None = None
        self._last: Bundle | None = None
        self._lock = threading.RLock()
        self._watcher: CommitLogWatcher[Pending] = CommitLogWatcher(
            checkpoint,
            self._commit_spark_committed,
            lock=self._lock,
            interval_s=max(self.policy.watch_interval_s, getattr(checkpoint, "poll_interval_s", 0.0)),
            name=f"eosink-commit-{app_id}",
            threaded=self.watch_in_background,
        )
        self._closed = False
        self._started = False
        self._fenced: FencedError | None = None
        self.last_recovery: RecoveryPlan | None = None
        """What the last ``recover`` decided (also what ``eosink recover --dry-run`` prints)."""
        self.member: str | None = None
        """The sink's name in a fan-out (:mod:`eosink.fanout`), for errors that must say which sink; None alone."""
        self.roll_forward_through: int | None = None
        """Set by a fan-out (:mod:`eosink.fanout`) before this sink's start: the newest batch every sink before
        this one holds (-1: none; None: no such limit, the default). An in-doubt batch after it that Spark has
        not committed is aborted at recovery instead of rolled forward (Spark replays it), so that no sink
        shows a batch before the sinks ahead of it."""

    # -- start: fence, then recover ------------------------------------------------------------

    @property
    def started(self) -> bool:
        """Whether this coordinator has fenced and recovered for the current run."""
        return self._started

    def start(self) -> None:
        """Fence older writers of the app_id and resolve in-doubt work; once, until a failure.

        A checkpoint that does not match the sink's bookkeeping is refused *before* fencing,
        so a query started on the wrong checkpoint never touches the right one's work.
        """
        if self._started:
            return
        self._retrying("setup", lambda: self.sink.setup(self.app_id))
        self._checkpoint_id = self.checkpoint.query_id()
        self._check_checkpoint(self._fetch_last_bundle(), self._checkpoint_id)
        try:
            self.epoch = self._retrying("fence", lambda: self.sink.fence(self.app_id))
            self.checkpoint.write_lease(self.app_id, new_lease(self.epoch))  # eosink recover --rewind checks it
            self.recover()
            self._last = self._fetch_last_bundle()
        except BaseException:
            self.reset()
            raise
        self._started = True
        log.info("eosink %s: writer epoch %d, last committed batch %s", self.app_id, self.epoch, self._last_id())

    def preflight(self, schema: pa.Schema | None) -> None:
        """What the first batch would find wrong, found before the stream starts and without a write: the sink
        reached with its credentials (``setup``), its target against the stream's ``schema`` and the strategy's
        needs (:meth:`Sink.preflight`), and this app_id against the checkpoint. Fences nothing: the first batch
        starts as it would have. Raises the eosink error."""
        self._retrying("setup", lambda: self.sink.setup(self.app_id))
        if schema is not None and self.strategy.generates_keys():
            schema = schema.append(pa.field(KEY_COLUMN, pa.string(), nullable=False))
        self.sink.preflight(
            schema,
            strategy=self.strategy.name,
            upsert_keys=self.strategy.upsert_keys(),
            transactional=self.strategy.transactional,
        )
        self._check_checkpoint(self._fetch_last_bundle(), self.checkpoint.query_id())

    def resume(self, epoch: int) -> None:
        """Go on as the writer that fenced in with ``epoch`` in another process, without fencing or recovering.

        For a batch whose steps run in different processes (``format("eosink")``: planning and commit
        run in separate Python workers): the sink still refuses the commit if a newer writer fenced since.
        """
        self._retrying("setup", lambda: self.sink.setup(self.app_id))
        self.epoch = epoch
        self._checkpoint_id = self.checkpoint.query_id()
        self._last = self._fetch_last_bundle()
        gap = sink_behind_spark(
            self.app_id, self._last, set(self.checkpoint.manifest_batches(self.app_id)), self.checkpoint
        )
        if gap is not None:  # the check recovery makes at start: the sink lost batches Spark committed
            raise self._lost(gap.batch_id, (), gap.reason, committed=gap.lost_batches, server=self._server())
        self._started = True

    @property
    def last_bundle(self) -> Bundle | None:
        """The newest batch the sink has committed for the app_id, as of start (and this writer's commits)."""
        return self._last

    def reset(self) -> None:
        """Forget per-run state after a failure: the next batch fences and recovers again
        (a query restarted in the same driver process is a new writer). The failed query no longer
        runs, so its lease goes too (a notebook's kernel outlives its query)."""
        if self.epoch is not None:
            self._release_lease()
        with self._lock:
            self._started = False
            self.epoch = None
            self._last = None
            self._watcher.error = None
            self._watcher.take()

    def recovery_plan(self) -> RecoveryPlan:
        """What :meth:`start` would recover now, without fencing or changing anything (``eosink recover --dry-run``).

        The same checkpoint check as :meth:`start` comes first: a checkpoint that does not match
        the sink's bookkeeping raises CheckpointMismatchError here too.
        """
        self._check_checkpoint(self._fetch_last_bundle(), self.checkpoint.query_id())
        return self._plan_recovery()

    def recover(self) -> RecoveryPlan:
        """Roll forward the in-doubt batches the strategy must keep, abort the rest; returns the plan executed.

        The decisions come from :func:`eosink.recovery.plan_recovery` (what ``eosink recover
        --dry-run`` prints); the plan is also kept as ``last_recovery``.
        """
        plan = self._plan_recovery()
        self.last_recovery = plan
        for n, batch_plan in enumerate(plan.batches):
            self._recover_batch(batch_plan)
            if n == 0:
                faults.hit(FaultPoint.F9, batch_plan.batch_id)
        return plan

    def _recover_batch(self, plan: BatchPlan) -> None:
        batch_id = plan.batch_id
        abort = list(plan.abort)
        if plan.action is Action.LOST:
            raise self._lost(batch_id, plan.commit, plan.reason, committed=plan.lost_batches, server=self._server())
        if plan.action is Action.ROLL_FORWARD:
            assert plan.bundle is not None
            log.warning("eosink %s: rolling forward in-doubt batch %d", self.app_id, batch_id)
            try:
                self._commit(
                    BatchRef(self.app_id, batch_id),
                    list(plan.commit),
                    replace(plan.bundle, epoch=self._epoch()),
                    spark_committed=bool(plan.spark_committed),
                )
                self.stats.recovered_forward += 1
            except CommitAbortedError:
                if plan.spark_committed:  # Spark will never replay it: this is loss, say so loudly
                    raise
                log.warning(
                    "eosink %s: in-doubt batch %d lost its prepared work; Spark replays it", self.app_id, batch_id
                )
                self.stats.recovered_aborted += 1
                abort = list(plan.candidates)
        elif plan.action is Action.ABORT:
            log.warning("eosink %s: aborting in-doubt batch %d (Spark will replay it)", self.app_id, batch_id)
            self.stats.recovered_aborted += 1
        if abort:
            self._retrying("abort", lambda: self.sink.abort(abort))
            self.stats.orphans_aborted += len(abort)
        self.checkpoint.delete_manifest(self.app_id, batch_id)

    # -- one batch -------------------------------------------------------------------------------

    def _process(self, batch_id: int, data: BatchInput) -> None:
        plan = self.begin_batch(batch_id)
        if plan is None:
            last = self._last
            assert last is not None
            version = last.fingerprint.version
            taken = Fingerprint(version=version) if version == COUNT_ONLY else data.fingerprint(version)
            self._check_replay(last, taken)
            return
        try:
            committables = data.write(plan)
        except CommittedWorkLostError as exc:  # a participant found the batch this one follows gone
            self.abort_batch(batch_id)
            if not exc.batches:
                raise
            raise self._lost(exc.batches[0], (), exc.problem, committed=exc.batches, server=exc.server) from None
        except BaseException:
            self.abort_batch(batch_id)
            raise
        self.finish_batch(batch_id, committables)

    def begin_batch(self, batch_id: int) -> WritePlan | None:
        """Fence and recover if not started, settle earlier batches; the plan participants write ``batch_id``
        with, or None when the sink has already committed it (a replay: fingerprint it, see :meth:`skip_replay`)."""
        self.start()
        if self._checkpoint_id is None:  # recover() ran before Spark created the checkpoint
            self._checkpoint_id = self.checkpoint.query_id()
        self._settle_pending(batch_id)
        faults.hit(FaultPoint.F1, batch_id)
        self._guard(batch_id)
        last = self._last
        if last is not None and last.batch.batch_id == batch_id:
            return None
        return WritePlan(
            sink=self.sink,
            batch=BatchRef(self.app_id, batch_id),
            epoch=self._epoch(),
            upsert_keys=self.strategy.upsert_keys(),
            transactional=self.strategy.transactional,
            generate_keys=self.strategy.generates_keys(),
            time_ms=self.checkpoint.batch_timestamp_ms(batch_id) or batch_id,
            strategy=self.strategy.name,
            begin_timeout_s=self.policy.transient_timeout_s,
            member=self.member,
            follows=self._last_id(),
            fingerprint_version=self.strategy.fingerprint_version(),
        )

    def abort_batch(self, batch_id: int) -> None:
        """The batch's write failed: abort every attempt of it the sink holds (best effort; a later start
        aborts what this misses). The write's own error is the one to report."""
        try:
            self._abort_orphans(BatchRef(self.app_id, batch_id), keep=set())
        except Exception as cleanup:
            log.warning("eosink %s: could not abort the attempts of batch %d: %s", self.app_id, batch_id, cleanup)

    def finish_batch(self, batch_id: int, committables: Sequence[Committable]) -> None:
        """Record the batch's manifest and commit it: now (txid-check, idempotent), or once Spark's commit log
        holds it (2pc). Attempts of the batch not in ``committables`` are aborted."""
        pending = self.record_batch(batch_id, committables)
        if self.strategy.commits_after_spark:
            self._watcher.add(batch_id, pending)
        else:
            self.commit_recorded(batch_id, pending)

    def record_batch(self, batch_id: int, committables: Sequence[Committable]) -> Pending:
        """Abort the batch's attempts not in ``committables`` and record its manifest (the commit decision);
        returns what :meth:`commit_recorded` commits."""
        batch = BatchRef(self.app_id, batch_id)
        kept = sorted(committables, key=lambda c: c.id)
        faults.hit(FaultPoint.F3, batch_id)
        keep = {c.id for c in kept}
        self._abort_orphans(batch, keep)
        fingerprint = sum((c.fingerprint for c in kept), Fingerprint())
        bundle = Bundle(
            batch,
            self._epoch(),
            fingerprint,
            tuple(sorted(keep)),
            self._checkpoint_id,
            self.strategy.name,
            follows=self._last_id(),
        )
        self.checkpoint.write_manifest(self.app_id, batch_id, Manifest(tuple(kept), bundle))
        faults.hit(FaultPoint.F4, batch_id)
        return kept, bundle

    def commit_recorded(self, batch_id: int, pending: Pending, *, spark_committed: bool = False) -> None:
        """Commit a recorded batch (a lost reply resolved through ``commit_status``) and remove its manifest."""
        committables, bundle = pending
        self._commit_and_finish(BatchRef(self.app_id, batch_id), committables, bundle, spark_committed=spark_committed)

    def _guard(self, batch_id: int) -> None:
        last = self._last
        if last is None:
            return
        self._check_checkpoint(last, self._checkpoint_id)
        if batch_id < last.batch.batch_id:
            raise CheckpointMismatchError(
                f"app_id {self.app_id!r} has batch {last.batch.batch_id} committed, but Spark asks to write "
                f"batch {batch_id}: the checkpoint is new or was rolled back (or, for a job, its batch_id is "
                "older than the newest one written).",
                "Restart from the original checkpoint, give a job a batch_id newer than the last one, or give "
                "this query or job a new app_id.",
            )

    def _check_checkpoint(self, last: Bundle | None, checkpoint_id: str | None) -> None:
        if last is None:
            return
        if last.checkpoint_id and checkpoint_id is None and not self.checkpoint.exists():
            raise CheckpointMismatchError(
                f"app_id {self.app_id!r} has batches up to {last.batch.batch_id} committed from Spark checkpoint "
                f"{last.checkpoint_id}, but the checkpoint location {self.checkpoint.location!r} is new.",
                "Point checkpoint_location at the query's original checkpoint, or give this query a new app_id.",
            )
        if last.checkpoint_id and checkpoint_id and last.checkpoint_id != checkpoint_id:
            raise CheckpointMismatchError(
                f"app_id {self.app_id!r} has batches up to {last.batch.batch_id} committed from another Spark "
                f"checkpoint (query id {last.checkpoint_id}); this query's checkpoint has id {checkpoint_id}.",
                "Restart from the original checkpoint, or give this query a new app_id.",
            )

    def skip_replay(self, batch_id: int, fingerprint: Fingerprint) -> None:
        """Skip the replay of committed batch ``batch_id`` whose rows fingerprint to ``fingerprint`` (taken in the
        bundle's version); a different fingerprint raises :class:`NonDeterministicReplayError`."""
        last = self._last
        if last is None or last.batch.batch_id != batch_id:
            raise CommitAbortedError(
                f"Batch {batch_id} of app_id {self.app_id!r} was planned as a replay of a committed batch, but the "
                f"sink's newest committed batch is {last.batch.batch_id if last else None}.",
                "Restart the query: the next start recovers and plans the batch again.",
            )
        self._check_replay(last, fingerprint)

    def _check_replay(self, last: Bundle, fingerprint: Fingerprint) -> None:
        """Skip the replay of ``last``'s batch, or raise NonDeterministicReplayError when its rows differ. A
        count-only bundle (two-phase commit's, committed after Spark's commit log) keeps what it committed
        without a comparison: Spark replays such a batch only when its checkpoint was rewound or lost."""
        if last.fingerprint.version != COUNT_ONLY and fingerprint != last.fingerprint:
            batch_id = last.batch.batch_id
            raise NonDeterministicReplayError(
                f"Batch {batch_id} of app_id {self.app_id!r} was replayed with different data "
                f"({fingerprint}) than was committed ({last.fingerprint}); the query is not deterministic.",
                "Make the query deterministic (no rand(), now(), unordered limits), or use the '2pc' strategy, "
                "which is exactly-once for non-deterministic queries.",
                batch_id=batch_id,
            )
        self.stats.replays_skipped += 1
        log.info("eosink %s: batch %d already committed, replay skipped", self.app_id, last.batch.batch_id)

    def _abort_orphans(self, batch: BatchRef, keep: set[str]) -> None:
        if not self.sink.capabilities.supports_recover:
            return
        found = self._retrying("recover", lambda: self.sink.recover(self.app_id))
        orphans = [c for c in found if c.batch == batch and c.id not in keep]
        if orphans:
            self._retrying("abort", lambda: self.sink.abort(orphans))
            self.stats.orphans_aborted += len(orphans)
            log.info("eosink %s: aborted %d leftover attempt(s) of batch %d", self.app_id, len(orphans), batch.batch_id)

    def _retrying(self, what: str, call: Callable[[], _T]) -> _T:
        """``call()``, retried with backoff on :class:`TransientError` (a sink restarting, a dropped connection)
        for up to ``policy.transient_timeout_s``; each retry is logged (see :mod:`eosink._retry`)."""
        p = self.policy
        return retry_transient(
            f"{what} of {self.app_id!r}",
            call,
            timeout_s=p.transient_timeout_s,
            backoff=p.backoff_s,
            max_backoff=p.max_backoff_s,
        )

    def _fetch_last_bundle(self) -> Bundle | None:
        return self._retrying("fetch_last_bundle", lambda: self.sink.fetch_last_bundle(self.app_id))

    def _plan_recovery(self) -> RecoveryPlan:
        """The recovery plan (read-only, so a failure retries the whole planning); in a fan-out, capped at what
        the sinks before this one hold (``roll_forward_through``)."""
        plan = self._retrying(
            "recovery planning", lambda: plan_recovery(self.sink, self.app_id, self.strategy, self.checkpoint)
        )
        held = self.roll_forward_through
        return plan if held is None else behind_earlier_sinks(plan, held)

    # -- committing --------------------------------------------------------------------------------

    def _commit_and_finish(
        self, batch: BatchRef, committables: list[Committable], bundle: Bundle, *, spark_committed: bool = False
    ) -> None:
        started = time.monotonic()
        self._commit(batch, committables, bundle, spark_committed=spark_committed)
        self.stats.commit_latency_ms.append((time.monotonic() - started) * 1000)
        faults.hit(FaultPoint.F8, batch.batch_id)
        self.stats.batches_committed += 1
        if self._last is None:  # the sink held no batch of the app_id: from now on losing them all is told apart
            self.checkpoint.write_first_commit(self.app_id, batch.batch_id)
        self._last = bundle
        self.checkpoint.delete_manifest(self.app_id, batch.batch_id)

    def _commit(
        self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle, *, spark_committed: bool = False
    ) -> None:
        """Commit, retrying transient failures and resolving lost replies through commit_status.

        ``spark_committed``: Spark's commit log holds the batch, so Spark never replays it; work the
        sink no longer has is then lost, and raised as :class:`PreparedWorkLostError`.
        """
        try:
            self._commit_resolved(batch, committables, bundle)
        except CommittedWorkLostError as exc:  # raised by the sink, which knows nothing of the checkpoint
            raise self._lost(exc.batch_id or 0, (), exc.problem, committed=exc.batches, server=exc.server) from None
        except CommitAbortedError as exc:
            if spark_committed and not isinstance(exc, PreparedWorkLostError):
                raise self._lost(batch.batch_id, committables, exc.problem) from None
            raise

    def _lost(
        self,
        batch_id: int,
        committables: Sequence[Committable],
        why: str,
        *,
        committed: Sequence[int] = (),
        server: str | None = None,
    ) -> PreparedWorkLostError:
        """The loud stop when Spark's commit log holds ``batch_id`` and the sink no longer has its work.

        ``committed``: the sink lost these batches after committing them (CommittedWorkLostError, which
        ``server`` explains); else the prepared work of ``batch_id`` is gone (PreparedWorkLostError).
        """
        ids = tuple(c.id for c in committables)
        shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
        sink = "the sink" if self.member is None else f"the fan-out's sink {self.member!r}"
        fix = (
            f"Stop the query. Rewind the checkpoint to batch {batch_id}: eosink recover --rewind --sink <sink options> "
            f"--checkpoint {self.checkpoint.location} --app-id {self.app_id} prints the plan, and with --yes removes "
            f"Spark's commit-log entries from batch {batch_id} on (offsets and state stay). The next start runs batch "
            f"{batch_id} again from the same offsets, and it lands once"
        )
        if committed:
            named = _batch_list(committed)
            return CommittedWorkLostError(
                f"Batch{'es' if len(committed) > 1 else ''} {named} of app_id {self.app_id!r} "
                f"{'are' if len(committed) > 1 else 'is'} lost: Spark's commit log holds "
                f"{'them' if len(committed) > 1 else 'it'}, so Spark will never run "
                f"{'them' if len(committed) > 1 else 'it'} again, but {sink} no longer has "
                f"{'them' if len(committed) > 1 else 'it'} although {'they were' if len(committed) > 1 else 'it was'} "
                f"committed ({why.rstrip('.')}).",
                f"{fix}, as long as the source still holds the batches' input (a Kafka topic's retention, files not "
                "yet deleted). See docs/operations.md, lost committed batches.",
                app_id=self.app_id,
                batch_id=batch_id,
                sink=self.member,
                batches=tuple(committed),
                server=server,
            )
        return PreparedWorkLostError(
            f"Batch {batch_id} of app_id {self.app_id!r} is lost: Spark's commit log holds it, so Spark will never run "
            f"it again, but {sink} no longer has its work ({why.rstrip('.')})"
            + (f"; committables {shown}" if ids else "")
            + f". Likely cause: {self.sink.lost_work_hint}",
            f"{fix}. See docs/operations.md, lost prepared work.",
            app_id=self.app_id,
            batch_id=batch_id,
            committables=ids,
            sink=self.member,
        )

    def _commit_resolved(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        policy = self.policy
        deadline: float | None = None
        delay = policy.backoff_s
        transient = 0
        transient_since: float | None = None
        recommits = 0
        need_commit = True
        while True:
            if need_commit:
                try:
                    self.sink.commit(batch, committables, bundle)
                    faults.hit(FaultPoint.F7, batch.batch_id)
                    return
                except AmbiguousCommitError as exc:
                    self.stats.ambiguous_commits += 1
                    log.warning(
                        "eosink %s: commit of batch %d is ambiguous (%s); asking the sink",
                        self.app_id,
                        batch.batch_id,
                        exc.problem,
                    )
                    deadline = deadline or time.monotonic() + policy.resolve_timeout_s
                except TransientError as exc:
                    transient += 1
                    now = time.monotonic()
                    transient_since = transient_since or now
                    if now - transient_since >= policy.transient_timeout_s:
                        raise
                    pause = backoff_s(transient, policy.backoff_s, policy.max_backoff_s)
                    log.warning(
                        "eosink %s: commit of batch %d failed (%s); retry %d in %.1f s (stops %.0f s after the "
                        "first failure)",
                        self.app_id,
                        batch.batch_id,
                        exc.problem,
                        transient,
                        pause,
                        policy.transient_timeout_s,
                    )
                    time.sleep(pause)
                    continue
            try:
                status = self.sink.commit_status(batch, committables)
            except TransientError:
                status = CommitStatus.IN_PROGRESS
            if status is CommitStatus.COMMITTED:
                self.stats.ambiguous_resolved_committed += 1
                return
            if status is CommitStatus.ABORTED:
                raise CommitAbortedError(
                    f"Batch {batch.batch_id} of app_id {self.app_id!r} was aborted by the sink while its commit "
                    "was in doubt.",
                    "Restart the query from its checkpoint; an uncommitted batch is replayed.",
                )
            need_commit = status is CommitStatus.PREPARED
            if need_commit:
                self.stats.ambiguous_recommitted += 1
                recommits += 1
            if deadline is not None and time.monotonic() > deadline:
                raise AmbiguousCommitError(
                    f"The commit of batch {batch.batch_id} of app_id {self.app_id!r} is still in doubt after "
                    f"{policy.resolve_timeout_s:g} s.",
                    "Check the sink's health, then restart the query: recovery resolves the batch.",
                )
            if not need_commit or recommits > 1:  # the first re-commit of a known-uncommitted batch is at once
                time.sleep(delay)
                delay = min(delay * 2, policy.max_backoff_s)

    # -- two-phase commit: commit when Spark's commit log holds the batch ---------------------------

    def commit_ready(self) -> int:
        """Commit every pending batch that Spark's commit log holds; returns how many."""
        return self._watcher.commit_ready()

    def _commit_spark_committed(self, batch_id: int, pending: Pending) -> None:
        self.commit_recorded(batch_id, pending, spark_committed=True)

    def _settle_pending(self, batch_id: int) -> None:
        """Backstop before a batch writes anything: commit what Spark committed, drop replays."""
        with self._lock:
            self.commit_ready()
            for pending_id, (committables, _) in sorted(self._watcher.take().items()):
                self.drop_pending(pending_id, committables, batch_id)

    def drop_pending(self, pending_id: int, committables: Sequence[Committable], running: int) -> None:
        """Spark runs batch ``running`` while recorded batch ``pending_id`` waits uncommitted by Spark: abort it
        (Spark replays it as ``running``), or raise when Spark has moved past it without committing it."""
        if pending_id < running:
            raise CommitAbortedError(
                f"Batch {pending_id} was never committed by Spark, yet Spark runs batch {running}: "
                f"the commit log under {self.checkpoint.location!r} does not hold batch {pending_id}.",
                "If that location is not the query's checkpointLocation, give eosink the query's own "
                "(writer.start(df.writeStream...) sets both); otherwise restart the query from its "
                "checkpoint, and recovery resolves the batch.",
            )
        self._retrying("abort", functools.partial(self.sink.abort, list(committables)))  # Spark replays it here
        self.checkpoint.delete_manifest(self.app_id, pending_id)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait (bounded) until every pending batch is committed; True if none is left."""
        return self._watcher.flush(timeout_s)

    def close(self) -> None:
        """Commit what Spark has committed, stop the watcher, release the sink."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._watcher.close()
        try:
            if self.epoch is not None and self._watcher.error is None:
                self.commit_ready()
        finally:
            self.sink.close()
            if self.epoch is not None:
                self._release_lease()
        if len(self._watcher):
            log.warning(
                "eosink %s: batches %s stay in doubt until the next start", self.app_id, self._watcher.batch_ids()
            )
        self._raise_lost_work()

    def finish_spark_committed(self) -> bool:
        """Commit the batches Spark's commit log holds but the sink does not, without fencing (2PC); False when
        it left some to a newer writer (fenced), so that a fan-out commits none in the sinks after this one.

        Called by :meth:`eosink.spark.BatchWriter.close` for a writer that processed no batch:
        a query restarted after a crash between Spark's commit log and the sink's commit, that
        finds no new input (``availableNow``), never calls ``foreachBatch``, so start-time
        recovery never runs. Only the outcome Spark already
        decided is carried out, under the manifest's own epoch: a newer writer fences it
        (nothing is done), and nothing is aborted here. First, under every strategy, the check
        recovery makes at start: a batch Spark committed whose work the sink no longer has raises
        :class:`PreparedWorkLostError`.
        """
        if self._fenced is not None:
            return False
        if self.epoch is not None:
            return True  # this run started: close() commits what Spark committed
        lost = self.recovery_plan().lost  # read-only: the same check as recovery at start
        if lost:
            raise self._lost(lost[0].batch_id, lost[0].commit, lost[0].reason)
        if not self.strategy.commits_after_spark:
            return True
        last = self._fetch_last_bundle()
        for batch_id in sorted(self.checkpoint.manifest_batches(self.app_id)):
            if (last is not None and last.batch.batch_id >= batch_id) or not self.checkpoint.is_committed(batch_id):
                continue
            manifest = self.checkpoint.read_manifest(self.app_id, batch_id)
            if manifest is None:
                continue
            try:
                self._commit(
                    BatchRef(self.app_id, batch_id), manifest.committables, manifest.bundle, spark_committed=True
                )
            except FencedError:
                log.info("eosink %s: a newer writer owns batch %d; leaving it to that writer", self.app_id, batch_id)
                return False
            self.stats.recovered_forward += 1
            self.checkpoint.delete_manifest(self.app_id, batch_id)
            log.warning("eosink %s: committed batch %d, which Spark had committed, at close", self.app_id, batch_id)
        return True

    # -- helpers -------------------------------------------------------------------------------------

    def _release_lease(self) -> None:
        """Remove this process's lease (never a newer driver's)."""
        try:
            lease = self.checkpoint.read_lease(self.app_id)
            if lease is not None and lease.get("pid") == os.getpid() and lease.get("epoch") == self.epoch:
                self.checkpoint.delete_lease(self.app_id)
        except EosinkError as exc:  # a checkpoint unreachable at close: a stale lease is only a refusal to rewind
            log.warning("eosink %s: could not remove the driver's lease: %s", self.app_id, exc.problem)

    def _server(self) -> str | None:
        """What the sink says of its server now, for a message about lost committed batches (None: nothing)."""
        try:
            return self.sink.server_identity()
        except EosinkError:
            return None

    def _epoch(self) -> int:
        assert self.epoch is not None, "start() not called"
        return self.epoch

    def _last_id(self) -> int | None:
        return None if self._last is None else self._last.batch.batch_id


def _batch_list(batches: Sequence[int]) -> str:
    """``3``, ``3 and 4``, ``3 to 7`` (a contiguous run) or ``3, 5 and 9``."""
    ids = sorted(batches)
    if len(ids) == 1:
        return str(ids[0])
    if ids == list(range(ids[0], ids[-1] + 1)) and len(ids) > 2:
        return f"{ids[0]} to {ids[-1]}"
    return ", ".join(str(b) for b in ids[:-1]) + f" and {ids[-1]}"
