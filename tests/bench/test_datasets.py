"""The benchmark's generated data: deterministic, about 100 bytes a row, cached on disk."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from eosink.bench.datasets import COLUMNS, SCHEMA, ensure_dataset, generate, row_bytes


def test_same_seed_same_rows_other_seed_other_rows() -> None:
    a = pa.concat_tables(generate(3000, seed=7, chunk=1000))
    b = pa.concat_tables(generate(3000, seed=7, chunk=1000))
    c = pa.concat_tables(generate(3000, seed=8, chunk=1000))
    assert a.equals(b)
    assert not a.equals(c)
    assert a.schema == SCHEMA
    assert [f.name for f in SCHEMA] == [name for name, _ in COLUMNS]


def test_ids_run_from_start_and_rows_are_about_100_bytes() -> None:
    table = pa.concat_tables(generate(5000, seed=1, start=100, chunk=1500))
    assert table.column("id").to_pylist() == list(range(100, 5100))
    assert table.column("amount").null_count == 0
    per_row = row_bytes(table) / table.num_rows
    assert 85 <= per_row <= 115, per_row


def test_dataset_is_written_once_and_matches_its_files(tmp_path: Path) -> None:
    ds = ensure_dataset(tmp_path, 12_345, seed=3, files=3)
    files = sorted(ds.parquet.glob("*.parquet"))
    assert len(files) == 3
    table = pa.concat_tables(pq.read_table(f) for f in files)
    assert table.num_rows == 12_345
    assert sorted(table.column("id").to_pylist()) == list(range(12_345))
    assert ds.csv.stat().st_size == ds.bytes
    assert len(ds.csv.read_bytes().splitlines()) == 12_345
    stamp = files[0].stat().st_mtime_ns
    again = ensure_dataset(tmp_path, 12_345, seed=3, files=3)
    assert again == ds
    assert files[0].stat().st_mtime_ns == stamp  # cached, not regenerated
