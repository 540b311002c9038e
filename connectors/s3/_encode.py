"""Encoding rows into objects: Parquet row groups or JSON lines, streamed into a :class:`PartWriter`.

An :class:`ObjectEncoder` holds one object being written: the store kit's Parquet stream or JSON
lines (:mod:`eosink.stores.encoding`) over the ``PartWriter``. The batch's schema is checked here
against the app_id's before anything of it is visible (Parquet: a change between batches is a
SchemaError).
"""

from __future__ import annotations

import base64
import gzip
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from eosink.connectors.s3.config import S3Config
from eosink.errors import SchemaError
from eosink.stores.encoding import ParquetStream, json_lines
from eosink.stores.s3_upload import ObjectRecord, PartWriter

__all__ = [
    "ObjectEncoder",
    "check_schema",
    "extension",
    "schema_json",
    "schema_of",
]


def extension(config: S3Config) -> str:
    """The objects' file extension: ``parquet``, ``jsonl`` or ``jsonl.gz``."""
    if config.format == "parquet":
        return "parquet"
    return "jsonl.gz" if config.compression == "gzip" else "jsonl"


def schema_json(schema: pa.Schema, partition_by: Sequence[str]) -> dict[str, Any]:
    """A batch's schema as the commit marker keeps it: names and types (compared between batches) and the
    Arrow schema itself (readers give partition columns back their types)."""
    plain = schema.remove_metadata()
    return {
        "fields": [[f.name, str(f.type)] for f in plain],
        "partition_by": list(partition_by),
        "arrow": base64.b64encode(plain.serialize().to_pybytes()).decode("ascii"),
    }


def schema_of(body: dict[str, Any]) -> pa.Schema:
    """The Arrow schema a marker's ``schema`` holds."""
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(body["arrow"])))


def check_schema(expected: dict[str, Any] | None, batch: pa.RecordBatch, where: str) -> None:
    """SchemaError when ``batch``'s columns or types differ from the app_id's committed schema (Parquet)."""
    if expected is None:
        return
    want = [tuple(f) for f in expected["fields"]]
    got = [(f.name, str(f.type)) for f in batch.schema]
    if want == got:
        return
    wanted, found = dict(want), dict(got)
    changes = [f"{n}: {wanted[n]} -> {found[n]}" for n in wanted if n in found and wanted[n] != found[n]]
    changes += [f"{n} missing" for n in wanted if n not in found]
    changes += [f"{n} added" for n in found if n not in wanted]
    if not changes:
        changes = ["the column order changed"]
    raise SchemaError(
        f"The batch's schema differs from the one this app_id's Parquet objects have ({where}): {'; '.join(changes)}.",
        "Make the query produce the committed schema (cast or select the columns as before); to change the "
        "schema for good, write under a new prefix or app_id (readers of one dataset expect one schema).",
    )


class ObjectEncoder:
    """One object being written in the configured format."""

    def __init__(self, config: S3Config, writer: PartWriter, schema: pa.Schema) -> None:
        self.config = config
        self.out = writer
        self.schema = schema
        self.rows = 0
        self._parquet: ParquetStream | None = None
        self._gzip: gzip.GzipFile | None = None
        if config.format == "parquet":
            self._parquet = ParquetStream(
                writer,
                schema,
                compression=config.compression,
                compression_level=config.compression_level,
                row_group_rows=config.row_group_rows,
                row_group_bytes=config.row_group_bytes,
            )
        elif config.compression == "gzip":
            level = 6 if config.compression_level is None else config.compression_level
            self._gzip = gzip.GzipFile(fileobj=writer, mode="wb", compresslevel=level, mtime=0)

    @property
    def record(self) -> ObjectRecord:
        return self.out.record

    @property
    def _pending_bytes(self) -> int:
        return 0 if self._parquet is None else self._parquet.pending_bytes

    @property
    def buffered(self) -> int:
        """Bytes this object holds in memory (the next row group, and the part not yet uploaded)."""
        return self._pending_bytes + self.out.buffered

    @property
    def size(self) -> int:
        """Bytes written to the object so far (encoded), plus the row group in waiting."""
        return self.out.tell() + self._pending_bytes

    def write(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows == 0:
            return
        self.rows += batch.num_rows
        if self._parquet is not None:
            self._parquet.write(batch)
            return
        data = json_lines(batch, self.config.max_record_bytes)
        if self._gzip is not None:
            self._gzip.write(data)
        else:
            self.out.write(data)

    def finish(self, *, transactional: bool) -> ObjectRecord:
        """Write what is left (the last row group and the footer), then finish the object's upload."""
        if self._parquet is not None:
            self._parquet.close()
        elif self._gzip is not None:
            self._gzip.close()
        record = self.out.finish(transactional=transactional)
        record.rows = self.rows
        return record

    def abort(self) -> None:
        if self._parquet is not None:
            self._parquet.discard()
        self.out.abort()
