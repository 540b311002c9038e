"""Writing one participant's rows as files: Parquet or JSON lines, Hive-style partitions, checks first.

Everything a batch could be refused for is checked before its first byte is written: the
schema against the target's (the first batch's, kept in ``_eosink/schema.json``), key columns and
their nulls, partition columns' types and values. Partition directories are named by the store kit
(:mod:`eosink.stores.partitions`), with HDFS's limit of 255 bytes per name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from eosink.connectors.hdfs.config import MAX_COMPONENT_BYTES, HdfsConfig
from eosink.errors import BadRecordError, SchemaError
from eosink.keys import KEY_COLUMN
from eosink.stores.encoding import ParquetStream, WriteOnlyFile, json_lines
from eosink.stores.hdfs import bounded
from eosink.stores.parquet import parquet_table
from eosink.stores.partitions import check_column_name, folder, groups

if TYPE_CHECKING:
    from eosink.stores.hdfs import Fs, HdfsFile

__all__ = [
    "FileSet",
    "check_schema",
    "check_schema_doc",
    "read_table",
    "schema_doc",
]

_PARTITION_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_integer, pa.types.is_boolean)
_BUFFER = 4 << 20


def extension(fmt: str) -> str:
    return "parquet" if fmt == "parquet" else "jsonl"


def schema_doc(schema: pa.Schema) -> list[list[str]]:
    """The schema as compared between batches: (name, type) pairs, eosink's generated key left out."""
    return [[f.name, str(f.type)] for f in schema if f.name != KEY_COLUMN]


def check_schema(stored: list[list[str]], schema: pa.Schema, where: str) -> None:
    check_schema_doc(stored, schema_doc(schema), where)


def check_schema_doc(stored: list[list[str]], given: list[list[str]], where: str) -> None:
    """SchemaError unless ``given`` has the columns and types of ``stored``, in order."""
    if given != stored:
        raise SchemaError(
            f"The batch's columns {_shown(given)} differ from the target's {_shown(stored)} ({where}); "
            "nothing of the batch was made visible.",
            "Write the same columns and types as the target holds (cast or select them in the query), or write "
            "into a new target directory.",
        )


def _shown(doc: list[list[str]]) -> str:
    return "[" + ", ".join(f"{n}: {t}" for n, t in doc) + "]"


class _Buffered(WriteOnlyFile):
    """A write-only file object over an hdfs-native writer: buffered, with ``tell`` (Parquet needs it).

    Every call into the writer is bounded by ``timeout_s`` (:func:`~eosink.stores.hdfs.bounded`).
    """

    def __init__(self, raw: HdfsFile, timeout_s: float) -> None:
        self.raw = raw
        self.timeout_s = timeout_s
        self.pos = 0
        self.buf = bytearray()
        self.closed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.buf += view
        self.pos += len(view)
        if len(self.buf) >= _BUFFER:
            self.flush()
        return len(view)

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        if self.buf:
            chunk = bytes(self.buf)
            bounded(lambda: self.raw.write(chunk), self.timeout_s, "a write")
            self.buf.clear()

    def sync_and_close(self) -> None:
        """Flush, hsync (the data is durable on the DataNodes) and close (the NameNode completes the file)."""
        self.flush()

        def sync_and_close() -> None:
            self.raw.hsync()
            self.raw.close()

        bounded(sync_and_close, self.timeout_s, "hsync and close")
        self.closed = True

    def close(self) -> None:  # pyarrow closes its wrapper; the real close is sync_and_close
        pass


@dataclass
class _Open:
    path: str
    out: _Buffered
    writer: ParquetStream | None = None  # for Parquet


