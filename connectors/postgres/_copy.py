"""Arrow record batch -> ``COPY ... FROM STDIN`` rows (text format, values adapted by psycopg).

Correctness first: values go through Python objects and psycopg's text dumpers, and the
server parses each value with the target column's own input function (so domains, enums and
arrays work, and a bad value fails the COPY, before anything is visible). Timestamps, times
and durations are cut to microseconds, PostgreSQL's precision. A binary COPY or a vectorised
CSV encoding is a later optimisation (to be measured).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from psycopg import Copy

from eosink.connectors.postgres._schema import Column

__all__ = ["copy_batch"]

_JSON = {"json", "jsonb"}


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


def copy_batch(copy: Copy, txn_id: str, first_seq: int, batch: pa.RecordBatch, columns: Sequence[Column]) -> int:
    """Write ``batch``'s rows (tagged with the committable and a sequence number) into ``copy``; the row count."""
    data = [column_values(batch.column(batch.schema.get_field_index(c.name)), c) for c in columns]
    n = 0
    for n, row in enumerate(zip(*data, strict=True), start=1):
        copy.write_row((txn_id, first_seq + n - 1, *row))
    return n
