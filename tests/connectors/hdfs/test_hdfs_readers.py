"""What readers that list the target see, read with pyarrow's dataset reader (and Spark) on the real MiniDFSCluster.

pyarrow's dataset discovery (like Spark's and Hive's file listing) skips names that start with
``_`` or ``.``. These tests hold HdfsSink to the promise built on that: a listing reader sees
whole committed batches only, never a prepared batch, a batch caught mid-gather, a writer's
unfinished files or the batch records; and after an idempotent replay with another partitioning,
the batch's directory holds each row once. pyarrow reaches HDFS through hdfs-native's fsspec file
system (no JVM), as a user without libhdfs would. Both readers discover the batch ranges' two
directory levels as the partition columns ``eosink_range`` and ``eosink_batch`` (docs/connectors/hdfs.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest
from hdfs_native.fsspec import HdfsFileSystem
from pyarrow.fs import FSSpecHandler, PyFileSystem

from eosink import faults
from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.connectors.hdfs import _layout as L
from eosink.contract import BatchRef, Committable, TaskRef
from eosink.contracts._steps import bundle_for, prepare, rows_for
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.errors import InjectedFault
from eosink.stores.hdfs import Fs

APP = "readers-app"
SPARK_JOB = Path(__file__).with_name("spark_read_job.py")
COLUMNS = ("id", "name", "amount", "tag")
LAYOUTS = [
    pytest.param({}, id="parquet"),
    pytest.param({"partition_by": ("tag",)}, id="parquet-partitioned"),
    pytest.param({"format": "jsonl"}, id="jsonl"),
]


def pyarrow_dataset(config: HdfsConfig) -> ds.Dataset:
    """The target as ``pyarrow.dataset`` discovers it by listing (Hive partitions), every file readable whole."""
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
    return dataset


def pyarrow_rows(config: HdfsConfig) -> Counter[tuple[Any, ...]]:
    """The rows ``pyarrow.dataset`` finds by listing the target (Hive partitions discovered), as tuples."""
    dataset = pyarrow_dataset(config)
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


RANGED = (0, 1, 1000)
"""Batches of the batch-range tests: two in the first range, one in the second."""


def ranged_target(target: str, layout: dict[str, Any]) -> tuple[HdfsConfig, list[dict[str, Any]]]:
    """Batches :data:`RANGED` of APP committed into ``target``, and an empty range directory beside them (a commit
    that died between making its range and its rename); the rows written."""
    config = HdfsConfig(target, **layout)
    sink = HdfsSink(config)
    sink.setup(APP)
    epoch = sink.fence(APP)
    rows: list[dict[str, Any]] = []
    for batch_id in RANGED:
        batch = BatchRef(APP, batch_id)
        shares = [rows_for(APP, batch_id, p, 5) for p in range(2)]
        made = [prepare(sink, batch, epoch, p, share) for p, share in enumerate(shares)]
        sink.commit(batch, made, bundle_for(batch, epoch, made))
        rows += [r for share in shares for r in share]
    sink.fs.mkdirs(f"{sink.root}/{L.range_dir_name(APP, 2000)}")
    return config, rows


def _with_batch(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    """Each row with the range and batch it was committed in (rows_for: batch = id // 10,000)."""
    key = L.app_key(APP)
    return Counter(
        (*_canon(r), f"{key}-{L.batch_name(r['id'] // 10_000 // 1000 * 1000)}", r["id"] // 10_000) for r in rows
    )


@pytest.mark.parametrize("layout", LAYOUTS[:2])
def test_pyarrow_discovers_the_batch_ranges_as_two_partition_columns(target: str, layout: dict[str, Any]) -> None:
    """Batches 0, 1 and 1000 (two ranges), an empty range directory beside them; Parquet, and Parquet in Hive
    partitions by ``tag``.

    Pass: ``pyarrow.dataset(..., partitioning="hive")`` returns the user's columns plus ``eosink_range`` (a
    string: <app>-<first batch>) and ``eosink_batch`` (an integer: the batch id), every row once, each with
    the range and batch it was committed in; selecting the user's columns leaves them out."""
    config, rows = ranged_target(target, layout)
    dataset = pyarrow_dataset(config)
    schema = dataset.schema
    assert [n for n in schema.names if n.startswith("eosink_")] == ["eosink_range", "eosink_batch"]
    assert set(schema.names) == {*COLUMNS, "eosink_range", "eosink_batch"}
    assert pa.types.is_string(schema.field("eosink_range").type)
    assert pa.types.is_integer(schema.field("eosink_batch").type)
    table = dataset.to_table(columns=[*COLUMNS, "eosink_range", "eosink_batch"])
    found = Counter((*_canon(r), r["eosink_range"], r["eosink_batch"]) for r in table.to_pylist())
    assert found == _with_batch(rows)
    assert pyarrow_rows(config) == _expected(rows)


def spark_read(urls: list[str]) -> list[dict[str, Any]]:
    """What ``spark.read.parquet`` returns for each URL, read in a process of its own (``spark_read_job.py``)."""
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    done = subprocess.run(
        [sys.executable, str(SPARK_JOB), *urls], capture_output=True, text=True, timeout=600, env=env, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.mark.full
@pytest.mark.spark
def test_spark_read_parquet_returns_the_users_columns_and_the_batch_ranges_columns(target: str) -> None:
    """``spark.read.parquet(T)`` of two targets with batches 0, 1 and 1000 (two ranges) and an empty range
    directory: plain Parquet, and Parquet partitioned by ``tag``.

    Pass: Spark's partition discovery accepts both (no "Conflicting directory structures"); its columns are the
    user's data columns, then ``eosink_range`` (string) and ``eosink_batch`` (integer), then ``tag`` where it
    partitions; every row once, with the range and batch it was committed in; ``.drop("eosink_range",
    "eosink_batch")`` leaves the user's columns."""
    layouts: list[dict[str, Any]] = [{}, {"partition_by": ("tag",)}]
    made = [ranged_target(f"{target}/{n}", layout) for n, layout in enumerate(layouts)]
    read = spark_read([config.target_url for config, _ in made])
    assert len(read) == len(made)
    for (config, rows), frame in zip(made, read, strict=True):
        data = [c for c in COLUMNS if c not in config.partition_by]
        assert frame["columns"] == [*data, "eosink_range", "eosink_batch", *config.partition_by]
        assert frame["dtypes"]["eosink_range"] == "string" and frame["dtypes"]["eosink_batch"] in ("int", "bigint")
        found = Counter((*_canon(r), r["eosink_range"], r["eosink_batch"]) for r in frame["rows"])
        assert found == _with_batch(rows)
        assert frame["dropped"] == [*data, *config.partition_by]
