"""Old commit markers folded into segments, against the real MinIO: through real commits, by concurrent folders,
beside readers (each interleaving forced with a hook between two of the reader's or folder's requests, no
sleeps), with a zombie's late marker, and in a prefix written before segments existed.

Small segments (``segment_batches=4``: a range is folded once a marker 2 batches past its end exists) keep the
histories short.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.s3 import S3Config, S3Sink, committed_markers, read, read_committed
from eosink.connectors.s3 import _listing as listing
from eosink.connectors.s3 import sink as sink_module
from eosink.connectors.s3._fold import FOLDS_PER_COMMIT, Folder
from eosink.connectors.s3._layout import Layout
from eosink.connectors.s3._markers import CommitMarker, MarkedObject
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, TaskRef
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver, canon, make_rows
from eosink.errors import CommitAbortedError, ConfigurationError, NonDeterministicReplayError
from eosink.stores.s3 import client as s3_client

from ..history import History
from ._synthetic import put_markers, synthetic_marker
from .conftest import HARNESS

APP = "seg-app"
SPAN = 4
BATCHES = 14  # 0..13: ranges 0-3, 4-7 and 8-11 folded (13 >= 11 + 2), 12 and 13 stay markers
TXID = next(v for v in VARIANTS if v.id == "txid-check")
TWO_PC = next(v for v in VARIANTS if v.id == "2pc")


def config(prefix: str, **options: Any) -> S3Config:
    return HARNESS.config(prefix, segment_batches=SPAN, **options)


def batches(n: int = BATCHES) -> list[MemoryBatch]:
    return [MemoryBatch(make_rows(b)) for b in range(n)]


def stored(cfg: S3Config, app_id: str = APP) -> tuple[list[int], list[tuple[int, int]]]:
    """The app_id's marker objects (batch ids) and segments (ranges), as a listing shows them."""
    layout = Layout(cfg.prefix)
    s3 = HARNESS.client()
    markers, segments = [], []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=cfg.bucket, Prefix=layout.control(app_id)):
        for obj in page.get("Contents", []):
            batch_id, found = Layout.marker_batch(obj["Key"]), Layout.segment_range(obj["Key"])
            if "/commits/" in obj["Key"] and batch_id is not None:
                markers.append(batch_id)
            elif found is not None:
                segments.append(found)
    return sorted(markers), sorted(segments)


def run(tmp_path: Path, cfg: S3Config, n: int = BATCHES, variant: Any = TXID) -> list[MemoryBatch]:
    """``n`` real batches through a real Coordinator, in Spark's order; the batches written."""
    written = batches(n)
    driver = SparkOrderDriver(tmp_path, variant, cfg, S3Sink, app_id=APP)
    try:
        driver.run(written)
    finally:
        driver.close()
    return written


@pytest.fixture
def count_requests() -> Iterator[Callable[[S3Config], Counter[str]]]:
    """Starts a live count of the S3 requests the sink's clients send for a configuration, by operation (a
    botocore ``before-call`` hook, removed when the test ends)."""
    hooked: list[tuple[Any, str]] = []

    def start(cfg: S3Config) -> Counter[str]:
        counts: Counter[str] = Counter()

        def count(model: Any, **kwargs: Any) -> None:
            counts[model.name] += 1

        for flavour in (True, False):
            client, unique_id = s3_client(cfg.connection(), retrying=flavour), f"eosink-seg-test-{flavour}"
            client.meta.events.register("before-call.s3", count, unique_id=unique_id)
            hooked.append((client, unique_id))
        return counts

    yield start
    for client, unique_id in hooked:
        client.meta.events.unregister("before-call.s3", unique_id=unique_id)


