"""The independent S3 reader (:class:`~eosink.connectors.s3.audit.StoreReader`, pyarrow's S3 client) against the
harness's MinIO: a committed batch read once, and its negative controls (a torn batch, a batch committed twice)."""

from __future__ import annotations

import re
import urllib.parse
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.s3 import S3Sink
from eosink.connectors.s3.audit import StoreReader, canonical
from eosink.contract import BatchRef, Bundle, Committable, Fingerprint, TaskRef
from eosink.errors import CommitAbortedError, EosinkError
from eosink.services.proxy import FaultProxy

from .conftest import HARNESS

pytestmark = pytest.mark.full

APP = "audit-app"


def _commit(
    sink: S3Sink, batch_id: int, epoch: int, rows: list[dict[str, object]] | None = None
) -> tuple[list[Committable], list[dict[str, object]]]:
    """Batch ``batch_id`` of four rows (its own, or ``rows``), written by one participant and committed."""
    batch = BatchRef(APP, batch_id)
    rows = rows or [{"id": batch_id * 10 + i, "region": "eu"} for i in range(4)]
    txn = sink.begin(TaskRef(batch, epoch, 0, "a0", strategy="2pc"))
    sink.write(txn, pa.RecordBatch.from_pylist(rows))
    committables = [sink.pre_commit(txn)]
    bundle = Bundle(batch, epoch, Fingerprint(), tuple(c.id for c in committables), None, "2pc")
    sink.commit(batch, committables, bundle)
    return committables, rows


def _reader(prefix: str) -> StoreReader:
    ep = HARNESS.endpoint()
    return StoreReader(ep.endpoint_url, ep.access_key, ep.secret_key, HARNESS.bucket, prefix, region=ep.region)


def test_the_reader_reads_each_committed_row_once_and_flags_a_torn_batch(prefix: str) -> None:
    """Pass: two committed batches read once, through the markers and by listing; then, with an object a marker
    names deleted behind the sink's back, the batch is torn and its rows lost."""
    sink = S3Sink(HARNESS.config(prefix))
    sink.setup(APP)
    epoch = sink.fence(APP)
    first, rows0 = _commit(sink, 0, epoch)
    _, rows1 = _commit(sink, 1, epoch)
    expected = Counter(canonical(r) for r in rows0 + rows1)
    reader = _reader(prefix).start()
    verdict = reader.verdict(expected)
    assert not verdict.problems and verdict.rows == verdict.listed == 8, verdict

    key = str(first[0].payload["objects"][0]["key"])
    HARNESS.client().delete_object(Bucket=HARNESS.bucket, Key=key)
    verdict = _reader(prefix).verdict(expected)
    assert verdict.torn and verdict.lost == 4, verdict


def test_the_reader_flags_a_batch_written_twice(prefix: str) -> None:
    """Negative control of the duplicate count: the same rows committed as two batches. Pass: 4 duplicated."""
    sink = S3Sink(HARNESS.config(prefix))
    sink.setup(APP)
    epoch = sink.fence(APP)
    _, rows = _commit(sink, 0, epoch)
    _commit(sink, 1, epoch, rows)
    verdict = _reader(prefix).verdict(Counter(canonical(r) for r in rows))
    assert verdict.duplicated == 4 and not verdict.lost, verdict


COMPLETE = re.compile(rb"^POST [^ ]*[?&]uploadId=")
"""A CompleteMultipartUpload request (an UploadPart is a PUT with the same parameter)."""


class NoSuchUploadFailsSink(S3Sink):
    """Negative control: a sink that takes the ``NoSuchUpload`` a repeated complete gets for failure (the work lost),
    instead of asking the store whether the object exists."""

    def _existing_etag(self, record: Any) -> str | None:
        return None


@pytest.mark.parametrize("sink_class", [S3Sink, NoSuchUploadFailsSink], ids=["eosink", "negative-control"])
def test_a_lost_complete_reply_is_settled_from_the_object(
    prefix: str, fault_proxy: Callable[[str, int], FaultProxy], sink_class: type[S3Sink]
) -> None:
    """CompleteMultipartUpload reaches the store and its reply is lost; the commit fails, and is called again (as the
    coordinator's retry does): its complete answers ``NoSuchUpload`` (MinIO, minio#13318). Judged by the pyarrow
    reader. Pass: eosink looks at the object, finds it complete and commits the batch, every row once; the mutant
    calls the work lost and gives the batch up (CommitAbortedError), which the reader flags as lost."""
    ep = HARNESS.endpoint()
    where = urllib.parse.urlsplit(ep.endpoint_url)
    assert where.hostname and where.port
    proxy = fault_proxy(where.hostname, where.port)
    sink = sink_class(HARNESS.config(prefix, endpoint_url=f"http://127.0.0.1:{proxy.port}"))
    sink.setup(APP)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    rows: list[dict[str, object]] = [{"id": i, "region": "eu"} for i in range(4)]
    txn = sink.begin(TaskRef(batch, epoch, 0, "a0", strategy="2pc"))
    sink.write(txn, pa.RecordBatch.from_pylist(rows))
    committables = [sink.pre_commit(txn)]
    bundle = Bundle(batch, epoch, Fingerprint(), tuple(c.id for c in committables), None, "2pc")
    reader = _reader(prefix).start()
    proxy.cut_after_request(COMPLETE)
    with pytest.raises(EosinkError):
        sink.commit(batch, committables, bundle)
    assert proxy.stats.cuts == 1
    try:
        sink.commit(batch, committables, bundle)
    except CommitAbortedError:
        assert sink_class is NoSuchUploadFailsSink
    verdict = reader.verdict(Counter(canonical(r) for r in rows))
    if sink_class is S3Sink:
        assert not verdict.problems and verdict.rows == 4, verdict
    else:
        assert verdict.lost == 4, verdict
