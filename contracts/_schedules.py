"""The suite's property test: random schedules of contract operations against a model.

The schedules are drawn *derandomized*: the same suite gives the same schedules on every run,
so a sink gets the same verdict in CI as on its author's machine. Three schedules are always
run first (:data:`ALWAYS`), whatever the example count: two app_ids interleaved, a second
attempt alive at commit, and batch ids and epochs past 10.
"""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Sink
from eosink.contracts._steps import bundle_for, canon, prepare, rows_for
from eosink.contracts.harness import Namespace, SinkHarness
from eosink.errors import FencedError

__all__ = ["ALWAYS", "DEFAULT_EXAMPLES", "run_schedules"]

APPS = ("app_a", "app_b")
BATCH_IDS = (0, 1, 2, 9, 10, 11)  # across a digit boundary: text order would put 10 before 9
DEFAULT_EXAMPLES = 60
"""Random schedules per run (besides :data:`ALWAYS`); ``--eosink-contract-examples=N`` changes it."""

Op = tuple[str, int, int, int]  # (kind, app index, batch id, shares)
KINDS = ["prepare", "prepare", "commit", "commit", "abort", "crash", "straggle", "zombie"]

OPS = st.lists(
    st.tuples(
        st.sampled_from(KINDS),
        st.integers(0, len(APPS) - 1),
        st.sampled_from(BATCH_IDS),
        st.integers(1, 2),
    ),
    min_size=1,
    max_size=30,
)
WARMUP = st.integers(0, 11)  # extra fences of app_b before the schedule: its epochs start anywhere up to 12

#: Schedules run on every run, each the shape the random draw must not leave to luck.
ALWAYS: dict[str, tuple[list[Op], int]] = {
    "two apps interleaved": (
        [
            ("prepare", 0, 1, 2),
            ("prepare", 1, 1, 2),
            ("commit", 1, 1, 1),
            ("prepare", 0, 2, 1),
            ("commit", 0, 1, 1),
            ("prepare", 1, 2, 1),
            ("abort", 0, 2, 1),
            ("crash", 0, 0, 1),
            ("prepare", 1, 9, 1),
            ("commit", 1, 2, 1),
            ("commit", 1, 9, 1),
        ],
        0,
    ),
    "a second attempt alive at commit": (
        [
            ("prepare", 0, 1, 2),
            ("straggle", 0, 1, 1),
            ("commit", 0, 1, 1),
            ("crash", 0, 0, 1),
            ("abort", 0, 1, 1),
        ],
        0,
    ),
    "ids past 10": (
        [
            ("prepare", 1, 9, 1),
            ("commit", 1, 9, 1),
            ("prepare", 1, 10, 2),
            ("commit", 1, 10, 1),
            ("zombie", 1, 11, 1),
            ("prepare", 1, 11, 1),
            ("crash", 0, 0, 1),
            ("zombie", 1, 11, 1),
            ("commit", 1, 11, 1),
            ("prepare", 1, 2, 1),
            ("commit", 1, 2, 1),
        ],
        8,
    ),
}


@dataclass
class _Model:
    """What the sink must show: prepared, committed and aborted work, bundles and epochs."""

    prepared: dict[BatchRef, list[Committable]] = field(default_factory=dict)
    stragglers: dict[BatchRef, list[Committable]] = field(default_factory=dict)
    rows: dict[BatchRef, list[dict[str, Any]]] = field(default_factory=dict)
    committed: dict[BatchRef, list[dict[str, Any]]] = field(default_factory=dict)
    bundles: dict[BatchRef, Bundle] = field(default_factory=dict)
    aborted: set[BatchRef] = field(default_factory=set)
    epochs: dict[str, int] = field(default_factory=dict)

    def in_doubt(self, app: str) -> list[str]:
        work = [*self.prepared.items(), *self.stragglers.items()]
        return sorted(c.id for b, cs in work if b.app_id == app for c in cs)

    def last_bundle(self, app: str) -> Bundle | None:
        mine = [b for b in self.bundles if b.app_id == app]
        return self.bundles[max(mine, key=lambda b: b.batch_id)] if mine else None


def examples_option(request: pytest.FixtureRequest) -> int:
    """The example count asked for with ``--eosink-contract-examples`` (the default without the plugin)."""
    try:
        value = request.config.getoption("eosink_contract_examples")
    except ValueError:
        return DEFAULT_EXAMPLES
    return DEFAULT_EXAMPLES if value is None else int(value)


def run_schedules(
    harness: SinkHarness,
    root: Path,
    reopen: Callable[[Namespace, Sink[Any] | None], Sink[Any]],
    visible: Callable[[Namespace], Counter[str]],
    examples: int = DEFAULT_EXAMPLES,
) -> None:
    """Run :data:`ALWAYS` and ``examples`` random schedules; each gets a fresh namespace under ``root``, named
    uniquely per run (a store that outlives one test run, your own S3 or database, may still hold older ones)."""
    counter = iter(range(10**9))
    run = uuid.uuid4().hex[:8]

    def schedule(ops: list[Op], warmup: int) -> None:
        n = next(counter)
        ns = Namespace(f"eosched{n}_{run}", root / f"schedule-{n}")
        ns.path.mkdir(parents=True)
        sink = harness.make_sink(ns)
        try:
            _run(ops, warmup, ns, sink, reopen, visible)
        finally:
            harness.cleanup(ns)

    for ops, warmup in ALWAYS.values():
        schedule(ops, warmup)
    if examples <= 0:
        return
    randomized = settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        database=None,
    )(given(ops=OPS, warmup=WARMUP)(schedule))
    randomized()


