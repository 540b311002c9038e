"""A writer's counters kept in a JSON file as they change, so that a killed driver still reports what it did.

Under 2PC a batch is committed after Spark's commit log, on the writer's watcher thread, when
foreachBatch has long returned: saving the counters around each batch misses the commits (and
the ambiguous replies resolved in them) that come before a kill. The harnesses' and the demo's
drivers therefore save on every change, on whichever thread makes it.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from eosink._procs import save_json
from eosink.coordinator import Stats

if TYPE_CHECKING:
    from eosink.spark import BatchWriter

__all__ = ["keep_stats"]


class _SavedStats(Stats):
    """:class:`~eosink.coordinator.Stats` that write themselves to ``path`` (atomically) after every change."""

    __slots__ = ("_lock", "_path")  # not in __dict__, so not in to_json()
    _lock: threading.Lock
    _path: str

    def __init__(self, path: str, counters: Stats) -> None:
        super().__init__(**counters.__dict__)
        object.__setattr__(self, "_lock", threading.Lock())
        object.__setattr__(self, "_path", path)
        self.save()

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if hasattr(self, "_path"):  # not while Stats.__init__ sets the fields
            self.save()

    def save(self) -> None:
        with self._lock:  # the query's thread and the watcher's change counters at once
            save_json(self._path, self.to_json())


def keep_stats(writer: BatchWriter, path: str | os.PathLike[str]) -> None:
    """Save ``writer``'s counters (:attr:`~eosink.spark.BatchWriter.stats`) to ``path`` now and after every
    change from now on, in the process that runs foreachBatch (not through Spark Connect)."""
    coordinator = writer.coordinator
    coordinator.stats = _SavedStats(os.fspath(path), coordinator.stats)
