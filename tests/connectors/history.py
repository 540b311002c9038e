"""Long-history checks, shared by the sinks' tests: a long history costs no more than a short one, and is bounded.

A stream runs for months, so everything a sink keeps per batch, per epoch or per attempt must stay
bounded, and what a driver does at start, at ``fetch_last_bundle`` and at each commit must not
grow with the number of batches behind it. Each sink's ``test_*_history.py`` gives an app_id a
synthetic history of :data:`HISTORY` batches (written in the sink's own format, as fast as the
sink allows) and another app_id one of :data:`SHORT` batches, then :func:`measure` runs the same
three steps on both, through a real :class:`~eosink.coordinator.Coordinator`:

* start: ``Coordinator.start()`` on a new sink object (setup, checkpoint check, fence, recover,
  ``fetch_last_bundle``), as a new driver process does;
* fetch: ``fetch_last_bundle`` on a new sink object (what ``format("eosink")``'s short-lived
  workers do at every batch);
* commit: one new batch written by participants, then committed inline (txid-check), the
  commit timed.

The times are reported side by side (``report``, also in ``build/history-<sink>.json``); the
tests assert the *work* each step does (requests, records, rows: counted by the sink's test),
never the times: speed is the benchmark suite's to prove.

``make test`` runs the quick form (:data:`HISTORY` = ``EOSINK_HISTORY_BATCHES``, 2,000 unless set);
``make test-full`` sets it to 100,000.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eosink.contract import BatchRef, Bundle, Fingerprint, Sink
from eosink.contracts._mini import FAST, FakeCheckpoint, MemoryBatch, NoWatcherCoordinator, make_rows
from eosink.strategies import TxidCheck

__all__ = ["HISTORY", "SHORT", "Costs", "History", "measure", "report", "synthetic_bundle"]

HISTORY = int(os.environ.get("EOSINK_HISTORY_BATCHES") or 2_000)
"""Batches of synthetic history the long app_id gets (100,000 in ``make test-full``)."""
SHORT = 10
"""Batches of history the short app_id gets: the yardstick."""


@dataclass(frozen=True)
class History:
    """An app_id with ``batches`` committed batches (0 .. batches - 1) from the checkpoint of ``query_id``."""

    app_id: str
    batches: int
    query_id: str = field(default_factory=lambda: str(uuid.uuid4()))

    @property
    def last(self) -> int:
        return self.batches - 1


def synthetic_bundle(history: History, batch_id: int, committables: tuple[str, ...] = ()) -> Bundle:
    """The bundle a sink would hold for ``batch_id`` of ``history``: epoch 1, 10 rows, txid-check (the same
    fingerprint for every batch: no test replays a synthetic batch)."""
    fingerprint = Fingerprint(10, 7919, 104729, 2)
    return Bundle(
        BatchRef(history.app_id, batch_id),
        1,
        fingerprint,
        committables or (f"synthetic-{batch_id}",),
        history.query_id,
        "txid-check",
    )


@dataclass
class Costs:
    """What the three steps took for one history."""

    batches: int
    start_s: float = 0.0
    fetch_s: float = 0.0
    commit_s: float = 0.0
    work: dict[str, Counter[str]] = field(default_factory=dict)
    """step -> what the sink's counter counted during it (requests, records read, ...)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "batches": self.batches,
            "start_ms": round(self.start_s * 1000, 1),
            "fetch_last_bundle_ms": round(self.fetch_s * 1000, 1),
            "commit_ms": round(self.commit_s * 1000, 1),
            "work": {step: dict(counts) for step, counts in self.work.items()},
        }


Counting = Callable[[], Counter[str]]
"""Returns what the sink has done so far (monotonic counts); the difference over a step is its work."""


@contextmanager
def _step(costs: Costs, name: str, count: Counting | None) -> Iterator[None]:
    before = count() if count else Counter()
    started = time.perf_counter()
    yield
    setattr(costs, f"{name}_s", time.perf_counter() - started)
    after = count() if count else Counter()
    costs.work[name] = Counter({k: after[k] - before[k] for k in after if after[k] - before[k]})


def measure(make_sink: Callable[[], Sink[Any]], history: History, root: Path, count: Counting | None = None) -> Costs:
    """Start, fetch and commit batch ``history.batches`` for ``history``'s app_id (see the module docstring)."""
    ckpt = FakeCheckpoint(root / f"checkpoint-{history.batches}", history.query_id)
    ckpt.write_offsets(history.last)
    ckpt.write_commit(history.last)
    costs = Costs(history.batches)
    fresh = make_sink()
    try:
        with _step(costs, "fetch", count):
            found = fresh.fetch_last_bundle(history.app_id)
        assert found is not None and found.batch.batch_id == history.last, f"last bundle {found}"
    finally:
        fresh.close()
    coordinator = NoWatcherCoordinator(make_sink(), history.app_id, TxidCheck(), ckpt.spark(), FAST)
    try:
        with _step(costs, "start", count):
            coordinator.start()
        last = coordinator.last_bundle
        assert last is not None and last.batch.batch_id == history.last, f"last bundle at start {last}"
        batch_id = history.batches
        ckpt.write_offsets(batch_id)
        plan = coordinator.begin_batch(batch_id)
        assert plan is not None
        committables = MemoryBatch(make_rows(batch_id, duplicate=False), participants=2).write(plan)
        with _step(costs, "commit", count):
            coordinator.finish_batch(batch_id, committables)
        new = coordinator.last_bundle
        assert new is not None and new.batch.batch_id == batch_id, f"committed {new}"
    finally:
        coordinator.close()
    return costs


def report(sink: str, short: Costs, long: Costs, kept: dict[str, int], bounds: dict[str, int]) -> str:
    """The two histories side by side (and into ``build/history-<sink>.json``), as text for the test output."""
    lines = [
        f"{sink}: {short.batches} vs {long.batches} batches of history",
        f"  {'step':<18}{short.batches:>12}{long.batches:>12}",
    ]
    for step, label in (("start", "start-up"), ("fetch", "fetch_last_bundle"), ("commit", "one commit")):
        a, b = getattr(short, f"{step}_s") * 1000, getattr(long, f"{step}_s") * 1000
        lines.append(f"  {label:<18}{a:>10.1f}ms{b:>10.1f}ms   work {dict(short.work[step])} / {dict(long.work[step])}")
    lines.append(f"  kept: {kept} (bounds {bounds})")
    out = Path(os.environ.get("EOSINK_BUILD_DIR", "build")) / f"history-{sink}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"sink": sink, "short": short.to_json(), "long": long.to_json(), "kept": kept, "bounds": bounds})
    )
    return "\n".join(lines)
