"""S3Sink.commit with many objects: they are completed concurrently, and a batch with one lost object
leaves nothing of itself behind.

The objects come from three participants writing into two partition folders each (six multipart
uploads), straight through the contract's calls against the harness's MinIO.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pyarrow as pa
import pytest

from eosink.connectors.s3 import S3Sink, committed_markers
from eosink.contract import BatchRef, Bundle, Committable, Fingerprint, TaskRef
from eosink.errors import CommitAbortedError, TransientError
from eosink.stores.s3_upload import ObjectRecord

from .conftest import HARNESS

APP = "commit-app"


def _prepare(sink: S3Sink, batch: BatchRef, epoch: int) -> list[Committable]:
    """Three participants, each with rows for regions ``eu`` and ``us``: two objects apiece."""
    out = []
    for participant in range(3):
        txn = sink.begin(TaskRef(batch, epoch, participant, f"a{participant}", strategy="2pc"))
        ids = [participant * 10 + i for i in range(4)]
        sink.write(txn, pa.record_batch({"id": ids, "region": ["eu", "us", "eu", "us"]}))
        out.append(sink.pre_commit(txn))
    return out


def _keys(committables: Sequence[Committable]) -> list[str]:
    return [str(o["key"]) for c in committables for o in c.payload["objects"]]


def _exists(key: str) -> bool:
    return bool(HARNESS.client().list_objects_v2(Bucket=HARNESS.bucket, Prefix=key).get("KeyCount"))


@pytest.fixture
def sink(prefix: str) -> S3Sink:
    made = S3Sink(HARNESS.config(prefix, partition_by=("region",)))
    made.setup(APP)
    return made


def test_every_object_of_a_batch_is_completed_concurrently_and_named_by_its_marker(sink: S3Sink) -> None:
    """Pass: six uploads complete, from more than one thread at once; the marker names each with the
    ETag the store gives it; committing the batch again changes nothing."""
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    committables = _prepare(sink, batch, epoch)
    keys = _keys(committables)
    assert len(keys) == 6 and not any(_exists(k) for k in keys)

    client = sink._s3_once
    threads: set[str] = set()
    original = client.complete_multipart_upload

    def spy(**kwargs: object) -> object:
        threads.add(threading.current_thread().name)
        return original(**kwargs)

    client.complete_multipart_upload = spy
    bundle = Bundle(batch, epoch, Fingerprint(), tuple(sorted(c.id for c in committables)), None, "2pc")
    try:
        sink.commit(batch, committables, bundle)
    finally:
        del client.complete_multipart_upload
    assert len(threads) > 1, threads

    (marker,) = committed_markers(sink.config, APP)
    assert sorted(o.key for o in marker.objects) == sorted(keys)
    s3 = HARNESS.client()
    for obj in marker.objects:
        assert s3.head_object(Bucket=HARNESS.bucket, Key=obj.key)["ETag"] == obj.etag
    sink.commit(batch, committables, bundle)
    assert [m.batch_id for m in committed_markers(sink.config, APP)] == [0]


def test_a_lost_upload_is_looked_for_then_aborts_the_commit_and_removes_the_objects_it_completed(
    sink: S3Sink, prefix: str
) -> None:
    """One upload is aborted behind the sink's back (a lifecycle rule) and its object never existed.

    Pass: the commit first raises TransientError naming that object and ``lost_after_s`` (a store that lost a node
    may show it once the node is back), keeping the five objects it completed; a commit that has looked for it
    longer than ``lost_after_s`` (0 here) raises CommitAbortedError naming it; none of the batch's six objects
    exists afterwards (the five completed are deleted again) and no marker was written.
    """
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    committables = _prepare(sink, batch, epoch)
    lost = ObjectRecord.from_json(committables[1].payload["objects"][0])
    HARNESS.client().abort_multipart_upload(Bucket=HARNESS.bucket, Key=lost.key, UploadId=lost.upload_id)

    bundle = Bundle(batch, epoch, Fingerprint(), tuple(sorted(c.id for c in committables)), None, "2pc")
    with pytest.raises(TransientError) as first:
        sink.commit(batch, committables, bundle)
    assert lost.key in str(first.value) and "lost_after_s" in str(first.value)
    assert len([k for k in _keys(committables) if _exists(k)]) == 5

    impatient = S3Sink(HARNESS.config(prefix, partition_by=("region",), lost_after_s=0))
    with pytest.raises(CommitAbortedError) as err:
        impatient.commit(batch, committables, bundle)
    assert lost.key in str(err.value) and "replay the batch" in str(err.value)
    assert not [k for k in _keys(committables) if _exists(k)]
    assert committed_markers(sink.config, APP) == []


def test_a_complete_failing_for_the_moment_is_settled_by_the_object_it_finds(sink: S3Sink) -> None:
    """Every CompleteMultipartUpload answers ``SlowDownWrite`` (503), as a MinIO cluster does for an upload that a
    node died applying (the object on a read quorum of drives, the upload on less than a write quorum); the
    uploads were in fact completed by an earlier request, here another client. Pass: while one object does not
    exist the commit raises TransientError and writes no marker; once every object exists the commit settles
    each from its HEAD (ETag as its parts give) and writes the marker, with no upload left."""
    from botocore.exceptions import ClientError

    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    committables = _prepare(sink, batch, epoch)
    records = [ObjectRecord.from_json(o) for c in committables for o in c.payload["objects"]]
    s3 = HARNESS.client()

    def complete_elsewhere(record: ObjectRecord) -> None:
        parts = [{"PartNumber": n, "ETag": e} for n, e in record.parts]
        s3.complete_multipart_upload(
            Bucket=HARNESS.bucket, Key=record.key, UploadId=record.upload_id, MultipartUpload={"Parts": parts}
        )

    def unwritable(**kwargs: object) -> object:
        error = {"Code": "SlowDownWrite", "Message": "Resource requested is unwritable"}
        raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 503}}, "CompleteMultipartUpload")

    for record in records[1:]:
        complete_elsewhere(record)
    sink._s3_once.complete_multipart_upload = unwritable
    bundle = Bundle(batch, epoch, Fingerprint(), tuple(sorted(c.id for c in committables)), None, "2pc")
    try:
        with pytest.raises(TransientError, match="SlowDownWrite"):
            sink.commit(batch, committables, bundle)
        assert committed_markers(sink.config, APP) == []
        complete_elsewhere(records[0])
        sink.commit(batch, committables, bundle)
    finally:
        del sink._s3_once.complete_multipart_upload
    (marker,) = committed_markers(sink.config, APP)
    assert sorted(o.key for o in marker.objects) == sorted(r.key for r in records)
    for obj in marker.objects:
        assert s3.head_object(Bucket=HARNESS.bucket, Key=obj.key)["ETag"] == obj.etag
    assert not any(s3.list_multipart_uploads(Bucket=HARNESS.bucket, Prefix=r.key).get("Uploads") for r in records)


def test_a_stray_upload_at_a_committed_key_is_aborted_and_the_object_stays(sink: S3Sink) -> None:
    """A second incomplete upload at the key of a committed object (a CreateMultipartUpload that reached the store
    twice) is listed by ``recover`` under the committed committable's id. Pass: aborting what ``recover`` found
    aborts that upload only (no CommitAbortedError, the committed object unchanged, no upload left); aborting the
    committed work as the writer holds it is still refused."""
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    committables = _prepare(sink, batch, epoch)
    bundle = Bundle(batch, epoch, Fingerprint(), tuple(sorted(c.id for c in committables)), None, "2pc")
    sink.commit(batch, committables, bundle)
    s3 = HARNESS.client()
    key = _keys(committables)[0]
    before = s3.head_object(Bucket=HARNESS.bucket, Key=key)["ETag"]
    stray = s3.create_multipart_upload(Bucket=HARNESS.bucket, Key=key)["UploadId"]

    found = sink.recover(APP)
    assert [c.id for c in found] == [committables[0].id]
    sink.abort(found)
    assert s3.head_object(Bucket=HARNESS.bucket, Key=key)["ETag"] == before
    uploads = s3.list_multipart_uploads(Bucket=HARNESS.bucket, Prefix=key).get("Uploads", [])
    assert stray not in [u["UploadId"] for u in uploads] and not sink.recover(APP)
    with pytest.raises(CommitAbortedError, match="Cannot abort committed work"):
        sink.abort(committables[:1])
    assert s3.head_object(Bucket=HARNESS.bucket, Key=key)["ETag"] == before


class _ListingNothing(S3Sink):
    """The sink as a node of a MinIO cluster answers it: a bucket-wide ``ListMultipartUploads`` shows none of the
    uploads (that node did not create them)."""

    def _listed_uploads(self) -> list[dict[str, object]]:
        return []


def test_prepared_uploads_a_bucket_listing_does_not_show_are_recovered_from_their_intents(
    sink: S3Sink, prefix: str
) -> None:
    """A driver dies after its participants prepared batch 0 (six incomplete uploads); the next driver's store
    lists no multipart upload for the bucket, as a node of a MinIO cluster that did not create them answers.
    Pass: ``recover`` still finds every prepared attempt (from the intents the attempts wrote before their
    uploads), aborting them leaves no upload and no intent behind, and a batch committed after that leaves no
    intent either."""
    epoch = sink.fence(APP)
    prepared = _prepare(sink, BatchRef(APP, 0), epoch)
    s3 = HARNESS.client()
    intents = f"{sink.layout.control(APP)}uploads/"
    assert len(s3.list_objects_v2(Bucket=HARNESS.bucket, Prefix=intents).get("Contents", [])) == 6

    restarted = _ListingNothing(HARNESS.config(prefix, partition_by=("region",)))
    restarted.setup(APP)
    found = restarted.recover(APP)
    assert sorted(c.id for c in found) == sorted(c.id for c in prepared)
    assert sorted(_keys(found)) == sorted(_keys(prepared))
    restarted.abort(found)
    for key in _keys(prepared):
        assert not s3.list_multipart_uploads(Bucket=HARNESS.bucket, Prefix=key).get("Uploads"), key
    assert not s3.list_objects_v2(Bucket=HARNESS.bucket, Prefix=intents).get("Contents")

    epoch = restarted.fence(APP)
    batch = BatchRef(APP, 0)
    again = _prepare(restarted, batch, epoch)
    restarted.commit(batch, again, Bundle(batch, epoch, Fingerprint(), tuple(sorted(c.id for c in again)), None, "2pc"))
    assert not s3.list_objects_v2(Bucket=HARNESS.bucket, Prefix=intents).get("Contents")
    assert not restarted.recover(APP)
