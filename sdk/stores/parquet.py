"""Parquet as the file sinks read it back: whole objects already in memory, decoded in the calling thread."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

__all__ = ["parquet_table"]


def parquet_table(data: bytes, columns: Sequence[str] | None = None) -> pa.Table:
    """One Parquet object's rows, decoded in the calling thread.

    ``pq.read_table`` hands even in-memory bytes to Arrow's thread pools; a process that exits while
    those wind down can abort with ``terminate called without an active exception``, after its work
    is done. The objects read here are already in memory, so the pools would buy nothing.
    """
    import pyarrow.parquet as pq

    return pq.ParquetFile(pa.BufferReader(data)).read(columns=columns, use_threads=False)
