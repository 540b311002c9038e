"""A writer's counters kept in a JSON file as they change, so that a killed driver still reports what it did.

Under 2PC a batch is committed after Spark's commit log, on the writer's watcher thread, when
foreachBatch has long returned: saving the counters around each batch misses the commits (and
the ambiguous replies resolved in them) that come before a kill. The harnesses' and the demo's
drivers therefore save on every change, on whichever thread makes it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from eosink._procs import save_json
from eosink.coordinator import Stats
from eosink.spark import FanOutWriter

if TYPE_CHECKING:
    from eosink.spark import BatchWriter

__all__ = ["keep_stats"]


class _SavedStats(Stats):
    """:class:`~eosink.coordinator.Stats` that call ``saved`` (which writes the file) after every change."""

    __slots__ = ("_saved",)  # not in __dict__, so not in to_json()
    _saved: Callable[[], None]

    def __init__(self, counters: Stats, saved: Callable[[], None]) -> None:
        super().__init__(**counters.__dict__)
        object.__setattr__(self, "_saved", saved)

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if hasattr(self, "_saved"):  # not while Stats.__init__ sets the fields
            self._saved()


def keep_stats(writer: BatchWriter | FanOutWriter, path: str | os.PathLike[str]) -> None:
    """Save ``writer``'s counters (:attr:`~eosink.spark.BatchWriter.stats`) to ``path`` now and after every
    change from now on, in the process that runs foreachBatch (not through Spark Connect). A fan-out's file
    holds each counter summed over its sinks, and each sink's own under ``sinks``."""
    target = os.fspath(path)
    lock = threading.Lock()  # the query's thread and the watcher's change counters at once
    if isinstance(writer, FanOutWriter):
        fanout = writer.fanout

        def save() -> None:
            with lock:
                sinks = {name: c.stats.to_json() for name, c in zip(fanout.names, fanout.coordinators, strict=True)}
                totals = {k: sum(int(s[k]) for s in sinks.values()) for k in SUMMED}
                save_json(target, {**totals, "sinks": sinks})

        for coordinator in fanout.coordinators:
            coordinator.stats = _SavedStats(coordinator.stats, save)
    else:
        coordinator = writer.coordinator

        def save() -> None:
            with lock:
                save_json(target, coordinator.stats.to_json())

        coordinator.stats = _SavedStats(coordinator.stats, save)
    save()


SUMMED = tuple(f.name for f in fields(Stats) if f.name != "commit_latency_ms")
"""The counters a fan-out's file sums over its sinks."""
