"""The S3 benchmark adapter without Spark: its runs and goals, its secrets, and its store-side parts against MinIO.

The Spark runs themselves (``make bench SINK=s3``) are not tests; here the at-least-once task function, the
latency poll, ``verify`` and ``drop`` work on objects and markers written from Python.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest

from eosink.bench.file_sinks import latency_buckets
from eosink.bench.runs import AT_LEAST_ONCE
from eosink.connectors.s3 import S3Sink
from eosink.connectors.s3._bench import BUCKET, S3Adapter, _DirectPut, app_id, object_prefix
from eosink.connectors.s3._fold import Folder
from eosink.contract import BatchRef
from eosink.contracts._steps import bundle_for
from eosink.fanout import member_app_id
from eosink.participant import WritePlan, run_participant
from eosink.services.minio import S3Endpoint
from eosink.services.spark_jars import SparkJars

SECRET = "bench-secret-0123456789abcdef"
SCHEMA = pa.schema([("id", pa.int64()), ("at", pa.timestamp("us", "UTC")), ("note", pa.string())])


def _rows(start: int, n: int, at_us: int) -> pa.RecordBatch:
    ids = list(range(start, start + n))
    stamps = [datetime.fromtimestamp(at_us / 1e6, timezone.utc)] * n
    return pa.RecordBatch.from_pydict({"id": ids, "at": stamps, "note": ["x"] * n}, schema=SCHEMA)


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> S3Adapter:
    """An adapter whose store comes from the environment, as in a job's driver (nothing contacted)."""
    monkeypatch.setenv("EOSINK_S3_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("EOSINK_S3_ACCESS_KEY", "bench-access")
    monkeypatch.setenv("EOSINK_S3_SECRET_KEY", SECRET)
    return S3Adapter()


@pytest.fixture
def adapter(s3_endpoint: S3Endpoint, monkeypatch: pytest.MonkeyPatch) -> S3Adapter:
    """An adapter of the harness's MinIO with its bucket made (``start`` would also fetch Spark's jars)."""
    for name, value in s3_endpoint.env().items():
        monkeypatch.setenv(name, value)
    made = S3Adapter()
    made.prepare("unused")
    return made


@pytest.fixture
def ns(adapter: S3Adapter) -> Iterator[str]:
    name = uuid.uuid4().hex[:8]
    yield name
    adapter.drop(name)


def test_runs_and_goals_are_the_issues() -> None:
    adapter = S3Adapter()
    names = {r.name for r in adapter.runs()}
    assert names == {
        "eosink-2pc",
        "eosink-txid-check",
        "eosink-idempotent",
        AT_LEAST_ONCE,
        "spark-arrow-floor",
        "spark-file-sink",
        "raw-upload",
    }
    goals = adapter.goals()
    assert [(b.run, b.min_ratio) for b in goals.baselines] == [("spark-file-sink", 1.0), ("raw-upload", None)]
    assert dict(goals.vs_at_least_once) == {"2pc": 0.85}
    assert goals.visible_after_commit_log_p50_ms == 150.0


def test_the_secret_reaches_the_job_by_environment_only(offline: S3Adapter, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = Path("/jars/hadoop-aws.jar")
    monkeypatch.setattr(SparkJars, "jars", lambda self, *groups: [jar] if groups == ("s3",) else [])
    conf = offline.spark_conf()
    assert SECRET not in str(conf) and conf["spark.hadoop.fs.s3a.path.style.access"] == "true"
    assert conf["spark.driver.extraClassPath"] == str(jar) and "spark.jars" not in conf
    assert conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] == "false"
    env = offline.child_env()
    assert env["EOSINK_S3_SECRET_KEY"] == SECRET and env["AWS_SECRET_ACCESS_KEY"] == SECRET
    assert SECRET not in repr(offline._store) and SECRET not in repr(offline.config("n"))
    assert offline.scrub(f"failed: key {SECRET}!") == "failed: key ***!"


def test_latency_buckets_count_rows_per_millisecond_and_warm_up_apart() -> None:
    at = pa.array([1_000_000, 1_000_000, 1_040_000, 2_000_000], pa.timestamp("us", "UTC"))
    assert latency_buckets(at, 2.1, warm_from_us=1_020_000) == {-1: 2, 1060: 1, 100: 1}


def test_at_least_once_objects_are_seen_then_read_then_counted(adapter: S3Adapter, ns: str) -> None:
    at_us = 1_700_000_000_000_000
    task = _DirectPut(adapter.config(ns), 3)
    done = list(task(iter([_rows(0, 50, at_us), _rows(50, 30, at_us)])))
    assert done[0].to_pydict() == {"rows": [80]}

    rows, hi, batch = adapter.poll_visible(ns, -1, 0)
    assert (rows, hi, batch) == ([], -1, None)  # stamped by the LIST; nothing read yet
    rows, hi, batch = adapter.poll_visible(ns, -1, 0)
    assert sum(c for _, c in rows) == 80 and hi == 79 and batch is None
    assert all(ms > 0 for ms, _ in rows)
    assert adapter.poll_visible(ns, hi, 0) == ([], 79, None)
    assert adapter.verify(ns) == 80


def _commit(sink: S3Sink, app: str, batch_id: int, shares: list[pa.RecordBatch], *, commit: bool = True) -> None:
    """One batch through the sink's own protocol, as the coordinator and two participants would run it."""
    epoch = sink.fence(app)
    batch = BatchRef(app, batch_id)
    transactional = commit
    plan = WritePlan(sink, batch, epoch, None, transactional, False, 0)
    made = [run_participant(plan, p, [share]) for p, share in enumerate(shares)]
    committables = [c for c in made if c is not None]
    if commit:
        sink.commit(batch, committables, bundle_for(batch, epoch, committables))


def test_a_batch_is_stamped_at_its_marker_and_verified_through_markers(adapter: S3Adapter, ns: str) -> None:
    sink = S3Sink(adapter.config(ns))
    sink.setup(app_id(ns))
    at_us = 1_700_000_000_000_000
    _commit(sink, app_id(ns), 0, [_rows(0, 20, at_us), _rows(20, 25, at_us)])

    assert adapter.poll_visible(ns, -1, 0) == ([], -1, 0)
    rows, hi, batch = adapter.poll_visible(ns, -1, 0)
    assert sum(c for _, c in rows) == 45 and hi == 44 and batch == 0
    assert adapter.verify(ns) == 45


def test_a_batch_a_fan_out_committed_is_counted_under_its_member_app_id(adapter: S3Adapter, ns: str) -> None:
    """Pass: objects whose markers a fan-out's sink ``s3`` wrote (app_id ``<app>.s3``) count, as they would on
    their own."""
    member = member_app_id(app_id(ns), adapter.name)
    sink = S3Sink(adapter.config(ns))
    sink.setup(member)
    _commit(sink, member, 0, [_rows(0, 12, 0), _rows(12, 9, 0)])
    assert adapter.verify(ns) == 21


def test_objects_without_a_marker_are_not_counted(adapter: S3Adapter, ns: str) -> None:
    """Objects of a batch that never committed (visible, as the idempotent strategy writes them) count 0."""
    sink = S3Sink(adapter.config(ns))
    sink.setup(app_id(ns))
    _commit(sink, app_id(ns), 0, [_rows(0, 10, 0)], commit=False)
    assert adapter.verify(ns) == 0


def test_drop_removes_the_prefix(adapter: S3Adapter) -> None:
    name = uuid.uuid4().hex[:8]
    list(_DirectPut(adapter.config(name), 0)(iter([_rows(0, 5, 0)])))
    adapter.drop(name)
    listed = adapter._client().list_objects_v2(Bucket=BUCKET, Prefix=f"{object_prefix(name)}/")
    assert listed.get("KeyCount", 0) == 0


def test_a_marker_folded_between_the_poll_and_its_read_is_read_from_its_segment(adapter: S3Adapter, ns: str) -> None:
    """Six batches (segments of 4, not folded yet) are stamped by one poll; then compact() folds 0..3 and deletes
    their markers before the next poll reads them. Pass: that poll reads every batch's rows, the folded ones
    through their segment."""
    config = replace(adapter.config(ns), segment_batches=4)
    sink = S3Sink(config)
    sink.setup(app_id(ns))
    at_us = 1_700_000_000_000_000
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Folder, "after_commit", lambda self, app, batch_id: None)
        for b in range(6):
            _commit(sink, app_id(ns), b, [_rows(b * 10, 10, at_us)])
    assert adapter.poll_visible(ns, -1, 0) == ([], -1, 5)
    assert S3Sink(config).compact(app_id(ns)) == 1
    rows, hi, batch = adapter.poll_visible(ns, -1, 0)
    assert sum(c for _, c in rows) == 60 and hi == 59 and batch == 5
