"""Other engines read what DeltaSink commits (eosink.connectors.delta.readers): deltalake and DuckDB count the
same rows per batch, the batches with a bundle come from the log, and a read that shows part of a batch, or a
batch's rows without its bundle, is told apart from a whole one."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from eosink.connectors.delta import DeltaConfig, DeltaSink
from eosink.connectors.delta.readers import CommittedBatches, DeltaLakeReader, DuckDBReader
from eosink.contract import BatchRef, Committable, TaskRef
from eosink.contracts._steps import bundle_for

APP = "readers-app"
SCHEMA = pa.schema([("batch_id", pa.int64()), ("v", pa.string())])


def _commit(sink: DeltaSink, epoch: int, batch_id: int, rows: int, participants: int = 2) -> None:
    batch = BatchRef(APP, batch_id)
    made: list[Committable] = []
    for p in range(participants):
        txn = sink.begin(TaskRef(batch, epoch, p, f"a{p}"))
        data = {"batch_id": [batch_id] * rows, "v": [f"{batch_id}/{p}/{i}" for i in range(rows)]}
        sink.write(txn, pa.RecordBatch.from_pydict(data, schema=SCHEMA))
        made.append(sink.pre_commit(txn))
    sink.commit(batch, made, bundle_for(batch, epoch, made))


@pytest.fixture
def config(tmp_path: Path) -> DeltaConfig:
    return DeltaConfig(str(tmp_path / "table"))


def test_deltalake_and_duckdb_see_every_committed_batch_whole_with_its_bundle(config: DeltaConfig) -> None:
    """Three batches committed by DeltaSink (two participants, 4 rows each).

    Pass: both engines count 8 rows in each batch, and every batch has a bundle in the log; before the
    first commit both read nothing."""
    sink = DeltaSink(config)
    sink.bind_schema(SCHEMA)
    epoch = sink.fence(APP)
    batches = CommittedBatches(config, APP)
    engines = [DeltaLakeReader(config), DuckDBReader(config)]
    assert [e.snapshot(batches).rows_per_batch for e in engines] == [{}, {}]
    for batch_id in range(3):
        _commit(sink, epoch, batch_id, 4)
    for engine in engines:
        snap = engine.snapshot(batches)
        assert snap.reader == engine.name
        assert snap.rows_per_batch == {0: 8, 1: 8, 2: 8}
        assert snap.bundles == frozenset({0, 1, 2})


def test_rows_another_writer_appended_show_as_rows_without_a_bundle(config: DeltaConfig) -> None:
    """A plain delta-rs append of rows claiming batch 5 (no eosink commit info).

    Pass: both engines see its rows, and batch 5 is not among the batches with a bundle, so the chaos
    reader would report it as a partial view."""
    from deltalake import write_deltalake

    sink = DeltaSink(config)
    sink.bind_schema(SCHEMA)
    _commit(sink, sink.fence(APP), 0, 2)
    write_deltalake(config.table, pa.table({"batch_id": [5, 5], "v": ["x", "y"]}, schema=SCHEMA), mode="append")
    batches = CommittedBatches(config, APP)
    for engine in (DeltaLakeReader(config), DuckDBReader(config)):
        snap = engine.snapshot(batches)
        assert snap.rows_per_batch == {0: 4, 5: 2}
        assert snap.bundles == frozenset({0})


def test_duckdb_refuses_an_hdfs_table_naming_the_readers_that_can() -> None:
    """Pass: a ConfigurationError that names deltalake and Spark."""
    from eosink.errors import ConfigurationError

    with pytest.raises(ConfigurationError, match="deltalake or Spark"):
        DuckDBReader(DeltaConfig("hdfs://127.0.0.1:9000/t"))


READ_AND_EXIT = """
import sys
from eosink.connectors.delta import DeltaConfig
from eosink.connectors.delta.readers import DeltaLakeReader
from eosink.connectors.delta.testing import read_table
config = DeltaConfig(sys.argv[1])
print(DeltaLakeReader(config).table(["v"]).num_rows, len(read_table(config)))
"""


def test_a_process_that_read_the_table_exits_cleanly(config: DeltaConfig) -> None:
    """Five fresh processes each read a committed table through the deltalake reader and the test kit, then exit.

    Pass: each prints the table's 8 rows twice and exits 0. A pyarrow dataset over delta-rs's file system
    (``to_pyarrow_table``) aborts most such processes at interpreter exit with SIGABRT."""
    import subprocess
    import sys

    sink = DeltaSink(config)
    sink.bind_schema(SCHEMA)
    _commit(sink, sink.fence(APP), 0, 4)
    for _ in range(5):
        run = subprocess.run(
            [sys.executable, "-c", READ_AND_EXIT, config.table], capture_output=True, text=True, timeout=120
        )
        assert (run.returncode, run.stdout.split()) == (0, ["8", "8"]), run.stderr[-2000:]
