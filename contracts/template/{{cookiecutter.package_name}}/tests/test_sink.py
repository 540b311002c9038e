"""Direct tests of {{ cookiecutter.class_name }}: each rule of the contract, one small case each.

The contract suite (test_contract.py) covers the same rules and much more (crashes at every line,
the real coordinator, random schedules); these cases are quick to read and to debug.
"""

from __future__ import annotations

import pickle
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, TaskRef
from eosink.errors import CommitAbortedError, ConfigurationError, FencedError

from {{ cookiecutter.package_name }} import (
    {{ cookiecutter.class_name }},
    {{ cookiecutter.class_name }}Config,
    read_rows,
)

APP, OTHER = "app_a", "app_b"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "out"


def make(root: Path) -> {{ cookiecutter.class_name }}:
    """A sink from configuration only, as a new process would make it."""
    return {{ cookiecutter.class_name }}({{ cookiecutter.class_name }}Config(root=root))


def rows(batch: BatchRef, participant: int, n: int = 3) -> list[dict[str, Any]]:
    return [{"id": batch.batch_id * 100 + participant * 10 + i, "name": f"{batch}/{participant}/{i}"} for i in range(n)]


def prepare(sink: {{ cookiecutter.class_name }}, batch: BatchRef, epoch: int, p: int = 0) -> Committable:
    """Participant ``p``'s begin / write (two record batches) / pre_commit."""
    txn = sink.begin(TaskRef(batch, epoch, p, attempt=f"a{p}"))
    data = rows(batch, p)
    sink.write(txn, pa.RecordBatch.from_pylist(data[:1]))
    sink.write(txn, pa.RecordBatch.from_pylist(data[1:]))
    return sink.pre_commit(txn)


def bundle(batch: BatchRef, epoch: int, committables: list[Committable]) -> Bundle:
    return Bundle(batch, epoch, Fingerprint(), tuple(c.id for c in committables))


def ids(found: list[dict[str, Any]]) -> list[int]:
    return sorted(r["id"] for r in found)


def test_config_refuses_a_relative_root() -> None:
    with pytest.raises(ConfigurationError, match="absolute"):
        {{ cookiecutter.class_name }}Config(root=Path("relative/out"))


def test_config_refuses_a_file_as_root(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigurationError, match="not a directory"):
        {{ cookiecutter.class_name }}Config(root=tmp_path / "file")


def test_pre_commit_is_invisible(root: Path) -> None:
    sink = make(root)
    batch = BatchRef(APP, 0)
    c = prepare(sink, batch, sink.fence(APP))
    assert read_rows(root) == []
    assert sink.fetch_last_bundle(APP) is None
    assert c.rows == 3 and (root / c.payload["staged"]).exists()


def test_commit_makes_rows_visible_with_the_bundle(root: Path) -> None:
    sink = make(root)
    batch, epoch = BatchRef(APP, 0), sink.fence(APP)
    cs = [prepare(sink, batch, epoch, p) for p in range(2)]
    sink.commit(batch, cs, bundle(batch, epoch, cs))
    assert ids(read_rows(root)) == ids(rows(batch, 0) + rows(batch, 1))
    assert sink.fetch_last_bundle(APP) == bundle(batch, epoch, cs)


def test_commit_twice_shows_rows_once(root: Path) -> None:
    sink = make(root)
    batch, epoch = BatchRef(APP, 0), sink.fence(APP)
    cs = [prepare(sink, batch, epoch)]
    sink.commit(batch, cs, bundle(batch, epoch, cs))
    sink.commit(batch, cs, bundle(batch, epoch, cs))
    make(root).commit(batch, cs, bundle(batch, epoch, cs))
    assert ids(read_rows(root)) == ids(rows(batch, 0))


def test_commit_of_the_batch_with_other_committables_is_refused(root: Path) -> None:
    sink = make(root)
    batch, epoch = BatchRef(APP, 0), sink.fence(APP)
    first, second = prepare(sink, batch, epoch, 0), prepare(sink, batch, epoch, 1)
    sink.commit(batch, [first], bundle(batch, epoch, [first]))
    with pytest.raises(CommitAbortedError):
        sink.commit(batch, [second], bundle(batch, epoch, [second]))


def test_abort_twice_is_fine(root: Path) -> None:
    sink = make(root)
    batch, epoch = BatchRef(APP, 0), sink.fence(APP)
    cs = [prepare(sink, batch, epoch)]
    sink.abort(cs)
    sink.abort(cs)
    make(root).abort(cs)
    assert read_rows(root) == [] and sink.recover(APP) == []
    with pytest.raises(CommitAbortedError):
        sink.commit(batch, cs, bundle(batch, epoch, cs))


def test_abort_of_unknown_work_is_ignored(root: Path) -> None:
    make(root).abort([Committable(BatchRef(APP, 0), 1, 0, "no-such-id"), Committable(BatchRef(APP, 0), 1, 0, "../x")])


def test_abort_after_commit_raises(root: Path) -> None:
    sink = make(root)
    batch, epoch = BatchRef(APP, 0), sink.fence(APP)
    cs = [prepare(sink, batch, epoch)]
    sink.commit(batch, cs, bundle(batch, epoch, cs))
    with pytest.raises(CommitAbortedError):
        sink.abort(cs)
    assert ids(read_rows(root)) == ids(rows(batch, 0))


