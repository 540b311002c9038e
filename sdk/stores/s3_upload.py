"""One object's bytes on their way into S3: a write-only file that uploads a part whenever enough is buffered.

The upload is created lazily, with the first full part. ``finish(transactional=True)`` uploads what
is left as the last part and leaves the multipart upload incomplete: durable, invisible, and
completable later from any process with the upload id and the parts' ETags (which the committable
carries). ``finish(transactional=False)`` makes the object visible now: CompleteMultipartUpload, or
one PutObject when it never filled a part. ``abort`` discards it.

The committable's record of an object (:class:`ObjectRecord`) is JSON-able: it travels from the
executor to the driver, into eosink's manifest and into the commit marker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from eosink.errors import BadRecordError, TransientError
from eosink.stores.encoding import WriteOnlyFile
from eosink.stores.s3 import MAX_PARTS, S3Connection
from eosink.stores.s3_errors import error_code, translated

__all__ = ["ObjectRecord", "PartWriter", "UploadGone", "UploadTarget", "abort_upload", "complete", "expected_etag"]


class UploadTarget(Protocol):
    """Where objects are uploaded and how (the S3 sink's S3Config is one)."""

    @property
    def bucket(self) -> str: ...
    @property
    def part_size_bytes(self) -> int: ...
    def connection(self) -> S3Connection: ...
    def sse_args(self) -> dict[str, Any]: ...


@dataclass
class ObjectRecord:
    """One object of a committable: where it is, its upload, its parts, and what it holds."""

    key: str
    upload_id: str | None = None
    parts: list[tuple[int, str]] = field(default_factory=list)
    rows: int = 0
    size: int = 0
    etag: str | None = None
    partition: dict[str, str | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"key": self.key, "rows": self.rows, "size": self.size}
        if self.upload_id is not None:
            body["upload_id"] = self.upload_id
        if self.parts:
            body["parts"] = [[n, e] for n, e in self.parts]
        if self.etag is not None:
            body["etag"] = self.etag
        if self.partition:
            body["partition"] = dict(self.partition)
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> ObjectRecord:
        return cls(
            str(body["key"]),
            body.get("upload_id"),
            [(int(n), str(e)) for n, e in body.get("parts", [])],
            int(body.get("rows", 0)),
            int(body.get("size", 0)),
            body.get("etag"),
            dict(body.get("partition") or {}),
        )


def expected_etag(parts: list[tuple[int, str]]) -> str:
    """The ETag S3 gives an object completed from ``parts``: MD5 of the parts' MD5s, a dash, their count."""
    digest = hashlib.md5(b"".join(bytes.fromhex(e.strip('"')) for _, e in parts))
    return f'"{digest.hexdigest()}-{len(parts)}"'


class PartWriter(WriteOnlyFile):
    """A write-only file (``write``, ``tell``, ``flush``, ``close``) whose bytes become one object."""

    def __init__(
        self,
        config: UploadTarget,
        client: Any,
        key: str,
        *,
        create_client: Any = None,
        before_create: Callable[[str], None] | None = None,
        after_create: Callable[[str, str], None] | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.create_client = create_client or client
        """CreateMultipartUpload goes through a client that never retries: a retry after a lost reply would
        leave a second upload of the key behind."""
        self.before_create = before_create
        """Called with the key before its upload is created (the S3 sink records its intent there)."""
        self.after_create = after_create
        """Called with the key and its upload id once the upload exists (the S3 sink adds the id to the intent)."""
        self.record = ObjectRecord(key)
        self._buffer = bytearray()
        self._written = 0
        self._discard = False
        self.closed = False

    # -- the file interface pyarrow and gzip use -----------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> int:
        if self._discard:  # aborted: an encoder's late footer (written when it is collected) goes nowhere
            return len(memoryview(data))
        if self.closed:
            raise ValueError("write to a finished object")
        view = memoryview(data).cast("B")
        self._buffer += view
        self._written += len(view)
        while len(self._buffer) >= self.config.part_size_bytes:
            chunk = bytes(self._buffer[: self.config.part_size_bytes])
            del self._buffer[: self.config.part_size_bytes]
            self._upload_part(chunk)
        return len(view)

    def tell(self) -> int:
        return self._written

    def flush(self) -> None:
        """Nothing: parts go out when full (a part must be at least 5 MiB)."""

    def close(self) -> None:
        """Closing the file ends writing; ``finish`` decides what becomes of the bytes."""
        self.closed = True

    @property
    def buffered(self) -> int:
        """Bytes held in memory, not yet uploaded."""
        return len(self._buffer)

    # -- the upload -----------------------------------------------------------------------------------

    def _create(self) -> None:
        if self.before_create is not None:
            self.before_create(self.record.key)
        with translated(self.config.connection(), f"creating the upload of {self.record.key!r}"):
            reply = self.create_client.create_multipart_upload(
                Bucket=self.config.bucket, Key=self.record.key, **self.config.sse_args()
            )
        self.record.upload_id = str(reply["UploadId"])
        if self.after_create is not None:
            self.after_create(self.record.key, self.record.upload_id)

    def _upload_part(self, chunk: bytes) -> None:
        if self.record.upload_id is None:
            self._create()
        number = len(self.record.parts) + 1
        if number > MAX_PARTS:
            raise BadRecordError(
                f"The object {self.record.key!r} needs more than S3's {MAX_PARTS} parts.",
                "Lower max_object_bytes or raise part_size_bytes.",
            )
        with translated(self.config.connection(), f"uploading part {number} of {self.record.key!r}"):
            reply = self.client.upload_part(
                Bucket=self.config.bucket,
                Key=self.record.key,
                UploadId=self.record.upload_id,
                PartNumber=number,
                Body=chunk,
            )
        self.record.parts.append((number, str(reply["ETag"])))

    def finish(self, *, transactional: bool) -> ObjectRecord:
        """Upload the rest; complete the object (``transactional=False``) or leave its upload incomplete."""
        self.closed = True
        rest = bytes(self._buffer)
        self._buffer.clear()
        self.record.size = self._written
        if not transactional and self.record.upload_id is None:
            with translated(self.config.connection(), f"writing {self.record.key!r}"):
                reply = self.client.put_object(
                    Bucket=self.config.bucket, Key=self.record.key, Body=rest, **self.config.sse_args()
                )
            self.record.etag = str(reply["ETag"])
            return self.record
        if rest or not self.record.parts:
            self._upload_part(rest)
        if not transactional:
            try:
                self.record.etag = complete(self.config, self.create_client, self.record)
            except UploadGone:
                raise TransientError(
                    f"The upload of {self.record.key!r} vanished before it was completed.",
                    "Retry the task (Spark does); if it repeats, look for a lifecycle rule aborting uploads.",
                ) from None
        return self.record

    def abort(self) -> None:
        """Discard the upload (best effort: recovery aborts what is left)."""
        self.closed = self._discard = True
        self._buffer.clear()
        if self.record.upload_id is not None:
            abort_upload(self.config, self.client, self.record.key, self.record.upload_id)


class UploadGone(Exception):
    """CompleteMultipartUpload found no such upload (completed or aborted before), or not all of its parts (an
    earlier complete half applied): the caller looks for the object."""


def complete(config: UploadTarget, client: Any, record: ObjectRecord) -> str:
    """CompleteMultipartUpload of ``record``; its ETag. UploadGone when the upload no longer exists, or its parts
    are not all there (``InvalidPart``, for parts whose ETags the writer was given). A 200
    reply with an error body, or one without an ETag, is a TransientError (the upload may or may not be
    complete: the caller finds out)."""
    from botocore.exceptions import ClientError

    parts = [{"PartNumber": n, "ETag": e} for n, e in record.parts]
    with translated(config.connection(), f"completing {record.key!r}"):
        try:
            reply = client.complete_multipart_upload(
                Bucket=config.bucket, Key=record.key, UploadId=record.upload_id, MultipartUpload={"Parts": parts}
            )
        except ClientError as exc:
            # InvalidPart: the upload is there with parts missing, as on a MinIO cluster that lost the node
            # applying an earlier complete of it; like NoSuchUpload, only the object tells what happened
            if error_code(exc) in ("NoSuchUpload", "InvalidPart"):
                raise UploadGone(record.key) from None
            raise
    etag = reply.get("ETag") if isinstance(reply, dict) else None
    if not etag:
        raise TransientError(
            f"S3 answered CompleteMultipartUpload of {record.key!r} without an ETag (an error in a 200 reply).",
            "Retry: the commit checks whether the object exists before completing it again.",
        )
    return str(etag)


def abort_upload(config: UploadTarget, client: Any, key: str, upload_id: str) -> None:
    """AbortMultipartUpload; an upload already gone is fine."""
    from botocore.exceptions import ClientError

    with translated(config.connection(), f"aborting the upload of {key!r}"):
        try:
            client.abort_multipart_upload(Bucket=config.bucket, Key=key, UploadId=upload_id)
        except ClientError as exc:
            if error_code(exc) != "NoSuchUpload":
                raise
