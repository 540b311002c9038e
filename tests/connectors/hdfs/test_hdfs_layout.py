"""Where committed batches live on the real cluster: batch ranges, the last bundle found without the history,
nothing kept per batch after its commit, and flat targets of earlier versions read, written and migrated."""

from __future__ import annotations

import logging
import pickle
from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink, _batches, admin, read_committed
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs.admin import migrate_layout
from eosink.connectors.hdfs.testing import COMMIT_REQUEST_MARKER, listed_rows
from eosink.contract import BatchRef, CommitStatus, TaskRef
from eosink.contracts._steps import bundle_for, canon, prepare, rows_for
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.errors import ConfigurationError

from .conftest import Prepared, prepared_batch

APP = "layout-app"
OTHER = "layout-other"


def commit(sink: HdfsSink, app: str, batch_id: int, *, transactional: bool = True) -> Prepared:
    """Batch ``batch_id`` of ``app`` prepared by two participants and committed; what was written."""
    epoch = sink.current_epoch(app) or sink.fence(app)
    batch = BatchRef(app, batch_id)
    shares = [rows_for(app, batch_id, p, 3) for p in range(2)]
    made = [prepare(sink, batch, epoch, p, rows, transactional=transactional) for p, rows in enumerate(shares)]
    bundle = bundle_for(batch, epoch, made, "2pc" if transactional else "idempotent")
    sink.commit(batch, made, bundle)
    return Prepared(batch, made, bundle, [r for s in shares for r in s])


def test_committed_batches_sit_in_ranges_and_the_target_is_marked_grouped(target: str) -> None:
    """Batches 0, 999, 1000 and 2500 of one app, batch 3 of another, into a new target.

    Pass: each batch is at eosink_range=<app>-<first>/eosink_batch=<batch> (RANGE = 1000); the target holds
    the range directories and _eosink only, and _eosink/layout.json names the grouped layout; the last bundle
    is batch 2500's; a reader of the records sees every row once."""
    config = HdfsConfig(target)
    sink = HdfsSink(config)
    rows = [r for b in (0, 999, 1000, 2500) for r in commit(sink, APP, b).rows] + commit(sink, OTHER, 3).rows

    assert sink.fs.names(sink.root) == sorted(
        [L.OWN_DIR] + [L.range_dir_name(APP, f) for f in (0, 1000, 2000)] + [L.range_dir_name(OTHER, 0)]
    )
    in_first = sink.fs.names(f"{sink.root}/{L.range_dir_name(APP, 0)}")
    assert in_first == [L.grouped_batch_dir_name(0), L.grouped_batch_dir_name(999)]
    assert sink.fs.read_text(f"{sink.root}/_eosink/layout.json") == '{"layout": "grouped", "range": 1000}'
    last = HdfsSink(config).fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 2500
    assert canon(read_committed(config).to_pylist()) == canon(rows)


def test_the_last_bundle_is_found_behind_a_newest_batch_without_a_record_across_ranges(target: str) -> None:
    """Batch 999 committed; batch 1000 (idempotent) has published its files into a new range but has no record
    yet. Pass: fetch_last_bundle answers batch 999 (walking back into the older range), and batch 1000 once it
    commits."""
    sink = HdfsSink(HdfsConfig(target))
    commit(sink, APP, 999)
    epoch = sink.current_epoch(APP)
    batch = BatchRef(APP, 1000)
    made = [prepare(sink, batch, epoch, 0, rows_for(APP, 1000, 0, 3), transactional=False)]
    assert sink.fs.exists(sink._final(APP, 1000))
    last = HdfsSink(HdfsConfig(target)).fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 999
    sink.commit(batch, made, bundle_for(batch, epoch, made, "idempotent"))
    last = HdfsSink(HdfsConfig(target)).fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 1000


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "idempotent"])
def test_a_commit_leaves_no_pending_directory_behind_without_a_fence_in_between(
    target: str, transactional: bool
) -> None:
    """foreach_batch fences once, at start: five batches committed by one writer, each after a participant's
    attempt failed before it prepared (its hidden directory left, as a task retried by Spark leaves it).

    Pass: after each commit, pending/ holds nothing (was: one empty directory per batch until the next fence,
    and the failed attempts' files) and staging/ nothing; the epochs directory two files at most."""
    sink = HdfsSink(HdfsConfig(target))
    sink.setup(APP)
    sink.fence(APP)
    for batch_id in range(5):
        epoch = sink.current_epoch(APP)
        failed = sink.begin(TaskRef(BatchRef(APP, batch_id), epoch, 0, f"failed-{batch_id}"))
        sink.write(failed, pa.RecordBatch.from_pylist(rows_for(APP, batch_id, 0, 2), schema=CONTRACT_SCHEMA))
        failed.files.close()  # the attempt's file is written; the task dies before pre_commit
        commit(sink, APP, batch_id, transactional=transactional)
        assert sink.fs.names(sink._pending(APP)) == [], f"after batch {batch_id}"
        assert sink.fs.names(sink._staging(APP)) == []
    assert len(sink.fs.names(f"{sink._app(APP)}/epochs")) <= 2


