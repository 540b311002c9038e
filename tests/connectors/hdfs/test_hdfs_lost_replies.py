"""Lost replies to HDFS writes, settled from what the NameNode holds (:class:`eosink.stores.hdfs.Fs`).

The fault proxy lets a request reach the NameNode and cuts the connection before its reply. hdfs-native raises
then (it does not send a write again). Each test shows the sink's answer and, as the negative control, the
answer a repeat of the request gets: the failure a sink that trusted it would report.
"""

from __future__ import annotations

import urllib.parse
from collections import Counter
from collections.abc import Callable

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink
from eosink.connectors.hdfs.audit import WebHdfsReader, canonical
from eosink.errors import CommitAbortedError
from eosink.services import get_service
from eosink.services.proxy import FaultProxy
from eosink.stores.hdfs import Fs, base

from .conftest import prepared_batch

pytestmark = pytest.mark.full


def _webhdfs() -> str:
    return str(get_service("hdfs").endpoint().webhdfs_url)


def _cut_fs(target: str, fault_proxy: Callable[[str, int], FaultProxy]) -> tuple[Fs, Fs, FaultProxy, str]:
    """A file system reached through a fault proxy, the same one reached directly (to look), the proxy, and the
    target's path."""
    parts = urllib.parse.urlsplit(target)
    assert parts.hostname and parts.port
    proxy = fault_proxy(parts.hostname, parts.port)
    config = HdfsConfig(target)
    return Fs(config.with_address("127.0.0.1", proxy.port)), Fs(config), proxy, config.path


def test_a_rename_whose_reply_is_lost_is_settled_as_done(
    target: str, fault_proxy: Callable[[str, int], FaultProxy]
) -> None:
    """Pass: the rename returns, the file is in place and its source gone; the lost reply did reach the caller
    (settle=False raises it), and a repeat would answer FileNotFoundError although the rename was done."""
    cut, direct, proxy, root = _cut_fs(target, fault_proxy)
    for name in ("a", "b"):
        direct.create_only(f"{root}/src-{name}", b"x")
    proxy.cut_after_request(b"rename2")
    cut.rename(f"{root}/src-a", f"{root}/dst-a", checked=False)
    assert proxy.stats.cuts == 1
    assert direct.info(f"{root}/src-a") is None and direct.read_bytes(f"{root}/dst-a") == b"x"

    proxy.cut_after_request(b"rename2")
    with pytest.raises(OSError) as lost:  # the negative control: what a caller that does not settle sees
        cut.rename(f"{root}/src-b", f"{root}/dst-b", checked=False, settle=False)
    assert not isinstance(lost.value, FileNotFoundError | FileExistsError)
    with pytest.raises(FileNotFoundError):
        cut.client.rename(f"{root}/src-b", f"{root}/dst-b", False)  # a repeat's answer: failure
    assert direct.read_bytes(f"{root}/dst-b") == b"x"


def test_a_create_only_whose_placing_reply_is_lost_says_it_created(
    target: str, fault_proxy: Callable[[str, int], FaultProxy]
) -> None:
    """create_only writes a hidden file and renames it into place without overwrite. Pass: with that rename's
    reply lost it still answers True (this call created it: an epoch claimed, a record placed), and no hidden
    file is left; a repeat answers False, as if another writer had won."""
    cut, direct, proxy, root = _cut_fs(target, fault_proxy)
    proxy.cut_after_request(b"rename2")
    assert cut.create_only(f"{root}/epoch-1", b"1") is True
    assert proxy.stats.cuts == 1
    assert direct.read_bytes(f"{root}/epoch-1") == b"1"
    assert direct.names(root) == ["epoch-1"]
    assert cut.create_only(f"{root}/epoch-1", b"1") is False  # the negative control: a repeat's answer


