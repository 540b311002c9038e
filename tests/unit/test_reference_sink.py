"""Unit tests of ReferenceSink, the SQLite-backed reference implementation of the sink contract."""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eosink import faults
from eosink.connectors.reference import ReferenceSink
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, TaskRef
from eosink.errors import (
    BadRecordError,
    CommitAbortedError,
    ConfigurationError,
    FencedError,
    InjectedFault,
    SchemaError,
)

APP = "app"


def task(
    batch_id: int = 0,
    participant: int = 0,
    *,
    app_id: str = APP,
    epoch: int = 1,
    attempt: str = "a0",
    upsert_keys: tuple[str, ...] | None = None,
    transactional: bool = True,
) -> TaskRef:
    return TaskRef(BatchRef(app_id, batch_id), epoch, participant, attempt, upsert_keys, transactional)


def prepare(sink: ReferenceSink, t: TaskRef, rows: list[dict[str, Any]]) -> Committable:
    txn = sink.begin(t)
    sink.write(txn, pa.RecordBatch.from_pylist(rows))
    return sink.pre_commit(txn)


def bundle_of(batch: BatchRef, committables: Sequence[Committable], epoch: int = 1) -> Bundle:
    return Bundle(batch, epoch, Fingerprint(), tuple(c.id for c in committables), strategy="test")


@pytest.fixture
def sink(tmp_path: Path) -> ReferenceSink:
    s = ReferenceSink(tmp_path / "sink.db")
    s.setup(APP)
    return s


def test_capabilities_follow_atomic_option(tmp_path: Path) -> None:
    assert ReferenceSink(tmp_path / "a.db").capabilities.atomic_batch_visibility is True
    caps = ReferenceSink(tmp_path / "b.db", atomic=False).capabilities
    assert caps.atomic_batch_visibility is False
    assert caps.supports_prepare and caps.supports_txid_status and caps.supports_keys and caps.supports_recover


def test_upsert_mode_needs_key_columns(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError):
        ReferenceSink(tmp_path / "s.db", mode="upsert")


def test_pre_commit_is_invisible_until_commit(sink: ReferenceSink) -> None:
    c = prepare(sink, task(), [{"x": 1}, {"x": 2}])
    assert c.rows == 2 and c.id == "app:0:0:a0"
    assert sink.rows() == []
    assert sink.fetch_last_bundle(APP) is None
    assert sink.commit_status(c.batch, [c]) is CommitStatus.PREPARED

    sink.commit(c.batch, [c], bundle_of(c.batch, [c]))
    assert sink.rows(APP) == [{"x": 1}, {"x": 2}]


def test_commit_makes_rows_and_bundle_visible_together(sink: ReferenceSink) -> None:
    batch = BatchRef(APP, 0)
    cs = [prepare(sink, task(participant=p), [{"p": p, "i": i} for i in range(3)]) for p in range(2)]
    bundle = bundle_of(batch, cs)
    assert (sink.rows(), sink.bundles(APP)) == ([], [])

    sink.commit(batch, cs, bundle)
    assert len(sink.rows(APP)) == 6
    assert sink.fetch_last_bundle(APP) == bundle
    assert sink.bundles(APP) == [bundle]
    assert sink.commit_status(batch, cs) is CommitStatus.COMMITTED
    assert sink.recover(APP) == [] and sink.in_doubt_count(APP) == 0


def test_fetch_last_bundle_is_the_highest_batch(sink: ReferenceSink) -> None:
    for batch_id in (0, 2, 1):
        c = prepare(sink, task(batch_id), [{"b": batch_id}])
        sink.commit(c.batch, [c], bundle_of(c.batch, [c]))
    last = sink.fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 2
    assert [b.batch.batch_id for b in sink.bundles(APP)] == [0, 1, 2]
    assert sink.fetch_last_bundle("other") is None


def test_commit_is_idempotent(sink: ReferenceSink) -> None:
    c = prepare(sink, task(), [{"x": 1}])
    bundle = bundle_of(c.batch, [c])
    sink.commit(c.batch, [c], bundle)
    sink.commit(c.batch, [c], bundle)
    assert sink.rows() == [{"x": 1}]
    assert sink.bundles(APP) == [bundle]


def test_commit_of_a_batch_committed_by_another_attempt_raises(sink: ReferenceSink) -> None:
    first = prepare(sink, task(attempt="a0"), [{"x": 1}])
    second = prepare(sink, task(attempt="a1"), [{"x": 1}])
    sink.commit(first.batch, [first], bundle_of(first.batch, [first]))
    with pytest.raises(CommitAbortedError, match="already committed"):
        sink.commit(second.batch, [second], bundle_of(second.batch, [second]))
    assert sink.rows() == [{"x": 1}]


def test_abort_is_idempotent(sink: ReferenceSink) -> None:
    c = prepare(sink, task(), [{"x": 1}])
    unknown = Committable(c.batch, 1, 9, "app:0:9:never")
    sink.abort([c, unknown])
    sink.abort([c, unknown])
    assert sink.commit_status(c.batch, [c]) is CommitStatus.ABORTED
    assert sink.recover(APP) == []
    assert sink.rows() == []


