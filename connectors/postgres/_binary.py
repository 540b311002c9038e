"""Arrow arrays -> PostgreSQL binary ``COPY`` fields, vectorised (numpy and pyarrow.compute, no per-row objects).

A binary COPY row is an int16 field count, then per field an int32 length (-1 for NULL) and that
many bytes in the type's binary *receive* format. Fixed-width columns become ``(rows, width)``
byte matrices, laid side by side in one matrix per run of them (the bytes of NULL values masked
out); a variable-width column becomes two Arrow binary arrays, the 4-byte lengths and the
payloads (null where the value is NULL); ``binary_join_element_wise`` interleaves the runs and
the variable-width columns into the rows in C++. :func:`rows` gives the result.

Only (Arrow type, PostgreSQL base type) pairs whose binary value is exactly what the text path
stores are encoded; :func:`encoder` returns None for any other pair, and also when the values
would not fit (an integer out of range, a string that is not a canonical UUID, a date outside
Python's range, ...), so that the caller keeps the text path and the server rejects what it
rejected before. Nothing is coerced here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SIGNATURE", "TRAILER", "Encoder", "Field", "Fixed", "constant", "encoder", "rows", "values"]

SIGNATURE = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
"""The binary COPY header: signature, flags (no OIDs), header extension length 0."""
TRAILER = b"\xff\xff"


@dataclass(frozen=True)
class Fixed:
    """A fixed-width column's values: row i of ``data`` (uint8, rows x width) unless ``valid[i]`` is False (NULL)."""

    data: np.ndarray
    valid: np.ndarray | None


Field = Fixed | tuple[pa.Array, pa.Array]
"""A column's values: fixed-width, or the lengths (4 bytes, -1 for NULL) and payloads (binary, null for NULL)."""


@dataclass(frozen=True)
class Encoder:
    """Encodes a slice of the column it was made for."""

    encode: Callable[[pa.Array], Field]
    fixed: bool
    """Whether ``encode`` gives :class:`Fixed` values."""


_PG_EPOCH_DAYS = 10_957  # 1970-01-01 -> 2000-01-01
_PG_EPOCH_US = _PG_EPOCH_DAYS * 86_400_000_000
# Python's datetime/date range (the text path builds those objects), a day inside it either side.
_MIN_US, _MAX_US = -62_135_596_800_000_000 + 86_400_000_000, 253_402_300_799_999_999 - 86_400_000_000
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896

_INT_RANGES = {
    "int2": (-(2**15), 2**15 - 1, ">i2"),
    "int4": (-(2**31), 2**31 - 1, ">i4"),
    "int8": (-(2**63), 2**63 - 1, ">i8"),
}
_TEXT_BASES = {"text", "varchar", "bpchar", "json"}

_HEX = np.full(256, 255, dtype=np.uint8)
for _i, _c in enumerate(b"0123456789abcdef"):
    _HEX[_c] = _i
for _i, _c in enumerate(b"ABCDEF"):
    _HEX[_c] = 10 + _i
_UUID_DASHES = (8, 13, 18, 23)
_UUID_HEX = np.array([i for i in range(36) if i not in _UUID_DASHES])


def _binary_of(data: np.ndarray, validity: pa.Buffer | None = None) -> pa.Array:
    """A binary array whose i-th value is row i of ``data`` (fixed-width rows, or 1-d items)."""
    n = len(data)
    raw = np.ascontiguousarray(data)
    width = raw.nbytes // n if n else 0
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32) if width else np.zeros(n + 1, np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [validity, pa.py_buffer(offsets), pa.py_buffer(raw)])


def _validity(arr: pa.Array) -> tuple[pa.Buffer | None, np.ndarray | None]:
    """The validity bitmap (offset 0) and mask of ``arr``; (None, None) without nulls."""
    if arr.null_count == 0:
        return None, None
    valid = pc.is_valid(arr)
    return valid.buffers()[1], valid.to_numpy(zero_copy_only=False)


