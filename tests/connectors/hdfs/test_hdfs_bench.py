"""The HDFS benchmark adapter without Spark: its runs and goals, and its file-system side against the MiniDFSCluster.

The Spark runs themselves (``make bench SINK=hdfs``) are not tests; here the at-least-once task function, the
latency poll, ``verify``, ``drop`` and the raw write work on files and batches written from Python.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eosink.bench.runs import AT_LEAST_ONCE, RunSpec
from eosink.connectors.hdfs import HdfsSink
from eosink.connectors.hdfs._bench import URL_ENV, HdfsAdapter, _DirectWrite, app_id
from eosink.connectors.hdfs.testing import files_under
from eosink.contract import BatchRef
from eosink.contracts._steps import bundle_for
from eosink.errors import ConfigurationError
from eosink.fanout import member_app_id
from eosink.participant import WritePlan, run_participant
from eosink.services.hdfs import HdfsEndpoint

SCHEMA = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", "UTC")), ("note", pa.string())])
AT_US = 1_700_000_000_000_000


def _rows(start: int, n: int, at_us: int = AT_US) -> pa.RecordBatch:
    ids = list(range(start, start + n))
    stamps = [datetime.fromtimestamp(at_us / 1e6, timezone.utc)] * n
    return pa.RecordBatch.from_pydict({"id": ids, "at": stamps, "note": ["x"] * n}, schema=SCHEMA)


@pytest.fixture
def adapter(hdfs_endpoint: HdfsEndpoint, monkeypatch: pytest.MonkeyPatch) -> HdfsAdapter:
    """An adapter of the harness's cluster, found as a job finds it (through its environment)."""
    monkeypatch.setenv(URL_ENV, hdfs_endpoint.url)
    return HdfsAdapter()


@pytest.fixture
def ns(adapter: HdfsAdapter) -> Iterator[str]:
    name = uuid.uuid4().hex[:8]
    yield name
    adapter.drop(name)


def test_runs_and_goals_are_the_issues() -> None:
    adapter = HdfsAdapter()
    names = {r.name for r in adapter.runs()}
    assert names == {
        "eosink-2pc",
        "eosink-txid-check",
        "eosink-idempotent",
        AT_LEAST_ONCE,
        "spark-arrow-floor",
        "spark-file-sink",
        "raw-write",
    }
    goals = adapter.goals()
    assert [(b.run, b.min_ratio) for b in goals.baselines] == [("spark-file-sink", 1.0), ("raw-write", None)]
    assert dict(goals.vs_at_least_once) == {"2pc": 0.85}


def test_without_a_cluster_the_adapter_says_how_to_get_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(URL_ENV, raising=False)
    with pytest.raises(ConfigurationError, match=URL_ENV):
        HdfsAdapter().config("n")


def test_at_least_once_files_are_seen_then_read_then_counted(adapter: HdfsAdapter, ns: str) -> None:
    task = _DirectWrite(adapter.config(ns), 3)
    done = list(task(iter([_rows(0, 50), _rows(50, 30)])))
    assert done[0].to_pydict() == {"rows": [80]}

    assert adapter.poll_visible(ns, -1, 0) == ([], -1, None)  # stamped by the listing; nothing read yet
    rows, hi, batch = adapter.poll_visible(ns, -1, 0)
    assert sum(c for _, c in rows) == 80 and hi == 79 and batch is None
    assert all(ms > 0 for ms, _ in rows)
    assert adapter.poll_visible(ns, hi, 0) == ([], 79, None)
    assert adapter.verify(ns) == 80


def _commit(sink: HdfsSink, app: str, batch_id: int, shares: list[pa.RecordBatch], *, commit: bool = True) -> None:
    """One batch through the sink's own protocol, as the coordinator and its participants would run it."""
    epoch = sink.fence(app)
    batch = BatchRef(app, batch_id)
    plan = WritePlan(sink, batch, epoch, None, commit, False, 0)
    made = [run_participant(plan, p, [share]) for p, share in enumerate(shares)]
    committables = [c for c in made if c is not None]
    if commit:
        sink.commit(batch, committables, bundle_for(batch, epoch, committables))


def test_a_batch_is_stamped_at_its_directory_and_verified_through_its_record(adapter: HdfsAdapter, ns: str) -> None:
    sink = HdfsSink(adapter.config(ns))
    sink.setup(app_id(ns))
    _commit(sink, app_id(ns), 0, [_rows(0, 20), _rows(20, 25)])

    assert adapter.poll_visible(ns, -1, 0) == ([], -1, 0)
    rows, hi, batch = adapter.poll_visible(ns, -1, 0)
    assert sum(c for _, c in rows) == 45 and hi == 44 and batch == 0
    assert adapter.verify(ns) == 45


def test_a_batch_a_fan_out_committed_is_counted_under_its_member_app_id(adapter: HdfsAdapter, ns: str) -> None:
    """Pass: rows committed as a fan-out's sink ``hdfs`` (app_id ``<app>.hdfs``) count, as they would on their own."""
    member = member_app_id(app_id(ns), adapter.name)
    sink = HdfsSink(adapter.config(ns))
    sink.setup(member)
    _commit(sink, member, 0, [_rows(0, 12), _rows(12, 9)])
    assert adapter.verify(ns) == 21


def test_files_of_a_batch_that_never_committed_are_not_counted(adapter: HdfsAdapter, ns: str) -> None:
    sink = HdfsSink(adapter.config(ns))
    sink.setup(app_id(ns))
    _commit(sink, app_id(ns), 0, [_rows(0, 10)], commit=False)
    assert adapter.verify(ns) == 0


def test_the_raw_write_copies_the_data_sets_files(adapter: HdfsAdapter, ns: str, tmp_path: Path) -> None:
    for i in range(2):
        pq.write_table(pa.Table.from_batches([_rows(i * 100, 100)]), tmp_path / f"part-{i}.parquet")

    class Data:
        parquet = str(tmp_path)

    seconds = adapter.run_external(RunSpec("raw-write", "external"), ns, Data())  # type: ignore[arg-type]
    assert seconds > 0
    assert adapter.verify(ns) == 200


def test_drop_removes_the_directory(adapter: HdfsAdapter) -> None:
    name = uuid.uuid4().hex[:8]
    list(_DirectWrite(adapter.config(name), 0)(iter([_rows(0, 5)])))
    assert files_under(adapter.config(name).target_url)
    adapter.drop(name)
    assert files_under(adapter.config(name).target_url) == []
