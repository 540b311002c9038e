"""The chaos job's and the demo's saved writer counters cover 2PC's commits, which come after foreachBatch.

No Spark: a real :class:`~eosink.spark.BatchWriter` (2PC, its commit-log watcher thread running)
writes into a ReferenceSink; the test plays Spark's part (offsets, foreachBatch, commit log).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eosink import faults
from eosink._saved_stats import keep_stats
from eosink.connectors.reference import ReferenceSink
from eosink.contracts._mini import FAST, FakeCheckpoint, MemoryBatch, make_rows, wait_until
from eosink.spark import BatchWriter, FanOutWriter


@pytest.fixture
def no_faults(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("EOSINK_FAULTS", raising=False)
    monkeypatch.delenv("EOSINK_FAULT_LOG", raising=False)
    faults.reset()
    yield
    faults.reset()


def _saved(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text()) if path.exists() else {}


def test_a_2pc_commit_after_the_last_batch_is_saved_before_close(tmp_path: Path, no_faults: None) -> None:
    """The last batch's reply to COMMIT is lost (F7 ambiguous); the watcher commits it after Spark's commit
    log, when foreachBatch has returned; the driver is then killed before ``close()``.

    Pass: the stats file already holds that commit and its resolved ambiguity, as a killed run's report
    reads it. (Saving the counters around each batch, as the job did, leaves both at 0 here.)
    """
    ckpt = FakeCheckpoint(tmp_path / "checkpoint")
    stats = tmp_path / "stats.json"
    writer = BatchWriter(
        ReferenceSink(tmp_path / "sink.db"), app_id="chaos", strategy="2pc", checkpoint_location=ckpt.root, policy=FAST
    )
    keep_stats(writer, stats)
    assert _saved(stats)["batches_committed"] == 0
    faults.configure("F7@0:ambiguous")
    try:
        ckpt.write_offsets(0)
        writer.coordinator.process(0, MemoryBatch(make_rows(0)))  # foreachBatch of the last batch
        assert _saved(stats)["batches_committed"] == 0  # 2PC: not before Spark's commit log
        ckpt.write_commit(0)
        assert wait_until(lambda: _saved(stats).get("batches_committed") == 1)
        saved = _saved(stats)
        assert saved["ambiguous_commits"] == 1 and saved["ambiguous_resolved_committed"] == 1
        assert saved == writer.stats.to_json()
    finally:
        writer.close()


def test_a_fan_outs_counters_are_saved_summed_and_per_sink(tmp_path: Path, no_faults: None) -> None:
    """A fan-out into two reference sinks (2PC, its watcher thread running) commits batch 0 after Spark's
    commit log.

    Pass: the stats file then says 2 batches committed (1 per sink, summed), and each sink's own counters
    under ``sinks``."""
    ckpt = FakeCheckpoint(tmp_path / "checkpoint")
    stats = tmp_path / "stats.json"
    writer = FanOutWriter(
        {"a": ReferenceSink(tmp_path / "a.db"), "b": ReferenceSink(tmp_path / "b.db")},
        app_id="chaos",
        strategy="2pc",
        checkpoint_location=ckpt.root,
        policy=FAST,
    )
    keep_stats(writer, stats)
    assert _saved(stats)["batches_committed"] == 0
    try:
        ckpt.write_offsets(0)
        writer.fanout.process(0, MemoryBatch(make_rows(0)))
        ckpt.write_commit(0)
        assert wait_until(lambda: _saved(stats).get("batches_committed") == 2)
        saved = _saved(stats)
        assert {name: s["batches_committed"] for name, s in saved["sinks"].items()} == {"a": 1, "b": 1}
    finally:
        writer.close()
