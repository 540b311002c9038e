"""The chaos harness's Delta reads from the runner's process, where the store's balancer and fault proxies are
threads (eosink.connectors.delta._chaos_reads): delta-rs keeps the GIL while it waits on the store, so a read
made in that process stalls the threads its own requests go through. Read through an in-process balancer in
front of the harness's MinIO: the reads' worker process sees every batch; the same read in this process
(negative control) does not come back before delta-rs gives up."""

from __future__ import annotations

import dataclasses
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from eosink.connectors.delta import DeltaConfig, DeltaSink
from eosink.connectors.delta._chaos_reads import ReadsProcess
from eosink.connectors.delta.readers import CommittedBatches, DeltaLakeReader
from eosink.connectors.delta.testing import BUCKET
from eosink.services import get_service
from eosink.services._balancer import Backend, Balancer
from eosink.stores.s3 import S3Connection, client, empty_prefix, ensure_bucket

from .test_delta_readers import APP, SCHEMA, _commit

pytestmark = pytest.mark.full


@pytest.fixture
def through_balancer() -> Iterator[tuple[DeltaConfig, DeltaConfig]]:
    """A table with three committed batches on the harness's MinIO: its config reaching MinIO directly, and
    one reaching it through a balancer that runs in this process (5 s request timeouts)."""
    ep = get_service("minio").endpoint()
    s3 = client(S3Connection(ep.endpoint_url, ep.region, access_key_id=ep.access_key, secret_access_key=ep.secret_key))
    ensure_bucket(s3, BUCKET)
    prefix = f"chaos-reads-{uuid.uuid4().hex[:10]}"
    direct = DeltaConfig.on_endpoint(f"s3://{BUCKET}/{prefix}", ep)
    sink = DeltaSink(direct)
    sink.bind_schema(SCHEMA)
    epoch = sink.fence(APP)
    for batch_id in range(3):
        _commit(sink, epoch, batch_id, 4)
    where = urllib.parse.urlsplit(ep.endpoint_url)
    assert where.hostname and where.port
    balancer = Balancer([Backend(where.hostname, where.port)]).start()
    try:
        via: Any = dataclasses.replace(ep, endpoint_url=f"http://127.0.0.1:{balancer.port}")
        yield direct, DeltaConfig.on_endpoint(f"s3://{BUCKET}/{prefix}", via, read_timeout_s=5.0)
    finally:
        balancer.close()
        empty_prefix(s3, BUCKET, prefix)


def test_the_reads_process_reads_through_the_runners_own_balancer(
    through_balancer: tuple[DeltaConfig, DeltaConfig],
) -> None:
    """Pass: both engines (deltalake, then DuckDB) count 8 rows in each of the three batches, every batch with
    its bundle, each read within 60 s; the rows read back are the table's 24."""
    _, via = through_balancer
    reads = ReadsProcess(timeout_s=60.0)
    try:
        seen = [reads.snapshot(via, APP) for _ in range(2)]
        assert [s.reader for s in seen if s is not None] == ["deltalake", "duckdb"]
        for snap in seen:
            assert snap is not None
            assert snap.rows_per_batch == {0: 8, 1: 8, 2: 8}
            assert snap.bundles == frozenset({0, 1, 2})
        assert len(reads.rows(via, ["batch_id", "v"])) == 24
        reads.forget(via, APP)
    finally:
        reads.close()


def test_negative_control_the_same_read_in_this_process_stalls_until_delta_rs_gives_up(
    through_balancer: tuple[DeltaConfig, DeltaConfig],
) -> None:
    """Pass: the read made in this process fails, after at least delta-rs's 5 s request timeout, where the
    same read of the table reaching MinIO directly returns every row."""
    direct, via = through_balancer
    assert DeltaLakeReader(direct).counts() == {0: 8, 1: 8, 2: 8}
    started = time.monotonic()
    with pytest.raises(Exception, match=r"(?i)timed out|timeout|error sending request"):
        DeltaLakeReader(via).snapshot(CommittedBatches(via, APP))
    assert time.monotonic() - started >= 5.0