def _lengths(width: int | np.ndarray, mask: np.ndarray | None, n: int) -> np.ndarray:
    """The 4-byte length words (-1 for NULL) as a rows x 4 byte matrix."""
    lengths = np.broadcast_to(np.asarray(width, dtype=np.int64), (n,))
    if mask is not None:
        lengths = np.where(mask, lengths, -1)
    return lengths.astype(">i4").view(np.uint8).reshape(n, 4)


def _rows_of(values: np.ndarray) -> np.ndarray:
    """``values`` (one or more big-endian items per row) as a rows x width byte matrix."""
    n = len(values)
    width = values.dtype.itemsize * (int(np.prod(values.shape[1:])) if values.ndim > 1 else 1)
    return np.ascontiguousarray(values).view(np.uint8).reshape(n, width)


def _fixed(values: Callable[[pa.Array], np.ndarray]) -> Encoder:
    """An encoder for a fixed-width type: ``values`` gives the big-endian numpy values of a slice."""

    def encode(arr: pa.Array) -> Field:
        return Fixed(_rows_of(values(arr)), _validity(arr)[1])

    return Encoder(encode, True)


def _numbers(arr: pa.Array, fill: Any = 0) -> np.ndarray:
    return np.asarray(arr.fill_null(fill).to_numpy(zero_copy_only=False)) if arr.null_count else arr.to_numpy()


def _bounds(arr: pa.Array) -> tuple[Any, Any]:
    found = pc.min_max(arr)
    return found["min"].as_py(), found["max"].as_py()


def _in_range(arr: pa.Array, lo: int, hi: int) -> bool:
    low, high = _bounds(arr)
    return low is None or (lo <= low and high <= hi)


def _variable(payload: Callable[[pa.Array], pa.Array]) -> Encoder:
    """An encoder for a variable-width type: ``payload`` gives a binary array (null where NULL)."""

    def encode(arr: pa.Array) -> Field:
        body = payload(arr)
        offsets = np.frombuffer(body.buffers()[1], dtype=np.int32)[body.offset : body.offset + len(body) + 1]
        _, mask = _validity(body)
        return _binary_of(_lengths(np.diff(offsets), mask, len(body))), body

    return Encoder(encode, False)


def _as_binary(arr: pa.Array) -> pa.Array:
    if pa.types.is_fixed_size_binary(arr.type):
        validity, _ = _validity(arr)
        width = arr.type.byte_width
        data = np.frombuffer(arr.buffers()[1], dtype=np.uint8)[arr.offset * width : (arr.offset + len(arr)) * width]
        return _binary_of(data.reshape(len(arr), width) if width else np.zeros((len(arr), 0), np.uint8), validity)
    if not pa.types.is_binary(arr.type) and not pa.types.is_string(arr.type):
        arr = arr.cast(pa.large_binary() if pa.types.is_large_binary(arr.type) else pa.string())
    return arr.cast(pa.binary())


def _jsonb(arr: pa.Array) -> pa.Array:
    version = pa.array(np.full(len(arr), b"\x01", dtype="S1"), pa.binary())
    return pc.binary_join_element_wise(version, _as_binary(arr), pa.scalar(b"", pa.binary()))


def _uuid(arr: pa.Array) -> np.ndarray | None:
    """16-byte rows from canonical ``8-4-4-4-12`` hex strings, or None if any value is not one."""
    filled = _as_binary(arr.fill_null("00000000-0000-0000-0000-000000000000") if arr.null_count else arr)
    offsets = np.frombuffer(filled.buffers()[1], dtype=np.int32, count=len(filled) + 1)
    if len(filled) and not (np.all(np.diff(offsets) == 36)):
        return None
    text = np.frombuffer(filled.buffers()[2], dtype=np.uint8)[offsets[0] : offsets[-1]].reshape(len(filled), 36)
    if not np.all(text[:, list(_UUID_DASHES)] == ord("-")):
        return None
    nibbles = _HEX[text[:, _UUID_HEX]]
    if np.any(nibbles == 255):
        return None
    return np.asarray((nibbles[:, 0::2] << 4) | nibbles[:, 1::2], dtype=np.uint8)


