"""``open_uploads``: a listed multipart upload counts only if the store still has it.

A node of a MinIO cluster lists the uploads on its own drives, which may still hold one completed through another
node (seen on the harness's four-node cluster: one node of four listed it for minutes). A fake client stands in
for the store here; the four-node cluster runs in the S3 cluster tests.
"""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError

from eosink.stores.s3 import empty_prefix, incomplete_uploads, open_uploads, uploads_of_key


class _Store:
    """Lists three uploads under ``p/``; only ``u1`` and ``u3`` still exist."""

    def __init__(self) -> None:
        self.listed = [{"Key": f"p/k{i}", "UploadId": f"u{i}"} for i in (1, 2, 3)] + [{"Key": "q/x", "UploadId": "u4"}]
        self.alive = {"u1", "u3", "u4"}
        self.aborted: list[str] = []

    def get_paginator(self, name: str) -> Any:
        store = self

        class Pages:
            def paginate(self, **kwargs: Any) -> list[dict[str, Any]]:
                if name == "list_multipart_uploads":
                    return [{"Uploads": store.listed}]
                return [{"Contents": []}]

        return Pages()

    def list_parts(self, *, Bucket: str, Key: str, UploadId: str, MaxParts: int) -> dict[str, Any]:
        if UploadId not in self.alive:
            raise ClientError({"Error": {"Code": "NoSuchUpload", "Message": "gone"}}, "ListParts")
        return {"Parts": []}

    def abort_multipart_upload(self, *, Bucket: str, Key: str, UploadId: str) -> None:
        if UploadId not in self.alive:
            raise ClientError({"Error": {"Code": "NoSuchUpload", "Message": "gone"}}, "AbortMultipartUpload")
        self.aborted.append(UploadId)


def test_a_listed_upload_the_store_no_longer_has_is_left_out() -> None:
    """Pass: ``u2`` (ListParts answers NoSuchUpload) is not an incomplete upload; the others under ``p/`` are;
    emptying the prefix aborts those two and does not fail on the stale entry."""
    store = _Store()
    assert [u["UploadId"] for u in incomplete_uploads(store, "b", "p")] == ["u1", "u3"]
    empty_prefix(store, "b", "p")
    assert store.aborted == ["u1", "u3"]


def test_another_error_of_list_parts_is_raised() -> None:
    """Pass: only NoSuchUpload means gone; AccessDenied is raised, not read as an answer."""

    class Denied(_Store):
        def list_parts(self, **kwargs: Any) -> dict[str, Any]:
            raise ClientError({"Error": {"Code": "AccessDenied", "Message": "no"}}, "ListParts")

    with pytest.raises(ClientError, match="AccessDenied"):
        open_uploads(Denied(), "b", [{"Key": "p/k1", "UploadId": "u1"}])


def test_the_uploads_of_a_key_are_those_of_exactly_that_key_page_by_page_that_the_store_still_has() -> None:
    """``uploads_of_key`` asks ``ListMultipartUploads`` with the whole key as its prefix (what a MinIO node answers
    from the erasure set). Pass: a longer key under the same prefix is left out, the second page is read, and an
    upload ``ListParts`` no longer finds is left out."""
    calls: list[dict[str, Any]] = []

    class Paged(_Store):
        def list_multipart_uploads(self, **kwargs: Any) -> dict[str, Any]:
            calls.append(kwargs)
            if "KeyMarker" not in kwargs:
                page = [{"Key": "p/k1", "UploadId": "u1"}, {"Key": "p/k1.x", "UploadId": "u3"}]
                return {"Uploads": page, "IsTruncated": True, "NextKeyMarker": "p/k1", "NextUploadIdMarker": "u1"}
            return {"Uploads": [{"Key": "p/k1", "UploadId": "u2"}, {"Key": "p/k1", "UploadId": "u4"}]}

    found = uploads_of_key(Paged(), "b", "p/k1")
    assert [u["UploadId"] for u in found] == ["u1", "u4"]  # u3 is another key's, u2 is gone
    assert [c.get("Prefix") for c in calls] == ["p/k1", "p/k1"]
    assert calls[1]["KeyMarker"] == "p/k1" and calls[1]["UploadIdMarker"] == "u1"
