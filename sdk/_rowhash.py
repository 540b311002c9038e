"""Vectorised 64-bit row hashes of Arrow record batches.

A row's hash depends only on its values and column positions, never on how Spark chunked
the batch into record batches or partitions, so a faithful replay hashes the same.

Hashes are stored (in bundles' fingerprints) and derived into row keys, so a version's numbers
never change; golden tests pin them. Version 1 hashes decimals through their text as Python
objects; version 2 hashes their Arrow buffer in numpy, about 15 times faster. Version 3
also hashes strings and binaries from their Arrow buffers (a polynomial over the bytes, taken
with prefix sums in numpy) instead of making a Python object per value, about twice as fast.
It tells accidental differences apart (what a fingerprint is for: a replay that computed
other values), not crafted collisions. Generated keys stay on version 1 (a replay after an
upgrade must produce the same keys); fingerprints carry their version, and a replay is
fingerprinted with the version of the bundle it is compared with.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

U64 = npt.NDArray[np.uint64]

HASH_VERSIONS = (1, 2, 3)
"""The row-hash versions this release computes."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_NULL = np.uint64(0x6A09E667F3BCC909)
_WIDTH_DTYPES = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}


def splitmix64(x: U64) -> U64:
    """The splitmix64 finaliser, element-wise (wrapping uint64 arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))  # type: ignore[no-any-return]


def stable_u64(text: str) -> int:
    """A process-independent 64-bit hash of a string (Python's hash() is salted)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def _fixed_width(arr: pa.Array) -> U64 | None:
    t = arr.type
    if not (pa.types.is_integer(t) or pa.types.is_temporal(t) or pa.types.is_floating(t)):
        return None
    width = t.bit_width
    if pa.types.is_floating(t):
        if width == 16:
            arr = arr.cast(pa.float32())
        floats = np.asarray(arr.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.float64) + 0.0
        floats[np.isnan(floats)] = np.nan
        return floats.view(np.uint64)
    dtype = _WIDTH_DTYPES.get(width)
    if dtype is None:
        return None
    buf = arr.buffers()[1]
    if buf is None:
        return np.zeros(len(arr), dtype=np.uint64)
    values = np.frombuffer(buf, dtype=dtype)[arr.offset : arr.offset + len(arr)]
    return values.astype(np.uint64)


def _object_hash(values: Any) -> U64:
    from pandas.util import hash_array

    hashed: U64 = hash_array(np.asarray(values, dtype=object), categorize=False)
    return hashed


def _decimal_hash(arr: pa.Array) -> U64:
    """Version 2 hash of each value of a decimal array, from its little-endian two's-complement buffer."""
    n = len(arr)
    width = arr.type.bit_width // 64
    buf = arr.buffers()[1]
    if width == 0:  # decimal32: 4-byte values
        return splitmix64(np.frombuffer(buf, dtype="<u4")[arr.offset : arr.offset + n].astype(np.uint64))
    parts = np.frombuffer(buf, dtype="<u8")[arr.offset * width : (arr.offset + n) * width].reshape(n, width)
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in range(width):
            h = splitmix64(h * np.uint64(31) + parts[:, i].astype(np.uint64))
    return h


_BASE = 0x100000001B3  # odd, so invertible modulo 2**64
_SPAN = 1 << 16
"""Bytes hashed in one numpy pass: bounds the temporary arrays (8 bytes per byte hashed)."""
_TABLES: list[tuple[U64, U64]] = []


def _power_tables() -> tuple[U64, U64]:
    """``_BASE**k`` and ``_BASE**-k`` modulo 2**64 for ``k <= _SPAN`` (made once per process)."""
    if not _TABLES:
        tables = []
        for base in (_BASE, pow(_BASE, -1, 1 << 64)):
            steps = np.full(_SPAN + 1, base, dtype=np.uint64)
            steps[0] = 1
            tables.append(np.cumprod(steps, dtype=np.uint64))
        _TABLES.append((tables[0], tables[1]))
    return _TABLES[0]


def _poly(data: npt.NDArray[np.uint8], starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> U64:
    """``sum((data[start + t] + 1) * _BASE**t for t < end - start)`` per value, wrapping; values within one span.

    A prefix sum over the span weights each byte by ``_BASE**i`` (its index in the span); a
    value's difference of prefix sums is its polynomial times ``_BASE**start``, which the
    inverse power takes out.
    """
    lo = int(starts[0])
    m = int(ends[-1]) - lo
    powers, inverses = _power_tables()
    with np.errstate(over="ignore"):
        prefix = np.zeros(m + 1, dtype=np.uint64)
        np.cumsum((data[lo : lo + m].astype(np.uint64) + np.uint64(1)) * powers[:m], out=prefix[1:])
        sums: U64 = (prefix[ends - lo] - prefix[starts - lo]) * inverses[starts - lo]
        return sums


def _long_poly(data: npt.NDArray[np.uint8], start: int, end: int) -> int:
    """:func:`_poly` of one value longer than a span, a span at a time."""
    total = 0
    for lo in range(start, end, _SPAN):
        hi = min(lo + _SPAN, end)
        part = int(_poly(data, np.array([lo], dtype=np.int64), np.array([hi], dtype=np.int64))[0])
        total = (total + part * pow(_BASE, lo - start, 1 << 64)) % (1 << 64)
    return total


def _bytes_hash(arr: pa.Array) -> U64:
    """Version 3 hash of each value of a string or binary array, from its offsets and data buffers.

    Null slots hash like empty values here; :func:`column_hash` replaces them with the null constant.
    """
    n = len(arr)
    wide = pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)
    offsets_buf, data_buf = arr.buffers()[1], arr.buffers()[2]
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    if offsets_buf is None:  # every value empty (or null)
        offsets = np.zeros(n + 1, dtype=np.int64)
    else:
        offsets = np.frombuffer(offsets_buf, dtype=np.int64 if wide else np.int32)[arr.offset : arr.offset + n + 1]
        offsets = offsets.astype(np.int64)
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else np.zeros(0, dtype=np.uint8)
    sums = np.zeros(n, dtype=np.uint64)
    i = 0
    while i < n:
        if offsets[i + 1] - offsets[i] > _SPAN:
            sums[i] = _long_poly(data, int(offsets[i]), int(offsets[i + 1]))
            i += 1
            continue
        j = max(int(np.searchsorted(offsets, offsets[i] + _SPAN, side="right")) - 1, i + 1)  # rows i..j-1
        sums[i:j] = _poly(data, offsets[i:j], offsets[i + 1 : j + 1])
        i = j
    lengths = (offsets[1:] - offsets[:-1]).astype(np.uint64)
    with np.errstate(over="ignore"):
        return splitmix64(sums + splitmix64(lengths))


_BYTES_TYPES = (pa.types.is_string, pa.types.is_large_string, pa.types.is_binary, pa.types.is_large_binary)


def column_hash(arr: pa.Array, version: int = 1) -> U64:
    """One uint64 per value under hash ``version``; nulls hash to a fixed constant."""
    if version not in HASH_VERSIONS:
        raise ValueError(f"unknown row-hash version {version} (this release knows {HASH_VERSIONS})")
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    fixed = _fixed_width(arr)
    if fixed is not None:
        h = splitmix64(fixed)
    elif pa.types.is_boolean(arr.type):
        h = splitmix64(np.asarray(arr.fill_null(False).to_numpy(zero_copy_only=False), dtype=np.uint64))
    elif version >= 2 and pa.types.is_decimal(arr.type):
        h = _decimal_hash(arr)
    elif version >= 3 and any(is_(arr.type) for is_ in _BYTES_TYPES):
        h = _bytes_hash(arr)
    elif pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
        h = _object_hash(arr.fill_null("").to_numpy(zero_copy_only=False))
    elif pa.types.is_binary(arr.type) or pa.types.is_large_binary(arr.type):
        h = _object_hash(arr.fill_null(b"").to_numpy(zero_copy_only=False))
    elif pa.types.is_decimal(arr.type):
        h = _object_hash(pc.cast(arr, pa.string()).fill_null("").to_numpy(zero_copy_only=False))
    else:  # nested and exotic types: canonical JSON of each value
        h = _object_hash([json.dumps(v, sort_keys=True, default=str) for v in arr.to_pylist()])
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
        h = np.where(valid, h, _NULL).astype(np.uint64)
    return h


def row_hashes(batch: pa.RecordBatch, columns: list[str] | None = None, version: int = 1) -> U64:
    """One uint64 per row under hash ``version``, combining every column (or ``columns``) by position."""
    names = columns if columns is not None else batch.schema.names
    h = np.full(batch.num_rows, np.uint64(len(names)), dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i, name in enumerate(names):
            col = column_hash(batch.column(batch.schema.get_field_index(name)), version)
            h = splitmix64(h * np.uint64(31) + col + np.uint64(i))
    return h
