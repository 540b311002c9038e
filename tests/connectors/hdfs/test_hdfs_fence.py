"""Fencing on the real cluster: what a new writer's fence removes, and what it must leave alone."""

from __future__ import annotations

from typing import Any

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink
from eosink.connectors.hdfs import _layout as L

APP = "fence-app"


def test_a_fence_keeps_a_batch_directory_a_writer_filled_after_it_was_listed_empty(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fence lists pending/<batch>/ as empty and removes it; a newer writer's attempt directory appears in
    it between the listing and the removal.

    Pass: the fence succeeds (the removal is best effort) and the writer's directory and file stay."""
    sink = HdfsSink(HdfsConfig(target))
    sink.setup(APP)
    epoch = sink.fence(APP)
    base = sink._pending(APP, 3)
    writing = f"{base}/{L.writing_name(epoch + 1, 0, 'attempt')}/part-p00000.parquet"
    assert sink.fs.create_only(writing, b"rows")
    names = sink.fs.names

    def listed_before_the_writer(path: str) -> list[Any]:
        return [] if path == base else names(path)

    monkeypatch.setattr(sink.fs, "names", listed_before_the_writer)
    sink.fence(APP)
    assert sink.fs.exists(writing)
