"""A committed batch's record, ``_eosink_bundle.json`` beside its files: what readers and recovery trust.

It holds the bundle (fingerprint, epoch, checkpoint id), the batch's data files relative to its
directory, the columns and types, and the upsert keys (if any). Readers that want whole batches
and the newest row per key (:func:`~eosink.connectors.hdfs.read_committed`) read files named
here only; a directory-listing reader needs none of it, as the batch's directory appears whole.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from eosink.contract import Bundle
from eosink.errors import EosinkError

__all__ = ["FORMAT", "BatchRecord"]

FORMAT = "eosink-hdfs-batch/1"


@dataclass(frozen=True)
class BatchRecord:
    bundle: Bundle
    files: tuple[str, ...]
    schema: tuple[tuple[str, str], ...] | None = None
    keys: tuple[str, ...] = ()

    def encode(self) -> bytes:
        body: dict[str, Any] = {
            "format": FORMAT,
            "bundle": self.bundle.to_json(),
            "files": list(self.files),
            "schema": [list(c) for c in self.schema] if self.schema is not None else None,
            "keys": list(self.keys),
        }
        return json.dumps(body, sort_keys=True).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes, where: str) -> BatchRecord:
        try:
            body = json.loads(data)
            if body.get("format") != FORMAT:
                raise ValueError(body.get("format"))
            schema = body.get("schema")
            return cls(
                Bundle.from_json(body["bundle"]),
                tuple(str(f) for f in body["files"]),
                tuple((str(n), str(t)) for n, t in schema) if schema is not None else None,
                tuple(str(k) for k in body.get("keys") or ()),
            )
        except (ValueError, KeyError, TypeError):
            raise EosinkError(
                f"The batch record {where} is damaged or of another format (expected {FORMAT}).",
                "Restore it from a backup of the target; never edit files under eosink_range= (or eosink_batch=) "
                "directories.",
            ) from None

    @staticmethod
    def schema_of(committables_schemas: Sequence[Any]) -> tuple[tuple[str, str], ...] | None:
        """The batch's schema: the first one a participant recorded (participants of one batch agree)."""
        for doc in committables_schemas:
            if doc:
                return tuple((str(n), str(t)) for n, t in doc)
        return None
