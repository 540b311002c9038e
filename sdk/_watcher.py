"""Two-phase commit's trigger: commit each recorded batch once Spark's commit log holds it.

A 2PC batch waits here, in batch order, from the moment its manifest is written until
``commits/N`` exists: Spark's promise never to replay it. A daemon thread polls the commit log
(every ``interval_s``, about 10 ms) and commits the ready batches through the coordinator's
``commit`` function. The coordinator adds backstops: before batch N+1 writes anything, and when
the query ends, it settles what is still here itself. (A Python StreamingQueryListener hears of
a commit 100-500 ms late and swallows its own exceptions: not a trigger to rely on.)

An error while committing in the background is kept and raised to the coordinator's next
call (:meth:`CommitLogWatcher.raise_error`), since nobody catches exceptions in the thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from eosink import faults
from eosink.checkpoint import SparkCheckpoint
from eosink.contract import Bundle, Committable
from eosink.errors import EosinkError
from eosink.faults import FaultPoint

__all__ = ["CommitLogWatcher", "Pending"]

log = logging.getLogger("eosink")

Pending = tuple[list[Committable], Bundle]
"""A recorded batch of one sink waiting for Spark's commit log: its committables and its bundle."""

P = TypeVar("P")


class CommitLogWatcher(Generic[P]):
    """The 2PC batches that wait for Spark's commit log, and the thread that commits them.

    What waits per batch is ``P``: one sink's :data:`Pending` for a coordinator, every sink's for a
    fan-out (:mod:`eosink.fanout`), whose ``commit`` commits the batch in each sink in turn.

    Every method takes ``lock`` (the coordinator's, reentrant): the thread and the query's own
    thread never commit at once. ``threaded=False`` keeps the thread off (deterministic tests
    call :meth:`commit_ready` where the thread would).
    """

    def __init__(
        self,
        checkpoint: SparkCheckpoint,
        commit: Callable[[int, P], None],
        *,
        lock: threading.RLock,
        interval_s: float,
        name: str,
        threaded: bool = True,
    ) -> None:
        self.checkpoint = checkpoint
        self._commit = commit
        self._lock = lock
        self._wake = threading.Condition(lock)
        self._interval_s = interval_s
        self._name = name
        self._threaded = threaded
        self._pending: dict[int, P] = {}
        self._thread: threading.Thread | None = None
        self._closed = False
        self.error: BaseException | None = None
        """The error that stopped the thread, if any (raised again by :meth:`raise_error`)."""

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

    def batch_ids(self) -> list[int]:
        """The batches still waiting, in order."""
        with self._lock:
            return sorted(self._pending)

    def add(self, batch_id: int, pending: P) -> None:
        """Wait for ``commits/<batch_id>``, then commit (a recorded batch: its manifest is written)."""
        with self._lock:
            self._pending[batch_id] = pending
            if self._threaded and (self._thread is None or not self._thread.is_alive()):
                self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
                self._thread.start()
            self._wake.notify_all()

    def commit_ready(self) -> int:
        """Commit every waiting batch that Spark's commit log holds, in order; returns how many."""
        done = 0
        with self._lock:
            for batch_id in sorted(self._pending):
                if not self.checkpoint.has_commit_file(batch_id):
                    break
                faults.hit(FaultPoint.F5, batch_id)
                self._commit(batch_id, self._pending[batch_id])
                del self._pending[batch_id]
                done += 1
        return done

    def take(self) -> dict[int, P]:
        """Remove and return every waiting batch (after :meth:`commit_ready`: those Spark has not committed)."""
        with self._lock:
            taken, self._pending = self._pending, {}
            return taken

    def flush(self, timeout_s: float) -> bool:
        """Commit what Spark commits within ``timeout_s``; True when nothing is left waiting."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.raise_error()
            self.commit_ready()
            if not len(self):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(self._interval_s)

    def close(self) -> None:
        """Stop the thread (batches still waiting stay in doubt until the next start's recovery)."""
        with self._lock:
            self._closed = True
            self._wake.notify_all()

    def raise_error(self) -> None:
        """Raise the error that stopped the thread, if any."""
        err = self.error
        if err is None:
            return
        if isinstance(err, EosinkError):
            raise err
        raise RuntimeError(f"eosink background commit failed: {err!r}") from err

    def _run(self) -> None:
        while True:
            with self._lock:
                while not self._pending and not self._closed:
                    self._wake.wait()
                if self._closed:
                    return
                try:
                    self.commit_ready()
                except BaseException as exc:
                    self.error = exc
                    log.error("eosink: commit failed in the background (%s): %s", self._name, exc)
                    return
                if self._pending:
                    self._wake.wait(self._interval_s)