def _uuid_rows(arr: pa.Array) -> np.ndarray:
    found = _uuid(arr)
    assert found is not None, "checked on the whole column"
    return found


def _numeric(unscaled: Callable[[pa.Array], np.ndarray], scale: int, int_digits: int) -> Encoder:
    """numeric from int64 unscaled values ``u`` meaning ``u * 10**-scale``, ``int_digits`` digits before the point.

    Every value gets the same digit groups (base 10000, aligned on the point); the server strips
    the leading and trailing zero groups and keeps ``scale`` as the display scale.
    """
    n_int, n_frac, rest = -(-int_digits // 4), -(-scale // 4), scale % 4
    n_digits = n_int + n_frac

    def digits(arr: pa.Array) -> np.ndarray:
        u = unscaled(arr).astype(np.int64)
        negative = u < 0
        mag = np.where(negative, (-(u + 1)).astype(np.uint64) + np.uint64(1), u.astype(np.uint64))
        out = np.empty((len(u), 4 + n_digits), dtype=">i2")
        out[:, 0] = n_digits
        out[:, 1] = n_int - 1
        out[:, 2] = np.where(negative, 0x4000, 0)
        out[:, 3] = scale
        frac, whole = mag % np.uint64(10**scale), mag // np.uint64(10**scale)
        col = 4 + n_digits - 1
        if rest:
            out[:, col] = (frac % np.uint64(10**rest)) * np.uint64(10 ** (4 - rest))
            frac //= np.uint64(10**rest)
            col -= 1
        for _ in range(scale // 4):
            out[:, col] = frac % np.uint64(10_000)
            frac //= np.uint64(10_000)
            col -= 1
        for _ in range(n_int):
            out[:, col] = whole % np.uint64(10_000)
            whole //= np.uint64(10_000)
            col -= 1
        return out

    return _fixed(digits)


def _decimal_unscaled(arr: pa.Array) -> np.ndarray:
    if isinstance(arr.type, pa.Decimal128Type):
        words = np.frombuffer(arr.buffers()[1], dtype="<i8")[2 * arr.offset : 2 * (arr.offset + len(arr))]
        return np.asarray(words[0::2])  # the low word: precision <= 18 fits in it
    return np.frombuffer(arr.buffers()[1], dtype="<i8")[arr.offset : arr.offset + len(arr)]


def _micros(arr: pa.Array) -> pa.Array:
    """Timestamps as microseconds, nanoseconds cut as the text path cuts them (an unsafe cast)."""
    unit = arr.type.unit
    if unit == "us":
        return arr
    return arr.cast(pa.timestamp("us", arr.type.tz), safe=unit != "ns")


def _same_width(dtype: str) -> Encoder:
    return _fixed(lambda a: _numbers(a).astype(dtype))


def encoder(arr: pa.Array, base: str, category: str, utf8: bool) -> Encoder | None:
    """An encoder for the whole column ``arr`` into a column of base type ``base``, or None to keep the text path."""
    t = arr.type
    if pa.types.is_null(t) or arr.null_count == len(arr):
        return Encoder(lambda a: Fixed(np.zeros((len(a), 0), np.uint8), np.zeros(len(a), bool)), True)
    if pa.types.is_integer(t):
        if base in _INT_RANGES:
            lo, hi, dtype = _INT_RANGES[base]
            return _same_width(dtype) if _in_range(arr, lo, hi) else None
        if base in ("float4", "float8"):
            return _same_width(">f4" if base == "float4" else ">f8")
        if base == "numeric" and _in_range(arr, -(2**63), 2**63 - 1):
            return _numeric(_numbers, 0, 20)
        return None
    if pa.types.is_floating(t):
        if base == "float8" or (base == "float4" and not pa.types.is_float64(t)):
            return _same_width(">f4" if base == "float4" else ">f8")
        return None  # float64 -> real rounds and may overflow; float -> numeric needs the shortest repr
    if pa.types.is_boolean(t):
        return _fixed(lambda a: _numbers(a, False).astype(np.uint8)) if base == "bool" else None
    if pa.types.is_decimal(t):
        fits = isinstance(t, pa.Decimal128Type) or str(t).startswith("decimal64")
        if base == "numeric" and fits and t.precision <= 18 and t.scale >= 0:
            return _numeric(_decimal_unscaled, int(t.scale), int(t.precision) - int(t.scale))
        return None
    if pa.types.is_date32(t):
        if base == "date" and _in_range(arr.cast(pa.int32()), _MIN_DAY, _MAX_DAY):
            return _fixed(lambda a: (_numbers(a.cast(pa.int32())) - _PG_EPOCH_DAYS).astype(">i4"))
        return None
    if pa.types.is_timestamp(t):
        # A naive timestamp into timestamptz, or an aware one into timestamp, depends on the session
        # time zone and on Arrow's zone: the text path handles those.
        if (base == "timestamp" and t.tz is None) or (base == "timestamptz" and t.tz is not None):
            try:
                micros = _micros(arr)
            except pa.ArrowInvalid:
                return None
            if _in_range(micros.cast(pa.int64()), _MIN_US, _MAX_US):
                return _fixed(lambda a: (_numbers(_micros(a).cast(pa.int64())) - _PG_EPOCH_US).astype(">i8"))
        return None
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _variable(_as_binary) if base == "bytea" else None
    if pa.types.is_string(t) or pa.types.is_large_string(t) or str(t) == "string_view":
        if not utf8:
            return None
        if base in _TEXT_BASES or category == "E":
            return _variable(_as_binary)
        if base == "jsonb":
            return _variable(_jsonb)
        if base == "uuid" and _uuid(arr) is not None:
            return _fixed(_uuid_rows)
    return None


def values(data: np.ndarray) -> Fixed:
    """Non-NULL fixed-width values: row i of ``data`` (already big-endian) is row i's value."""
    return Fixed(_rows_of(data), None)


def constant(value: bytes, n: int) -> Fixed:
    """The same non-NULL value in each of ``n`` rows."""
    return Fixed(np.broadcast_to(np.frombuffer(value, dtype=np.uint8), (n, len(value))), None)


def _pack(run: Sequence[Fixed], prefix: np.ndarray, n: int) -> pa.Array:
    """One binary array: per row ``prefix`` then each fixed field's length word and value (none if NULL)."""
    width = prefix.shape[1] + sum(4 + f.data.shape[1] for f in run)
    out = np.empty((n, width), dtype=np.uint8)
    out[:, : prefix.shape[1]] = prefix
    at = prefix.shape[1]
    keep: np.ndarray | None = None
    for f in run:
        w = f.data.shape[1]
        out[:, at : at + 4] = _lengths(w, f.valid, n)
        out[:, at + 4 : at + 4 + w] = f.data
        if f.valid is not None and w:
            if keep is None:
                keep = np.ones((n, width), dtype=bool)
            keep[:, at + 4 : at + 4 + w] = f.valid[:, None]
        at += 4 + w
    if keep is None:
        return _binary_of(out)
    sizes = keep.sum(axis=1, dtype=np.int32)
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(out[keep])])


def rows(fields: Sequence[Field], n: int) -> pa.Buffer:
    """The binary COPY rows (without header or trailer) of ``n`` rows of ``fields``."""
    prefix = _rows_of(np.full(n, len(fields), dtype=">i2"))
    parts: list[pa.Array] = []
    run: list[Fixed] = []
    for f in fields:
        if isinstance(f, Fixed):
            run.append(f)
            continue
        if run or not parts:
            parts.append(_pack(run, prefix if not parts else prefix[:, :0], n))
            run = []
        parts.extend(f)
    if run or not parts:
        parts.append(_pack(run, prefix if not parts else prefix[:, :0], n))
    if len(parts) == 1:
        joined = parts[0]
    else:
        joined = pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.binary()), null_handling="skip")
    offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)[joined.offset : joined.offset + n + 1]
    data: pa.Buffer = joined.buffers()[2]
    return data.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