def test_a_prepared_straggler_keeps_its_batch_pending_directory_for_recovery(target: str) -> None:
    """A second prepared attempt of batch 0 (a straggler) is not in the committed bundle. Pass: the commit keeps
    pending/<batch> with the straggler in it; recover names it; aborting it leaves pending/ empty again at
    the next commit."""
    sink = HdfsSink(HdfsConfig(target))
    work = prepared_batch(sink, APP)
    straggler = prepare(sink, work.batch, work.bundle.epoch, 5, rows_for(APP, 0, 5, 2))
    sink.commit(work.batch, work.committables, work.bundle)
    assert sink.fs.names(sink._pending(APP, 0)) == [straggler.id]
    assert [c.id for c in sink.recover(APP)] == [straggler.id]
    assert sink.commit_status(straggler.batch, [straggler]) is CommitStatus.ABORTED
    sink.abort([straggler])
    commit(sink, APP, 1)
    assert sink.fs.names(sink._pending(APP)) == []


def test_a_fence_removes_the_temporary_files_of_fences_that_crashed(target: str) -> None:
    """A fence killed between writing its epoch's temporary file and renaming it leaves a hidden file; three such
    crashes (for epochs 2 to 4), then fences up to epoch 6. Pass: the epochs directory holds the two newest
    epoch files only (was: every crashed fence's file, for good)."""
    sink = HdfsSink(HdfsConfig(target))
    sink.fence(APP)
    epochs = f"{sink._app(APP)}/epochs"
    for epoch in range(2, 5):
        sink.fs.write_hidden(f"{epochs}/{epoch:020d}", b"")
    assert len(sink.fs.names(epochs)) == 4
    newest = max(sink.fence(APP) for _ in range(5))
    assert newest == 6
    assert sink.fs.names(epochs) == [f"{newest - 1:020d}", f"{newest:020d}"]


def test_an_empty_range_directory_shows_readers_nothing(target: str) -> None:
    """The commit makes the batch's range directory before the rename; a crash in between leaves it empty.
    Pass: the batches committed read back the same with an empty range directory beside them."""
    config = HdfsConfig(target)
    sink = HdfsSink(config)
    rows = commit(sink, APP, 0).rows
    sink.fs.mkdirs(f"{sink.root}/{L.range_dir_name(APP, 1000)}")
    assert canon(listed_rows(config)) == canon(rows)
    assert canon(read_committed(config).to_pylist()) == canon(rows)
    last = sink.fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 0