@contextmanager
def unfolded() -> Iterator[None]:
    """Commits that do not fold, as a version without segments made them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Folder, "after_commit", lambda self, app_id, batch_id: None)
        yield


def assert_each_batch_once(cfg: S3Config, written: list[MemoryBatch]) -> None:
    assert [m.batch_id for m in committed_markers(cfg, APP)] == list(range(len(written)))
    rows = read_committed(cfg, APP).to_pylist()
    assert canon(rows) == canon([r for b in written for r in b.rows])


# -- configuration ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 10_001, 2.5, "100", True])
def test_segment_batches_outside_1_to_10000_is_refused(value: object) -> None:
    with pytest.raises(ConfigurationError) as err:
        S3Config("bucket", segment_batches=value)  # type: ignore[arg-type]
    assert "segment_batches" in str(err.value)


# -- folding through real commits ---------------------------------------------------------------------


@pytest.mark.parametrize("variant", [TXID, TWO_PC], ids=lambda v: v.id)
def test_commits_fold_old_markers_and_readers_see_every_batch_once(tmp_path: Path, prefix: str, variant: Any) -> None:
    """14 real batches with segments of 4. Pass: the markers of batches 0..11 are in three segments, 12 and 13 stay
    marker objects (at most 1.5 x 4 + 1); read_committed returns every row once; a new process's last bundle is
    batch 13's."""
    cfg = config(prefix)
    written = run(tmp_path, cfg, variant=variant)
    assert stored(cfg) == ([12, 13], [(0, 3), (4, 7), (8, 11)])
    assert_each_batch_once(cfg, written)
    last = S3Sink(cfg).fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 13


def test_a_replay_and_the_status_and_commit_of_a_folded_batch_answer_as_before(tmp_path: Path, prefix: str) -> None:
    """After the folds: Spark replays the newest batch (its commit log lost commits/13) and it is skipped, its
    rows not written again; a replay with other rows stops the query. commit_status of folded batch 2 answers
    COMMITTED (a fresh sink and one that knows the last bundle); committing it again with its own committables
    is a no-op, with others CommitAbortedError; aborting its committables is refused: the segment names them."""
    cfg = config(prefix)
    written = batches()
    driver = SparkOrderDriver(tmp_path, TXID, cfg, S3Sink, app_id=APP)
    driver.run(written)
    (driver.ckpt.root / "commits" / "13").unlink()
    driver.restart()
    driver.run(written)
    assert driver.coordinator.stats.replays_skipped == 1
    assert_each_batch_once(cfg, written)
    (driver.ckpt.root / "commits" / "13").unlink()
    driver.restart()
    changed = [*written[:13], MemoryBatch(make_rows(13, salt="-changed"))]
    driver.fail(changed, NonDeterministicReplayError)
    driver.close()

    (folded,) = [m for m in committed_markers(cfg, APP) if m.batch_id == 2]
    batch = BatchRef(APP, 2)
    own = [Committable(batch, folded.bundle.epoch, 0, id=c) for c in folded.bundle.committables]
    other = [Committable(batch, folded.bundle.epoch, 0, id="another-attempt")]
    fresh, knowing = S3Sink(cfg), S3Sink(cfg)
    assert knowing.fetch_last_bundle(APP) is not None
    epoch = knowing.fence(APP)  # the writer that commits again holds the newest epoch
    for sink in (fresh, knowing):
        assert sink.commit_status(batch, own) is CommitStatus.COMMITTED
        sink.commit(batch, own, replace(folded.bundle, epoch=epoch))
        with pytest.raises(CommitAbortedError):
            sink.commit(batch, other, Bundle(batch, epoch, Fingerprint(), ("another-attempt",)))
        with pytest.raises(CommitAbortedError):
            sink.abort(own)
    assert stored(cfg) == ([12, 13], [(0, 3), (4, 7), (8, 11)])


# -- a zombie's late marker ----------------------------------------------------------------------------


