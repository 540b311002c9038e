"""The column-at-a-time JSON encoder makes, byte for byte, what ``json`` made of each row.

The oracle is the per-row encoding the sink used before (``json.JSONEncoder(separators=(",", ":"),
default=str)`` over ``to_pylist()`` rows): record values (``ensure_ascii=False``) and idempotent
record keys (``ensure_ascii=True``) keep their bytes, so a replay after an upgrade writes the same
records, and compaction keeps one per key across it.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.kafka._json import json_arrays, json_objects, json_text

VALUE_JSON = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
KEY_JSON = json.JSONEncoder(separators=(",", ":"), default=str).encode

_STRINGS = [
    "",
    "plain",
    'quote " and \\ backslash',
    "tab\tnew\nline\rcr\bbs\fff",
    "nul\x00 bell\x07 esc\x1b unit\x1f del\x7f",
    "é ü 中文 😀 \u2028\u2029",
    "</script>",
    "'single'",
]
_FLOATS = [
    0.0, -0.0, 1.0, -1.5, 0.1, 1e-5, 1e-4, 1e15, 1e16, 1e22, 1.5e300, 5e-324, 1.7976931348623157e308,
    0.30000000000000004, 12345678901234567.0, 123456789.123, math.nan, math.inf, -math.inf,
]  # fmt: skip


def _floats(rng: random.Random, n: int) -> list[float | None]:
    picked: list[float | None] = [rng.choice(_FLOATS) for _ in range(n)]
    for i in range(0, n, 3):
        picked[i] = rng.gauss(0, 1) * 10.0 ** rng.randrange(-30, 30)
    return picked


def _column(rng: random.Random, t: pa.DataType, n: int) -> pa.Array:
    """``n`` values of type ``t``, edges included, about one in five null."""

    def nulls(values: list[Any]) -> list[Any]:
        return [None if rng.random() < 0.2 else v for v in values]

    if pa.types.is_boolean(t):
        return pa.array(nulls([rng.random() < 0.5 for _ in range(n)]), t)
    if pa.types.is_integer(t):
        lo, hi = (
            (0, 2**t.bit_width - 1)
            if pa.types.is_unsigned_integer(t)
            else (-(2 ** (t.bit_width - 1)), 2 ** (t.bit_width - 1) - 1)
        )
        return pa.array(nulls([rng.choice([lo, hi, 0, rng.randint(lo, hi)]) for _ in range(n)]), t)
    if pa.types.is_floating(t):
        values = _floats(rng, n)
        if pa.types.is_float32(t):
            values = [v if v is None or not math.isfinite(v) or abs(v) < 3e38 else 1.0 for v in values]
        return pa.array(nulls(values), t)
    if pa.types.is_decimal(t):
        scale = t.scale
        q = decimal.Decimal(1).scaleb(-scale)
        values = [
            decimal.Decimal(rng.randint(-(10**t.precision) + 1, 10**t.precision - 1)).scaleb(-scale) for _ in range(n)
        ]
        values += [decimal.Decimal(0).quantize(q), decimal.Decimal(1).scaleb(-scale)]
        return pa.array(nulls(values[:n]), t)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.array(nulls([rng.choice(_STRINGS) + str(rng.randrange(100)) for _ in range(n)]), t)
    if pa.types.is_date(t):
        days = [dt.date(1, 1, 1), dt.date(999, 12, 31), dt.date(1970, 1, 1), dt.date(9999, 12, 31)]
        return pa.array(
            nulls(
                [rng.choice(days) if rng.random() < 0.3 else dt.date(rng.randint(1000, 9999), 2, 28) for _ in range(n)]
            ),
            t,
        )
    if pa.types.is_timestamp(t):
        scale = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}[t.unit]
        values = [
            rng.choice(
                [
                    0,
                    -1,
                    1,
                    1_700_000_000 * scale + rng.randrange(scale),
                    rng.randint(-2 * 10**9, 2 * 10**11) * scale + rng.randrange(scale),
                ]
            )
            for _ in range(n)
        ]
        if t.unit == "ns":
            values = [v % (2**62) for v in values]
        return pa.array(nulls(values), pa.int64()).cast(t)
    if pa.types.is_binary(t):
        return pa.array(nulls([bytes(rng.randrange(256) for _ in range(rng.randrange(6))) for _ in range(n)]), t)
    if pa.types.is_time(t):
        return pa.array(
            nulls(
                [dt.time(rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.choice([0, 5])) for _ in range(n)]
            ),
            t,
        )
    raise AssertionError(t)


SCALARS = [
    pa.bool_(), pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint64(), pa.float32(), pa.float64(),
    pa.decimal128(12, 2), pa.decimal128(38, 10), pa.decimal128(5, 0), pa.decimal256(40, 3),
    pa.string(), pa.large_string(), pa.date32(), pa.date64(),
    pa.timestamp("s"), pa.timestamp("ms"), pa.timestamp("us"), pa.timestamp("ns"),
    pa.timestamp("us", "UTC"), pa.timestamp("us", "Etc/UTC"), pa.timestamp("ms", "Europe/Paris"),
    pa.timestamp("us", "America/St_Johns"), pa.timestamp("us", "+05:45"), pa.timestamp("us", "Africa/Monrovia"),
    pa.binary(), pa.time64("us"),
]  # fmt: skip


def _expected(batch: pa.RecordBatch, names: list[str], encode: Any) -> list[str]:
    return [encode(row) for row in batch.select(names).to_pylist()]


@pytest.mark.parametrize("t", SCALARS, ids=str)
def test_each_type_encodes_as_json_encoded_each_value(t: pa.DataType) -> None:
    rng = random.Random(str(t))
    column = _column(rng, t, 400)
    assert json_text(column).to_pylist() == [VALUE_JSON(v) for v in column.to_pylist()]
    assert json_text(column, ascii_only=True).to_pylist() == [KEY_JSON(v) for v in column.to_pylist()]


@pytest.mark.parametrize("t", SCALARS, ids=str)
def test_nested_types_encode_as_json_encoded_each_value(t: pa.DataType) -> None:
    rng = random.Random(f"nested {t}")
    inner = _column(rng, t, 300)
    lists = pa.ListArray.from_arrays(pa.array(sorted(rng.sample(range(301), 40)), pa.int32()), inner)
    sliced = lists.slice(3, 30)
    struct = pa.StructArray.from_arrays([inner, _column(rng, pa.int64(), 300)], names=["v", 'n "x"'])
    struct = struct.slice(7, 200)
    structs = pa.StructArray.from_arrays([inner], names=["v"], mask=pa.array([rng.random() < 0.1 for _ in range(300)]))
    keys = pa.array([f"k{i}" for i in range(300)])
    maps = pa.MapArray.from_arrays(lists.offsets, keys.slice(0, len(inner)), inner)
    fixed = pa.FixedSizeListArray.from_arrays(inner, 3)
    for column in (lists, sliced, struct, structs, maps, fixed):
        expected = [VALUE_JSON(v) for v in column.to_pylist()]
        assert json_text(column).to_pylist() == expected, column.type


def test_a_rows_object_is_json_of_the_row_as_to_pylist_gives_it() -> None:
    rng = random.Random(11)
    columns = [_column(rng, t, 500) for t in SCALARS]
    names = [f"c{i}_{t}" for i, t in enumerate(SCALARS)]
    names[0] = 'odd "name" é\n'
    batch = pa.RecordBatch.from_arrays(columns, names=names)
    assert json_objects(batch, names).to_pylist() == _expected(batch, names, VALUE_JSON)
    assert json_objects(batch.slice(17, 100), names).to_pylist() == _expected(batch.slice(17, 100), names, VALUE_JSON)
    assert json_objects(batch, []).to_pylist() == ["{}"] * 500


def test_duplicate_column_names_keep_what_to_pylist_keeps() -> None:
    batch = pa.RecordBatch.from_arrays([pa.array([1, 2]), pa.array(["a", "b"])], names=["x", "x"])
    assert json_objects(batch, ["x", "x"]).to_pylist() == [VALUE_JSON(row) for row in batch.to_pylist()]


def test_key_arrays_are_json_lists_in_ascii() -> None:
    rng = random.Random(5)
    columns = [_column(rng, t, 300) for t in (pa.string(), pa.int64(), pa.float64(), pa.timestamp("us", "UTC"))]
    expected = [KEY_JSON(list(values)) for values in zip(*(c.to_pylist() for c in columns), strict=True)]
    assert json_arrays(columns).to_pylist() == expected


def test_dictionary_columns_encode_their_values() -> None:
    column = pa.array(["a", "b\n", None, "a"]).dictionary_encode()
    assert json_text(column).to_pylist() == ['"a"', '"b\\n"', "null", '"a"']
