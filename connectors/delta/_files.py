"""A participant's data files: Parquet written from Arrow straight into the table's directory.

Files are named for the attempt that writes them, so two attempts never write the same name and a
crashed attempt's files can be told from a committed one's::

    <partition dirs>/eosink-<app key>-<batch>-p<participant>-<attempt>-<n>.parquet

A file is invisible to every Delta reader until a commit's add action names it. Each closed file
becomes an add action: its path relative to the table, size, partition values and statistics.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from eosink.connectors.delta._stats import FileStats
from eosink.stores.encoding import ParquetStream
from eosink.stores.naming import digest
from eosink.stores.partitions import DEFAULT_PARTITION, groups

if TYPE_CHECKING:
    from eosink.connectors.delta._store import Store

__all__ = ["AddFile", "DataFiles", "app_key", "file_prefix"]

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def app_key(app_id: str) -> str:
    """A short, path-safe name for an app_id (any string) in file names."""
    return digest(app_id)


def file_prefix(app_id: str, batch_id: int, participant: int, attempt: str) -> str:
    """The first part of every data file name of one attempt (see the module docstring)."""
    safe = _UNSAFE.sub("_", attempt)[-40:] or "a"  # the tail: an attempt id ends in its UUIDv7
    return f"eosink-{app_key(app_id)}-{batch_id:020d}-p{participant:05d}-{safe}"


@dataclass(frozen=True)
class AddFile:
    """A written file, as its add action needs it (JSON-able for committables)."""

    path: str
    size: int
    partition_values: dict[str, str | None]
    modification_time: int
    stats: str

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "partition_values": dict(self.partition_values),
            "modification_time": self.modification_time,
            "stats": self.stats,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AddFile:
        return cls(
            str(data["path"]),
            int(data["size"]),
            {str(k): (None if v is None else str(v)) for k, v in dict(data.get("partition_values") or {}).items()},
            int(data["modification_time"]),
            str(data["stats"]),
        )

    def action(self) -> Any:
        from deltalake.transaction import AddAction

        return AddAction(self.path, self.size, self.partition_values, self.modification_time, True, self.stats)


class _Open:
    """One data file being written."""

    def __init__(self, store: Store, path: str, schema: pa.Schema, row_group_rows: int) -> None:
        self.path = path
        self.stream = store.writer(path)
        self.stats = FileStats(schema)
        self.parquet = ParquetStream(
            pa.PythonFile(self.stream, mode="w"), schema, row_group_rows=row_group_rows, on_rows=self.stats.add
        )

    @property
    def rows(self) -> int:
        return self.parquet.rows

    def add(self, data: pa.Table) -> None:
        self.parquet.write(data)

    def close(self, partition_values: dict[str, str | None]) -> AddFile:
        self.parquet.close()
        size = self.stream.tell()
        self.stream.finish()
        return AddFile(self.path, size, partition_values, int(time.time() * 1000), self.stats.to_json())


class DataFiles:
    """One attempt's files: one open file per partition, a new one past ``file_rows`` rows."""

    def __init__(
        self,
        store: Store,
        prefix: str,
        partition_by: tuple[str, ...],
        row_group_rows: int,
        file_rows: int,
        on_open: Callable[[list[str]], None] = lambda paths: None,
    ) -> None:
        self.store = store
        self.on_open = on_open
        self.prefix = prefix
        self.partition_by = partition_by
        self.row_group_rows = row_group_rows
        self.file_rows = file_rows
        self.open: dict[tuple[str | None, ...], _Open] = {}
        self.done: list[AddFile] = []
        self.counter = 0

    def add(self, data: pa.RecordBatch) -> None:
        table = pa.Table.from_batches([data])
        if not self.partition_by:
            self._write((), table)
            return
        for values, part in _split(table, self.partition_by):
            self._write(values, part)

    def _write(self, values: tuple[str | None, ...], data: pa.Table) -> None:
        current = self.open.get(values)
        if current is not None and current.rows >= self.file_rows:
            self.done.append(current.close(self._partition_values(values)))
            current = None
        if current is None:
            folder = "".join(f"{_escape(c)}={_escape(v)}/" for c, v in zip(self.partition_by, values, strict=True))
            path = f"{folder}{self.prefix}-{self.counter:03d}.parquet"
            self.counter += 1
            self.on_open([*(f.path for f in self.done), *(o.path for o in self.open.values()), path])
            current = self.open[values] = _Open(self.store, path, data.schema, self.row_group_rows)
        current.add(data)

    def _partition_values(self, values: tuple[str | None, ...]) -> dict[str, str | None]:
        return dict(zip(self.partition_by, values, strict=True))

    def close(self) -> list[AddFile]:
        """Every file closed (written through to the store); their add actions."""
        for values, current in self.open.items():
            self.done.append(current.close(self._partition_values(values)))
        self.open.clear()
        return list(self.done)

    def discard(self) -> None:
        """Forget open files after an error (the sweep at the app's next fence removes the attempt's files)."""
        self.open.clear()


def _escape(value: str | None) -> str:
    return DEFAULT_PARTITION if value is None else urllib.parse.quote(value, safe="")


def _split(table: pa.Table, columns: tuple[str, ...]) -> list[tuple[tuple[str | None, ...], pa.Table]]:
    """The table's rows per distinct partition value (as Delta writes them: strings, None for null),
    with the partition columns left out."""
    as_text = pa.table({c: pc.cast(table.column(c), pa.string()) for c in columns})
    rest = table.drop_columns(list(columns))
    return [(values, rest if rows is None else rest.take(rows)) for values, rows in groups(as_text, columns)]
