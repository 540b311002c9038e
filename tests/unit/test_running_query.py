"""The running query writer.start() returns: the eosink error from awaitTermination, a stop after the batch in
flight that closes the writer, and run() that stops that way on SIGINT / SIGTERM (a fake Spark query)."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest

from eosink._query import BatchGate, Query, error_in
from eosink.errors import BadRecordError, CommittedWorkLostError, QueryStoppedError, SchemaError


class FakeSparkQuery:
    """Spark's StreamingQuery as far as Query uses it: ends when stopped, or fails with ``failure``."""

    def __init__(self) -> None:
        self.stopped = threading.Event()
        self.failure: Exception | None = None
        self.name = "payments"

    def awaitTermination(self, timeout: int | None = None) -> bool | None:
        if self.failure is not None:
            raise self.failure
        ended = self.stopped.wait(timeout)
        return ended if timeout is not None else None

    def stop(self) -> None:
        self.stopped.set()


def _query(gate: BatchGate, spark: FakeSparkQuery) -> tuple[Query, list[str]]:
    calls: list[str] = []
    return Query(spark, gate, lambda timeout: calls.append("settle"), lambda: calls.append("close")), calls  # type: ignore[arg-type]


def test_a_failed_query_raises_the_eosink_error_with_sparks_as_its_unprinted_context() -> None:
    """Pass: awaitTermination raises the BadRecordError the batch raised, not Spark's exception, which stays
    its __context__ with printing suppressed; Spark's other attributes pass through."""
    gate, spark = BatchGate(), FakeSparkQuery()
    query, _ = _query(gate, spark)
    with pytest.raises(BadRecordError), gate.batch(3):
        raise BadRecordError("A row was refused.", "Fix it.")
    spark.failure = RuntimeError("[STREAM_FAILED] ... An exception was raised by the Python Proxy")
    with pytest.raises(BadRecordError) as info:
        query.awaitTermination()
    assert info.value.__context__ is spark.failure and info.value.__suppress_context__
    assert query.name == "payments"
    other = BatchGate()  # a failure that is no eosink error is Spark's, unchanged
    with pytest.raises(RuntimeError):
        _query(other, spark)[0].awaitTermination()


def test_stop_waits_for_the_batch_in_flight_refuses_the_next_and_closes_the_writer_once() -> None:
    """Pass: stop() returns only after the batch in flight ends; a batch that begins after it raises
    QueryStoppedError before its body runs; Spark's commit log is awaited, the writer closed once even when
    stop() is called twice; awaitTermination then ends without an error, even if Spark reports one."""
    gate, spark = BatchGate(), FakeSparkQuery()
    query, calls = _query(gate, spark)
    inside, release, done = threading.Event(), threading.Event(), []

    def batch() -> None:
        with gate.batch(7):
            inside.set()
            release.wait(10)
            done.append(7)

    worker = threading.Thread(target=batch)
    worker.start()
    assert inside.wait(10)
    stopper = threading.Thread(target=query.stop)
    stopper.start()
    stopper.join(0.3)
    assert stopper.is_alive() and not spark.stopped.is_set(), "stop() did not wait for the batch in flight"
    release.set()
    stopper.join(10)
    worker.join(10)
    assert done == [7] and spark.stopped.is_set() and calls == ["settle", "close"]
    ran: list[int] = []
    with pytest.raises(QueryStoppedError), gate.batch(8):
        ran.append(8)
    assert ran == []
    query.stop()
    assert calls == ["settle", "close"]
    spark.failure = RuntimeError("interrupted")
    assert query.awaitTermination() is True


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_run_stops_on_sigint_and_sigterm_and_restores_the_handlers(signum: signal.Signals) -> None:
    """Pass: run() returns after the signal, the query stopped and the writer closed; the process's own
    handler for the signal is back afterwards (PySpark's for SIGINT)."""
    gate, spark = BatchGate(), FakeSparkQuery()
    query, calls = _query(gate, spark)
    seen: list[Any] = []
    before = signal.signal(signum, lambda *a: seen.append(a))
    try:
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signum))
        timer.start()
        started = time.monotonic()
        query.run()
        timer.join()
        assert spark.stopped.is_set() and calls == ["settle", "close"]
        assert time.monotonic() - started < 10
        os.kill(os.getpid(), signum)  # the handler run() replaced is back
        assert seen
    finally:
        signal.signal(signum, before)


def test_run_returns_when_the_query_ends_by_itself() -> None:
    """An availableNow query ends after its input. Pass: run() returns and closes the writer."""
    gate, spark = BatchGate(), FakeSparkQuery()
    query, calls = _query(gate, spark)
    threading.Timer(0.2, spark.stopped.set).start()
    query.run()
    assert calls[-1] == "close"


def test_an_error_raised_in_another_process_is_rebuilt_from_sparks_text() -> None:
    """format("eosink") raises in Spark's Python worker: only the text reaches the driver. Pass: Query.of(...)
    raises the most specific eosink class named there, with its problem and fix; text naming none is Spark's."""
    text = (
        "[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_DATA_SOURCE_ERROR] ...\n"
        "Traceback (most recent call last):\n  File ...\n"
        "eosink.errors.SchemaError: Column 'id': the stream's type string cannot be written into t.id of type "
        "BIGINT. Fix: Cast the column in the query (col('id').cast('bigint')), or ALTER the column's type.\n"
        "\tat org.apache.spark.api.python.BasePythonRunner..."
    )
    spark = FakeSparkQuery()
    spark.failure = RuntimeError(text)
    with pytest.raises(SchemaError) as info:
        Query.of(spark).awaitTermination()  # type: ignore[arg-type]
    assert info.value.problem.startswith("Column 'id': the stream's type string")
    assert info.value.fix == "Cast the column in the query (col('id').cast('bigint')), or ALTER the column's type."
    lost = error_in("eosink.errors.CommittedWorkLostError: Batch 3 is gone. Fix: Rewind.")
    assert type(lost) is CommittedWorkLostError and lost.fix == "Rewind."
    assert error_in("java.lang.OutOfMemoryError: Java heap space") is None


def test_run_reports_the_querys_own_error_even_when_closing_fails_too() -> None:
    """The query failed with a BadRecordError, and closing the writer then fails as well. Pass: run() raises the
    BadRecordError (closing's error is logged), and the query was stopped."""
    gate, spark = BatchGate(), FakeSparkQuery()

    def close() -> None:
        raise RuntimeError("the sink is down too")

    query = Query(spark, gate, lambda timeout_s: None, close)  # type: ignore[arg-type]
    with pytest.raises(BadRecordError), gate.batch(2):
        raise BadRecordError("A row was refused.", "Fix it.")
    spark.failure = RuntimeError("[STREAM_FAILED] ...")
    with pytest.raises(BadRecordError):
        query.run()
    assert spark.stopped.is_set()
