"""The suite's property test: random schedules of contract operations against a model."""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eosink.contract import BatchRef, CommitStatus, Committable, Sink
from eosink.contracts._steps import bundle_for, canon, prepare, rows_for
from eosink.contracts.harness import Namespace, SinkHarness

__all__ = ["run_schedules"]

APPS = ("app_a", "app_b")
BATCHES = 4

Op = tuple[str, int, int, int]  # (kind, app index, batch id, shares)

OPS = st.lists(
    st.tuples(
        st.sampled_from(["prepare", "prepare", "commit", "commit", "abort", "crash", "recover"]),
        st.integers(0, len(APPS) - 1),
        st.integers(0, BATCHES - 1),
        st.integers(1, 2),
    ),
    min_size=1,
    max_size=30,
)


@dataclass
class _Model:
    prepared: dict[BatchRef, list[Committable]] = field(default_factory=dict)
    rows: dict[BatchRef, list[dict[str, Any]]] = field(default_factory=dict)
    committed: dict[BatchRef, list[dict[str, Any]]] = field(default_factory=dict)
    aborted: dict[BatchRef, list[Committable]] = field(default_factory=dict)
    epochs: dict[str, int] = field(default_factory=dict)


def run_schedules(
    harness: SinkHarness,
    root: Path,
    reopen: Callable[[Namespace, Sink[Any] | None], Sink[Any]],
    visible: Callable[[Namespace], Counter[str]],
) -> None:
    """Run hypothesis over random schedules; each example gets a fresh namespace under ``root``."""
    counter = iter(range(10**9))

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(ops=OPS)
    def schedule(ops: list[Op]) -> None:
        n = next(counter)
        ns = Namespace(f"eosched{n}_{root.name[-6:].lower()}".replace("-", "_"), root / f"schedule-{n}")
        ns.path.mkdir(parents=True)
        sink = harness.make_sink(ns)
        try:
            _run(ops, ns, sink, reopen, visible)
        finally:
            harness.cleanup(ns)

    schedule()


def _run(
    ops: list[Op],
    ns: Namespace,
    sink: Sink[Any],
    reopen: Callable[[Namespace, Sink[Any] | None], Sink[Any]],
    visible: Callable[[Namespace], Counter[str]],
) -> None:
    model = _Model(epochs={app: sink.fence(app) for app in APPS})
    recover = sink.capabilities.supports_recover
    for step, (kind, app_i, batch_id, shares) in enumerate(ops):
        app = APPS[app_i]
        batch = BatchRef(app, batch_id)
        where = f"step {step} ({kind} {batch}) of {ops}"
        done = batch in model.committed or batch in model.aborted
        if kind == "prepare" and batch not in model.prepared and not done:
            rows = [rows_for(app, batch_id, p, 3, base=app_i * 100_000) for p in range(shares)]
            epoch = model.epochs[app]
            model.prepared[batch] = [prepare(sink, batch, epoch, p, r) for p, r in enumerate(rows)]
            model.rows[batch] = [r for share in rows for r in share]
        elif kind == "commit" and batch in model.prepared:
            committables = model.prepared.pop(batch)
            sink.commit(batch, committables, bundle_for(batch, model.epochs[app], committables))
            model.committed[batch] = model.rows[batch]
        elif kind == "abort" and batch in model.prepared:
            model.aborted[batch] = model.prepared.pop(batch)
            sink.abort(model.aborted[batch])
        elif kind == "crash":
            sink = reopen(ns, sink)
            model.epochs = {a: sink.fence(a) for a in APPS}
        elif kind == "recover" and recover:
            listed = sorted(c.id for c in sink.recover(app))
            expected = sorted(c.id for b, cs in model.prepared.items() if b.app_id == app for c in cs)
            assert listed == expected, f"recover({app}) after {where}: {listed} != {expected}"
        want = canon([r for rows in model.committed.values() for r in rows])
        assert visible(ns) == want, f"visible content wrong after {where}"
        for b, cs in model.prepared.items():
            assert sink.commit_status(b, cs) is CommitStatus.PREPARED, f"status of prepared {b} after {where}"
        for b in model.committed:
            assert sink.fetch_last_bundle(b.app_id) is not None, f"no bundle for {b.app_id} after {where}"
    with contextlib.suppress(Exception):
        sink.close()
