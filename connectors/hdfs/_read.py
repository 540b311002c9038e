"""Reading an HdfsSink's target back: as a directory-listing reader does, and by the batch records.

A reader that lists the target (Spark, Hive, pyarrow's dataset) skips every name starting with
``_`` or ``.`` (eosink's bookkeeping, pending and staging work, batch records), so it sees whole
committed batches only: a batch's directory appears at once, by one rename. It reads the two
directory levels ``eosink_range=`` and ``eosink_batch=`` as partition columns; the functions here
return the user's columns only. Upserts are the one
thing it cannot see: it reads every version of a key. :func:`read_committed` reads the files the
batch records name, and keeps the newest row per key where the batches upsert.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from eosink._newest import ORDER, newest_per_key, with_order
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs._batches import all_batches
from eosink.connectors.hdfs._files import read_table
from eosink.connectors.hdfs._record import BatchRecord
from eosink.connectors.hdfs.config import HdfsConfig
from eosink.errors import ConfigurationError, EosinkError
from eosink.stores.hdfs import Fs
from eosink.stores.partitions import unescape

__all__ = ["committed_batches", "read_committed", "read_rows", "visible_files"]


def visible_files(fs: Fs, root: str) -> list[str]:
    """Every data file a listing reader sees under ``root`` (no ``_`` or ``.`` component below it)."""
    out = []
    for status in fs.walk_files(root):
        rel = status.path[len(root.rstrip("/")) + 1 :]
        if not any(part.startswith(("_", ".")) for part in rel.split("/")):
            out.append(status.path)
    return sorted(out)


def _partition_values(rel: str) -> dict[str, Any]:
    """The user's partition columns of a file (eosink's ``eosink_range=`` and ``eosink_batch=`` levels left out)."""
    values: dict[str, Any] = {}
    for part in rel.split("/")[:-1]:
        if "=" in part and not part.startswith((L.BATCH_PREFIX, L.RANGE_PREFIX)):
            column, _, value = part.partition("=")
            values[column] = unescape(value)
    return values


def read_rows(fs: Fs, root: str, fmt: str, *, with_batch: bool = False) -> list[dict[str, Any]]:
    """Every row a listing reader sees (the user's partition columns, as strings, from the directory names);
    ``with_batch`` adds ``_batch_dir``, the batch directory each row is in, relative to ``root``."""
    rows: list[dict[str, Any]] = []
    for path in visible_files(fs, root):
        rel = path[len(root.rstrip("/")) + 1 :]
        extra = _partition_values(rel)
        if with_batch:
            parts = rel.split("/")
            depth = next((n for n, p in enumerate(parts) if p.startswith(L.BATCH_PREFIX)), 0)
            extra["_batch_dir"] = "/".join(parts[: depth + 1])
        rows += [{**row, **extra} for row in read_table(fs, path, fmt).to_pylist()]
    return rows


def committed_batches(config: HdfsConfig, app_id: str | None = None) -> list[tuple[str, BatchRecord]]:
    """(directory, record) of every committed batch of ``app_id`` (None: of every app_id), oldest first, in
    either layout (batch ranges, or a flat target's batch directories)."""
    fs = Fs(config)
    found: list[tuple[str, int, str, BatchRecord]] = []
    for _, batch_id, directory in all_batches(fs, config.path, app_id):
        data = fs.read_bytes(f"{directory}/{L.BUNDLE_FILE}")
        if data is not None:
            record = BatchRecord.decode(data, f"{directory}/{L.BUNDLE_FILE}")
            found.append((record.bundle.batch.app_id, batch_id, directory, record))
    found.sort(key=lambda f: (f[0], f[1]))
    return [(directory, record) for _, _, directory, record in found]


def read_committed(config: HdfsConfig, app_id: str | None = None, *, columns: Sequence[str] | None = None) -> pa.Table:
    """The committed rows as one pyarrow Table: only files the batch records name, partition columns back
    with their types, and, where batches upsert by keys, the newest row per key (newest batch wins)."""
    from eosink.connectors.hdfs._errors import translated

    fs = Fs(config)
    with translated(config, "reading the committed batches"):
        batches = committed_batches(config, app_id)
        tables: list[pa.Table] = []
        keys: set[tuple[str, ...]] = set()
        order = 0
        for directory, record in batches:
            if record.keys:
                keys.add(record.keys)
            for rel in record.files:
                table = _with_partitions(read_table(fs, f"{directory}/{rel}", config.format), rel, record)
                tables.append(with_order(table, order))
                order += table.num_rows
    if len(keys) > 1:
        raise ConfigurationError(
            f"The batch records under {config.target_url} name different upsert keys: {sorted(keys)}.",
            "Read one app_id at a time (read_committed(config, app_id)).",
        )
    if not tables:
        return pa.table({})
    table = pa.concat_tables(tables, promote_options="default")
    table = newest_per_key(table, next(iter(keys))) if keys else table.drop_columns([ORDER])
    if columns is not None:
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise ConfigurationError(
                f"read_committed: no column {missing} in the committed files under {config.target_url}; they have "
                f"{table.column_names}.",
                "Ask for columns the batches were written with.",
            )
        table = table.select(list(columns))
    return table


def _with_partitions(table: pa.Table, rel: str, record: BatchRecord) -> pa.Table:
    """``table`` with its partition columns (from the file's directory names) at their places and types."""
    values = _partition_values(rel)
    if not values:
        return table
    types = dict(record.schema or ())
    for column, value in values.items():
        kind = _arrow_type(types.get(column, "string"))
        try:
            array = pa.array([value] * table.num_rows, pa.string()).cast(kind)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            raise EosinkError(
                f"The partition directory {column}={value!r} does not read back as {kind}.",
                "Restore the batch directory's names; eosink wrote them from the values.",
            ) from None
        table = table.append_column(pa.field(column, kind), array)
    if record.schema is not None:
        order = [n for n, _ in record.schema if n in table.column_names]
        table = table.select(order + [n for n in table.column_names if n not in order])
    return table


def _arrow_type(name: str) -> pa.DataType:
    try:
        return pa.type_for_alias(name)
    except ValueError:
        return pa.string()
