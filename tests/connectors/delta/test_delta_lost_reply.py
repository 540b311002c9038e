"""A Delta commit whose log entry landed but whose reply was lost, then the batch's replay committed, judged by
DuckDB's delta extension (the sink writes with delta-rs), with its negative control: a writer that rebases the
append onto the next version without looking for its txn writes the batch twice."""

from __future__ import annotations

import contextlib
import dataclasses
import urllib.parse
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.delta import DeltaConfig, DeltaSink
from eosink.connectors.delta.readers import CommittedBatches, DuckDBReader
from eosink.connectors.delta.testing import BUCKET, COMMIT_REQUEST_MARKER
from eosink.contract import BatchRef, Committable, TaskRef
from eosink.contracts._steps import bundle_for
from eosink.errors import AmbiguousCommitError, CommitAbortedError, TransientError
from eosink.services import get_service
from eosink.services.proxy import FaultProxy
from eosink.stores.s3 import S3Connection, client, empty_prefix, ensure_bucket

pytestmark = pytest.mark.full

APP = "lost-reply-app"
SCHEMA = pa.schema([("batch_id", pa.int64()), ("v", pa.string())])


class RebasingDeltaSink(DeltaSink):
    """Negative control: a sink that never looks for its batch's txn in the log, so a commit called again after a
    lost reply appends the batch once more on the next version (delta-rs does not refuse a repeated txn)."""

    def _committed(self, table: Any, app_id: str, batch_id: int) -> Any:
        return None


@pytest.fixture
def endpoint() -> Iterator[tuple[Any, str]]:
    """The harness's MinIO and a fresh table prefix in its bucket (emptied afterwards)."""
    ep = get_service("minio").endpoint()
    s3 = client(S3Connection(ep.endpoint_url, ep.region, access_key_id=ep.access_key, secret_access_key=ep.secret_key))
    ensure_bucket(s3, BUCKET)
    prefix = f"lost-reply-{uuid.uuid4().hex[:10]}"
    yield ep, prefix
    empty_prefix(s3, BUCKET, prefix)


@pytest.mark.parametrize("sink_class", [DeltaSink, RebasingDeltaSink], ids=["eosink", "negative-control"])
def test_a_log_entry_whose_reply_was_lost_is_found_by_its_txn(
    endpoint: tuple[Any, str], sink_class: type[DeltaSink]
) -> None:
    """The PUT of the log entry reaches MinIO and its reply is lost (delta-rs repeats the conditional PUT, which
    then looks like a conflict at that version, or the commit raises AmbiguousCommitError or TransientError). The
    batch is then committed again by a replay: another attempt's files, as Spark's replay writes them. Pass: eosink
    finds the batch's txn in the log with other committables and refuses (CommitAbortedError): DuckDB counts the
    batch's 8 rows once; the mutant rebases the replay onto the next version, and DuckDB counts 16."""
    ep, prefix = endpoint
    where = urllib.parse.urlsplit(ep.endpoint_url)
    assert where.hostname and where.port
    with FaultProxy(where.hostname, where.port) as proxy:
        via = dataclasses.replace(ep, endpoint_url=f"http://127.0.0.1:{proxy.port}")
        sink = _sink(sink_class, prefix, via, read_timeout_s=5.0)
        epoch = sink.fence(APP)
        first = _prepared(sink, epoch, "a")
        proxy.cut_after_request(COMMIT_REQUEST_MARKER)
        with contextlib.suppress(AmbiguousCommitError, TransientError):
            sink.commit(BATCH, first, bundle_for(BATCH, epoch, first))
        assert proxy.stats.cuts == 1
    replaying = _sink(sink_class, prefix, ep)
    replay = _prepared(replaying, epoch, "r")
    try:
        replaying.commit(BATCH, replay, bundle_for(BATCH, epoch, replay))
    except CommitAbortedError:
        assert sink_class is DeltaSink
    direct = DeltaConfig.on_endpoint(f"s3://{BUCKET}/{prefix}", ep)
    rows = DuckDBReader(direct).snapshot(CommittedBatches(direct, APP)).rows_per_batch
    assert rows == ({0: 8} if sink_class is DeltaSink else {0: 16}), rows


BATCH = BatchRef(APP, 0)


def _sink(sink_class: type[DeltaSink], prefix: str, ep: Any, **options: Any) -> DeltaSink:
    sink = sink_class(DeltaConfig.on_endpoint(f"s3://{BUCKET}/{prefix}", ep, **options))
    sink.bind_schema(SCHEMA)
    return sink


def _prepared(sink: DeltaSink, epoch: int, attempt: str) -> list[Committable]:
    """Batch 0 written by two participants (4 rows each) in attempt ``attempt``, prepared."""
    made: list[Committable] = []
    for p in range(2):
        txn = sink.begin(TaskRef(BATCH, epoch, p, f"{attempt}{p}"))
        data = {"batch_id": [0] * 4, "v": [f"0/{p}/{i}" for i in range(4)]}
        sink.write(txn, pa.RecordBatch.from_pydict(data, schema=SCHEMA))
        made.append(sink.pre_commit(txn))
    return made
