"""What readers that list the target see, read with pyarrow's dataset reader on the real MiniDFSCluster.

pyarrow's dataset discovery (like Spark's and Hive's file listing) skips names that start with
``_`` or ``.``. These tests hold HdfsSink to the promise built on that: a listing reader sees
whole committed batches only, never a prepared batch, a batch caught mid-gather, a writer's
unfinished files or the batch records; and after an idempotent replay with another partitioning,
the batch's directory holds each row once. pyarrow reaches HDFS through hdfs-native's fsspec file
system (no JVM), as a user without libhdfs would.
"""

from __future__ import annotations

import urllib.parse
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hdfs_native.fsspec import HdfsFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem

from eosink import faults
from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.connectors.hdfs._fs import Fs
from eosink.contract import BatchRef, Committable, TaskRef
from eosink.contracts._steps import bundle_for, prepare, rows_for
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.errors import InjectedFault

APP = "readers-app"
COLUMNS = ("id", "name", "amount", "tag")
LAYOUTS = [
    pytest.param({}, id="parquet"),
    pytest.param({"partition_by": ("tag",)}, id="parquet-partitioned"),
    pytest.param({"format": "jsonl"}, id="jsonl"),
]


def pyarrow_rows(config: HdfsConfig) -> Counter[tuple[Any, ...]]:
    """The rows ``pyarrow.dataset`` finds by listing the target (Hive partitions discovered), as tuples."""
    parts = urllib.parse.urlsplit(config.target_url)
    filesystem = PyFileSystem(FSSpecHandler(HdfsFileSystem(host=parts.hostname, port=parts.port)))
    partitioning = ds.HivePartitioning.discover(infer_dictionary=False)
    dataset = ds.dataset(
        config.path,
        filesystem=filesystem,
        format="json" if config.format == "jsonl" else "parquet",
        partitioning=partitioning,
    )
    whole = Fs(config)
    for path in dataset.files:  # the harness's NameNode closes files before their last block is reported
        whole.read_bytes(path)  # (docs: file close latency): wait, bounded, until each reads whole
    table = dataset.to_table(columns=list(COLUMNS)) if dataset.files else pa.table({c: [] for c in COLUMNS})
    return Counter(_canon(row) for row in table.to_pylist())


def _canon(row: dict[str, Any]) -> tuple[Any, ...]:
    return (int(row["id"]), row["name"], float(row["amount"]), None if row["tag"] is None else str(row["tag"]))


def _expected(*shares: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(_canon(row) for rows in shares for row in rows)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_listing_reader_sees_whole_committed_batches_only(target: str, layout: dict[str, Any]) -> None:
    """Batch 0 committed; batch 1 prepared; batch 2 caught mid-gather (one participant staged); a writer of
    batch 3 that has not prepared. Pass: pyarrow's dataset reader sees batch 0 alone; once 1 and 2 commit,
    exactly the three batches; the same rows as ``read_committed``."""
    config = HdfsConfig(target, **layout)
    sink = HdfsSink(config)
    sink.setup(APP)
    epoch = sink.fence(APP)

    def prepared(batch_id: int) -> tuple[BatchRef, list[Committable], list[list[dict[str, Any]]]]:
        batch = BatchRef(APP, batch_id)
        shares = [rows_for(APP, batch_id, p, 7) for p in range(2)]
        return batch, [prepare(sink, batch, epoch, p, rows) for p, rows in enumerate(shares)], shares

    b0, c0, rows0 = prepared(0)
    sink.commit(b0, c0, bundle_for(b0, epoch, c0))
    b1, c1, rows1 = prepared(1)
    b2, c2, rows2 = prepared(2)
    faults.configure("F6@2:raise")
    try:
        with pytest.raises(InjectedFault):
            sink.commit(b2, c2, bundle_for(b2, epoch, c2))
    finally:
        faults.reset()
    writing = sink.begin(TaskRef(BatchRef(APP, 3), epoch, 0, "attempt-unprepared"))
    sink.write(writing, pa.RecordBatch.from_pylist(rows_for(APP, 3, 0, 5), schema=CONTRACT_SCHEMA))

    assert pyarrow_rows(config) == _expected(*rows0), "a listing reader saw rows of a batch not committed"

    sink.commit(b1, c1, bundle_for(b1, epoch, c1))
    sink.commit(b2, c2, bundle_for(b2, epoch, c2))
    assert pyarrow_rows(config) == _expected(*rows0, *rows1, *rows2)
    assert Counter(_canon(r) for r in read_committed(config, APP).to_pylist()) == pyarrow_rows(config)


@pytest.mark.parametrize("layout", LAYOUTS[:2])
def test_an_idempotent_replay_with_another_partitioning_leaves_each_row_once(
    target: str, layout: dict[str, Any]
) -> None:
    """Idempotent: batch 0's first attempt wrote three participants' files and died before its commit; the
    replay (Spark re-partitioned it) writes the same rows through two participants and commits.

    Pass: the first attempt's third file, which no replay participant names, is gone; a listing reader and
    ``read_committed`` see every row once."""
    config = HdfsConfig(target, **layout)
    sink = HdfsSink(config)
    sink.setup(APP)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    rows = [row for p in range(3) for row in rows_for(APP, 0, p, 6)]
    first = [rows[0:6], rows[6:12], rows[12:18]]
    for p, share in enumerate(first):
        prepare(sink, batch, epoch, p, share, transactional=False)
    assert pyarrow_rows(config) == _expected(rows), "idempotent files are visible as written"

    epoch = sink.fence(APP)  # the restarted driver
    replay = [rows[1::2], rows[0::2]]
    committables = [prepare(sink, batch, epoch, p, share, transactional=False) for p, share in enumerate(replay)]
    sink.commit(batch, committables, bundle_for(batch, epoch, committables, "idempotent"))
    assert pyarrow_rows(config) == _expected(rows), "a file of the first attempt survived the replay's commit"
    assert Counter(_canon(r) for r in read_committed(config, APP).to_pylist()) == _expected(rows)