def test_a_zombie_marker_written_late_into_a_folded_range_is_ignored_then_removed(tmp_path: Path, prefix: str) -> None:
    """A fenced writer paused before its marker PUT of batch 2 wakes after the range 0..3 was folded and its
    marker deleted: its create-only PUT succeeds, with other committables and naming batch 3's objects again.
    Pass: readers see each batch once, batch 2 as the segment holds it; the sink answers from the segment
    (commit with the zombie's committables refused); the next fold removes the zombie's marker."""
    cfg = config(prefix)
    written = run(tmp_path, cfg)
    markers = {m.batch_id: m for m in committed_markers(cfg, APP)}
    zombie_bundle = Bundle(BatchRef(APP, 2), 1, Fingerprint(), ("zombie-attempt",), None, "txid-check")
    objects = tuple(MarkedObject(o.key, o.etag, o.size, o.rows, "zombie-attempt") for o in markers[3].objects)
    put_markers(S3Sink(cfg), [CommitMarker(APP, zombie_bundle, objects, markers[2].schema, "parquet")])
    assert stored(cfg) == ([2, 12, 13], [(0, 3), (4, 7), (8, 11)])

    assert_each_batch_once(cfg, written)
    assert [m.bundle.committables for m in committed_markers(cfg, APP) if m.batch_id == 2] == [
        markers[2].bundle.committables
    ]
    sink = S3Sink(cfg)
    epoch = sink.fence(APP)
    zombie = [Committable(BatchRef(APP, 2), epoch, 0, id="zombie-attempt")]
    with pytest.raises(CommitAbortedError):
        sink.commit(BatchRef(APP, 2), zombie, replace(zombie_bundle, epoch=epoch))
    assert sink.compact(APP) == 1  # the range is folded already: its leftover marker goes
    assert stored(cfg) == ([12, 13], [(0, 3), (4, 7), (8, 11)])
    assert_each_batch_once(cfg, written)


# -- folds that stop half-way, and concurrent folders --------------------------------------------------


