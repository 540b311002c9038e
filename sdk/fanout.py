"""One batch into several sinks, exactly once in each, in a stated order: the fan-out's driver side.

A fan-out is one query whose every micro-batch lands in several sinks (rows in PostgreSQL and an
event per row in Kafka). Data passes once: each participant writes its share into every sink
(:func:`eosink.participant.run_participants`) and the driver collects only committables. Each
sink keeps what it has alone: its own app_id (``<app_id>.<name>``), bundle, writer epoch, fencing,
manifests and recovery, each run by its own :class:`~eosink.coordinator.Coordinator`. The fan-out
adds the order, the one thing no sink can keep by itself::

    every sink prepares and records its manifest        (before any sink commits)
    2pc:        Spark's commit log holds the batch       (the single decision)
    then, per batch, in the order given:  commit sink 1, [F14], commit sink 2, ...

The promise: a sink never shows a batch before every sink ahead of it holds that batch.

* **Commits** go in the given order, batch by batch; a sink whose commit fails stops the ones after
  it (they keep the batch recorded, in doubt).
* **Recovery** runs sink by sink in the same order. 2pc rolls each sink forward through every batch
  Spark committed, so a crash between two sinks' commits ends with the rest committed at restart;
  a sink that lost such a batch's work stops the query with
  :class:`~eosink.errors.PreparedWorkLostError` naming it (``.sink``), and the sinks after it stay as
  they are. Inline strategies roll a sink forward only through batches every sink before it holds;
  a later batch is aborted there and Spark's replay writes it.
* **Replays** write only into the sinks that lack the batch. Each sink that holds it compares its
  bundle's fingerprint with the replay's before anything is committed
  (:class:`~eosink.errors.NonDeterministicReplayError` on a difference).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from eosink import faults
from eosink._engine import Engine
from eosink._watcher import CommitLogWatcher, Pending
from eosink.checkpoint import SparkCheckpoint
from eosink.contract import Committable, Fingerprint, Sink
from eosink.coordinator import CommitPolicy, Coordinator, Stats
from eosink.errors import ConfigurationError
from eosink.faults import FaultPoint
from eosink.fingerprint import COUNT_ONLY
from eosink.participant import WritePlan
from eosink.recovery import Action, RecoveryPlan
from eosink.strategies import Strategy

__all__ = [
    "FanOut",
    "FanOutInput",
    "check_order",
    "member_app_id",
    "name_sinks",
    "repeated",
    "replay_fingerprints",
    "valid_name",
]

log = logging.getLogger("eosink")

Recorded = list[tuple[Coordinator, Pending]]
"""One batch as recorded in each sink that writes it, in commit order."""


class FanOutInput(Protocol):
    """One batch's data as a fan-out sees it: one pass writes every sink's share, never holding rows."""

    def write_many(self, plans: Sequence[WritePlan]) -> list[list[Committable]]:
        """Run every participant once, each writing into the sink of every plan; per plan, its committables."""

    def fingerprint(self, version: int) -> Fingerprint:
        """Fingerprint the batch under row-hash ``version`` without writing it."""


def member_app_id(app_id: str, name: str) -> str:
    """The app_id a fan-out's sink ``name`` keeps its bundles, epochs and manifests under."""
    return f"{app_id}.{name}"


def name_sinks(sinks: Sequence[Sink[Any]] | Mapping[str, Sink[Any]]) -> list[tuple[str, Sink[Any]]]:
    """The fan-out's sinks with their names, in commit order: a mapping's keys, else each connector's name
    (``postgres`` for ``eosink.connectors.postgres``); two sinks of one connector need a mapping."""
    named = list(sinks.items()) if isinstance(sinks, Mapping) else [(_connector_name(s), s) for s in sinks]
    if len(named) < 2:
        raise ConfigurationError(
            f"A fan-out needs at least two sinks, got {len(named)}.",
            "Pass one sink object for a query with one sink, or a list (or {name: sink} mapping) of several.",
        )
    for name, sink in named:
        if not isinstance(sink, Sink):
            raise ConfigurationError(f"{sink!r} is not an eosink Sink.", "Pass a connector's sink object.")
        if not isinstance(name, str) or not valid_name(name):
            raise ConfigurationError(
                f"Fan-out sink name {name!r} is not a name of ASCII letters, digits, '-' and '_'.",
                "Name the sinks with a mapping, e.g. {'ledger': PostgresSink(...), 'events': KafkaSink(...)}.",
            )
    twice = repeated([n for n, _ in named])
    if twice:
        raise ConfigurationError(
            f"The fan-out has more than one sink named {', '.join(map(repr, twice))}.",
            "Name each sink with a mapping, e.g. {'orders': PostgresSink(...), 'audit': PostgresSink(...)}; the "
            "names are part of each sink's app_id, so keep them for good.",
        )
    return named


