"""Hive-style partitions, as Spark writes and reads them: rows grouped by value, and folder names.

The file sinks (S3, HDFS, Delta) split each record batch by the values of its partition columns
and write each group under ``col=value/`` folders. The grouping runs in Arrow (one hash group-by,
no Python object per row); only one value per group reaches Python, to name its folder.

A value that is a path (``/``, ``\\``, ``.``, ``..``) or holds a control character can never be a
folder name: it is a BadRecordError naming the column, raised before a byte is written. Other
special characters are percent-escaped as Spark's ``escapePathName`` does, and a null or empty
value is Hive's default partition.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from eosink.errors import BadRecordError, SchemaError

__all__ = [
    "DEFAULT_PARTITION",
    "check_column_name",
    "folder",
    "groups",
    "partition_text",
    "unescape",
]

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""The folder value of a null (or empty) partition value, as Spark and Hive write it."""
# Spark's ExternalCatalogUtils.escapePathName escapes these (and control characters).
_ESCAPED = set("\"#%'*/:=?\\\x7f{[]^")


def groups(data: pa.RecordBatch | pa.Table, columns: Sequence[str]) -> list[tuple[tuple[Any, ...], pa.Array | None]]:
    """The rows of each distinct combination of ``columns``' values, in order of first appearance:
    ``(values as Python objects, row indices)``; the indices are None when every row is in the group."""
    if not columns:
        return [((), None)]
    keys = pa.table({f"k{i}": data.column(c) for i, c in enumerate(columns)})
    if data.num_rows == 0:
        return []
    rows = keys.append_column("row", pa.array(range(data.num_rows), pa.int64()))
    grouped = rows.group_by(keys.column_names, use_threads=False).aggregate([("row", "list")])
    if grouped.num_rows == 1:
        return [(tuple(grouped.column(k)[0].as_py() for k in keys.column_names), None)]
    values = zip(*(grouped.column(k).to_pylist() for k in keys.column_names), strict=True)
    indices = grouped.column("row_list")
    return [(key, indices[i].values) for i, key in enumerate(values)]


def partition_text(value: object) -> str | None:
    """A partition value as text, as Spark writes it (None for null; booleans as true/false; dates ISO)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    isoformat = getattr(value, "isoformat", None)
    return str(isoformat()) if callable(isoformat) else str(value)


def folder(column: str, value: object, where: str, *, max_bytes: int | None = None) -> str:
    """``column=value`` (escaped) for one partition folder: BadRecordError for a value that is a path, holds a
    control character, or makes a name longer than ``max_bytes``."""
    text = partition_text(value)
    if text is None or text == "":
        text = DEFAULT_PARTITION
    elif "/" in text or "\\" in text or text in (".", "..") or any(ord(ch) < 0x20 for ch in text):
        raise BadRecordError(
            f"Partition column {column!r} has the value {text[:80]!r} ({where}): a path ('/', '\\', '.', "
            "'..' or a control character) is not a partition value.",
            f"Clean or map column {column!r} before writing (e.g. regexp_replace(col, '[/\\\\]', '_')), or "
            "filter such rows out.",
        )
    name = f"{_escape(column)}={_escape(text)}"
    if max_bytes is not None and len(name.encode()) > max_bytes:
        raise BadRecordError(
            f"Partition column {column!r} has a value of {len(text.encode())} bytes ({text[:24]!r}...; {where}): "
            f"its folder name would pass the store's limit of {max_bytes} bytes.",
            f"Shorten or hash the values of {column!r}, or partition by another column.",
        )
    return name


def unescape(text: str) -> str | None:
    """A folder's value as it was written (None for the default partition)."""
    if text == DEFAULT_PARTITION:
        return None
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def check_column_name(column: str) -> None:
    """SchemaError for a partition column name that cannot be part of a folder name."""
    if not column or "/" in column or "\\" in column or any(ord(ch) < 0x20 for ch in column):
        raise SchemaError(
            f"Partition column name {column!r} cannot be a folder name.", "Rename the column (no '/', '\\', controls)."
        )


def _escape(text: str) -> str:
    return "".join(f"%{ord(ch):02X}" if ch in _ESCAPED or ord(ch) < 0x20 else ch for ch in text)
