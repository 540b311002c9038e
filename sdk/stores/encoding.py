"""Rows into bytes, as every file sink writes them: Parquet row groups streamed into a file, and JSON lines.

:class:`ParquetStream` writes Parquet into any write-only file object (an S3 multipart upload, an
HDFS file, a Delta data file). Record batches wait in memory until ``row_group_rows`` rows or
``row_group_bytes`` bytes have gathered, then become one row group: Spark hands Arrow batches of
about 10,000 rows, and a row group per batch would make files slow to read and poorly compressed.
Dictionary encoding is chosen per column from the first row group (:func:`dictionary_columns`): a column
of mostly distinct values (ids, amounts, timestamps) is written plain, since building its dictionary
costs about half of the encode and the file comes out larger.

:func:`json_lines` and :func:`check_record_sizes` refuse a row with a clear BadRecordError before
any of its batch is written: NaN or infinity (which JSON cannot hold) and rows over the limit.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import threading
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from eosink.errors import BadRecordError

__all__ = [
    "DEFAULT_ROW_GROUP_BYTES",
    "ParquetStream",
    "WriteOnlyFile",
    "check_record_sizes",
    "dictionary_columns",
    "json_lines",
]

DEFAULT_ROW_GROUP_BYTES = 64 << 20
"""Bytes (as Arrow holds them) a row group gathers in memory at most, by default."""
DICTIONARY_SAMPLE_ROWS = 65_536
"""Rows of the first row group whose distinct values decide a column's dictionary encoding."""
DICTIONARY_MAX_DISTINCT = 0.5
"""A column whose sample is more distinct than this share is written without a dictionary."""


def dictionary_columns(table: pa.Table) -> bool | list[str]:
    """The columns worth a Parquet dictionary, judged on ``table``'s first rows: ``pyarrow.parquet``'s
    ``use_dictionary``.

    A column repeats enough values when its sample's distinct count is at most
    :data:`DICTIONARY_MAX_DISTINCT` of the sample. Nested columns, and any column whose distinct values
    cannot be counted, keep the default (every column with a dictionary: ``True``).
    """
    sample = table.slice(0, DICTIONARY_SAMPLE_ROWS)
    if sample.num_rows == 0 or any(pa.types.is_nested(f.type) for f in table.schema):
        return True
    chosen = []
    for name, column in zip(table.column_names, sample.columns, strict=True):
        if pa.types.is_dictionary(column.type):
            chosen.append(name)
            continue
        try:
            distinct = pc.count_distinct(column, mode="all").as_py()
        except (pa.ArrowNotImplementedError, pa.ArrowTypeError):
            return True
        if distinct <= DICTIONARY_MAX_DISTINCT * sample.num_rows:
            chosen.append(name)
    return chosen


class WriteOnlyFile:
    """What pyarrow asks of a Python file it writes into, besides ``write`` and ``tell``: a base for the
    stores' write-only files (an S3 upload, an HDFS file, a local file)."""

    closed = False

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def readable(self) -> bool:
        return False


class ParquetStream:
    """One Parquet file being written into ``out``; ``on_rows`` sees every row group's rows (for statistics)."""

    def __init__(
        self,
        out: Any,
        schema: pa.Schema,
        *,
        compression: str | None = "snappy",
        compression_level: int | None = None,
        row_group_rows: int = 1_000_000,
        row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
        on_rows: Callable[[pa.Table], None] | None = None,
    ) -> None:
        self.schema = schema
        self.rows = 0
        self.row_group_rows = row_group_rows
        self.row_group_bytes = row_group_bytes
        self.on_rows = on_rows
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._pending_rows = 0
        codec = None if compression in (None, "none") else compression
        self._options: dict[str, Any] = {"compression": codec, "compression_level": compression_level}
        self._out = out
        self._writer: Any = None  # a ParquetWriter, opened at the first row group (its rows choose dictionaries)
        self._encoding: _Encoding | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes (as Arrow holds them) of the rows in waiting and of the row group being encoded."""
        return self._pending_bytes + (self._encoding.bytes if self._encoding is not None else 0)

    def write(self, data: pa.RecordBatch | pa.Table) -> None:
        """Add rows; a row group is written once enough have gathered."""
        if data.num_rows == 0:
            return
        self.rows += data.num_rows
        self._pending.extend(data.to_batches() if isinstance(data, pa.Table) else [data])
        self._pending_bytes += data.nbytes
        self._pending_rows += data.num_rows
        if self._pending_bytes >= self.row_group_bytes or self._pending_rows >= self.row_group_rows:
            self.flush()

    def flush(self) -> None:
        """Write the rows in waiting as one row group: encoded on a thread of its own while the caller goes on
        gathering rows, once the row group before it is written (its error, if any, is raised here)."""
        self._hand_over(background=True)

    def _hand_over(self, *, background: bool) -> None:
        self._wait()
        if not self._pending:
            return
        table = pa.Table.from_batches(self._pending, self.schema)
        self._pending, self._pending_bytes, self._pending_rows = [], 0, 0
        if not background:
            self._encode(table)
            return
        self._encoding = _Encoding(self._encode, table)

    def _encode(self, table: pa.Table) -> None:
        if self._writer is None:
            self._writer = self._open(dictionary_columns(table))
        self._writer.write_table(table, row_group_size=table.num_rows)
        if self.on_rows is not None:
            self.on_rows(table)

    def _wait(self) -> None:
        encoding, self._encoding = self._encoding, None
        if encoding is not None:
            encoding.result()

    def _open(self, use_dictionary: bool | list[str]) -> Any:
        import pyarrow.parquet as pq

        return pq.ParquetWriter(self._out, self.schema, use_dictionary=use_dictionary, **self._options)

    def close(self) -> None:
        """Write the last row group and the footer (``out`` itself stays open)."""
        self._hand_over(background=False)
        if self._writer is None:
            self._writer = self._open(True)
        self._writer.close()

    def discard(self) -> None:
        """Drop the rows in waiting (the file is being abandoned): a row group being encoded is waited for,
        and its error dropped, so that nothing writes into ``out`` after this returns."""
        self._pending, self._pending_bytes, self._pending_rows = [], 0, 0
        encoding, self._encoding = self._encoding, None
        if encoding is not None:
            encoding.join()


class _Encoding:
    """One row group being encoded on a thread of its own (pyarrow lets go of the GIL while it encodes)."""

    def __init__(self, encode: Callable[[pa.Table], None], table: pa.Table) -> None:
        self.bytes = table.nbytes
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(encode, table), name="eosink-parquet", daemon=True)
        self._thread.start()

    def _run(self, encode: Callable[[pa.Table], None], table: pa.Table) -> None:
        try:
            encode(table)
        except BaseException as exc:  # raised in the caller's thread by result()
            self._error = exc

    def join(self) -> None:
        self._thread.join()

    def result(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


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


def json_lines(batch: pa.RecordBatch, limit: int | None = None) -> bytes:
    """The batch as JSON lines: UTF-8, one object per row, keys in column order; dates and times ISO 8601,
    decimals as strings, durations in seconds, bytes in base64. NaN, infinity and (with ``limit``) a line
    over ``limit`` bytes are a BadRecordError."""
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
        if limit is not None and len(encoded) > limit:
            raise BadRecordError(
                f"Row {i} of a record batch is {len(encoded)} bytes as JSON, larger than max_record_bytes={limit}.",
                "Filter or truncate oversized rows, or raise max_record_bytes.",
            )
        out.append(encoded)
    return b"\n".join(out) + b"\n"


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
