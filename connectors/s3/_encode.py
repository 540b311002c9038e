"""Encoding rows into objects: Parquet row groups or JSON lines, streamed into a :class:`PartWriter`.

An :class:`ObjectEncoder` holds one object being written: its format's writer over the
``PartWriter``, and (Parquet) the record batches waiting to become the next row group, written
when ``row_group_bytes`` or ``row_group_rows`` is reached. Checks that must stop a batch before
anything of it is visible live here too: the size of each row (``max_record_bytes``), and the
batch's schema against the app_id's (Parquet: a change between batches is a SchemaError).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import gzip
import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eosink.connectors.s3.config import S3Config
from eosink.errors import BadRecordError, SchemaError
from eosink.stores.s3_upload import ObjectRecord, PartWriter

__all__ = [
    "ObjectEncoder",
    "check_record_sizes",
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


def check_record_sizes(batch: pa.RecordBatch, limit: int, where: str) -> None:
    """BadRecordError for a row larger than ``limit`` bytes (as Arrow holds it), before it is written."""
    if batch.num_rows == 0:
        return
    sizes: Any = pa.scalar(0, pa.int64())
    nested = []
    for column in batch.columns:
        kind = column.type
        if (
            pa.types.is_string(kind)
            or pa.types.is_binary(kind)
            or pa.types.is_large_string(kind)
            or pa.types.is_large_binary(kind)
        ):
            sizes = pc.add(sizes, pc.fill_null(pc.binary_length(column), 0))
        elif (width := _bit_width(kind)) is not None:
            sizes = pc.add(sizes, pa.scalar(max(width // 8, 1), pa.int64()))
        else:
            nested.append(column)
    if nested and _largest(sizes)[0] + sum(c.nbytes for c in nested) > limit:
        for column in nested:  # lists, structs, maps: one huge value must not hide in the column's average
            sizes = pc.add(sizes, pa.array([column.slice(i, 1).nbytes for i in range(batch.num_rows)], pa.int64()))
    biggest, at = _largest(sizes)
    if biggest > limit:
        raise BadRecordError(
            f"A row of {biggest} bytes is larger than max_record_bytes={limit} ({where}, row {at} of its record "
            "batch).",
            "Filter or truncate oversized rows, or raise max_record_bytes (and max_buffer_bytes) if such rows "
            "are expected.",
        )


def _largest(sizes: Any) -> tuple[int, int]:
    """(the largest size, its row) of per-row ``sizes`` (an array, or one scalar for every row)."""
    if isinstance(sizes, pa.Scalar):
        return int(sizes.as_py()), 0
    at = int(pc.index(sizes, pc.max(sizes)).as_py())
    return int(sizes[at].as_py()), at


def _bit_width(kind: pa.DataType) -> int | None:
    """The type's width in bits, None for variable-width types."""
    try:
        return int(kind.bit_width)
    except ValueError:
        return None


class ObjectEncoder:
    """One object being written in the configured format."""

    def __init__(self, config: S3Config, writer: PartWriter, schema: pa.Schema) -> None:
        self.config = config
        self.out = writer
        self.schema = schema
        self.rows = 0
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._pending_rows = 0
        self._parquet: Any = None
        self._gzip: gzip.GzipFile | None = None
        if config.format == "parquet":
            import pyarrow.parquet as pq

            codec = None if config.compression == "none" else config.compression
            self._parquet = pq.ParquetWriter(
                writer, schema, compression=codec, compression_level=config.compression_level
            )
        elif config.compression == "gzip":
            level = 6 if config.compression_level is None else config.compression_level
            self._gzip = gzip.GzipFile(fileobj=writer, mode="wb", compresslevel=level, mtime=0)

    @property
    def record(self) -> ObjectRecord:
        return self.out.record

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
            self._pending.append(batch)
            self._pending_bytes += batch.nbytes
            self._pending_rows += batch.num_rows
            if self._pending_bytes >= self.config.row_group_bytes or self._pending_rows >= self.config.row_group_rows:
                self._row_group()
            return
        data = _json_lines(batch, self.config.max_record_bytes)
        if self._gzip is not None:
            self._gzip.write(data)
        else:
            self.out.write(data)

    def _row_group(self) -> None:
        if self._pending:
            self._parquet.write_table(
                pa.Table.from_batches(self._pending, self.schema), row_group_size=self._pending_rows
            )
        self._pending, self._pending_bytes, self._pending_rows = [], 0, 0

    def finish(self, *, transactional: bool) -> ObjectRecord:
        """Write what is left (the last row group and the footer), then finish the object's upload."""
        if self._parquet is not None:
            self._row_group()
            self._parquet.close()
        elif self._gzip is not None:
            self._gzip.close()
        record = self.out.finish(transactional=transactional)
        record.rows = self.rows
        return record

    def abort(self) -> None:
        self._pending = []
        self.out.abort()


def _json_value(value: Any) -> Any:
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _json_lines(batch: pa.RecordBatch, limit: int) -> bytes:
    """The batch as JSON lines (UTF-8, one object per row, keys in column order)."""
    out = []
    for i, row in enumerate(batch.to_pylist()):
        try:
            line = json.dumps(row, ensure_ascii=False, allow_nan=False, default=_json_value, separators=(",", ":"))
        except ValueError as exc:
            raise BadRecordError(
                f"Row {i} of a record batch cannot be written as JSON: {exc}.",
                "Replace NaN and infinite floats (e.g. with null), or use format='parquet'.",
            ) from None
        encoded = line.encode("utf-8")
        if len(encoded) > limit:
            raise BadRecordError(
                f"Row {i} of a record batch is {len(encoded)} bytes as JSON, larger than max_record_bytes={limit}.",
                "Filter or truncate oversized rows, or raise max_record_bytes.",
            )
        out.append(encoded)
    return b"\n".join(out) + b"\n"
