"""A fan-out participant's sinks written side by side: one thread (a lane) per sink.

A participant reads each Arrow batch once and hands it to every sink. Written one after the other, a
sink's round trips (a COPY into PostgreSQL, a produce request to Kafka) leave the other sinks idle;
in lanes, while one sink waits on its server the next is encoding or sending. Each lane owns its sink's
transaction from ``begin`` to ``pre_commit``; the batches reach every lane in the same order, through a
short queue, so a slow sink holds back the reader instead of piling batches up in memory.

Lanes run on a process-wide pool whose idle threads serve the next task's lanes, so what a sink keeps per
thread (PostgreSQL's control connection) is reused across tasks as on the reader's own thread, and
bounded by the pool's size.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import pyarrow as pa

__all__ = ["Lane"]

_DONE = object()
_STOP = object()
_QUEUE_BATCHES = 2
"""Batches a lane may hold besides the one it writes: enough to keep it busy, few enough to keep memory flat."""
_POLL_S = 0.5
_POOL_THREADS = 64
"""More than any process runs lanes at once (a lane per sink per concurrent task): a lane never waits for a thread."""

_pool: tuple[int, ThreadPoolExecutor] | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    """This process's lane threads (a forked child makes its own: the parent's threads are not in it)."""
    global _pool
    with _pool_lock:
        if _pool is None or _pool[0] != os.getpid():
            _pool = (os.getpid(), ThreadPoolExecutor(_POOL_THREADS, thread_name_prefix="eosink-lane"))
        return _pool[1]


class Lane:
    """One sink's writes on a thread of their own: :meth:`put` each batch, then :meth:`finish` and :meth:`result`,
    or :meth:`stop` (after a failure elsewhere). The first error inside the lane comes out of the next call."""

    def __init__(self, write: Callable[[pa.RecordBatch], None], finish: Callable[[], Any]) -> None:
        self._write, self._finish = write, finish
        self._queue: queue.Queue[object] = queue.Queue(_QUEUE_BATCHES)
        self._error: BaseException | None = None
        self._result: Any = None
        self._running: Future[None] = _executor().submit(self._run)

    def put(self, batch: pa.RecordBatch) -> None:
        """Queue ``batch`` for the sink; waits while the lane is behind, and raises the lane's error if it failed."""
        self._hand(batch)

    def finish(self) -> None:
        """No more batches: once the queued ones are written, the lane runs ``finish`` (the pre-commit)."""
        self._hand(_DONE)

    def result(self) -> Any:
        """Wait for the lane to end; what ``finish`` made."""
        self._running.result()
        self._raise()
        return self._result

    def stop(self) -> None:
        """Stop after the batch being written, dropping the rest (another lane or the reader failed)."""
        while True:
            try:
                self._queue.put(_STOP, timeout=_POLL_S)
                break
            except queue.Full:
                if self._running.done():
                    break
                with suppress(queue.Empty):  # make room: what is queued will not be written anyway
                    self._queue.get_nowait()
        self._running.result()

    def _hand(self, item: object) -> None:
        while True:
            self._raise()
            try:
                self._queue.put(item, timeout=_POLL_S)
                return
            except queue.Full:
                continue

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    return
                if item is _DONE:
                    self._result = self._finish()
                    return
                assert isinstance(item, pa.RecordBatch)
                self._write(item)
        except BaseException as exc:  # raised in the reader's thread at its next put or finish (within _POLL_S)
            self._error = exc
