"""DeltaSink's commit at one version, on local disk and on MinIO: a zombie's commit racing a fence takes the
same version and is refused by the store's create-only write (on S3 the PUT with ``If-None-Match: *``); a
store that ignores that condition is refused at setup, before anything is written."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from eosink.connectors.delta import DeltaSink, _log
from eosink.connectors.delta.testing import DeltaHarness, read_table
from eosink.contract import BatchRef, CommitStatus
from eosink.contracts._steps import bundle_for, prepare, rows_for
from eosink.contracts.harness import CONTRACT_SCHEMA, Namespace
from eosink.errors import CommitAbortedError, ConfigurationError, FencedError, TransientError
from tests.connectors._no_conditions import NoConditionsProxy

HARNESS = DeltaHarness("s3")
STORES = {"file": DeltaHarness("file"), "s3": HARNESS}
APP = "delta-s3-app"


@pytest.fixture
def ns(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Namespace]:
    where = Namespace(f"race_{uuid.uuid4().hex[:10]}", tmp_path)
    yield where
    callspec = getattr(request.node, "callspec", None)
    STORES[callspec.params["store"] if callspec else "s3"].cleanup(where)


def sink_of(ns: Namespace, harness: DeltaHarness = HARNESS, **options: Any) -> DeltaSink:
    sink = DeltaSink(harness.config(ns, **options))
    sink.bind_schema(CONTRACT_SCHEMA)
    return sink


@pytest.mark.parametrize("store", sorted(STORES))
def test_a_zombie_whose_snapshot_predates_a_fence_loses_the_create_only_write(ns: Namespace, store: str) -> None:
    """A writer checks its epoch on snapshot v; before its commit (the create-only write of entry v + 1), a
    newer writer fences, taking v + 1 first. Pass: the store refuses the zombie's entry, the zombie reads the
    log again and raises FencedError (no commit at v + 2); nothing of its batch is visible; its work is still
    PREPARED for the new writer to decide."""
    harness = STORES[store]
    zombie = sink_of(ns, harness)
    epoch = zombie.fence(APP)
    batch = BatchRef(APP, 0)
    made = [prepare(zombie, batch, epoch, p, rows_for(APP, 0, p, 3)) for p in range(2)]
    real = _log.commit_at
    fenced: list[int] = []

    def fence_first(*args: Any, **kwargs: Any) -> None:
        if not fenced:
            fenced.append(0)  # first, so that the fence's own commit goes straight through
            fenced[0] = sink_of(ns, harness).fence(APP)
        real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_log, "commit_at", fence_first)
        with pytest.raises(FencedError):
            zombie.commit(batch, made, bundle_for(batch, epoch, made))
    assert fenced == [epoch + 1]
    assert read_table(zombie.config) == []
    assert sink_of(ns, harness).commit_status(batch, made) is CommitStatus.PREPARED


def test_a_prepared_file_a_head_misses_for_a_moment_is_asked_again_before_the_batch_is_lost(ns: Namespace) -> None:
    """The first HEADs of one prepared file answer 404, as a MinIO node restarted a moment ago does for an object
    written while it was down. Pass: the commit asks again and lands the batch whole. Control: a prepared file
    deleted for good still makes the batch's work lost (CommitAbortedError naming it), after the same asking."""
    sink = sink_of(ns)
    epoch = sink.fence(APP)
    made = [prepare(sink, BatchRef(APP, 0), epoch, p, rows_for(APP, 0, p, 3)) for p in range(2)]
    client = sink._storage().client()
    real = client.head_object
    misses: list[str] = []

    def restarted_node(**kwargs: Any) -> Any:
        if len(misses) < 3:
            from botocore.exceptions import ClientError

            misses.append(kwargs["Key"])
            raise ClientError({"Error": {"Code": "404", "Message": "Not Found"}}, "HeadObject")
        return real(**kwargs)

    client.head_object = restarted_node
    try:
        sink.commit(BatchRef(APP, 0), made, bundle_for(BatchRef(APP, 0), epoch, made))
    finally:
        del client.head_object
    assert len(misses) == 3 and len(read_table(sink.config)) == 6

    lost = [prepare(sink, BatchRef(APP, 1), epoch, p, rows_for(APP, 1, p, 3)) for p in range(2)]
    gone = str(lost[1].payload["adds"][0]["path"])
    client.delete_object(Bucket=urlsplit(sink.config.table).netloc, Key=sink._storage().key(gone))
    with pytest.raises(CommitAbortedError, match="are gone"):
        sink.commit(BatchRef(APP, 1), lost, bundle_for(BatchRef(APP, 1), epoch, lost))
    assert len(read_table(sink.config)) == 6


def test_a_store_that_ignores_if_none_match_is_refused_at_setup(ns: Namespace) -> None:
    """Reached through a proxy that drops the conditions (as a store without conditional writes would).
    Pass: setup raises ConfigurationError naming If-None-Match and the fix, and writes no table; the same
    sink on MinIO itself sets up, and its first batch lands."""
    proxy = NoConditionsProxy(HARNESS._minio())
    try:
        bad = sink_of(ns, endpoint_url=proxy.url)
        with pytest.raises(ConfigurationError, match="If-None-Match") as err:
            bad.setup(APP)
        assert err.value.fix and "conditional writes" in err.value.fix
        assert proxy.stripped >= 1, "the probe's conditional PUT went through the proxy"
    finally:
        proxy.close()
    good = sink_of(ns)
    assert _log.load(good.config.table, good.config.delta_options()) is None
    good.setup(APP)
    epoch = good.fence(APP)
    batch = BatchRef(APP, 0)
    made = [prepare(good, batch, epoch, 0, rows_for(APP, 0, 0, 2))]
    good.commit(batch, made, bundle_for(batch, epoch, made))
    assert len(read_table(good.config)) == 2


@pytest.fixture
def hdfs_url(tmp_path: Path) -> Iterator[str]:
    """A private MiniDFSCluster at HDFS's default num-committed-allowed (0), which delta-rs needs."""
    from eosink.services.hdfs import HdfsServer

    server = HdfsServer(tmp_path / "hdfs", close_before_report=False)
    try:
        yield str(server.start().url).rstrip("/")
    finally:
        server.stop()


@pytest.mark.full
def test_a_namenode_that_stops_answering_is_a_transient_error_not_a_hang(tmp_path: Path, hdfs_url: str) -> None:
    """delta-rs's HDFS client waits without limit for an answer. Through a fault proxy that holds every byte,
    the sink's read of the log must give up. Pass: it raises TransientError naming read_timeout_s within a few
    seconds of it (2 s here); through the proxy passing again, the table reads."""
    from eosink.services.proxy import FaultProxy

    parts = urlsplit(hdfs_url)
    assert parts.hostname and parts.port
    ns = Namespace(f"stall_{uuid.uuid4().hex[:10]}", tmp_path)
    direct = DeltaHarness("hdfs")
    direct.use_hdfs(hdfs_url)
    sink_of(ns, direct).fence(APP)
    with FaultProxy(parts.hostname, parts.port) as proxy:
        proxied = DeltaHarness("hdfs")
        proxied.use_hdfs(f"hdfs://127.0.0.1:{proxy.port}")
        sink = sink_of(ns, proxied, read_timeout_s=2.0)
        proxy.delay(3600)
        started = time.monotonic()
        with pytest.raises(TransientError, match="read_timeout_s"):
            sink.current_epoch(APP)
        assert time.monotonic() - started < 30
        proxy.delay(0)
        proxy.cut_all()
    assert sink_of(ns, direct).current_epoch(APP) == 1
