"""The deciding step of an HDFS commit, the rename that makes a batch visible: cut by the fault proxy, the
sink says ambiguous and looking settles it (the staging directory renamed, shared by every coordinator of the
batch), or settles it itself (the record's hidden file, this call's own); meeting a directory already in its
place, it moves nothing into it.

The contract suite accepts TransientError for a cut commit too (safe to retry); here the connector
is held to the sharper answer for its deciding rename, under both kinds of committable: the staging
directory renamed into place (2pc, txid-check) and the batch record renamed into the batch's
directory (idempotent).
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.connectors.hdfs.testing import COMMIT_REQUEST_MARKER
from eosink.contract import BatchRef, CommitStatus
from eosink.contracts._steps import bundle_for, canon, prepare, rows_for
from eosink.errors import AmbiguousCommitError, CommitAbortedError
from eosink.services.proxy import FaultProxy

from .conftest import prepared_batch

APP = "cut-app"


@pytest.mark.parametrize("transactional", [True, False], ids=["transactional", "idempotent"])
def test_a_lost_reply_to_the_deciding_rename_is_ambiguous_and_resolved_as_committed(
    target: str, fault_proxy: Callable[[str, int], FaultProxy], transactional: bool
) -> None:
    parts = urllib.parse.urlsplit(target)
    assert parts.hostname and parts.port
    proxy = fault_proxy(parts.hostname, parts.port)
    config = HdfsConfig(target)
    cut = HdfsSink(config.with_address("127.0.0.1", proxy.port))
    epoch = cut.fence(APP)
    batch = BatchRef(APP, 0)
    shares = [rows_for(APP, 0, p, 4) for p in range(2)]
    committables = [prepare(cut, batch, epoch, p, rows, transactional=transactional) for p, rows in enumerate(shares)]
    bundle = bundle_for(batch, epoch, committables, "2pc" if transactional else "idempotent")

    proxy.cut_after_request(COMMIT_REQUEST_MARKER)
    if transactional:
        with pytest.raises(AmbiguousCommitError, match="got no reply"):
            cut.commit(batch, committables, bundle)
    else:  # the record's hidden file gone and the record there: this call's rename was done
        cut.commit(batch, committables, bundle)
    assert proxy.stats.cuts == 1

    other = HdfsSink(config)
    assert other.commit_status(batch, committables) is CommitStatus.COMMITTED
    if transactional:  # the rename went through: the batch's directory holds its record, the staging one is gone
        assert other.fs.info(other._staging(APP, 0)) is None
    other.commit(batch, committables, bundle)  # a repeat after the resolution changes nothing
    expected: list[dict[str, Any]] = [row for rows in shares for row in rows]
    assert canon(read_committed(config).to_pylist()) == canon(expected)


def test_the_deciding_rename_never_moves_a_batch_into_a_directory_already_there(target: str) -> None:
    """A directory that eosink did not write already has batch 0's name. HDFS's two-argument rename would move
    the staging directory *into* it; the sink's rename must not.

    Pass: the commit stops with CommitAbortedError naming the directory; the foreign directory holds only its
    own file (nothing was moved into it) and the batch stays prepared; once the directory is moved away, the
    same commit lands the batch once."""
    config = HdfsConfig(target)
    sink = HdfsSink(config)
    work = prepared_batch(sink, APP)
    final = sink._final(APP, 0)
    foreign = f"{final}/someone-elses.txt"
    assert sink.fs.create_only(foreign, b"not eosink's")

    with pytest.raises(CommitAbortedError, match="holds no batch record"):
        sink.commit(work.batch, work.committables, work.bundle)
    assert [s.path for s in sink.fs.walk_files(final)] == [foreign], "the batch was moved into the directory"
    assert sink.commit_status(work.batch, work.committables) is CommitStatus.PREPARED
    assert read_committed(config).num_rows == 0

    sink.fs.delete(final)
    sink.commit(work.batch, work.committables, work.bundle)
    assert canon(read_committed(config).to_pylist()) == canon(work.rows)


def _when_first_walking_pending(sink: HdfsSink, monkeypatch: pytest.MonkeyPatch, act: Callable[[], None]) -> None:
    """Run ``act`` (another coordinator's step) the first time ``sink`` lists a prepared attempt's files."""
    walk = sink.fs.walk_files
    done: list[bool] = []

    def walk_files(path: str) -> Any:
        if not done and "/pending/" in path and path.rsplit("/", 1)[-1].startswith("b"):
            done.append(True)
            act()
        return walk(path)

    monkeypatch.setattr(sink.fs, "walk_files", walk_files)


@pytest.mark.parametrize("other_step", ["gathers", "commits"])
def test_commit_status_finds_work_another_coordinator_moves_while_it_looks(
    target: str, monkeypatch: pytest.MonkeyPatch, other_step: str
) -> None:
    """A recovery (or a zombie) asks commit_status while another coordinator commits the same batch: files move
    from pending to staging, and staging is renamed into place, between two of its looks.

    Pass: commit_status answers PREPARED while the files are staged, COMMITTED once the rename is done; never
    ABORTED for work that exists (the looks follow the files' way: pending, staging, then the record)."""
    config = HdfsConfig(target)
    asking, other = HdfsSink(config), HdfsSink(config)
    work = prepared_batch(other, APP)
    stage = other._staging(APP, 0)
    step = {
        "gathers": lambda: other._gather(work.batch, work.committables, work.bundle, stage),
        "commits": lambda: other.commit(work.batch, work.committables, work.bundle),
    }[other_step]
    _when_first_walking_pending(asking, monkeypatch, step)
    expected = CommitStatus.PREPARED if other_step == "gathers" else CommitStatus.COMMITTED
    assert asking.commit_status(work.batch, work.committables) is expected


def test_a_commit_racing_another_coordinators_commit_of_the_same_batch_succeeds_once(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two coordinators commit the same committables (a zombie and its successor); the other one's whole commit
    lands while this one counts the prepared files.

    Pass: this commit finds the batch committed with the same bundle and succeeds without a change (not
    CommitAbortedError for files it no longer finds); the batch is visible once."""
    config = HdfsConfig(target)
    racing, other = HdfsSink(config), HdfsSink(config)
    work = prepared_batch(other, APP)
    _when_first_walking_pending(racing, monkeypatch, lambda: other.commit(work.batch, work.committables, work.bundle))
    racing.commit(work.batch, work.committables, work.bundle)
    assert canon(read_committed(config).to_pylist()) == canon(work.rows)


def test_commit_status_of_an_attempt_whose_batch_another_attempt_committed_is_aborted(target: str) -> None:
    """Batch 0 prepared twice (a first attempt, then a replay's); the replay's attempt is committed.

    Pass: commit_status of the replay's committables is COMMITTED, of the first attempt's ABORTED (its files
    are not in the batch, and commit refuses them as already committed by another attempt), never COMMITTED."""
    sink = HdfsSink(HdfsConfig(target))
    first = prepared_batch(sink, APP)
    replay = prepared_batch(sink, APP)
    sink.commit(replay.batch, replay.committables, replay.bundle)
    assert sink.commit_status(replay.batch, replay.committables) is CommitStatus.COMMITTED
    assert sink.commit_status(first.batch, first.committables) is CommitStatus.ABORTED
    newest = dataclasses.replace(first.bundle, epoch=replay.bundle.epoch)  # as a recovery would commit it
    with pytest.raises(CommitAbortedError, match="already committed by another attempt"):
        sink.commit(first.batch, first.committables, newest)