def check_order(checkpoint: SparkCheckpoint, app_id: str, names: Sequence[str], *, record: bool) -> None:
    """Refuse sinks named or ordered otherwise than fan-out ``app_id``'s first start on this checkpoint recorded
    (the order is the commit order, the names the sinks' app_ids); with ``record``, record them the first time."""
    recorded = checkpoint.read_fanout(app_id)
    if recorded is None:
        if record and checkpoint.exists():
            checkpoint.write_fanout(app_id, list(names))
        return
    if list(names) != recorded:
        raise ConfigurationError(
            f"The fan-out {app_id!r} writes into sinks {recorded} in this order (its checkpoint recorded them at "
            f"its first start), not {list(names)}: the order is the commit order, and each name is its sink's "
            "app_id.",
            f"Give the sinks as {recorded}, in that order; to change the set of sinks, start a new query (a new "
            "app_id and checkpoint).",
        )


def repeated(names: Sequence[str]) -> list[str]:
    """The names given more than once, sorted (a fan-out's sinks need one name each)."""
    return sorted({n for n in names if names.count(n) > 1})


def valid_name(name: str) -> bool:
    """Whether ``name`` can name a fan-out's sink: ASCII letters, digits, ``-`` and ``_`` (it ends its app_id)."""
    return bool(name) and name.isascii() and all(ch.isalnum() or ch in "-_" for ch in name)


def _connector_name(sink: Sink[Any]) -> str:
    parts = type(sink).__module__.split(".")
    if len(parts) > 2 and parts[:2] == ["eosink", "connectors"]:
        return parts[2]
    return type(sink).__name__.lower().removesuffix("sink") or "sink"