def test_commit_status_tells_the_truth(root: Path) -> None:
    sink = make(root)
    epoch = sink.fence(APP)
    prepared, committed, aborted = (BatchRef(APP, b) for b in range(3))
    p, c, a = ([prepare(sink, b, epoch, i) for i in range(2)] for b in (prepared, committed, aborted))
    sink.commit(committed, c, bundle(committed, epoch, c))
    sink.abort(a[:1])  # one share gone: the batch can no longer be committed
    other = make(root)
    assert other.commit_status(prepared, p) is CommitStatus.PREPARED
    assert other.commit_status(committed, c) is CommitStatus.COMMITTED
    assert other.commit_status(aborted, a) is CommitStatus.ABORTED


def test_a_crash_before_the_bundle_leaves_a_prepared_batch_that_commit_completes(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = make(root)
    batch, epoch = BatchRef(APP, 0), sink.fence(APP)
    cs = [prepare(sink, batch, epoch, p) for p in range(2)]
    write_atomic = sink._write_atomic

    def crash_on_bundle(path: Path, text: str) -> None:
        if "_bundles" in path.parts:
            raise KeyboardInterrupt("the driver dies before writing the bundle")
        write_atomic(path, text)

    monkeypatch.setattr(sink, "_write_atomic", crash_on_bundle)
    with pytest.raises(KeyboardInterrupt):
        sink.commit(batch, cs, bundle(batch, epoch, cs))
    other = make(root)
    assert other.commit_status(batch, cs) is CommitStatus.PREPARED  # all rows visible, no bundle yet
    assert other.fetch_last_bundle(APP) is None
    other.commit(batch, cs, bundle(batch, epoch, cs))
    assert other.commit_status(batch, cs) is CommitStatus.COMMITTED
    assert ids(read_rows(root)) == ids(rows(batch, 0) + rows(batch, 1))


def test_recover_lists_only_its_own_app_ids_prepared_work(root: Path) -> None:
    sink = make(root)
    epoch_a, epoch_b = sink.fence(APP), sink.fence(OTHER)
    done = BatchRef(APP, 0)
    cs = [prepare(sink, done, epoch_a)]
    sink.commit(done, cs, bundle(done, epoch_a, cs))
    mine = [prepare(sink, BatchRef(APP, 1), epoch_a, p) for p in range(2)]
    theirs = [prepare(sink, BatchRef(OTHER, 1), epoch_b)]
    other = make(root)
    assert sorted(c.id for c in other.recover(APP)) == sorted(c.id for c in mine)
    assert [c.id for c in other.recover(OTHER)] == [c.id for c in theirs]


def test_fence_hands_out_increasing_epochs_and_fences_older_ones(root: Path) -> None:
    sink = make(root)
    old = sink.fence(APP)
    batch = BatchRef(APP, 0)
    txn = sink.begin(TaskRef(batch, old, 0, "zombie"))
    new = make(root).fence(APP)
    assert new > old
    assert list(root.glob("_staging/*/*.jsonl")) == []  # the older writer's open work is gone
    with pytest.raises(FencedError):
        sink.pre_commit(txn)
    with pytest.raises(FencedError):
        sink.begin(TaskRef(batch, old, 1, "late"))
    cs = [prepare(sink, batch, new)]
    with pytest.raises(FencedError):
        sink.commit(batch, cs, bundle(batch, old, cs))
    assert make(root).fence(OTHER) == 1  # epochs are per app_id


def test_concurrent_fences_never_hand_out_the_same_epoch(root: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        epochs = list(pool.map(lambda _: make(root).fence(APP), range(40)))
    assert sorted(epochs) == list(range(1, 41))


def test_prepared_work_survives_a_new_sink_and_pickling(root: Path) -> None:
    sink = pickle.loads(pickle.dumps(make(root)))  # what an executor gets
    batch, epoch = BatchRef(APP, 0), sink.fence(APP)
    cs = [prepare(sink, batch, epoch, p) for p in range(2)]
    other = make(root)  # e.g. the driver after a restart
    recovered = other.recover(APP)
    assert sorted(c.id for c in recovered) == sorted(c.id for c in cs)
    other.commit(batch, recovered, bundle(batch, epoch, cs))
    assert ids(read_rows(root)) == ids(rows(batch, 0) + rows(batch, 1))


def test_writing_after_abort_is_refused(root: Path) -> None:
    sink = make(root)
    batch, epoch = BatchRef(APP, 0), sink.fence(APP)
    txn = sink.begin(TaskRef(batch, epoch, 0, "a0"))
    sink.write(txn, pa.RecordBatch.from_pylist(rows(batch, 0)))
    sink.abort([Committable(batch, epoch, 0, txn.id)])  # the coordinator gave up on this attempt
    with pytest.raises(CommitAbortedError):
        sink.write(txn, pa.RecordBatch.from_pylist(rows(batch, 0)))
    with pytest.raises(CommitAbortedError):
        sink.pre_commit(txn)
