"""Arrow columns as JSON text, a column at a time, in Arrow's and numpy's kernels.

The Kafka sink's JSON values (and its keys under ``idempotent``) were made per row in Python:
``to_pylist()`` and one ``json.dumps`` per row, the bulk of a participant's time. This module
makes the same bytes column by column: each column becomes an array of its values' JSON text,
and a row's object is the element-wise join of ``"name":`` and those arrays. The bytes are
exactly what ``json.JSONEncoder(separators=(",", ":"), default=str)`` makes of the row as
``to_pylist()`` gives it (``ensure_ascii`` as the caller asks); ``tests/connectors/kafka``
compares the two, value for value, for every type.

Per type: integers and decimals as Arrow casts them (a decimal is ``default=str``'s quoted
text), floats as ``repr`` (numpy's shortest round-trip text, the same digits and layout; NaN and
infinities as ``json`` spells them), strings escaped by a few replacements (the rare row with
another control character, or non-ASCII text where ASCII is asked for, by ``json`` itself),
dates and timestamps as ``str`` of the Python value, lists, structs and maps by joining their
children's text. A type with no kernel here (binary, time, duration, nanosecond timestamps, ...)
is encoded by ``json`` value by value: the same bytes, at Python's speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["json_arrays", "json_objects", "json_text"]

_STRING = pa.string()
_US_PER_DAY = 86_400_000_000
_YEAR_1000_US = -30_610_224_000 * 1_000_000
_YEAR_10000_US = 253_402_300_800 * 1_000_000
_YEAR_2037_US = 2_114_380_800 * 1_000_000
_NEEDS_ESCAPE = r'[\x00-\x1f"\\]'
_CONTROL = r"[\x00-\x1f]"
_NOT_PRINTABLE_ASCII = r"[^\x20-\x7e]"
_SHORT_ESCAPES = (
    ("\\", "\\\\"),
    ('"', '\\"'),
    ("\n", "\\n"),
    ("\r", "\\r"),
    ("\t", "\\t"),
    ("\b", "\\b"),
    ("\f", "\\f"),
)

_ENCODERS = {
    False: json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode,
    True: json.JSONEncoder(separators=(",", ":"), default=str).encode,
}


def json_objects(data: pa.RecordBatch, names: Sequence[str], *, ascii_only: bool = False) -> pa.Array:
    """Each row of ``data``'s columns ``names`` as one JSON object (a string array, no nulls)."""
    wanted = set(names)
    columns = [data.column(i) for i, name in enumerate(data.schema.names) if name in wanted]
    if len(columns) != len(names) or len(wanted) != len(names):  # a repeated name: to_pylist keeps one
        rows = pa.RecordBatch.from_arrays(columns, names=[n for n in data.schema.names if n in wanted]).to_pylist()
        return pa.array([_ENCODERS[ascii_only](row) for row in rows], _STRING)
    return _object(names, columns, data.num_rows, ascii_only)


def json_arrays(columns: Sequence[pa.Array], *, ascii_only: bool = True) -> pa.Array:
    """Row ``i`` of ``columns`` as the JSON array ``[c0[i],c1[i],...]`` (a string array, no nulls)."""
    return _join(["[", *_separated([json_text(c, ascii_only=ascii_only) for c in columns], ","), "]"], len(columns[0]))