def test_a_delete_whose_reply_is_lost_is_settled_as_done(
    target: str, fault_proxy: Callable[[str, int], FaultProxy]
) -> None:
    """Pass: the delete answers True and the path is gone; a repeat would answer False (nothing deleted)."""
    cut, direct, proxy, root = _cut_fs(target, fault_proxy)
    direct.create_only(f"{root}/old", b"x")
    proxy.cut_after_request(b"\x06delete")
    assert cut.delete(f"{root}/old", False) is True
    assert proxy.stats.cuts == 1
    assert direct.info(f"{root}/old") is None
    assert cut.delete(f"{root}/old", False) is False  # the negative control: a repeat's answer


class _RepeatingFs(Fs):
    """The mutant's file system: a rename whose reply is lost is sent again, and the repeat's answer taken."""

    def rename(self, src: str, dst: str, *, overwrite: bool = False, checked: bool = True, settle: bool = True) -> None:
        try:
            super().rename(src, dst, overwrite=overwrite, checked=checked, settle=False)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError | FileExistsError):
                raise
            try:
                self.client.rename(src, dst, overwrite)
            except FileNotFoundError:
                raise CommitAbortedError(f"{src} is gone: the batch's work is lost.", "Replay the batch.") from None


class RepeatingRenameSink(HdfsSink):
    """Negative control: a sink that takes a repeated rename's failure for lost work."""

    def _reset(self) -> None:
        super()._reset()
        self.fs = _RepeatingFs(self.config)


@pytest.mark.parametrize("sink_class", [HdfsSink, RepeatingRenameSink], ids=["eosink", "negative-control"])
def test_a_lost_reply_to_a_gather_rename_under_2pc_leaves_the_batch_whole(
    target: str, fault_proxy: Callable[[str, int], FaultProxy], sink_class: type[HdfsSink]
) -> None:
    """The commit's first rename (a prepared file moved into the batch's staging directory) reaches the NameNode and
    its reply is lost. Judged by the WebHDFS reader. Pass: eosink settles the rename by looking and commits the
    batch whole; the mutant, repeating the rename, takes its FileNotFoundError for lost work and gives the batch
    up, which the reader flags as lost."""
    parts = urllib.parse.urlsplit(target)
    assert parts.hostname and parts.port
    proxy = fault_proxy(parts.hostname, parts.port)
    config = HdfsConfig(target)
    sink = sink_class(config.with_address("127.0.0.1", proxy.port))
    work = prepared_batch(sink, "lost-gather")
    reader = WebHdfsReader(_webhdfs(), config.path).start()
    proxy.cut_after_request(b"rename2")
    try:
        sink.commit(work.batch, work.committables, work.bundle)
    except CommitAbortedError:
        assert sink_class is RepeatingRenameSink
    assert proxy.stats.cuts == 1
    verdict = reader.verdict(Counter(canonical(r) for r in work.rows))
    if sink_class is HdfsSink:
        assert not verdict.problems, verdict
    else:
        assert verdict.lost == len(work.rows), verdict


def test_the_webhdfs_reader_flags_a_torn_batch(target: str) -> None:
    """Negative control of the reader's torn check: a file beside a committed batch's files, which its record does
    not name (as an earlier attempt's would be). Pass: flagged torn, and its rows as duplicates of none."""
    config = HdfsConfig(target)
    sink = HdfsSink(config)
    work = prepared_batch(sink, "torn")
    sink.commit(work.batch, work.committables, work.bundle)
    reader = WebHdfsReader(_webhdfs(), config.path)
    assert not reader.verdict(Counter(canonical(r) for r in work.rows)).problems
    final = sink._final("torn", 0)
    data = sink.fs.read_bytes(next(s.path for s in sink.fs.walk_files(final) if not base(s).startswith("_")))
    assert data is not None
    sink.fs.create_only(f"{final}/stray.parquet", data)
    verdict = reader.verdict(Counter(canonical(r) for r in work.rows))
    assert verdict.torn and verdict.duplicated > 0, verdict