def _run(
    ops: list[Op],
    warmup: int,
    ns: Namespace,
    sink: Sink[Any],
    reopen: Callable[[Namespace, Sink[Any] | None], Sink[Any]],
    visible: Callable[[Namespace], Counter[str]],
) -> None:
    for _ in range(warmup):
        sink.fence(APPS[1])
    model = _Model(epochs={app: sink.fence(app) for app in APPS})
    caps = sink.capabilities
    for step, op in enumerate(ops):
        where = f"step {step} ({op}) of {ops}, warmup {warmup}"
        sink = _step(op, sink, model, ns, reopen, caps.supports_prepare, where)
        _check(sink, model, ns, visible, caps.supports_recover, where)
    with contextlib.suppress(Exception):
        sink.close()


def _step(
    op: Op,
    sink: Sink[Any],
    model: _Model,
    ns: Namespace,
    reopen: Callable[[Namespace, Sink[Any] | None], Sink[Any]],
    can_prepare: bool,
    where: str,
) -> Sink[Any]:
    """Apply one operation to the sink and the model; the (maybe reopened) sink."""
    kind, app_i, batch_id, shares = op
    app = APPS[app_i]
    batch = BatchRef(app, batch_id)
    done = batch in model.committed or batch in model.aborted
    if kind == "prepare" and batch not in model.prepared and not done:
        rows = [_share(app_i, batch_id, p) for p in range(shares)]
        model.prepared[batch] = [prepare(sink, batch, model.epochs[app], p, r) for p, r in enumerate(rows)]
        model.rows[batch] = [r for share in rows for r in share]
    elif kind == "straggle" and batch in model.prepared and can_prepare:
        # another attempt of participant 0, the same rows: only one of the two may ever be published
        late = prepare(sink, batch, model.epochs[app], 0, _share(app_i, batch_id, 0))
        model.stragglers.setdefault(batch, []).append(late)
    elif kind == "commit" and batch in model.prepared:
        committables = model.prepared.pop(batch)
        bundle = bundle_for(batch, model.epochs[app], committables)
        sink.commit(batch, committables, bundle)
        model.committed[batch], model.bundles[batch] = model.rows[batch], bundle
    elif kind == "abort" and (batch in model.prepared or batch in model.stragglers):
        work = model.prepared.pop(batch, []) + model.stragglers.pop(batch, [])
        sink.abort(work)
        if batch not in model.committed:
            model.aborted.add(batch)
    elif kind == "crash":
        sink = reopen(ns, sink)
        model.epochs = {a: sink.fence(a) for a in APPS}
    elif kind == "zombie" and model.epochs[app] > 1:
        _zombie(sink, model, batch, where)
    return sink


def _zombie(sink: Sink[Any], model: _Model, batch: BatchRef, where: str) -> None:
    """The writer one epoch behind tries to prepare, and to commit what is prepared: both refused."""
    stale = model.epochs[batch.app_id] - 1
    ghost = BatchRef(batch.app_id, 1000 + batch.batch_id)
    with pytest.raises(FencedError):
        prepare(sink, ghost, stale, 0, _share(APPS.index(batch.app_id), ghost.batch_id, 0))
    if batch in model.prepared:
        committables = model.prepared[batch]
        with pytest.raises(FencedError):
            sink.commit(batch, committables, bundle_for(batch, stale, committables))
        assert sink.commit_status(batch, committables) is CommitStatus.PREPARED, f"zombie changed {batch} at {where}"


def _check(
    sink: Sink[Any],
    model: _Model,
    ns: Namespace,
    visible: Callable[[Namespace], Counter[str]],
    can_recover: bool,
    where: str,
) -> None:
    """After every operation: visible content, in-doubt work, statuses and last bundles match the model."""
    want = canon([r for rows in model.committed.values() for r in rows])
    assert visible(ns) == want, f"visible content wrong after {where}"
    for app in APPS:
        if can_recover:
            listed = sorted(c.id for c in sink.recover(app))
            assert listed == model.in_doubt(app), f"recover({app}) after {where}: {listed} != {model.in_doubt(app)}"
        assert sink.fetch_last_bundle(app) == model.last_bundle(app), f"fetch_last_bundle({app}) after {where}"
    for b, cs in model.prepared.items():
        assert sink.commit_status(b, cs) is CommitStatus.PREPARED, f"status of prepared {b} after {where}"
    for b in model.bundles:
        assert sink.commit_status(b, []) is CommitStatus.COMMITTED, f"status of committed {b} after {where}"


def _share(app_i: int, batch_id: int, participant: int) -> list[dict[str, Any]]:
    return rows_for(APPS[app_i], batch_id, participant, 3, base=app_i * 1_000_000)
