"""Deterministic row keys for the idempotent strategy.

A generated key is UUIDv7-shaped: its 48 time bits come from the batch (Spark's batch
timestamp, identical on replay) and its other bits from a hash of app_id, batch_id, the row's
content and the row's ordinal among identical rows. A replay of the batch therefore produces
the same keys, even when Spark re-partitions it, provided identical rows meet in one
participant (the Spark integration repartitions by row hash to make sure of that).

They are deliberately not random UUIDv7s (``uuid6.uuid7()``, which eosink uses for ids that
must only be unique and time-ordered: task attempts, transactions, uploads, files): a random
key would differ on every replay, so the upsert that makes the idempotent strategy
exactly-once would insert a second copy instead of overwriting the first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eosink._rowhash import U64, row_hashes, splitmix64, stable_u64
from eosink.errors import SchemaError

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["KEY_COLUMN", "KeyGenerator"]

KEY_COLUMN = "eosink_key"
"""Name of the generated key column added to each row."""

_KEY_HASH_VERSION = 1
"""Row-hash version of generated keys; never changed: a replay after an upgrade must get the same keys."""
_ORD = np.uint64(0xC2B2AE3D27D4EB4F)
_LOW62 = np.uint64((1 << 62) - 1)
_VARIANT = np.uint64(1 << 63)


class KeyGenerator:
    """Adds :data:`KEY_COLUMN` to the record batches of one participant of one batch."""

    def __init__(self, app_id: str, batch_id: int, time_ms: int) -> None:
        self._salt = np.uint64(stable_u64(f"{app_id}\x00{batch_id}"))
        self._time_hi = np.uint64((time_ms & ((1 << 48) - 1)) << 16)
        import pandas as pd  # here, not at the top: every Spark worker that imports eosink would pay for it

        self._seen: pd.Series = pd.Series(dtype=np.int64)

    def _ordinals(self, h: U64) -> U64:
        import pandas as pd

        s = pd.Series(h)
        within = s.groupby(s, sort=False).cumcount().to_numpy(dtype=np.int64)
        before = s.map(self._seen).fillna(0).to_numpy(dtype=np.int64)
        counts = s.value_counts()
        self._seen = self._seen.add(counts, fill_value=0).astype(np.int64)
        ordinals: U64 = (within + before).astype(np.uint64)
        return ordinals

    def keys(self, batch: pa.RecordBatch) -> pa.Array:
        """The keys of ``batch``'s rows, as canonical UUID strings."""
        h = row_hashes(batch, version=_KEY_HASH_VERSION)
        with np.errstate(over="ignore"):
            m1 = splitmix64(h ^ self._salt ^ (self._ordinals(h) * _ORD))
            m2 = splitmix64(m1 ^ self._salt)
        hi = self._time_hi | np.uint64(0x7000) | (m1 & np.uint64(0xFFF))
        lo = _VARIANT | (m2 & _LOW62)
        raw = np.empty((len(h), 2), dtype=">u8")
        raw[:, 0] = hi
        raw[:, 1] = lo
        hexed = pa.array(np.frombuffer(raw.tobytes().hex().encode(), dtype="S32").astype(str))
        parts = [pc.utf8_slice_codeunits(hexed, a, b) for a, b in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))]
        return pc.binary_join_element_wise(*parts, "-")

    def add_keys(self, batch: pa.RecordBatch) -> pa.RecordBatch:
        """``batch`` with the generated key column appended."""
        if KEY_COLUMN in batch.schema.names:
            raise SchemaError(
                f"The batch already has a column named {KEY_COLUMN!r}, which eosink generates.",
                "Rename that column, or pass it as key_columns to the Idempotent strategy.",
            )
        return batch.append_column(KEY_COLUMN, self.keys(batch))
