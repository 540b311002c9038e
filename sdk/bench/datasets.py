"""The benchmark's data: about 100-byte rows (bigint, text, numeric, timestamp, text) from a fixed seed.

The same rows reach every run: Spark reads them from Parquet files, ``psql \\copy`` from a CSV
file written from the same Arrow table. Generation is vectorised (numpy + Arrow) and cached on
disk by (rows, seed, layout version), so a second ``make bench`` starts at once.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

__all__ = ["COLUMNS", "DEFAULT_SEED", "SCHEMA", "Dataset", "ensure_dataset", "generate", "row_bytes"]

DEFAULT_SEED = 20240611
LAYOUT = 1
"""Bumped when the generated data changes, so cached files of an older layout are not reused."""

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=False),
        pa.field("name", pa.string()),
        pa.field("amount", pa.decimal128(12, 2)),
        pa.field("at", pa.timestamp("us", "UTC")),
        pa.field("note", pa.string()),
    ]
)
COLUMNS: tuple[tuple[str, str], ...] = (
    ("id", "bigint"),
    ("name", "text"),
    ("amount", "numeric(12,2)"),
    ("at", "timestamptz"),
    ("note", "text"),
)
"""The target table's columns, in the SQL types the Arrow schema maps to."""

_EPOCH_US = int(datetime(2026, 1, 1, tzinfo=timezone.utc).timestamp() * 1_000_000)
_WORDS = [
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliet",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
    "quebec",
    "romeo",
    "sierra",
    "tango",
    "uniform",
    "victor",
    "whiskey",
    "xray",
    "yankee",
    "zulu",
]


def _pools(rng: np.random.Generator) -> tuple[pa.Array, pa.Array]:
    names = pa.array([f"customer-{i:06d}" for i in range(10_000)])
    notes = []
    for _ in range(4096):
        words = rng.choice(len(_WORDS), size=int(rng.integers(5, 9)))
        notes.append(" ".join(_WORDS[w] for w in words)[:48])
    return names, pa.array(notes)


def generate(rows: int, seed: int = DEFAULT_SEED, start: int = 0, chunk: int = 500_000) -> list[pa.Table]:
    """``rows`` rows from ``seed`` as tables of at most ``chunk`` rows; the same arguments give the same rows.

    ``id`` runs from ``start``; ``at`` advances one millisecond per row from 2026-01-01 UTC.
    """
    rng = np.random.default_rng(seed)
    names, notes = _pools(rng)
    tables = []
    for lo in range(start, start + rows, chunk):
        n = min(chunk, start + rows - lo)
        ids = np.arange(lo, lo + n, dtype=np.int64)
        cents = rng.integers(0, 10_000_000, size=n, dtype=np.int64)
        unscaled = np.zeros((n, 2), dtype="<i8")  # decimal128: 16 bytes little-endian, non-negative here
        unscaled[:, 0] = cents
        amount = pa.Array.from_buffers(pa.decimal128(12, 2), n, [None, pa.py_buffer(unscaled)])
        at = pa.array(_EPOCH_US + ids * 1000, pa.timestamp("us", "UTC"))
        tables.append(
            pa.Table.from_arrays(
                [
                    pa.array(ids),
                    names.take(pa.array(rng.integers(0, len(names), size=n))),
                    amount,
                    at,
                    notes.take(pa.array(rng.integers(0, len(notes), size=n))),
                ],
                schema=SCHEMA,
            )
        )
    return tables


def row_bytes(table: pa.Table) -> int:
    """The size of ``table`` as CSV text (what ``COPY`` reads): the figure MB/s is computed from."""
    sink = pa.BufferOutputStream()
    pacsv.write_csv(table, sink, pacsv.WriteOptions(include_header=False))
    return int(sink.getvalue().size)


@dataclass(frozen=True)
class Dataset:
    """A generated data set on disk: Parquet files for Spark, one CSV file for ``psql \\copy``."""

    rows: int
    seed: int
    root: Path
    bytes: int
    """The CSV size: the data's size as text, the base of every MB/s figure."""

    @property
    def parquet(self) -> Path:
        return self.root / "parquet"

    @property
    def csv(self) -> Path:
        return self.root / "data.csv"

    @property
    def mb(self) -> float:
        return self.bytes / 1e6


def ensure_dataset(cache: Path, rows: int, seed: int = DEFAULT_SEED, files: int = 4) -> Dataset:
    """The data set of ``rows`` rows from ``seed`` under ``cache``, generated once."""
    root = cache / f"rows-{rows}-seed-{seed}-v{LAYOUT}"
    meta = root / "dataset.json"
    if meta.exists():
        info = json.loads(meta.read_text())
        return Dataset(rows, seed, root, int(info["bytes"]))
    shutil.rmtree(root, ignore_errors=True)
    (root / "parquet").mkdir(parents=True)
    per_file = -(-rows // files)
    total = 0
    with open(root / "data.csv", "wb") as csv:
        for f, lo in enumerate(range(0, rows, per_file)):
            n = min(per_file, rows - lo)
            part = pa.concat_tables(generate(n, seed + f, start=lo))
            pq.write_table(part, root / "parquet" / f"part-{f:04d}.parquet", row_group_size=100_000)
            sink = pa.BufferOutputStream()
            pacsv.write_csv(part, sink, pacsv.WriteOptions(include_header=False))
            buf = sink.getvalue()
            csv.write(buf.to_pybytes())
            total += buf.size
    meta.write_text(json.dumps({"rows": rows, "seed": seed, "bytes": total, "layout": LAYOUT}))
    return Dataset(rows, seed, root, total)
