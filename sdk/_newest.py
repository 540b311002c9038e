"""The newest row per key of an Arrow table: how readers of upserted batches merge what they read."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["ORDER", "newest_per_key", "with_order"]

ORDER = "__eosink_order"
"""The read-order column: rows of later batches, and later rows of one batch, come later."""


def with_order(table: pa.Table, start: int) -> pa.Table:
    """``table`` with :data:`ORDER` numbering its rows from ``start``."""
    return table.append_column(ORDER, pa.array(range(start, start + table.num_rows), pa.int64()))


def newest_per_key(table: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Per key, the row with the highest :data:`ORDER` (the newest batch, then the later row); ORDER dropped.

    Single-threaded on purpose: Arrow's thread pools, once started, can abort a process at its exit.
    """
    if table.num_rows == 0:
        return table.drop_columns([ORDER]) if ORDER in table.column_names else table
    newest = table.group_by(list(keys), use_threads=False).aggregate([(ORDER, "max")])
    keep = pc.is_in(table.column(ORDER), value_set=newest.column(f"{ORDER}_max"))
    return table.filter(keep).sort_by(ORDER).drop_columns([ORDER])
