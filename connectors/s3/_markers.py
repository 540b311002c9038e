"""Commit markers: the record that makes a batch committed, and the only thing readers of whole batches trust.

A marker is one JSON object at ``_eosink/<app-dir>/commits/<batch:020d>.json``, created with
``If-None-Match: *`` (create-only) after every object of the batch is complete. It holds the
bundle (epoch, fingerprint, committable ids, checkpoint id, strategy), the batch's objects (key,
ETag, size, rows, partition values) and the batch's schema. Its SHA-256 travels as object
metadata (``x-amz-meta-eosink-sha256``), so that after a lost reply a HEAD request tells whether
the marker that exists is the one this process sent.

Markers do not stay one object per batch forever: once a range of batches is old, its markers
are folded, as they were, into one segment object (``_segments``), which is then the range's
record; the newest markers stay marker objects.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from eosink.connectors.s3._layout import Layout
from eosink.contract import Bundle

__all__ = ["FORMAT", "SHA_META", "CommitMarker", "MarkedObject", "list_marker_batches", "list_marker_keys"]

FORMAT = "eosink.s3.commit/1"
SHA_META = "eosink-sha256"


@dataclass(frozen=True)
class MarkedObject:
    """One object of a committed batch, as its marker names it."""

    key: str
    etag: str
    size: int
    rows: int
    committable: str
    partition: dict[str, str | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "key": self.key,
            "etag": self.etag,
            "size": self.size,
            "rows": self.rows,
            "committable": self.committable,
        }
        if self.partition:
            body["partition"] = dict(self.partition)
        return body

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> MarkedObject:
        return cls(
            str(body["key"]),
            str(body.get("etag", "")),
            int(body.get("size", 0)),
            int(body.get("rows", 0)),
            str(body.get("committable", "")),
            dict(body.get("partition") or {}),
        )


@dataclass(frozen=True)
class CommitMarker:
    """A committed batch: its bundle, its objects, its schema, how it was written."""

    app_id: str
    bundle: Bundle
    objects: tuple[MarkedObject, ...]
    schema: dict[str, Any] | None
    format: str
    keys: tuple[str, ...] = ()

    @property
    def batch_id(self) -> int:
        return self.bundle.batch.batch_id

    @property
    def rows(self) -> int:
        return sum(o.rows for o in self.objects)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "app_id": self.app_id,
            "bundle": self.bundle.to_json(),
            "objects": [o.to_json() for o in self.objects],
            "schema": self.schema,
            "file_format": self.format,
            "keys": list(self.keys),
        }

    def encode(self) -> tuple[bytes, str]:
        """The marker's bytes and their SHA-256 (hex)."""
        body = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")).encode("utf-8")
        return body, hashlib.sha256(body).hexdigest()

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> CommitMarker:
        if body.get("format") != FORMAT:
            raise ValueError(f"not an eosink S3 commit marker (format {body.get('format')!r})")
        return cls(
            str(body["app_id"]),
            Bundle.from_json(body["bundle"]),
            tuple(MarkedObject.from_json(o) for o in body.get("objects", [])),
            body.get("schema"),
            str(body.get("file_format", "parquet")),
            tuple(body.get("keys") or ()),
        )

    @classmethod
    def decode(cls, data: bytes) -> CommitMarker:
        return cls.from_json(json.loads(data))


def list_marker_keys(
    client: Any, bucket: str, layout: Layout, app_id: str, start_after: str | None = None
) -> list[str]:
    """The app_id's marker keys, ascending (so by batch id: the names are zero-padded), after ``start_after``."""
    prefix = layout.markers(app_id)
    keys: list[str] = []
    args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    if start_after is not None:
        args["StartAfter"] = start_after
    while True:
        reply = client.list_objects_v2(**args)
        keys += [o["Key"] for o in reply.get("Contents", []) if Layout.marker_batch(o["Key"]) is not None]
        if not reply.get("IsTruncated"):
            return keys
        args["ContinuationToken"] = reply["NextContinuationToken"]
        args.pop("StartAfter", None)


def list_marker_batches(
    client: Any, bucket: str, layout: Layout, app_id: str, span: int, ranges: int | None
) -> list[int]:
    """The batch ids of the app_id's markers, ascending: of its oldest ``ranges`` ranges of ``span`` batches (each
    listed whole: the listing stops at the first key of the range after them), or of all of them (None)."""
    prefix = layout.markers(app_id)
    found: list[int] = []
    seen: list[int] = []
    args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
    while True:
        reply = client.list_objects_v2(**args)
        for entry in reply.get("Contents", []):
            batch_id = Layout.marker_batch(entry["Key"])
            if batch_id is None:
                continue
            if not seen or seen[-1] != batch_id // span:
                if ranges is not None and len(seen) == ranges:
                    return found
                seen.append(batch_id // span)
            found.append(batch_id)
        if not reply.get("IsTruncated"):
            return found
        args["ContinuationToken"] = reply["NextContinuationToken"]
