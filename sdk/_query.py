"""The running query :meth:`eosink.spark.BatchWriter.start` returns: Spark's, with eosink's errors and a clean stop.

Spark reports a failed ``foreachBatch`` as a ``StreamingQueryException`` whose text ends with the
eosink error; :meth:`Query.awaitTermination` raises the eosink error itself instead (Spark's stays
its ``__context__``, not printed again). :meth:`Query.stop` stops after the batch in flight and
closes the writer; :meth:`Query.run` waits for the end, and stops that way on SIGINT or SIGTERM.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from eosink import errors
from eosink._extras import missing_on_executors
from eosink.errors import EosinkError, QueryStoppedError

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["BatchGate", "Query"]

log = logging.getLogger("eosink")

_POLL_S = 1  # seconds: how often run() looks for a stop request while the query runs


class BatchGate:
    """Whether a batch is in flight, and the stop request: a batch that begins after it raises QueryStoppedError
    before writing anything, so a stop never lands half a batch and never lets Spark commit an unwritten one."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._in_flight: int | None = None
        self._stopping = False
        self.failure: EosinkError | None = None
        """The eosink error the last batch raised (what :meth:`Query.awaitTermination` raises)."""

    @contextmanager
    def batch(self, batch_id: int) -> Iterator[None]:
        with self._cond:
            if self._stopping:
                raise QueryStoppedError(
                    f"Batch {batch_id} began after the query was asked to stop; nothing of it was written.",
                    "Start the query again: it runs this batch then.",
                )
            self._in_flight = batch_id
        try:
            yield
        except EosinkError as exc:
            self.failure = exc
            raise
        finally:
            with self._cond:
                self._in_flight = None
                self._cond.notify_all()

    def stop(self, timeout_s: float) -> int | None:
        """Refuse new batches and wait up to ``timeout_s`` for the one in flight; the batch still in flight
        then (None: none)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            self._stopping = True
            if self._in_flight is not None:
                log.info("eosink: stopping after batch %d", self._in_flight)
            while self._in_flight is not None and (left := deadline - time.monotonic()) > 0:
                self._cond.wait(left)
            return self._in_flight

    @property
    def stopping(self) -> bool:
        return self._stopping

    def __getstate__(self) -> dict[str, Any]:  # a writer is pickled (Spark Connect): a fresh gate there
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


def error_in(text: str) -> EosinkError | None:
    """The eosink error whose ``Class: problem Fix: fix`` line Spark's exception text ends with (the error was
    raised in another process: a ``format("eosink")`` worker, a Spark Connect server), rebuilt as that class;
    else the ConfigurationError for a connector's package missing on the executors; None when the text holds
    neither."""
    names = [n for n in errors.__all__ if f"{n}: " in text]
    if not names:
        return missing_on_executors(text)
    kind = max(names, key=len)  # the most specific class named (CommittedWorkLostError over PreparedWorkLostError)
    line = text[text.rfind(f"{kind}: ") + len(kind) + 2 :].splitlines()[0].strip()
    problem, _, fix = line.partition(" Fix: ")
    cls = getattr(errors, kind)
    return cls(problem, fix or None) if isinstance(cls, type) and issubclass(cls, EosinkError) else None


class Query:
    """A running streaming query of an eosink writer: Spark's ``StreamingQuery`` (every attribute of it works
    here), with the eosink error raised by :meth:`awaitTermination` and a :meth:`stop` after the batch in
    flight that also closes the writer."""

    def __init__(
        self,
        query: StreamingQuery,
        gate: BatchGate,
        settle: Callable[[float], None],
        close: Callable[[], None],
    ) -> None:
        self._query = query
        self._gate = gate
        self._settle = settle  # waits (bounded) until Spark's commit log holds the writer's last batch
        self._close = close
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._query, name)

    def __repr__(self) -> str:
        return f"eosink.spark.Query({self._query!r})"

    @classmethod
    def of(cls, query: StreamingQuery) -> Query:
        """Wrap a query started another way, e.g. ``df.writeStream.format("eosink")...start()``: its
        :meth:`awaitTermination` raises the eosink error named in Spark's exception (rebuilt from the text:
        the error was raised in Spark's Python worker). :meth:`stop` is Spark's there: it may interrupt a batch
        in flight, which the next start runs again."""
        return cls(query, BatchGate(), lambda timeout_s: None, lambda: None)

    @property
    def spark_query(self) -> StreamingQuery:
        """Spark's own query object."""
        return self._query

    def awaitTermination(self, timeout: int | None = None) -> bool | None:
        """Spark's ``awaitTermination``; a query that failed raises the eosink error that stopped it (Spark's
        exception is its ``__context__``). A query ended by :meth:`stop` ends without an error."""
        try:
            return self._query.awaitTermination() if timeout is None else self._query.awaitTermination(timeout)
        except Exception as exc:
            failure = self._gate.failure or error_in(str(exc))
            if isinstance(failure, QueryStoppedError) or (failure is None and self._gate.stopping):
                return True
            if failure is None:
                raise
            raise failure from None  # Spark's exception stays as __context__, its 30 lines are not printed again

    def stop(self, timeout_s: float = 600.0) -> None:
        """Stop after the batch in flight (waiting up to ``timeout_s`` for it), then close the writer: under 2pc
        it commits what Spark committed, so nothing is left in doubt. Safe to call twice."""
        if self._closed:
            return
        started = time.monotonic()
        left = self._gate.stop(timeout_s)
        if left is not None:
            log.warning("eosink: batch %d still runs after %.0f s; stopping the query under it", left, timeout_s)
        else:  # Spark records the batch in its commit log just after it returns: let it, or 2pc leaves it in doubt
            self._settle(max(1.0, timeout_s - (time.monotonic() - started)))
        self._query.stop()
        self._closed = True
        self._close()

    def run(self, *, stop_on: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)) -> None:
        """Wait until the query ends: after its input with ``trigger(availableNow=True)``, else until one of
        ``stop_on`` arrives (Ctrl-C, or a scheduler's SIGTERM), which stops it after the batch in flight. Then
        the writer is closed. Raises the eosink error that stopped the query, if one did. Main thread only."""
        asked: list[int] = []

        def on_signal(signum: int, frame: FrameType | None) -> None:
            if not asked:
                log.info("eosink: %s: stopping after the batch in flight", signal.Signals(signum).name)
            asked.append(signum)

        previous = {s: signal.signal(s, on_signal) for s in stop_on}
        try:
            while not asked and self.awaitTermination(_POLL_S) is False:
                pass
        except BaseException:
            self._restore(previous)
            try:
                self.stop()
            except Exception as closing:  # the query's own error is the one to report
                log.warning("eosink: closing the writer after the query failed: %s", closing)
            raise
        self._restore(previous)
        self.stop()

    @staticmethod
    def _restore(previous: dict[signal.Signals, Any]) -> None:
        for s, handler in previous.items():
            signal.signal(s, handler)
