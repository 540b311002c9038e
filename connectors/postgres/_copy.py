"""Arrow record batch -> ``COPY ... FROM STDIN`` into staging: binary and vectorised, or text per value.

:func:`copy_rows` sends a binary COPY built from Arrow buffers by :mod:`._binary` (no per-row
Python objects) when every column has a binary encoder whose result is exactly what the text
path stores; measured on 200k rows that is several times faster than the text path (see
``benchmarks/postgres_copy_formats.py``). A text-like column (text, varchar, char, json, jsonb,
enum) that has no vectorised encoder, such as a struct written into jsonb, is rendered by the text
path's Python code and sent as the binary value, which for those types is the same text. Any
other column the fast path cannot encode (arrays, strings parsed into other types, values out of
range, ...) sends the whole batch through the text path, unchanged: values go through Python
objects and psycopg's text dumpers, and the server parses each value with the target column's
input function (so domains, enums and arrays work, and a bad value fails the COPY before
anything is visible). Either way timestamps, times and durations are cut to microseconds,
PostgreSQL's precision, and the server rejects what it rejected before.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
from psycopg import Connection, Copy, sql

from eosink.connectors.postgres import _binary
from eosink.connectors.postgres._control import SEQ_COLUMN, TXN_COLUMN
from eosink.connectors.postgres._schema import Column

__all__ = ["binary_plan", "copy_batch", "copy_rows"]

_JSON = {"json", "jsonb"}
_TEXT_LIKE = {"text", "varchar", "bpchar", "json", "jsonb"}
_CHUNK_BYTES = 4 << 20
"""About this much COPY data is built and sent at a time (bounds memory; keeps offsets 32-bit)."""


def _micro(arr: pa.Array) -> pa.Array:
    t = arr.type
    if pa.types.is_timestamp(t) and t.unit == "ns":
        return arr.cast(pa.timestamp("us", t.tz), safe=False)
    if pa.types.is_time64(t) and t.unit == "ns":
        return arr.cast(pa.time64("us"), safe=False)
    if pa.types.is_duration(t) and t.unit == "ns":
        return arr.cast(pa.duration("us"), safe=False)
    return arr


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        # A map comes out of Arrow as a list of (key, value) tuples.
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):
            return {str(k): _jsonable(v) for k, v in value}
        return [_jsonable(v) for v in value]
    return value


def column_values(arr: pa.Array, col: Column) -> list[Any]:
    """The Python values of one Arrow column, ready for psycopg's text dumpers."""
    arr = _micro(arr)
    values: list[Any] = arr.to_pylist()
    if col.base in _JSON and not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)):
        return [None if v is None else json.dumps(_jsonable(v), default=str, ensure_ascii=False) for v in values]
    if pa.types.is_map(arr.type) or pa.types.is_struct(arr.type):
        return [None if v is None else json.dumps(_jsonable(v), default=str, ensure_ascii=False) for v in values]
    return values


def copy_batch(copy: Copy, txn_id: str | None, first_seq: int, batch: pa.RecordBatch, columns: Sequence[Column]) -> int:
    """Write ``batch``'s rows (tagged with the committable and a sequence number, if ``txn_id``) into
    ``copy``; the row count."""
    data = [column_values(batch.column(batch.schema.get_field_index(c.name)), c) for c in columns]
    n = 0
    for n, row in enumerate(zip(*data, strict=True), start=1):
        copy.write_row(row if txn_id is None else (txn_id, first_seq + n - 1, *row))
    return n


def _text_values(arr: pa.Array, col: Column) -> pa.Array:
    """The text path's values of a text-like column, as a string array (what it would have sent)."""
    return pa.array(column_values(arr, col), pa.string())


def binary_plan(
    batch: pa.RecordBatch, columns: Sequence[Column], utf8: bool
) -> list[tuple[Column, _binary.Encoder, pa.Array]] | None:
    """Per column a binary encoder and the array it encodes, or None for the text path.

    The columns come in ``columns``' order, the fixed-width ones first (a COPY names its columns,
    and a run of fixed-width columns is laid out at once).
    """
    plan: list[tuple[Column, _binary.Encoder, pa.Array]] = []
    for col in columns:
        arr = batch.column(batch.schema.get_field_index(col.name))
        found = _binary.encoder(arr, col.base, col.category, utf8)
        if found is None and utf8 and (col.base in _TEXT_LIKE or col.category == "E"):
            arr = _text_values(arr, col)
            found = _binary.encoder(arr, col.base, col.category, utf8)
        if found is None:
            return None
        plan.append((col, found, arr))
    return sorted(plan, key=lambda p: not p[1].fixed)


def copy_rows(
    conn: Connection[Any],
    table: sql.Composable,
    txn_id: str | None,
    first_seq: int,
    batch: pa.RecordBatch,
    columns: Sequence[Column],
) -> int:
    """COPY ``batch``'s rows into ``table``, tagged with ``txn_id`` and sequence numbers from ``first_seq``.

    With a ``txn_id``, ``table`` is a staging table with the committable column and the sequence
    column (:data:`TXN_COLUMN`, :data:`SEQ_COLUMN`) besides ``columns``; without one, the rows go
    untagged into ``columns`` (the target itself). Returns the row count.
    """
    tagged = txn_id is not None
    plan = binary_plan(batch, columns, conn.info.encoding == "utf-8")
    if plan is None:
        with conn.cursor().copy(_statement(table, [c.name for c in columns], "", tagged)) as copy:
            return copy_batch(copy, txn_id, first_seq, batch, columns)
    n: int = batch.num_rows
    per_row = (8 + len(txn_id) + 12 if txn_id is not None else 0) + sum(
        8 + arr.nbytes / max(n, 1) for _, _, arr in plan
    )
    step = max(1, min(n, int(_CHUNK_BYTES / max(per_row, 1))))
    with conn.cursor().copy(_statement(table, [c.name for c, _, _ in plan], " (FORMAT binary)", tagged)) as copy:
        copy.write(_binary.SIGNATURE)
        for start in range(0, n, step):
            stop = min(n, start + step)
            fields: list[_binary.Field] = []
            if txn_id is not None:
                seq = np.arange(first_seq + start, first_seq + stop, dtype=np.int64)
                fields += [_binary.constant(txn_id.encode(), stop - start), _binary.values(seq.astype(">i8"))]
            fields += [encoder.encode(arr.slice(start, stop - start)) for _, encoder, arr in plan]
            copy.write(memoryview(_binary.rows(fields, stop - start)))
        copy.write(_binary.TRAILER)
    return n


def _statement(table: sql.Composable, names: Sequence[str], options: str, tagged: bool = True) -> sql.Composed:
    tags = (TXN_COLUMN, SEQ_COLUMN) if tagged else ()
    idents = sql.SQL(", ").join(sql.Identifier(n) for n in (*tags, *names))
    return sql.SQL("COPY {} ({}) FROM STDIN" + options).format(table, idents)