def test_abort_after_commit_raises(sink: ReferenceSink) -> None:
    c = prepare(sink, task(), [{"x": 1}])
    sink.commit(c.batch, [c], bundle_of(c.batch, [c]))
    with pytest.raises(CommitAbortedError, match="abort committed work"):
        sink.abort([c])
    assert sink.rows() == [{"x": 1}]


def test_commit_of_an_aborted_committable_raises_and_publishes_nothing(sink: ReferenceSink) -> None:
    batch = BatchRef(APP, 0)
    good = prepare(sink, task(participant=0), [{"x": 1}])
    gone = prepare(sink, task(participant=1), [{"x": 2}])
    sink.abort([gone])
    with pytest.raises(CommitAbortedError, match=gone.id):
        sink.commit(batch, [good, gone], bundle_of(batch, [good, gone]))
    assert sink.rows() == []
    assert sink.fetch_last_bundle(APP) is None
    assert sink.commit_status(batch, [good, gone]) is CommitStatus.ABORTED


def test_fence_rejects_the_older_epoch(sink: ReferenceSink) -> None:
    assert sink.fence(APP) == 1
    batch = BatchRef(APP, 0)
    prepared = prepare(sink, task(epoch=1, participant=0), [{"x": 1}])
    zombie = sink.begin(task(epoch=1, participant=1))
    sink.write(zombie, pa.RecordBatch.from_pylist([{"x": 2}]))

    assert sink.fence(APP) == 2
    with pytest.raises(FencedError, match=r"'app'.*epoch 1.*epoch 2"):
        sink.pre_commit(zombie)
    with pytest.raises(FencedError):
        sink.write(zombie, pa.RecordBatch.from_pylist([{"x": 3}]))
    with pytest.raises(FencedError, match="only the newest may commit"):
        sink.commit(batch, [prepared], bundle_of(batch, [prepared], epoch=1))
    assert sink.rows() == []
    # The fence aborted the zombie's open work but kept prepared work for recovery.
    assert sink.commit_status(batch, [prepared, Committable(batch, 1, 1, zombie.id)]) is CommitStatus.ABORTED
    assert [c.id for c in sink.recover(APP)] == [prepared.id]

    # The new epoch's writer recovers and commits the prepared work.
    sink.commit(batch, [prepared], bundle_of(batch, [prepared], epoch=2))
    assert sink.rows() == [{"x": 1}]


def test_fence_is_per_app_id(sink: ReferenceSink) -> None:
    assert sink.fence("a") == 1
    assert sink.fence("a") == 2
    assert sink.fence("b") == 1


def test_recover_lists_only_prepared_work_of_the_app(sink: ReferenceSink) -> None:
    committed = prepare(sink, task(0), [{"x": 0}])
    sink.commit(committed.batch, [committed], bundle_of(committed.batch, [committed]))
    aborted = prepare(sink, task(1, 0), [{"x": 1}])
    sink.abort([aborted])
    sink.begin(task(1, 1))  # open, never prepared
    later = prepare(sink, task(3, 0), [{"x": 3}])
    p1 = prepare(sink, task(2, 1), [{"x": 21}, {"x": 22}])
    p0 = prepare(sink, task(2, 0), [{"x": 20}])
    other = prepare(sink, task(2, 0, app_id="other"), [{"x": 99}])

    recovered = sink.recover(APP)
    assert recovered == [p0, p1, later]
    assert recovered[1].rows == 2
    assert sink.in_doubt_count(APP) == 3
    assert sink.recover("other") == [other]
    assert sink.recover("nobody") == []


def test_upsert_mode_keeps_the_last_value_per_key(tmp_path: Path) -> None:
    sink = ReferenceSink(tmp_path / "u.db", mode="upsert", key_columns=["k"])
    c0 = prepare(sink, task(0), [{"k": 1, "v": "a"}, {"k": 2, "v": "b"}, {"k": 1, "v": "c"}])
    sink.commit(c0.batch, [c0], bundle_of(c0.batch, [c0]))
    assert sink.rows() == [{"k": 1, "v": "c"}, {"k": 2, "v": "b"}]

    c1 = prepare(sink, task(1), [{"k": 2, "v": "d"}, {"k": 3, "v": "e"}])
    sink.commit(c1.batch, [c1], bundle_of(c1.batch, [c1]))
    assert sorted(sink.rows(), key=lambda r: r["k"]) == [
        {"k": 1, "v": "c"},
        {"k": 2, "v": "d"},
        {"k": 3, "v": "e"},
    ]


def test_null_key_raises_bad_record_and_writes_nothing(sink: ReferenceSink) -> None:
    txn = sink.begin(task(upsert_keys=("k",), transactional=False))
    with pytest.raises(BadRecordError, match="'k'") as info:
        sink.write(txn, pa.RecordBatch.from_pylist([{"k": 1}, {"k": None}]))
    assert info.value.fix is not None and "null" in info.value.fix
    assert sink.rows() == []