class FanOut(Engine[FanOutInput]):
    """Drives one query's sinks through the commit protocol in order (see the module docstring).

    The same surface as :class:`~eosink.coordinator.Coordinator` (``start``, ``process``,
    ``commit_ready``, ``flush``, ``close``, ``finish_spark_committed``), over a :class:`FanOutInput`.
    """

    def __init__(
        self,
        sinks: Sequence[tuple[str, Sink[Any]]],
        app_id: str,
        strategy: Strategy,
        checkpoint: SparkCheckpoint,
        policy: CommitPolicy | None = None,
        *,
        threaded: bool = True,
    ) -> None:
        self.app_id = app_id
        self.strategy = strategy
        self.checkpoint = checkpoint
        self.policy = policy or CommitPolicy()
        self.names = [name for name, _ in sinks]
        self.coordinators = [self._member(name, sink) for name, sink in sinks]
        self._lock = threading.RLock()
        self._watcher: CommitLogWatcher[Recorded] = CommitLogWatcher(
            checkpoint,
            lambda batch_id, recorded: self._commit_in_order(batch_id, recorded, spark_committed=True),
            lock=self._lock,
            interval_s=max(self.policy.watch_interval_s, getattr(checkpoint, "poll_interval_s", 0.0)),
            name=f"eosink-commit-{app_id}",
            threaded=threaded,
        )
        self._closed = False
        self._order_settled = False  # the sinks' order checked against (or recorded in) an existing checkpoint

    def _member(self, name: str, sink: Sink[Any]) -> Coordinator:
        coordinator = _Member(sink, member_app_id(self.app_id, name), self.strategy, self.checkpoint, self.policy)
        coordinator.member = name
        return coordinator

    @property
    def started(self) -> bool:
        """Whether every sink has fenced and recovered for the current run."""
        return all(c.started for c in self.coordinators)

    @property
    def stats(self) -> dict[str, Stats]:
        """Each sink's counters, by name."""
        return {name: c.stats for name, c in zip(self.names, self.coordinators, strict=True)}

    def start(self) -> None:
        """Fence and recover each sink in order; a sink rolls forward only what the sinks before it hold
        (2pc: everything Spark committed, which they hold once their own recovery succeeded)."""
        with self._lock:
            self._settle_order()
            held: int | None = None
            for coordinator in self.coordinators:
                if not coordinator.started:
                    coordinator.roll_forward_through = held
                    coordinator.start()
                last = coordinator.last_bundle
                newest = -1 if last is None else last.batch.batch_id
                held = newest if held is None else min(held, newest)

    def preflight(self, schema: pa.Schema | None) -> None:
        """Each sink's :meth:`Coordinator.preflight`, in order, after the sinks' order is checked against the
        checkpoint's record (nothing recorded: the first batch records it)."""
        check_order(self.checkpoint, self.app_id, self.names, record=False)
        for coordinator in self.coordinators:
            coordinator.preflight(schema)

    def _settle_order(self) -> None:
        """Check the sinks' order against the checkpoint's record, or record it, once the checkpoint exists (a
        ``recover()`` before the query's first start finds none yet: the first batch records it then)."""
        if not self._order_settled:
            check_order(self.checkpoint, self.app_id, self.names, record=True)
            self._order_settled = self.checkpoint.exists()

    def recovery_plans(self) -> list[tuple[str, RecoveryPlan]]:
        """What :meth:`start` would recover in each sink, in order, changing nothing (``eosink recover --dry-run``):
        each sink's plan capped at what the sinks before it would hold after theirs."""
        plans: list[tuple[str, RecoveryPlan]] = []
        held: int | None = None
        for name, coordinator in zip(self.names, self.coordinators, strict=True):
            coordinator.roll_forward_through = held
            plan = coordinator.recovery_plan()
            plans.append((name, plan))
            kept = [b.batch_id for b in plan.batches if b.action is Action.ROLL_FORWARD]
            newest = max([-1 if plan.last_batch_id is None else plan.last_batch_id, *kept])
            held = newest if held is None else min(held, newest)
        return plans

    def recover(self) -> None:
        """Fence older writers and resolve in-doubt batches of every sink now, before the query starts."""
        self.start()

    # -- one batch -------------------------------------------------------------------------------

    def _process(self, batch_id: int, data: FanOutInput) -> None:
        plans = self.begin_batch(batch_id)
        writing = [(c, plan) for c, plan in zip(self.coordinators, plans, strict=True) if plan is not None]
        holding = [c for c, plan in zip(self.coordinators, plans, strict=True) if plan is None]
        try:
            written = data.write_many([plan for _, plan in writing]) if writing else []
            self._check_replays(holding, written, data)
        except BaseException:
            for coordinator, _ in writing:
                coordinator.abort_batch(batch_id)
            raise
        self.finish_written(batch_id, [(c, made) for (c, _), made in zip(writing, written, strict=True)])

    def begin_batch(self, batch_id: int) -> list[WritePlan | None]:
        """Start (fence, recover in order) if not started and settle earlier batches; per sink in order, the plan
        its participants write ``batch_id`` with, or None where the sink holds the batch (a replay, to be
        fingerprinted in its bundle's row-hash version)."""
        with self._lock:
            self.start()
            self._settle_pending(batch_id)
            return [c.begin_batch(batch_id) for c in self.coordinators]

    def finish_written(self, batch_id: int, written: Sequence[tuple[Coordinator, Sequence[Committable]]]) -> None:
        """Record the batch's manifest in every sink that wrote it, then commit them in order: now (txid-check,
        idempotent) or once Spark's commit log holds the batch (2pc)."""
        recorded = [(c, c.record_batch(batch_id, made)) for c, made in written]
        if self.strategy.commits_after_spark:
            self._watcher.add(batch_id, recorded)
        else:
            self._commit_in_order(batch_id, recorded, spark_committed=False)

    def _check_replays(
        self, holding: Sequence[Coordinator], written: Sequence[list[Committable]], data: FanOutInput
    ) -> None:
        """Each sink that already holds the batch compares the replay's fingerprint with its bundle's; the
        fingerprint comes from the write pass when it took one in the same row-hash version."""
        bundles = [c.last_bundle for c in holding]
        assert all(b is not None for b in bundles)  # begin_batch returned no plan: each sink holds this batch
        versions = [b.fingerprint.version if b is not None else None for b in bundles]
        passed = sum((c.fingerprint for c in written[0]), Fingerprint()) if written else None
        for coordinator, bundle, taken in zip(
            holding, bundles, replay_fingerprints(versions, passed, data.fingerprint), strict=True
        ):
            assert bundle is not None and taken is not None
            coordinator.skip_replay(bundle.batch.batch_id, taken)

    def _commit_in_order(self, batch_id: int, recorded: Recorded, *, spark_committed: bool) -> None:
        for n, (coordinator, pending) in enumerate(recorded):
            if n:
                faults.hit(FaultPoint.F14, batch_id)
            coordinator.commit_recorded(batch_id, pending, spark_committed=spark_committed)

    def _settle_pending(self, batch_id: int) -> None:
        """Backstop before a batch writes anything: commit what Spark committed, drop replays (every sink)."""
        self._watcher.commit_ready()
        for pending_id, recorded in sorted(self._watcher.take().items()):
            for coordinator, (committables, _) in recorded:
                coordinator.drop_pending(pending_id, committables, batch_id)

    def reset(self) -> None:
        """Forget per-run state after a failure: the next batch fences and recovers every sink again."""
        for coordinator in self.coordinators:
            coordinator.reset()
        with self._lock:
            self._watcher.error = None
            self._watcher.take()

    # -- two-phase commit and the end of a run -------------------------------------------------------

    def commit_ready(self) -> int:
        """Commit, in order in every sink, each pending batch Spark's commit log holds; returns how many batches."""
        return self._watcher.commit_ready()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait (bounded) until every pending batch is committed in every sink; True if none is left."""
        return self._watcher.flush(timeout_s)

    def finish_spark_committed(self) -> None:
        """For a run that processed no batch: each sink in order commits the batches Spark committed that it
        lacks (2pc), after the check for lost work (see ``Coordinator.finish_spark_committed``). Nothing after a
        fenced writer, or after a sink that left a batch to a newer writer: the sinks after it would show the
        batch first."""
        if self._fenced is not None:
            return
        self._settle_order()  # a run with no batch never started: sinks given in another order commit nothing
        for name, coordinator in zip(self.names, self.coordinators, strict=True):
            if not coordinator.finish_spark_committed():
                log.info(
                    "eosink %s: sink %r is a newer writer's now; the sinks after it are left to it", self.app_id, name
                )
                return

    def close(self) -> None:
        """Commit what Spark has committed (in order), stop the watcher, close every sink."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._watcher.close()
        try:
            if self.started and self._watcher.error is None:
                self.commit_ready()
        finally:
            for coordinator in self.coordinators:
                coordinator.close()
        if len(self._watcher):
            log.warning(
                "eosink %s: batches %s stay in doubt in its sinks until the next start",
                self.app_id,
                self._watcher.batch_ids(),
            )
        self._raise_lost_work()


class _Member(Coordinator):
    """A fan-out's sink: the fan-out's watcher commits its 2pc batches, so it starts no thread of its own."""

    watch_in_background = False


def replay_fingerprints(
    versions: Sequence[int | None], written: Fingerprint | None, take: Callable[[int], Fingerprint]
) -> list[Fingerprint | None]:
    """Per sink, the replay's fingerprint in the row-hash version of the bundle it holds (None: the sink lacks
    the batch and writes it).

    ``written`` is what the pass that wrote the other sinks fingerprinted (None if no sink wrote): reused
    where its version matches, so one pass serves both; any other version is taken once, by ``take``.
    """
    taken: dict[int, Fingerprint] = {} if written is None else {written.version: written}
    out: list[Fingerprint | None] = []
    for version in versions:
        if version == COUNT_ONLY:  # a count-only bundle is never compared (Coordinator._check_replay)
            taken.setdefault(version, Fingerprint(version=COUNT_ONLY))
        if version is not None and version not in taken:
            taken[version] = take(version)
        out.append(None if version is None else taken[version])
    return out
