"""Kafka's default partitions of many record keys at once: murmur2 on numpy arrays.

Kafka's default partitioner puts a keyed record in partition ``(murmur2(key) & 0x7fffffff) % n``,
and every client must agree on it for keys to stay together. kafka-python's ``murmur2`` hashes
one key at a time in Python, some microseconds a key: for keyed records sent in bulk it cost more
than encoding them. Here keys of one length are hashed together (gathered from an Arrow array's
buffers), word by word, with numpy's uint64 arithmetic masked to 32 bits, which gives the same
numbers bit for bit (a product of two 32-bit values fits in 64 bits).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["murmur2_many", "partitions_of"]

_SEED = 0x9747B28C
_M = np.uint64(0x5BD1E995)
_MASK = np.uint64(0xFFFFFFFF)


def murmur2_many(keys: Sequence[bytes] | pa.Array) -> npt.NDArray[np.uint64]:
    """Kafka's murmur2 of every key (as kafka-python's ``murmur2``: unsigned 32-bit values).

    ``keys`` are bytes, or a binary Arrow array without nulls (hashed from its buffers).
    """
    if isinstance(keys, pa.Array):
        keys = keys.cast(pa.binary())
        offsets = np.frombuffer(keys.buffers()[1], dtype=np.int32)[keys.offset : keys.offset + len(keys) + 1]
        data = np.frombuffer(keys.buffers()[2] or b"", dtype=np.uint8)
    else:
        lengths = np.fromiter(map(len, keys), dtype=np.int32, count=len(keys))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        data = np.frombuffer(b"".join(keys), dtype=np.uint8)
    starts, lengths = offsets[:-1].astype(np.int64), np.diff(offsets)
    out = np.empty(len(starts), dtype=np.uint64)
    for length in np.unique(lengths).tolist():
        rows = np.flatnonzero(lengths == length)
        matrix = data[starts[rows][:, None] + np.arange(length)] if length else np.empty((len(rows), 0), np.uint8)
        out[rows] = _hash_equal_length(matrix, length)
    return out


def partitions_of(keys: Sequence[bytes] | pa.Array, partitions: int) -> npt.NDArray[np.int64]:
    """The default partitioner's partition index (0..partitions-1) of each key."""
    index: npt.NDArray[np.int64] = ((murmur2_many(keys) & np.uint64(0x7FFFFFFF)) % np.uint64(partitions)).astype(
        np.int64
    )
    return index


def _hash_equal_length(matrix: npt.NDArray[np.uint8], length: int) -> npt.NDArray[np.uint64]:
    """murmur2 of each row of ``matrix`` (rows of ``length`` bytes)."""
    count = len(matrix)
    data = matrix.astype(np.uint64)
    h = np.full(count, (_SEED ^ length) & 0xFFFFFFFF, dtype=np.uint64)
    words = length // 4
    for j in range(words):
        w = data[:, 4 * j : 4 * j + 4]
        k = w[:, 0] | (w[:, 1] << np.uint64(8)) | (w[:, 2] << np.uint64(16)) | (w[:, 3] << np.uint64(24))
        k = (k * _M) & _MASK
        k ^= k >> np.uint64(24)
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail, base = length & 3, words * 4
    if tail >= 3:
        h ^= data[:, base + 2] << np.uint64(16)
    if tail >= 2:
        h ^= data[:, base + 1] << np.uint64(8)
    if tail >= 1:
        h ^= data[:, base]
        h = (h * _M) & _MASK
    h ^= h >> np.uint64(13)
    h = (h * _M) & _MASK
    h ^= h >> np.uint64(15)
    hashed: npt.NDArray[np.uint64] = h
    return hashed