def test_the_commit_request_marker_matches_the_deciding_renames_only() -> None:
    """The fault proxies' marker: the staging directory renamed onto a batch's directory (grouped and flat) and
    the record renamed into it match; a file moved into staging, a participant's rename and a range's mkdirs
    do not."""
    grouped = L.GROUPED.batch_dir(APP, 1234)
    flat = L.FLAT.batch_dir(APP, 1234)

    def rename2(src: str, dst: str) -> bytes:
        """A rename2 request as the proxy sees it: method name, then source, destination and overwrite fields."""
        fields = b"\x0a" + bytes([len(src)]) + src.encode() + b"\x12" + bytes([len(dst)]) + dst.encode()
        return b"\x07rename2" + fields + b"\x18\x00"

    matching = [
        rename2("/t/_eosink/apps/a/staging/00000000000000001234", f"/t/{grouped}"),
        rename2(f"/t/{grouped}/._eosink_bundle.json.0a.tmp", f"/t/{grouped}/_eosink_bundle.json"),
        rename2("/t/_eosink/apps/a/staging/00000000000000001234", f"/t/{flat}"),
    ]
    other = [
        rename2("/t/_eosink/apps/a/pending/00000000000000001234/b1/part-p00000.parquet", "/t/_eosink/apps/a/staging/b"),
        rename2("/t/_eosink/apps/a/pending/00000000000000001234/.w-e1-p0-a", "/t/_eosink/apps/a/pending/b1"),
        rename2(f"/t/{grouped}/.part-p00000.parquet", f"/t/{grouped}/part-p00000.parquet"),
        b"\x06mkdirs\x12" + f"/t/{L.range_dir_name(APP, 1000)}".encode() + b"\x18\x01",
    ]
    assert all(COMMIT_REQUEST_MARKER.search(m) for m in matching)
    assert not any(COMMIT_REQUEST_MARKER.search(m) for m in other)


def test_a_damaged_layout_file_is_a_configuration_error(target: str) -> None:
    sink = HdfsSink(HdfsConfig(target))
    sink.setup(APP)
    assert sink.fs.create_only(f"{sink.root}/_eosink/layout.json", b'{"layout": "spiral"}')
    with pytest.raises(ConfigurationError, match=r"layout\.json") as err:
        sink.fetch_last_bundle(APP)
    assert err.value.fix