def test_missing_key_column_raises_schema_error(tmp_path: Path) -> None:
    sink = ReferenceSink(tmp_path / "u.db", mode="upsert", key_columns=["k", "j"])
    txn = sink.begin(task())
    with pytest.raises(SchemaError, match="'j'"):
        sink.write(txn, pa.RecordBatch.from_pylist([{"k": 1, "v": 2}]))


def test_non_transactional_task_is_visible_after_write(sink: ReferenceSink) -> None:
    t = task(upsert_keys=("k",), transactional=False)
    txn = sink.begin(t)
    sink.write(txn, pa.RecordBatch.from_pylist([{"k": 1, "v": "a"}]))
    assert sink.rows() == [{"k": 1, "v": "a"}]

    c = sink.pre_commit(txn)
    assert sink.recover(APP) == []
    # A replay of the same batch upserts the same keys: no duplicate.
    replay = prepare(sink, task(upsert_keys=("k",), transactional=False, attempt="a1"), [{"k": 1, "v": "a"}])
    sink.commit(c.batch, [c, replay], bundle_of(c.batch, [c, replay]))
    assert sink.rows() == [{"k": 1, "v": "a"}]
    assert sink.commit_status(c.batch, [c, replay]) is CommitStatus.COMMITTED


def test_non_atomic_partial_commit_is_prepared_and_completed_by_a_second_commit(tmp_path: Path) -> None:
    sink = ReferenceSink(tmp_path / "n.db", atomic=False)
    batch = BatchRef(APP, 0)
    cs = [prepare(sink, task(participant=p), [{"p": p}]) for p in range(2)]
    bundle = bundle_of(batch, cs)
    faults.configure("F6:raise")
    try:
        with pytest.raises(InjectedFault):
            sink.commit(batch, cs, bundle)
    finally:
        faults.reset()
    assert sink.rows() == [{"p": 0}]  # a partial batch
    assert sink.fetch_last_bundle(APP) is None
    assert sink.commit_status(batch, cs) is CommitStatus.PREPARED

    sink.commit(batch, cs, bundle)
    assert sink.rows() == [{"p": 0}, {"p": 1}]
    assert sink.fetch_last_bundle(APP) == bundle
    assert sink.commit_status(batch, cs) is CommitStatus.COMMITTED


def test_pickles_and_works_after(sink: ReferenceSink) -> None:
    c = prepare(sink, task(0), [{"x": 0}])  # opens a connection, which must not travel
    copy = pickle.loads(pickle.dumps(sink))
    assert repr(copy) == repr(sink) and str(sink.path) in repr(sink)
    assert copy.capabilities == sink.capabilities
    c1 = prepare(copy, task(0, 1), [{"x": 1}])
    copy.commit(c.batch, [c, c1], bundle_of(c.batch, [c, c1]))
    assert sink.rows() == [{"x": 0}, {"x": 1}]
    copy.close()
    sink.close()
    assert sink.rows() == [{"x": 0}, {"x": 1}]  # reopens after close


def test_threads_write_concurrently(sink: ReferenceSink) -> None:
    def work(p: int) -> Committable:
        return prepare(sink, task(participant=p), [{"p": p, "i": i} for i in range(10)])

    with ThreadPoolExecutor(4) as pool:
        cs = list(pool.map(work, range(8)))
    batch = BatchRef(APP, 0)
    sink.commit(batch, cs, bundle_of(batch, cs))
    assert len(sink.rows()) == 80


def _write_share(sink: ReferenceSink, participant: int, start: Any, out: Any) -> None:
    """Child process: wait for the others, then write one participant's share in many small writes."""
    start.wait()
    txn = sink.begin(task(participant=participant))
    for chunk in range(20):
        sink.write(txn, pa.RecordBatch.from_pylist([{"p": participant, "c": chunk, "i": i} for i in range(5)]))
    out.put(sink.pre_commit(txn))
    sink.close()


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_concurrent_writers_in_three_processes(sink: ReferenceSink, method: str) -> None:
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {method} start method here")
    ctx = multiprocessing.get_context("spawn") if method == "spawn" else multiprocessing.get_context("fork")
    sink.rows()  # the parent holds an open connection: forked children must not reuse it
    start, out = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_write_share, args=(sink, p, start, out)) for p in range(3)]
    for proc in procs:
        proc.start()
    committables = sorted((out.get(timeout=120) for _ in procs), key=lambda c: c.participant)
    for proc in procs:
        proc.join(timeout=120)
        assert proc.exitcode == 0
    assert sink.rows() == [] and sink.in_doubt_count(APP) == 3

    batch = BatchRef(APP, 0)
    sink.commit(batch, committables, bundle_of(batch, committables))
    rows = sink.rows(APP)
    assert len(rows) == 3 * 20 * 5
    assert {(r["p"], r["c"], r["i"]) for r in rows} == {
        (p, c, i) for p in range(3) for c in range(20) for i in range(5)
    }