def test_a_fold_stopped_before_its_deletes_fails_no_commit_and_the_next_folder_finishes_it(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every fold's DeleteObjects fails (the store refuses it) while 6 batches commit: the commit of batch 5
    writes the segment of 0..3 and its deletes fail. Pass: every commit succeeds, a warning says so; readers
    see each batch once (segment and markers both there); then compact() by another process gets 412 for its
    segment, reads the one there, and deletes the range's markers."""
    cfg = config(prefix)

    def refused(self: Folder, app_id: str, batches: list[int]) -> None:
        raise ConfigurationError("access denied (simulated DeleteObjects refusal)", "grant s3:DeleteObject")

    with caplog.at_level(logging.WARNING, logger="eosink.s3"), pytest.MonkeyPatch.context() as patch:
        patch.setattr(Folder, "delete_markers", refused)
        written = run(tmp_path, cfg, 6)
    assert any("folding old commit markers after batch 5 failed" in r.getMessage() for r in caplog.records)
    assert stored(cfg) == ([0, 1, 2, 3, 4, 5], [(0, 3)])
    assert_each_batch_once(cfg, written)

    puts: list[bool] = []
    real_put = Folder.put_segment

    def spy(self: Folder, segment: Any) -> bool:
        puts.append(real_put(self, segment))
        return puts[-1]

    monkeypatch.setattr(Folder, "put_segment", spy)
    assert S3Sink(cfg).compact(APP) == 1
    assert puts == [False]  # 412: the segment there is used
    assert stored(cfg) == ([4, 5], [(0, 3)])
    assert_each_batch_once(cfg, written)


def test_two_folders_of_one_range_at_once_leave_one_segment(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefix of 6 unfolded markers; folder A has read the markers of 0..3 when folder B folds the range
    whole (segment written, markers deleted); then A's segment PUT runs. Pass: A gets 412, uses B's segment,
    deletes nothing more and reports the range folded; one segment; readers see each batch once."""
    cfg = config(prefix)
    with unfolded():
        written = run(tmp_path, cfg, 6)
    a, b = S3Sink(cfg), S3Sink(cfg)
    real_put = Folder.put_segment
    created: list[tuple[str, bool]] = []

    def b_first(self: Folder, segment: Any) -> bool:
        if self.sink is a and not created:  # A has read the markers; B folds the range whole, then A goes on
            assert b.compact(APP) == 1
        created.append(("a" if self.sink is a else "b", real_put(self, segment)))
        return created[-1][1]

    monkeypatch.setattr(Folder, "put_segment", b_first)
    assert a.compact(APP) == 1
    assert created == [("b", True), ("a", False)]
    assert stored(cfg) == ([4, 5], [(0, 3)])
    assert_each_batch_once(cfg, written)


# -- readers racing a fold ------------------------------------------------------------------------------


def test_a_fold_between_the_readers_two_listings_counts_no_batch_twice(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader has listed the 14 markers; then a fold writes segments 0..3, 4..7, 8..11 (and deletes their
    markers); then the reader lists the segments. Pass: each batch once (listed markers in a segment's range
    are not read), every row once."""
    cfg = config(prefix)
    with unfolded():
        written = run(tmp_path, cfg)
    real = read.list_segment_keys
    folds: list[int] = []

    def fold_first(*args: Any, **kwargs: Any) -> list[str]:
        if not folds:
            folds.append(S3Sink(cfg).compact(APP))
        return real(*args, **kwargs)

    monkeypatch.setattr(read, "list_segment_keys", fold_first)
    assert_each_batch_once(cfg, written)
    assert folds == [3]


def test_a_fold_between_the_readers_listings_and_its_reads_makes_it_look_again(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader has listed the 14 markers and no segment; then the fold runs, before the reader's first GET.
    Pass: the first marker it reads is gone, so it lists again (two looks in all) and finds the segments: no
    batch missed, none twice."""
    cfg = config(prefix)
    with unfolded():
        written = run(tmp_path, cfg)
    real_fetch, real_list = read._fetch, read.list_marker_keys
    looks: list[int] = []
    folds: list[int] = []

    def fold_before_first_read(s3: Any, bucket: str, key: str) -> bytes | None:
        if not folds:
            folds.append(S3Sink(cfg).compact(APP))
        return real_fetch(s3, bucket, key)

    def counted(*args: Any, **kwargs: Any) -> list[str]:
        looks.append(1)
        return real_list(*args, **kwargs)

    monkeypatch.setattr(read, "_fetch", fold_before_first_read)
    monkeypatch.setattr(read, "list_marker_keys", counted)
    markers = committed_markers(cfg, APP)
    assert [m.batch_id for m in markers] == list(range(BATCHES))
    assert folds == [3] and len(looks) == 2
    assert_each_batch_once(cfg, written)


def test_reading_after_a_batch_reads_no_segment_before_it(
    tmp_path: Path, prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Folded 0..11 in three segments. Pass: after_batch=5 gives batches 6..13 and reads the segments 4..7 and
    8..11 only; after_batch=11 reads no segment; after_batch=13 gives nothing."""
    cfg = config(prefix)
    run(tmp_path, cfg)
    real = read._fetch
    fetched: list[str] = []

    def spy(s3: Any, bucket: str, key: str) -> bytes | None:
        fetched.append(key)
        return real(s3, bucket, key)

    monkeypatch.setattr(read, "_fetch", spy)
    for after, expected in ((5, [(4, 7), (8, 11)]), (11, []), (13, [])):
        fetched.clear()
        found = [m.batch_id for m in committed_markers(cfg, APP, after_batch=after)]
        assert found == list(range(after + 1, BATCHES)), after
        assert [Layout.segment_range(k) for k in fetched if Layout.segment_range(k)] == expected, after


# -- a prefix written before segments existed -----------------------------------------------------------


def _commit(sink: S3Sink, batch_id: int) -> None:
    """One batch straight through the contract's calls (one participant, two rows)."""
    batch = BatchRef(APP, batch_id)
    epoch = sink.fence(APP)
    txn = sink.begin(TaskRef(batch, epoch, 0, f"a{batch_id}", strategy="txid-check"))
    sink.write(txn, pa.record_batch({"id": [batch_id, batch_id + 1000]}))
    committable = sink.pre_commit(txn)
    sink.commit(batch, [committable], Bundle(batch, epoch, Fingerprint(), (committable.id,), None, "txid-check"))


def test_a_prefix_of_unfolded_markers_is_caught_up_a_few_ranges_per_commit_or_at_once(prefix: str) -> None:
    """40 markers written before segments existed (batches 0..39). Pass: the commit of batch 40 folds the two
    oldest ranges, the commit of 41 the next two; compact() folds the rest that may be folded (up to 36..39),
    leaving 40 and 41 as markers; readers see 0..41 once each."""
    cfg = config(prefix)
    history = History(APP, 40)
    put_markers(S3Sink(cfg), (synthetic_marker(history, b) for b in range(40)))
    sink = S3Sink(cfg)
    sink.setup(APP)
    _commit(sink, 40)
    assert stored(cfg)[1] == [(0, 3), (4, 7)][:FOLDS_PER_COMMIT]
    _commit(sink, 41)
    assert stored(cfg)[1] == [(0, 3), (4, 7), (8, 11), (12, 15)][: 2 * FOLDS_PER_COMMIT]
    assert S3Sink(cfg).compact(APP) == 10 - 2 * FOLDS_PER_COMMIT
    markers, segments = stored(cfg)
    assert markers == [40, 41] and segments == [(k, k + 3) for k in range(0, 40, 4)]
    assert [m.batch_id for m in committed_markers(cfg, APP)] == list(range(42))


def test_a_batch_missing_from_its_folded_range_can_no_longer_be_committed(prefix: str) -> None:
    """Batches 0..13 but 2 committed (a gap), folded by compact(). Pass: a later commit of batch 2 (a writer far
    behind) is refused with CommitAbortedError and writes no marker: the segment of 0..3 is final."""
    cfg = config(prefix)
    history = History(APP, BATCHES)
    put_markers(S3Sink(cfg), (synthetic_marker(history, b) for b in range(BATCHES) if b != 2))
    assert S3Sink(cfg).compact(APP) == 3
    sink = S3Sink(cfg)
    sink.setup(APP)
    with pytest.raises(CommitAbortedError) as err:
        _commit(sink, 2)
    assert "folded" in str(err.value)
    assert stored(cfg) == ([12, 13], [(0, 3), (4, 7), (8, 11)])
    assert [m.batch_id for m in committed_markers(cfg, APP)] == [b for b in range(BATCHES) if b != 2]


def test_the_newest_marker_is_found_without_listing_every_page(
    prefix: str, monkeypatch: pytest.MonkeyPatch, count_requests: Callable[[S3Config], Counter[str]]
) -> None:
    """1,000 unfolded markers and listing pages of 10 (100 pages). Pass: a new process finds batch 999's bundle
    with at most 25 listings (one page, then one-key listings that home in on the newest)."""
    cfg = config(prefix)
    history = History(APP, 1000)
    put_markers(S3Sink(cfg), (synthetic_marker(history, b) for b in range(1000)))
    monkeypatch.setattr(listing, "PAGE", 10)
    lists = count_requests(cfg)
    last = S3Sink(cfg).fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 999
    assert 1 < lists["ListObjectsV2"] <= 25, lists


def test_without_a_marker_object_the_newest_segment_gives_the_last_bundle(
    tmp_path: Path, prefix: str, count_requests: Callable[[S3Config], Counter[str]]
) -> None:
    """Folded 0..11; the marker objects of 12 and 13 removed by hand. Pass: a new process's last bundle is batch
    11's, from the newest segment, found with a few one-key listings (not a listing of every segment)."""
    cfg = config(prefix)
    run(tmp_path, cfg)
    layout = Layout(cfg.prefix)
    HARNESS.client().delete_objects(
        Bucket=cfg.bucket, Delete={"Objects": [{"Key": layout.marker_key(APP, b)} for b in (12, 13)]}
    )
    lists = count_requests(cfg)
    last = S3Sink(cfg).fetch_last_bundle(APP)
    assert last is not None and last.batch.batch_id == 11
    assert lists["ListObjectsV2"] <= 8, lists


# -- setup's probes ------------------------------------------------------------------------------------


def test_a_probe_left_by_a_process_that_died_mid_probe_is_swept(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A probe object under _eosink/probe/ that its process never deleted. Pass: the next probe deletes it (with
    the age limit at zero) and leaves nothing under _eosink/probe/."""
    cfg = config(prefix)
    sink = S3Sink(cfg)
    s3 = HARNESS.client()
    s3.put_object(Bucket=cfg.bucket, Key=f"{sink.layout.probes}leftover", Body=b"1")
    monkeypatch.setattr(sink_module, "PROBE_MAX_AGE_S", -3600.0)
    sink._probe_conditional_writes()
    assert s3.list_objects_v2(Bucket=cfg.bucket, Prefix=sink.layout.probes).get("KeyCount") == 0