@dataclass
class FileSet:
    """The files one participant writes under its directory ``root``, one per partition."""

    config: HdfsConfig
    fs: Fs
    root: str
    name: str = "part-p00000"
    """The files' name (without extension) in each partition directory."""
    schema: pa.Schema | None = None
    rows: int = 0
    open: dict[str, _Open] = field(default_factory=dict)
    written: list[str] = field(default_factory=list)
    """Relative paths of the files written and closed."""

    def data_schema(self, schema: pa.Schema) -> pa.Schema:
        return pa.schema([f for f in schema if f.name not in self.config.partition_by])

    def add(self, batch: pa.RecordBatch, where: str = "a batch") -> None:
        """Append ``batch``'s rows to the files of their partitions (a hostile partition value raises before any
        of them is written)."""
        if self.schema is None:
            self.schema = batch.schema
        for pdir, part in split_partitions(batch, self.config.partition_by, where):
            handle = self.open.get(pdir)
            if handle is None:
                rel = (pdir + "/" if pdir else "") + self.name + "." + extension(self.config.format)
                raw = self.fs.create(f"{self.root}/{rel}", overwrite=True)
                handle = _Open(rel, _Buffered(raw, self.config.write_timeout_s))
                if self.config.format == "parquet":
                    handle.writer = ParquetStream(
                        pa.PythonFile(handle.out, mode="w"),
                        self.data_schema(batch.schema),
                        row_group_rows=self.config.row_group_rows,
                    )
                self.open[pdir] = handle
            _write_rows(handle, part, self.config)
        self.rows += batch.num_rows

    def close(self) -> list[str]:
        """Sync and close every file; their relative paths."""
        for handle in self.open.values():
            if handle.writer is not None:
                handle.writer.close()
            handle.out.sync_and_close()
            self.written.append(handle.path)
        self.open.clear()
        return list(self.written)


def _write_rows(handle: _Open, part: pa.RecordBatch, config: HdfsConfig) -> None:
    data = part.select([n for n in part.schema.names if n not in config.partition_by])
    if handle.writer is not None:
        handle.writer.write(data)
    else:
        handle.out.write(json_lines(data))


def split_partitions(
    batch: pa.RecordBatch, columns: Sequence[str], where: str = "a batch"
) -> list[tuple[str, pa.RecordBatch]]:
    """``batch`` split by the values of ``columns``: (``col=value/...``, rows) pairs; BadRecordError for a value
    that cannot name a directory (before anything is written)."""
    out = []
    for values, indices in groups(batch, columns):
        pdir = "/".join(
            folder(c, v, where, max_bytes=MAX_COMPONENT_BYTES) for c, v in zip(columns, values, strict=True)
        )
        out.append((pdir, batch if indices is None else batch.take(indices)))
    return out


def check_partition_types(schema: pa.Schema, columns: Sequence[str], where: str) -> None:
    for column in columns:
        check_column_name(column)
        if column not in schema.names:
            raise SchemaError(
                f"Partition column {column!r} is not in the batch ({where}; columns: {schema.names}).",
                "Select it in the query, or change partition_by.",
            )
        kind = schema.field(column).type
        if not any(test(kind) for test in _PARTITION_TYPES) and not pa.types.is_date(kind):
            raise SchemaError(
                f"Partition column {column!r} has type {kind}; only strings, integers, booleans and dates make "
                "directory names that read back as they were.",
                f"Cast {column!r} to a string (or partition by another column).",
            )


def check_keys(batch: pa.RecordBatch, keys: Sequence[str], where: str) -> None:
    missing = [k for k in keys if k not in batch.schema.names]
    if missing:
        raise SchemaError(
            f"Key column(s) {missing} are not in the batch ({where}; columns: {batch.schema.names}).",
            "Select the key columns in the query, or change the sink's key columns.",
        )
    for k in keys:
        if batch.column(k).null_count:
            raise BadRecordError(
                f"A row has a null in key column {k!r} ({where}); it cannot be upserted.",
                f"Filter out or fill rows where {k!r} is null before writing.",
            )


def read_table(fs: Fs, path: str, fmt: str) -> pa.Table:
    """A data file of the sink as an Arrow table (partition columns are in its directory names, not here)."""
    data = fs.read_bytes(path) or b""
    if fmt == "parquet" or path.endswith(".parquet"):
        return parquet_table(data)
    rows = [json.loads(line) for line in data.decode("utf-8").splitlines() if line.strip()]
    return pa.Table.from_pylist(rows)
