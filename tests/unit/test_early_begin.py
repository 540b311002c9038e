"""A participant's ``begin`` before its first row (``Capabilities.begin_before_rows``).

A sink that allows it has ``begin`` run on a thread of its own from the participant's start, so that
its round trips overlap Spark reading the first rows; a participant that then gets no rows commits
its empty transaction with the batch. A sink that does not allow it begins at the first row.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from unit_conftest import APP, MemoryBatch, MiniSpark, Variant, make_rows

from eosink.connectors.reference import ReferenceSink
from eosink.contract import BatchRef, Capabilities, Committable
from eosink.errors import FencedError
from eosink.participant import WritePlan, run_participants
from eosink.strategies import TwoPhaseCommit, TxidCheck


class _Sink:
    """Records on which thread ``begin`` ran and whether a row had been read by then."""

    def __init__(self, early: bool, error: BaseException | None = None) -> None:
        self.capabilities = Capabilities(begin_before_rows=early)
        self.error = error
        self.begun = threading.Event()
        self.begin_thread: str | None = None
        self.rows_read_at_begin: int | None = None
        self.rows_read = 0
        self.calls: list[str] = []

    def begin(self, task: Any) -> list[pa.RecordBatch]:
        self.begin_thread = threading.current_thread().name
        self.rows_read_at_begin = self.rows_read
        self.calls.append("begin")
        self.begun.set()
        if self.error is not None:
            raise self.error
        return []

    def write(self, txn: list[pa.RecordBatch], batch: pa.RecordBatch) -> None:
        self.calls.append("write")
        txn.append(batch)

    def pre_commit(self, txn: list[pa.RecordBatch]) -> Committable:
        self.calls.append("pre_commit")
        return Committable(BatchRef("app", 3), 1, 0, "prepared", rows=sum(b.num_rows for b in txn))


def _plan(sink: _Sink) -> WritePlan:
    return WritePlan(sink, BatchRef("app", 3), 1, None, True, False, 0)  # type: ignore[arg-type]


def _rows(sink: _Sink, n: int, *, wait_for_begin: bool) -> Iterator[pa.RecordBatch]:
    """``n`` batches of 5 rows, as Spark hands them over; ``wait_for_begin``: the first only once ``begin`` ran
    (a participant that begins at the first row would wait here forever, so the wait is bounded)."""
    if wait_for_begin:
        assert sink.begun.wait(10), "begin did not run before the first row was handed over"
    for i in range(n):
        sink.rows_read += 5
        yield pa.record_batch({"id": list(range(i * 5, i * 5 + 5))})


def test_a_sink_that_allows_it_begins_on_its_own_thread_before_the_first_row() -> None:
    """Pass: begin ran on another thread than the reader's, with no row read yet; every row written once."""
    sink = _Sink(early=True)
    [made] = run_participants([_plan(sink)], 0, _rows(sink, 4, wait_for_begin=True))
    assert sink.begin_thread is not None and sink.begin_thread != threading.current_thread().name
    assert sink.rows_read_at_begin == 0
    assert sink.calls == ["begin"] + ["write"] * 4 + ["pre_commit"]
    assert made is not None and made.rows == 20 and made.fingerprint.rows == 20


def test_a_sink_that_does_not_begins_at_the_first_row_on_the_readers_thread() -> None:
    """Pass: begin ran on the reader's thread after the first batch was read (the default)."""
    sink = _Sink(early=False)
    run_participants([_plan(sink)], 0, _rows(sink, 2, wait_for_begin=False))
    assert sink.begin_thread == threading.current_thread().name
    assert sink.rows_read_at_begin == 5


def test_no_rows_after_an_early_begin_pre_commits_the_empty_transaction() -> None:
    """Pass: the participant hands back a committable of 0 rows (the batch commits it), not None."""
    sink = _Sink(early=True)
    [made] = run_participants([_plan(sink)], 0, iter([pa.record_batch({"id": pa.array([], pa.int64())})]))
    assert sink.calls == ["begin", "pre_commit"]
    assert made is not None and made.rows == 0


def test_an_early_begin_that_fails_raises_its_own_error_in_the_participant() -> None:
    """Pass: the sink's FencedError reaches the caller's thread as itself; nothing was written."""
    sink = _Sink(early=True, error=FencedError("a newer writer holds the app_id", "stop this one"))
    with pytest.raises(FencedError, match="newer writer"):
        run_participants([_plan(sink)], 0, _rows(sink, 3, wait_for_begin=True))
    assert "write" not in sink.calls


class _EarlyReferenceSink(ReferenceSink):
    def __init__(self, db: Path) -> None:
        super().__init__(db)
        self.capabilities = replace(self.capabilities, begin_before_rows=True)


@pytest.mark.parametrize(
    "variant", [Variant("2pc", TwoPhaseCommit), Variant("txid-check", TxidCheck)], ids=lambda v: v.id
)
def test_batches_with_empty_participants_land_exactly_once(tmp_path: Path, variant: Variant) -> None:
    """A sink that begins early, batches whose participants are partly or wholly empty (four participants, three
    rows), and an empty batch. Pass: exact; each empty participant's committable is in its batch's bundle and
    committed (none left prepared for recovery); a restart recovers nothing."""
    batches = [MemoryBatch(make_rows(b)[:3], participants=4, chunk=1) for b in range(2)] + [
        MemoryBatch([], participants=4)
    ]
    ms = MiniSpark(tmp_path, variant, batches, sink_factory=_EarlyReferenceSink)
    ms.run()
    ms.assert_exact()
    bundles = ms.reader().bundles(APP)
    assert [len(b.committables) for b in bundles] == [4, 4, 4]
    assert bundles[2].fingerprint.rows == 0
    assert ms.coordinator.sink.recover(APP) == []
    restarted = ms.new_coordinator()
    assert restarted.recovery_plan().batches == ()
