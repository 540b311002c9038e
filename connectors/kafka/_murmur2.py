"""Kafka's default partitions of many record keys at once: murmur2 on numpy arrays.

Kafka's default partitioner puts a keyed record in partition ``(murmur2(key) & 0x7fffffff) % n``,
and every client must agree on it for keys to stay together. kafka-python's ``murmur2`` hashes
one key at a time in Python, some microseconds a key: for keyed records sent in bulk it cost more
than encoding them. Here keys of one length are hashed together, word by word, with numpy's
uint64 arithmetic masked to 32 bits, which gives the same numbers bit for bit (a product of two
32-bit values fits in 64 bits).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

__all__ = ["murmur2_many", "partitions_of"]

_SEED = 0x9747B28C
_M = np.uint64(0x5BD1E995)
_MASK = np.uint64(0xFFFFFFFF)


def murmur2_many(keys: Sequence[bytes]) -> npt.NDArray[np.uint64]:
    """Kafka's murmur2 of every key (as kafka-python's ``murmur2``: unsigned 32-bit values)."""
    out = np.empty(len(keys), dtype=np.uint64)
    by_length: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(i)
    for length, rows in by_length.items():
        out[rows] = _hash_equal_length(b"".join(keys[i] for i in rows), len(rows), length)
    return out


def partitions_of(keys: Sequence[bytes], partitions: int) -> npt.NDArray[np.int64]:
    """The default partitioner's partition index (0..partitions-1) of each key."""
    index: npt.NDArray[np.int64] = ((murmur2_many(keys) & np.uint64(0x7FFFFFFF)) % np.uint64(partitions)).astype(
        np.int64
    )
    return index


def _hash_equal_length(joined: bytes, count: int, length: int) -> npt.NDArray[np.uint64]:
    data = np.frombuffer(joined, dtype=np.uint8).reshape(count, length).astype(np.uint64)
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