def test_a_target_another_writer_starts_while_we_read_its_layout_is_grouped_not_half_migrated(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reader finds no layout.json; before it lists the target, another writer stores the layout and commits
    batch 0 (the CI failure of stop 46: sixteen threads opening one new target).

    Pass: the reader takes the target as grouped (no ConfigurationError about an unfinished migration) and
    finds the other writer's bundle."""
    config = HdfsConfig(target)
    reader, writer = HdfsSink(config), HdfsSink(config)
    reader.setup(APP)
    listed = reader.fs.names
    raced: list[bool] = []

    def names_after_the_other_writer(path: str) -> list[str]:
        if path == reader.root and not raced:
            raced.append(True)
            commit(writer, APP, 0)
        return listed(path)

    monkeypatch.setattr(reader.fs, "names", names_after_the_other_writer)
    last = reader.fetch_last_bundle(APP)
    assert raced, "the reader never listed the target: the race was not staged"
    assert last is not None and last.batch.batch_id == 0
    assert reader._target_layout() == L.GROUPED


# -- flat targets, written by eosink before batch ranges -------------------------------------------------------


def flat_target(target: str, monkeypatch: pytest.MonkeyPatch, batches: dict[str, list[int]]) -> list[dict[str, Any]]:
    """A target as eosink before ranges wrote it: ``batches`` of each app committed flat (the sink forced flat
    for a new target); the rows committed."""
    real = _batches.detect_layout

    def flat_when_new(*args: Any) -> tuple[L.Layout, bool]:
        layout, known = real(*args)
        return (L.FLAT, True) if not known else (layout, known)

    monkeypatch.setattr("eosink.connectors.hdfs.sink.detect_layout", flat_when_new)
    sink = HdfsSink(HdfsConfig(target))
    rows = [r for app, ids in batches.items() for b in ids for r in commit(sink, app, b).rows]
    monkeypatch.undo()
    assert not sink.fs.exists(_batches.layout_file(sink.root))
    assert all(n == L.OWN_DIR or L.flat_batch_of(n) for n in sink.fs.names(sink.root))
    return rows


def test_a_flat_target_is_read_and_written_flat_with_one_warning(
    target: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A target of eosink before ranges (batches 0 and 1 right under it, no layout.json).

    Pass: a new writer finds batch 1 as its last bundle, commits batch 2 flat too (never a range beside flat
    batches: Spark would refuse the target), and warns once per process, naming migrate_layout; the sink's
    pickled copy (a participant's) carries the decision."""
    config = HdfsConfig(target)
    rows = flat_target(target, monkeypatch, {APP: [0, 1]})
    _batches._WARNED.discard(config.target_url)
    with caplog.at_level(logging.WARNING, "eosink.hdfs"):
        sink = HdfsSink(config)
        last = sink.fetch_last_bundle(APP)
        assert last is not None and last.batch.batch_id == 1
        rows += commit(sink, APP, 2).rows
        HdfsSink(config).fetch_last_bundle(APP)
    warnings = [r for r in caplog.records if "migrate_layout" in r.getMessage()]
    assert len(warnings) == 1
    assert pickle.loads(pickle.dumps(sink))._layout == L.FLAT  # participants write where the driver decided
    assert L.flat_batch_dir_name(APP, 2) in sink.fs.names(sink.root)
    assert not [n for n in sink.fs.names(sink.root) if L.range_of(n)]
    assert canon(listed_rows(config)) == canon(rows)


def test_migrate_layout_moves_a_flat_target_into_ranges_and_finishes_after_a_crash(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A flat target with batches 0, 1, 2 and 1000 of one app and 0 of another, batch 3 of the first prepared
    (in doubt). The migration dies after two moves; the sink then refuses the half-moved target; the rerun
    finishes it.

    Pass: a ConfigurationError naming migrate_layout while it is half done; after the rerun every batch sits in
    its range, layout.json names the grouped layout and the rerun reported the four batches left; the last
    bundle, commit_status and recover see the same as before; batch 3 commits into its range; readers (listing
    and records) see every row once; a third run moves nothing."""
    config = HdfsConfig(target)
    rows = flat_target(target, monkeypatch, {APP: [0, 1, 2, 1000], OTHER: [0]})
    sink = HdfsSink(config)
    pending = prepared_batch(sink, APP, 3)
    done = prepared_batch(sink, OTHER, 1)
    sink.commit(done.batch, done.committables, done.bundle)  # a flat commit: the writer saw a flat target
    rows += done.rows

    real, moved = admin._move_batch, []

    def dies_after_two(*args: Any) -> None:
        if len(moved) == 2:
            raise RuntimeError("RPCError: connection reset by peer (the migration's process died)")
        real(*args)
        moved.append(args)

    monkeypatch.setattr(admin, "_move_batch", dies_after_two)
    with pytest.raises(Exception, match="reset by peer"):
        migrate_layout(config, workers=1)
    monkeypatch.undo()
    with pytest.raises(ConfigurationError, match="migrate_layout"):
        HdfsSink(config).fetch_last_bundle(APP)

    assert migrate_layout(config) == 4
    ranges = [L.range_dir_name(APP, 0), L.range_dir_name(APP, 1000), L.range_dir_name(OTHER, 0)]
    assert sink.fs.names(sink.root) == sorted([L.OWN_DIR, *ranges])
    assert sink.fs.read_text(_batches.layout_file(sink.root)) == '{"layout": "grouped", "range": 1000}'

    after = HdfsSink(config)
    last = after.fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 1000
    assert after.commit_status(done.batch, done.committables) is CommitStatus.COMMITTED
    assert after.commit_status(pending.batch, pending.committables) is CommitStatus.PREPARED
    assert sorted(c.id for c in after.recover(APP)) == sorted(c.id for c in pending.committables)
    after.commit(pending.batch, pending.committables, pending.bundle)
    rows += pending.rows
    assert after.fs.exists(f"{after.root}/{L.GROUPED.batch_dir(APP, 3)}")
    last = HdfsSink(config).fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 1000
    assert HdfsSink(config).recover(APP) == []

    assert canon(listed_rows(config)) == canon(rows)
    assert canon(read_committed(config).to_pylist()) == canon(rows)
    assert migrate_layout(config) == 0
