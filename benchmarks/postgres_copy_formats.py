"""Rows/s of the PostgreSQL sink's COPY encodings: the text path, vectorised CSV, and vectorised binary.

For a few representative schemas, N rows are COPYed into a staging-like table (a text column, a
bigint sequence, then the data columns) with each encoder: ``text`` (per value through Python
objects and psycopg's text dumpers, the sink's fallback), ``csv`` (``pyarrow.csv.write_csv``;
measured only, not shipped: it would need care for bytea, nested types and float text), and
``binary`` (:func:`eosink.connectors.postgres._copy.copy_rows`, the sink's default). Each run
is the whole COPY, encoding included; ``encode_only`` is the client's share of it.

Run against the harness server (``eosink services up postgres``)::

    .venv/bin/python benchmarks/postgres_copy_formats.py [--rows 200000] [--repeat 3]

It prints a table and writes ``benchmarks/results/postgres-copy-formats.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.csv as pacsv
from psycopg import sql
from psycopg._copy_base import TextFormatter
from psycopg.adapt import Transformer

from eosink.connectors.postgres._control import SEQ_COLUMN, TXN_COLUMN
from eosink.connectors.postgres._copy import binary_plan, copy_batch, copy_rows
from eosink.connectors.postgres._schema import Column, create_table_sql, reflect
from eosink.services import get_service

RESULTS = Path(__file__).parent / "results" / "postgres-copy-formats.json"
TXN = "eo1:bench:app:1:1:0:attempt"


def _words(rng: np.random.Generator, n: int) -> pa.Array:
    pool = np.array(["alpha", "beta", "gamma, delta", 'say "hi"', "tab\there", "ünïcode ✓", "", "x" * 24])
    picks = pool[rng.integers(0, len(pool), n)]
    suffix = rng.integers(0, 1_000_000, n).astype(str)
    return pa.array(np.char.add(picks.astype(str), suffix), pa.string())


def _nulls(rng: np.random.Generator, arr: pa.Array, share: float = 0.05) -> pa.Array:
    mask = pa.array(rng.random(len(arr)) < share)
    return pa.compute.if_else(mask, pa.nulls(len(arr), arr.type), arr)


def _decimal(unscaled: np.ndarray, precision: int, scale: int) -> pa.Array:
    words = np.stack([unscaled, unscaled >> 63], axis=1).astype("<i8")
    return pa.Array.from_buffers(pa.decimal128(precision, scale), len(unscaled), [None, pa.py_buffer(words)])


def schemas(n: int, seed: int = 7) -> dict[str, pa.RecordBatch]:
    """The benchmark's batches: narrow numeric/text, date-time/decimal/bool, and a wide 20-column one."""
    rng = np.random.default_rng(seed)
    base = 1_600_000_000_000_000
    cents = rng.integers(-10_000_000, 10_000_000, n)
    wide: dict[str, pa.Array] = {}
    for i in range(8):
        wide[f"i{i}"] = _nulls(rng, pa.array(rng.integers(-(2**40), 2**40, n)))
    for i in range(6):
        wide[f"f{i}"] = _nulls(rng, pa.array(rng.normal(0, 1e6, n)))
    for i in range(4):
        wide[f"s{i}"] = _nulls(rng, _words(rng, n))
    for i in range(2):
        wide[f"b{i}"] = _nulls(rng, pa.array(rng.random(n) < 0.5))
    return {
        "ints_floats_text": pa.record_batch(
            {
                "id": pa.array(np.arange(n, dtype=np.int64)),
                "qty": _nulls(rng, pa.array(rng.integers(-1000, 1000, n).astype(np.int32))),
                "price": _nulls(rng, pa.array(rng.normal(100, 30, n))),
                "ratio": _nulls(rng, pa.array(rng.random(n).astype(np.float32))),
                "name": _nulls(rng, _words(rng, n)),
            }
        ),
        "timestamps_decimal_bool": pa.record_batch(
            {
                "at": _nulls(rng, pa.array(base + rng.integers(-(10**15), 10**15, n), pa.timestamp("us", "UTC"))),
                "local": _nulls(rng, pa.array(base + rng.integers(0, 10**13, n), pa.timestamp("us"))),
                "day": _nulls(rng, pa.array(rng.integers(-20_000, 20_000, n).astype(np.int32), pa.date32())),
                "amount": _nulls(rng, _decimal(cents, 12, 2)),
                "flag": _nulls(rng, pa.array(rng.random(n) < 0.5)),
            }
        ),
        "wide_20_columns": pa.record_batch(wide),
    }


def _text(
    conn: psycopg.Connection[Any],
    table: sql.Composable,
    names: sql.Composable,
    batch: pa.RecordBatch,
    columns: list[Column],
) -> int:
    with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN").format(table, names)) as copy:
        return copy_batch(copy, TXN, 0, batch, columns)


def _csv_bytes(batch: pa.RecordBatch) -> pa.Buffer:
    n = batch.num_rows
    table = pa.table(
        [pa.array(np.full(n, TXN)), pa.array(np.arange(n, dtype=np.int64)), *batch.columns],
        names=[TXN_COLUMN, SEQ_COLUMN, *batch.schema.names],
    )
    out = pa.BufferOutputStream()
    pacsv.write_csv(table, out, pacsv.WriteOptions(include_header=False, quoting_style="needed", batch_size=8192))
    return out.getvalue()


def _csv(
    conn: psycopg.Connection[Any],
    table: sql.Composable,
    names: sql.Composable,
    batch: pa.RecordBatch,
    columns: list[Column],
) -> int:
    data = _csv_bytes(batch)
    with conn.cursor().copy(sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(table, names)) as copy:
        copy.write(memoryview(data))
    n: int = batch.num_rows
    return n


