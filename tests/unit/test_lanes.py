"""A fan-out participant writes its sinks side by side (`eosink._lanes`), each sink's transaction on a thread of its
own: the same batches in the same order as one after the other, errors out of the task with their own type, and no
thread left writing after a failure."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from eosink.contract import BatchRef, Committable
from eosink.participant import WritePlan, run_participants


class _Sink:
    """Records what a participant asks of it, and on which thread; ``fail_at`` makes the n-th write fail."""

    def __init__(self, name: str, fail_at: int | None = None, gate: threading.Event | None = None) -> None:
        self.name, self.fail_at, self.gate = name, fail_at, gate
        self.calls: list[tuple[str, Any]] = []
        self.threads: set[str] = set()

    def begin(self, task: Any) -> list[pa.RecordBatch]:
        self.threads.add(threading.current_thread().name)
        self.calls.append(("begin", task.participant))
        return []

    def write(self, txn: list[pa.RecordBatch], batch: pa.RecordBatch) -> None:
        self.threads.add(threading.current_thread().name)
        if self.gate is not None:
            assert self.gate.wait(30), "the test never opened the gate"
        if self.fail_at is not None and len(txn) == self.fail_at:
            raise PermissionError(f"{self.name}: no INSERT grant")
        txn.append(batch)
        self.calls.append(("write", batch.num_rows))

    def pre_commit(self, txn: list[pa.RecordBatch]) -> Committable:
        self.threads.add(threading.current_thread().name)
        self.calls.append(("pre_commit", sum(b.num_rows for b in txn)))
        return Committable(BatchRef("app", 3), 1, 0, f"{self.name}-prepared")


def _plan(sink: _Sink) -> WritePlan:
    return WritePlan(sink, BatchRef("app", 3), 1, None, True, False, 0)  # type: ignore[arg-type]


def _batches(n: int, rows: int = 5, fail_after: int | None = None) -> Iterator[pa.RecordBatch]:
    for i in range(n):
        if fail_after is not None and i == fail_after:
            raise OSError("Spark's input stream ended early")
        yield pa.record_batch({"id": list(range(i * rows, (i + 1) * rows))})


def _lane_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("eosink-lane")]


def test_each_sink_gets_every_batch_in_order_on_its_own_thread_and_the_same_committable_fields() -> None:
    """Pass: both sinks see begin, the 20 writes in order and one pre-commit, each on one lane thread (not the
    reader's, not the other sink's); the committables carry the pass's row count and one shared fingerprint."""
    a, b = _Sink("a"), _Sink("b")
    made = run_participants([_plan(a), _plan(b)], 0, _batches(20))
    expected = [("begin", 0)] + [("write", 5)] * 20 + [("pre_commit", 100)]
    assert a.calls == b.calls == expected
    assert len(a.threads) == len(b.threads) == 1 and a.threads != b.threads
    assert threading.current_thread().name not in a.threads | b.threads
    assert [c.id for c in made if c is not None] == ["a-prepared", "b-prepared"]
    assert made[0] is not None and made[1] is not None
    assert made[0].rows == made[1].rows == 100 and made[0].fingerprint == made[1].fingerprint
    assert made[0].fingerprint.rows == 100


def test_no_rows_opens_no_transaction_in_any_sink() -> None:
    """Pass: a participant with only empty batches returns None per sink, and no sink saw a call."""
    a, b = _Sink("a"), _Sink("b")
    empty = pa.record_batch({"id": pa.array([], pa.int64())})
    assert run_participants([_plan(a), _plan(b)], 0, iter([empty, empty])) == [None, None]
    assert a.calls == b.calls == []


def test_a_sink_that_fails_stops_the_task_with_its_own_error_and_the_other_lane_stops_writing() -> None:
    """Pass: the second sink's failure on its 3rd write comes out of the task as that PermissionError; neither
    sink pre-commits; the first sink wrote no more than the reader had handed it (queue-bounded), and both
    lanes are idle again (no thread still writing)."""
    a, b = _Sink("a"), _Sink("b", fail_at=2)
    with pytest.raises(PermissionError, match="b: no INSERT grant"):
        run_participants([_plan(a), _plan(b)], 0, _batches(200))
    assert not any(c[0] == "pre_commit" for c in a.calls + b.calls)
    assert sum(c[0] == "write" for c in a.calls) <= 10, a.calls
    assert [c for c in b.calls if c[0] == "write"] == [("write", 5)] * 2


def test_a_reader_that_fails_stops_every_lane_before_the_task_ends() -> None:
    """Pass: the input failing after 4 batches is the task's error; both sinks wrote exactly those 4 batches
    (nothing queued is lost or written after the task ended) and pre-committed nothing; a lane blocked in a
    write is waited for, not left running behind the task."""
    gate = threading.Event()
    a, b = _Sink("a", gate=gate), _Sink("b")
    threading.Timer(0.2, gate.set).start()  # the first sink's writes resume a moment later, before or after the failure
    with pytest.raises(OSError, match="input stream ended early"):
        run_participants([_plan(a), _plan(b)], 0, _batches(10, fail_after=4))
    written_a = [c for c in a.calls if c[0] == "write"]
    assert len(written_a) <= 4 and [c for c in b.calls if c[0] == "write"] == [("write", 5)] * 4
    assert not any(c[0] == "pre_commit" for c in a.calls + b.calls)
    calls_then = list(a.calls)
    run_participants([_plan(_Sink("c")), _plan(_Sink("d"))], 0, _batches(3))  # the lanes serve a next task
    assert a.calls == calls_then  # stopped: nothing written after the task ended


def test_lane_threads_are_reused_by_the_next_task() -> None:
    """Pass: ten fan-out tasks one after another leave no more lane threads than two tasks did (a sink's
    per-thread connections stay bounded)."""
    run_participants([_plan(_Sink("a")), _plan(_Sink("b"))], 0, _batches(2))
    run_participants([_plan(_Sink("a")), _plan(_Sink("b"))], 0, _batches(2))
    before = len(_lane_threads())
    for _ in range(10):
        run_participants([_plan(_Sink("a")), _plan(_Sink("b"))], 0, _batches(2))
    assert len(_lane_threads()) == before <= 4