def json_text(array: pa.Array, *, ascii_only: bool = False) -> pa.Array:
    """Each value of ``array`` as JSON text, ``null`` for nulls (a string array, no nulls)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    t = array.type
    if pa.types.is_dictionary(t):
        return json_text(array.dictionary_decode(), ascii_only=ascii_only)
    encode = _kernel(t)
    text = encode(array, ascii_only) if encode is not None else _by_value(array, ascii_only)
    return pc.fill_null(text, "null") if array.null_count else text


# -- kernels, one per kind of type ---------------------------------------------------------------


def _kernel(t: pa.DataType) -> Callable[[pa.Array, bool], pa.Array] | None:
    if pa.types.is_null(t):
        return lambda a, _: pa.array(["null"] * len(a), _STRING)
    if pa.types.is_boolean(t):
        return lambda a, _: pc.if_else(a, "true", "false")
    if pa.types.is_integer(t):
        return lambda a, _: pc.cast(a, _STRING)
    if pa.types.is_float32(t) or pa.types.is_float64(t):
        return _floats
    if pa.types.is_decimal(t):
        return lambda a, _: _quoted_plain(pc.cast(a, _STRING))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return _strings
    if pa.types.is_date(t):
        return _dates
    if pa.types.is_timestamp(t) and t.unit != "ns":  # ns: to_pylist gives pandas' Timestamp, str'd otherwise
        return _timestamps
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _lists
    if pa.types.is_map(t):
        return _maps
    if pa.types.is_struct(t) and len({f.name for f in t}) == t.num_fields:
        return _structs
    return None


def _by_value(array: pa.Array, ascii_only: bool) -> pa.Array:
    encode = _ENCODERS[ascii_only]
    return pa.array([None if v is None else encode(v) for v in array.to_pylist()], _STRING)


def _floats(array: pa.Array, _ascii_only: bool) -> pa.Array:
    values = pc.cast(array, pa.float64()).to_numpy(zero_copy_only=False)
    text = pa.array(values.astype(str), _STRING)  # numpy's float64 str is Python's repr, digit for digit
    if np.isfinite(values).all():
        return _with_nulls(text, array)
    text = pc.if_else(pc.is_nan(pa.array(values)), "NaN", text)
    text = pc.if_else(pc.equal(pa.array(values), np.inf), "Infinity", text)
    text = pc.if_else(pc.equal(pa.array(values), -np.inf), "-Infinity", text)
    return _with_nulls(text, array)


def _strings(array: pa.Array, ascii_only: bool) -> pa.Array:
    text = array if array.type == _STRING else pc.cast(array, _STRING)
    odd: pa.Array | None = None
    if pc.any(pc.match_substring_regex(text, _NEEDS_ESCAPE)).as_py():
        for plain, escaped in _SHORT_ESCAPES:
            text = pc.replace_substring(text, plain, escaped)
        if not ascii_only:
            odd = pc.match_substring_regex(text, _CONTROL)  # another control character: json's \u00XX
    if ascii_only:  # json's \uXXXX for all but printable ASCII (after the short escapes above)
        odd = pc.match_substring_regex(text, _NOT_PRINTABLE_ASCII)
    quoted = _quoted_plain(text)
    return quoted if odd is None else _patched(quoted, odd, array, ascii_only)


def _dates(array: pa.Array, _ascii_only: bool) -> pa.Array:
    days = array if pa.types.is_date32(array.type) else pc.cast(array, pa.date32())
    if not _years_ok(_int64s(days.view(pa.int32())) * _US_PER_DAY):
        return _by_value(array, False)
    return _quoted_plain(pc.cast(days, _STRING))


def _timestamps(array: pa.Array, _ascii_only: bool) -> pa.Array:
    """``str(datetime)``: ``YYYY-MM-DD HH:MM:SS[.ffffff][+HH:MM]``, in the zone's local time."""
    t = array.type
    micros = pc.cast(array, pa.timestamp("us", t.tz))
    local = pc.local_timestamp(micros) if t.tz else micros
    local_us = _int64s(local)
    if not _years_ok(local_us):
        return _by_value(array, False)
    text = pc.cast(local, _STRING)  # YYYY-MM-DD HH:MM:SS.ffffff
    whole = pa.array(local_us % 1_000_000 == 0)
    text = pc.if_else(whole, pc.utf8_slice_codeunits(text, 0, 19), text)  # str leaves out a zero fraction
    if not t.tz:
        return _quoted_plain(text)
    offset_us = local_us - _int64s(micros)
    if (offset_us % 60_000_000).any():  # an offset with seconds: str adds them, rare enough for json
        return _by_value(array, False)
    offsets = np.unique(offset_us)  # a zone's few offsets, each written once
    zones = [_offset_text(int(o)) for o in offsets]
    zone: Any = zones[0] if len(zones) == 1 else pc.take(pa.array(zones), np.searchsorted(offsets, offset_us))
    text = _with_nulls(_join(['"', text, zone, '"'], len(array)), array)
    # Past 2037 zoneinfo applies the zone's rule for daylight time; Arrow's time zone database
    # keeps the last offset it lists. Rows that far ahead go through str, as before.
    return _patched(text, pa.array(_int64s(micros) >= _YEAR_2037_US), array, False)


