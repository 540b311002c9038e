"""Reads of files whose last block the NameNode still counts as 0 bytes (closed, not yet reported)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from eosink.connectors.hdfs import HdfsConfig
from eosink.errors import TransientError
from eosink.stores import hdfs as _fs

PAYLOAD = b'{"format": "eosink-hdfs-batch/1"}'


@dataclass
class _Status:
    length: int


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data

    def close(self) -> None:
        pass


class _ShortFirst:
    """A client whose reads come back empty ``short`` times, as before the DataNodes' block report."""

    def __init__(self, short: int) -> None:
        self.short = short
        self.reads = 0

    def get_file_info(self, path: str) -> _Status:
        return _Status(len(PAYLOAD))

    def read(self, path: str) -> _Reader:
        self.reads += 1
        return _Reader(b"" if self.reads <= self.short else PAYLOAD)


def _fs_with(client: Any, monkeypatch: pytest.MonkeyPatch) -> _fs.Fs:
    monkeypatch.setattr(_fs, "client_for", lambda config: client)
    return _fs.Fs(HdfsConfig("hdfs://127.0.0.1:1/t"))


def test_a_short_read_is_read_again_until_the_file_is_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    client = _ShortFirst(short=3)
    assert _fs_with(client, monkeypatch).read_bytes("/t/f") == PAYLOAD
    assert client.reads == 4


def test_a_read_that_stays_short_is_a_transient_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_fs, "_SHORT_READ_WAIT_S", 0.1)
    with pytest.raises(TransientError, match=r"/t/f read 0 of its \d+ bytes"):
        _fs_with(_ShortFirst(short=10**9), monkeypatch).read_bytes("/t/f")


class _RenameMovesNothing:
    """A client whose rename answers success and leaves both paths as they were (a false "done")."""

    def __init__(self) -> None:
        self.renames: list[tuple[str, str, bool]] = []

    def rename(self, src: str, dst: str, overwrite: bool) -> None:
        self.renames.append((src, dst, overwrite))

    def get_file_info(self, path: str) -> _Status:
        if path == "/t/src":
            return _Status(0)
        raise FileNotFoundError(path)


def test_a_rename_that_answers_success_but_moved_nothing_raises_rename_not_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = _RenameMovesNothing()
    fs = _fs_with(client, monkeypatch)
    with pytest.raises(_fs.RenameNotDone, match="/t/dst is not in place"):
        fs.rename("/t/src", "/t/dst")
    assert client.renames == [("/t/src", "/t/dst", False)], "a checked rename never overwrites"
    fs.rename("/t/src", "/t/dst", checked=False)  # unchecked: the caller looks for itself
