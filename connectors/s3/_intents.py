"""Upload intents: one small object per transactional upload, naming the upload so recovery can settle it.

An intent is PUT before its upload is created (its body the object key) and PUT again once the store has
given the upload its id (the key, a newline, the id). Recovery settles an intent that names its upload with
``ListParts`` of that upload, which every node of an erasure-coded cluster answers from a quorum of drives;
only an intent without an id (its writer died between the two PUTs) needs ``ListMultipartUploads``, which a
MinIO node answers from one drive of its own, and which misses an upload created while that node was down.
"""

from __future__ import annotations

__all__ = ["decode_intent", "encode_intent"]


def encode_intent(key: str, upload_id: str | None = None) -> bytes:
    """The body of the intent of the upload of ``key`` (with its id once the upload exists)."""
    return (key if upload_id is None else f"{key}\n{upload_id}").encode("utf-8")


def decode_intent(body: bytes) -> tuple[str, str | None]:
    """(object key, upload id or None) of an intent's body; an intent written before ids were recorded is its
    key alone."""
    key, _, upload_id = body.decode("utf-8").partition("\n")
    return key, upload_id or None