def _offset_text(offset_us: int) -> str:
    minutes = abs(offset_us) // 60_000_000
    return f"{'-' if offset_us < 0 else '+'}{minutes // 60:02d}:{minutes % 60:02d}"


def _lists(array: pa.Array, ascii_only: bool) -> pa.Array:
    if pa.types.is_fixed_size_list(array.type):
        array = pc.cast(array, pa.list_(array.type.value_field))
    items = json_text(array.values, ascii_only=ascii_only)
    lists = type(array).from_arrays(array.offsets, items)
    return _with_nulls(_join(["[", pc.binary_join(lists, ","), "]"], len(array)), array)


def _maps(array: pa.Array, ascii_only: bool) -> pa.Array:
    """A map as to_pylist gives it: a list of (key, value) pairs, so ``[[k,v],...]``."""
    entries = array.values
    pairs = _join(
        [
            "[",
            json_text(entries.field(0), ascii_only=ascii_only),
            ",",
            json_text(entries.field(1), ascii_only=ascii_only),
            "]",
        ],
        len(entries),
    )
    lists = pa.ListArray.from_arrays(array.offsets, pairs)
    return _with_nulls(_join(["[", pc.binary_join(lists, ","), "]"], len(array)), array)


def _structs(array: pa.Array, ascii_only: bool) -> pa.Array:
    names = [f.name for f in array.type]
    return _with_nulls(_object(names, array.flatten(), len(array), ascii_only), array)


# -- helpers -----------------------------------------------------------------------------------


def _object(names: Sequence[str], columns: Sequence[pa.Array], rows: int, ascii_only: bool) -> pa.Array:
    encode = _ENCODERS[ascii_only]
    members = [
        [encode(str(name)) + ":", json_text(column, ascii_only=ascii_only)]
        for name, column in zip(names, columns, strict=True)
    ]
    parts: list[Any] = ["{"]
    for i, member in enumerate(members):
        parts += ([","] if i else []) + member
    parts.append("}")
    return _join(parts, rows)


def _separated(items: list[pa.Array], separator: str) -> list[Any]:
    out: list[Any] = []
    for i, item in enumerate(items):
        out += ([separator] if i else []) + [item]
    return out


def _join(parts: Sequence[Any], rows: int) -> pa.Array:
    """Element-wise concatenation of arrays and constant strings (a string array of ``rows``)."""
    texts = [p for p in parts if not isinstance(p, str)]
    if not texts:
        return pa.array(["".join(parts)] * rows, _STRING)
    merged: list[Any] = []
    for p in parts:  # adjacent constants as one, fewer arguments for the kernel
        if isinstance(p, str) and merged and isinstance(merged[-1], str):
            merged[-1] += p
        else:
            merged.append(p)
    return pc.binary_join_element_wise(*merged, "")


def _quoted_plain(text: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise('"', text, '"', "")


def _patched(text: pa.Array, rows: pa.Array, source: pa.Array, ascii_only: bool) -> pa.Array:
    """``text`` with the JSON of ``source``'s values made by ``json`` where ``rows`` is true."""
    rows = pc.fill_null(rows, False)
    if not pc.any(rows).as_py():
        return text
    encode = _ENCODERS[ascii_only]
    return pc.replace_with_mask(text, rows, pa.array([encode(v) for v in pc.filter(source, rows).to_pylist()], _STRING))


def _with_nulls(text: pa.Array, source: pa.Array) -> pa.Array:
    """``text`` with nulls where ``source`` has them (json_text then writes ``null`` there)."""
    if not source.null_count:
        return text
    return pc.if_else(source.is_valid(), text, pa.scalar(None, _STRING))


def _int64s(array: pa.Array) -> np.ndarray[Any, np.dtype[np.int64]]:
    """``array``'s values as int64s, nulls as 0 (their text is replaced by ``null``)."""
    values: np.ndarray[Any, np.dtype[np.int64]] = pc.fill_null(array.cast(pa.int64()), 0).to_numpy()
    return values


def _years_ok(local_us: np.ndarray[Any, np.dtype[np.int64]]) -> bool:
    """Whether every time (microseconds since 1970) is in the years 1000-9999: four digits, as text here."""
    return not len(local_us) or bool(local_us.min() >= _YEAR_1000_US and local_us.max() < _YEAR_10000_US)
