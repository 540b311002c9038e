"""Order-independent batch fingerprints, computed in the same pass as the write.

A fingerprint is the row count plus two wrapping sums of row hashes: commutative, so
participants' partial fingerprints add up to the batch's whatever the partitioning, and a
faithful replay of a batch fingerprints the same. A replay that differs (a non-deterministic
query) almost surely does not, which is how :class:`~eosink.errors.NonDeterministicReplayError`
is detected without a second Spark action over the batch.

New fingerprints use :data:`FINGERPRINT_VERSION`; a replay is fingerprinted with the version of
the bundle it is compared with, so bundles written by an older release still compare.

Two-phase commit takes :data:`COUNT_ONLY` fingerprints, the row count without hashing a row: it
commits a batch only after Spark's commit log holds it, so Spark never replays a batch it
committed and there is no replay to compare. The row hashes are most of what separates its
write pass from a plain one (docs/design.md, "3.1 Two-phase commit").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from eosink._rowhash import row_hashes, splitmix64
from eosink.contract import Fingerprint

__all__ = ["COUNT_ONLY", "FINGERPRINT_VERSION", "fingerprint_of"]

FINGERPRINT_VERSION = 3
"""The row-hash version of new fingerprints (``eosink._rowhash``)."""

COUNT_ONLY = 0
"""The version of a fingerprint that holds only the row count (two-phase commit's; never compared)."""

_SECOND = np.uint64(0xD6E8FEB86659FD93)


def fingerprint_of(batch: pa.RecordBatch, version: int = FINGERPRINT_VERSION) -> Fingerprint:
    """The fingerprint of one record batch; add fingerprints to combine batches."""
    if batch.num_rows == 0:
        return Fingerprint(version=version)
    if version == COUNT_ONLY:
        return Fingerprint(batch.num_rows, version=COUNT_ONLY)
    h = row_hashes(batch, version=version)
    with np.errstate(over="ignore"):
        sum1 = int(h.sum(dtype=np.uint64))
        sum2 = int(splitmix64(h ^ _SECOND).sum(dtype=np.uint64))
    return Fingerprint(batch.num_rows, sum1, sum2, version)
