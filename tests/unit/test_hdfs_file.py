"""A file being written on HDFS is finished only by an explicit close, never by the garbage collector.

hdfs-native's ``FileWriter`` closes its file when collected (it is an ``io.RawIOBase``): a NameNode call
that can wait for ever, run in whichever thread the collector runs in. The test found it as a deadlock:
the collector ran in a fault proxy's event loop, and the close waited on that very loop.
"""

from __future__ import annotations

import gc

from hdfs_native import FileWriter

from eosink.stores.hdfs import HdfsFile


class _Raw:
    """Stands in for hdfs-native's Rust writer: counts what reaches the cluster."""

    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.syncs = 0
        self.closes = 0

    def write(self, data: bytes) -> int:
        self.written.append(data)
        return len(data)

    def hsync(self) -> None:
        self.syncs += 1

    def close(self) -> None:
        self.closes += 1


def test_hdfs_natives_own_writer_closes_its_file_when_collected() -> None:
    """The control: the hazard is real in the installed hdfs-native (if this fails, HdfsFile's guard is moot)."""
    raw = _Raw()
    writer = FileWriter(raw)  # type: ignore[arg-type]
    del writer
    gc.collect()
    assert raw.closes == 1


def test_a_dropped_hdfs_file_leaves_its_file_unfinished() -> None:
    raw = _Raw()
    file = HdfsFile(FileWriter(raw))  # type: ignore[arg-type]
    file.write(b"abc")
    del file
    gc.collect()
    assert raw.written == [b"abc"]
    assert raw.closes == 0


def test_an_hdfs_file_passes_writes_syncs_and_its_close_through_once() -> None:
    raw = _Raw()
    file = HdfsFile(FileWriter(raw))  # type: ignore[arg-type]
    assert file.write(b"abc") == 3
    file.hsync()
    file.close()
    del file
    gc.collect()
    assert (raw.written, raw.syncs, raw.closes) == ([b"abc"], 1, 1)
