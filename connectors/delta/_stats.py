"""Delta file statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``), computed from Arrow.

Readers skip files by these bounds, so a bound must never be tighter than the data: where a value
cannot be written exactly in the log's JSON, the bound is widened or left out (a missing bound
means "unknown" to every reader):

* integers, floats (a column holding NaN gets no bounds), strings (a longer maximum than
  ``STRING_PREFIX`` characters is left out; the minimum is cut to its prefix), dates
  (``YYYY-MM-DD``), timestamps in milliseconds (zoned: ``YYYY-MM-DDTHH:MM:SS[.sss]Z`` in UTC; without
  a zone: ``YYYY-MM-DD HH:MM:SS[.sss]``; the maximum rounded up to the next millisecond when it has
  more digits), decimals (JSON numbers, rounded outwards);
* booleans (``false`` < ``true``); structs nest their fields; binary, list and map columns get
  nothing (as delta-rs writes them).

Statistics are gathered per write and merged, so a file's figures cover all its record batches.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["STRING_PREFIX", "FileStats"]

STRING_PREFIX = 32
"""Characters of a string bound kept in the log (Delta's own writers keep 32)."""
_MS = dt.timedelta(milliseconds=1)


def _bounded(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_boolean(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_floating(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_date(kind)
        or pa.types.is_timestamp(kind)
        or pa.types.is_decimal(kind)
    )


@dataclass
class _Column:
    """One column's (or struct field's) running figures; ``lo``/``hi`` are Python values, None when unknown."""

    kind: pa.DataType
    nulls: int = 0
    lo: Any = None
    hi: Any = None
    unbounded: bool = False
    children: dict[str, _Column] = field(default_factory=dict)

    def add(self, values: pa.Array | pa.ChunkedArray) -> None:
        self.nulls += values.null_count
        if pa.types.is_struct(self.kind):
            array = values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
            for index in range(self.kind.num_fields):
                child = self.kind.field(index)
                column = self.children.setdefault(child.name, _Column(child.type))
                column.add(pc.struct_field(array, [index]))
            return
        if not _bounded(self.kind) or self.unbounded or values.null_count == len(values):
            return
        if pa.types.is_floating(self.kind) and pc.any(pc.is_nan(values)).as_py():
            self.unbounded = True
            self.lo = self.hi = None
            return
        found = pc.min_max(values)
        lo, hi = found["min"].as_py(), found["max"].as_py()
        self.lo = lo if self.lo is None else min(self.lo, lo)
        self.hi = hi if self.hi is None else max(self.hi, hi)

    def bounds(self) -> tuple[Any, Any]:
        """(min, max) as the log writes them; either is None when left out."""
        if self.children:
            return None, None
        if self.lo is None:
            return None, None
        return _json_bound(self.kind, self.lo, low=True), _json_bound(self.kind, self.hi, low=False)


def _json_bound(kind: pa.DataType, value: Any, *, low: bool) -> Any:
    if isinstance(value, str):
        if len(value) <= STRING_PREFIX:
            return value
        return value[:STRING_PREFIX] if low else None
    if isinstance(value, dt.datetime):
        extra = value.microsecond % 1000
        value = value - dt.timedelta(microseconds=extra) + (_MS if extra and not low else dt.timedelta(0))
        spec = "milliseconds" if value.microsecond else "seconds"  # as delta-rs: no fraction when it is zero
        if isinstance(kind, pa.TimestampType) and kind.tz is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
            return value.isoformat(timespec=spec) + "Z"
        return value.isoformat(sep=" ", timespec=spec)
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        number = float(value)
        if low and decimal.Decimal(number) > value:
            number = math.nextafter(number, -math.inf)
        if not low and decimal.Decimal(number) < value:
            number = math.nextafter(number, math.inf)
        return number
    if isinstance(value, float) and math.isinf(value):
        return None
    return value


class FileStats:
    """The statistics of one data file, fed each record batch written into it."""

    def __init__(self, schema: pa.Schema) -> None:
        self.rows = 0
        self.columns = {f.name: _Column(f.type) for f in schema}

    def add(self, data: pa.RecordBatch | pa.Table) -> None:
        self.rows += data.num_rows
        for name, column in self.columns.items():
            column.add(data.column(name))

    def to_json(self) -> str:
        """The add action's ``stats`` string."""
        return json.dumps(
            {
                "numRecords": self.rows,
                "minValues": _tree(self.columns, 0),
                "maxValues": _tree(self.columns, 1),
                "nullCount": _nulls(self.columns),
            },
            separators=(",", ":"),
            allow_nan=False,
        )


def _tree(columns: dict[str, _Column], side: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, column in columns.items():
        if column.children:
            nested = _tree(column.children, side)
            if nested:
                out[name] = nested
            continue
        bound = column.bounds()[side]
        if bound is not None:
            out[name] = bound
    return out


def _counted(kind: pa.DataType) -> bool:
    return not (
        pa.types.is_binary(kind)
        or pa.types.is_large_binary(kind)
        or pa.types.is_fixed_size_binary(kind)
        or pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_fixed_size_list(kind)
        or pa.types.is_map(kind)
    )


def _nulls(columns: dict[str, _Column]) -> dict[str, Any]:
    return {
        n: (_nulls(c.children) if c.children else c.nulls)
        for n, c in columns.items()
        if _counted(c.kind) and (c.children or not pa.types.is_struct(c.kind))
    }
