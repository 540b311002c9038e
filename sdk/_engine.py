"""What the driver-side engines share: one batch at a time, a failure ends the run, a fence ends it for good.

:class:`~eosink.coordinator.Coordinator` (one sink) and :class:`~eosink.fanout.FanOut` (several)
both run ``process`` as below; each brings its own ``_process`` and ``reset``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar, final

import pyarrow as pa

from eosink._watcher import CommitLogWatcher
from eosink.errors import CommitAbortedError, FencedError

__all__ = ["Engine"]

I = TypeVar("I")  # noqa: E741 - the batch input's type


class Engine(ABC, Generic[I]):
    """A driver-side protocol engine over batch inputs of type ``I``."""

    _fenced: FencedError | None = None
    _watcher: CommitLogWatcher[Any]

    @final
    def process(self, batch_id: int, data: I) -> None:
        """Write batch ``batch_id`` exactly once (called from foreachBatch).

        After a failure the next call fences and recovers again (a query restarted in the same
        driver is a new writer), except after FencedError: a fenced writer stays fenced, as a
        fenced Kafka producer does, so two drivers never take turns fencing each other.
        """
        if self._fenced is not None:
            raise self._fenced
        try:
            self._watcher.raise_error()
            self._process(batch_id, data)
        except FencedError as exc:
            self._fenced = exc
            raise
        except BaseException:
            self.reset()
            raise

    @final
    def _raise_lost_work(self) -> None:
        """At the end of ``close``: a commit that failed in the background because the sink no longer has work
        Spark committed (:class:`CommitAbortedError`, and so PreparedWorkLostError and CommittedWorkLostError) is
        the run's error, raised, never only logged: the query's last batch has no next batch to report it."""
        err = self._watcher.error
        if isinstance(err, CommitAbortedError):
            raise err

    @abstractmethod
    def _process(self, batch_id: int, data: I) -> None:
        """One batch, from settling earlier ones to its commit (or hand-over to the commit-log watcher)."""

    @abstractmethod
    def preflight(self, schema: pa.Schema | None) -> None:
        """Check before the stream starts what the first batch would find wrong (the sink's credentials, its
        target against the stream's ``schema``, the app_id against the checkpoint), changing nothing."""

    @abstractmethod
    def reset(self) -> None:
        """Forget per-run state after a failure: the next batch fences and recovers again."""