def _binary_copy(
    conn: psycopg.Connection[Any],
    table: sql.Composable,
    names: sql.Composable,
    batch: pa.RecordBatch,
    columns: list[Column],
) -> int:
    assert binary_plan(batch, columns, True) is not None, "every benchmark column has a binary encoder"
    return copy_rows(conn, table, TXN, 0, batch, columns)


class _Discard:
    """Stands in for psycopg's Copy (and a connection, for copy_rows): encodes rows as psycopg would, sends nothing."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._format = TextFormatter(Transformer(conn))
        self.info = conn.info

    def write_row(self, row: Any) -> None:
        self._format.write_row(row)

    def write(self, data: Any) -> None:
        pass

    def cursor(self) -> _Discard:
        return self

    @contextlib.contextmanager
    def copy(self, statement: Any) -> Iterator[_Discard]:
        yield self


def _encode_text(conn: psycopg.Connection[Any], batch: pa.RecordBatch, columns: list[Column]) -> None:
    copy_batch(_Discard(conn), TXN, 0, batch, columns)  # type: ignore[arg-type]


def _encode_csv(conn: psycopg.Connection[Any], batch: pa.RecordBatch, columns: list[Column]) -> None:
    _csv_bytes(batch)


def _encode_binary(conn: psycopg.Connection[Any], batch: pa.RecordBatch, columns: list[Column]) -> None:
    copy_rows(_Discard(conn), sql.Identifier("unused"), TXN, 0, batch, columns)  # type: ignore[arg-type]


Encode = Callable[[psycopg.Connection[Any], pa.RecordBatch, list[Column]], None]
Runner = Callable[[psycopg.Connection[Any], sql.Composable, sql.Composable, pa.RecordBatch, list[Column]], int]
FORMATS: dict[str, tuple[Runner, Encode]] = {
    "text": (_text, _encode_text),
    "csv": (_csv, _encode_csv),
    "binary": (_binary_copy, _encode_binary),
}


def _best(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def _measure(
    conn: psycopg.Connection[Any],
    staging: sql.Composable,
    names: sql.Composable,
    batch: pa.RecordBatch,
    columns: list[Column],
    runner: Runner,
    encode: Encode,
    repeat: int,
) -> dict[str, Any]:
    def once() -> None:
        conn.execute(sql.SQL("TRUNCATE {}").format(staging))
        with conn.transaction():
            assert runner(conn, staging, names, batch, columns) == batch.num_rows

    once()  # warm up (and check the row count)
    total = _best(once, repeat)
    encode_only = _best(lambda: encode(conn, batch, columns), repeat)
    return {
        "seconds": round(total, 4),
        "rows_per_s": round(batch.num_rows / total),
        "encode_only_rows_per_s": round(batch.num_rows / encode_only),
    }


def run(rows: int, repeat: int) -> dict[str, Any]:
    url = get_service("postgres").endpoint().url
    schema = f"bench_copy_{uuid.uuid4().hex[:8]}"
    load_before = os.getloadavg()[0]
    results: dict[str, Any] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        server = conn.execute("SHOW server_version").fetchone()
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        try:
            for name, batch in schemas(rows).items():
                conn.execute(create_table_sql(schema, name, batch.schema))
                target = reflect(conn, schema, name)
                assert target is not None
                staging = sql.Identifier(schema, f"{name}_staging")
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} AS SELECT NULL::text AS {}, NULL::bigint AS {}, x.* FROM {} AS x WITH NO DATA"
                    ).format(staging, sql.Identifier(TXN_COLUMN), sql.Identifier(SEQ_COLUMN), target.ident)
                )
                names = sql.SQL(", ").join(sql.Identifier(n) for n in (TXN_COLUMN, SEQ_COLUMN, *batch.schema.names))
                columns = list(target.columns)
                per_format = {
                    fmt: _measure(conn, staging, names, batch, columns, runner, encode, repeat)
                    for fmt, (runner, encode) in FORMATS.items()
                }
                text_rate = per_format["text"]["rows_per_s"]
                for fmt in ("csv", "binary"):
                    per_format[fmt]["speedup_vs_text"] = round(per_format[fmt]["rows_per_s"] / text_rate, 2)
                results[name] = {"columns": len(columns), "formats": per_format}
                conn.execute(sql.SQL("DROP TABLE {}, {}").format(staging, target.ident))
        finally:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "rows": rows,
        "repeat": repeat,
        "timing": "best of `repeat` runs; each run is one COPY of all rows in one transaction, encoding included",
        "machine": {
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "load_average_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "note": "a shared machine: the server and other work run on the same cores as the client",
            "python": sys.version.split()[0],
        },
        "versions": {
            "postgresql": server[0] if server else None,
            "psycopg": f"{psycopg.__version__} ({psycopg.pq.__impl__})",
            "pyarrow": pa.__version__,
            "numpy": np.__version__,
        },
        "schemas": results,
        "shipped": "binary by default; text-like columns without an encoder send the text path's values; any other "
        "column without an encoder sends the batch through the text path (connectors/postgres/_copy.py)",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args()
    report = run(args.rows, args.repeat)
    print(f"{'schema':<26}{'format':<8}{'rows/s':>12}{'encode rows/s':>15}{'x text':>8}")
    for name, found in report["schemas"].items():
        for fmt, r in found["formats"].items():
            ratio = r.get("speedup_vs_text", 1.0)
            print(f"{name:<26}{fmt:<8}{r['rows_per_s']:>12,}{r['encode_only_rows_per_s']:>15,}{ratio:>8.2f}")
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
