"""The binary COPY path stores exactly what the text path stores, and rejects what it rejects.

Each case COPYs one batch into two staging-like tables, once with :func:`copy_rows` (binary
when every column has an encoder) and once with the text path (:func:`copy_batch`), and compares
the tables' contents as the server prints them.
"""

from __future__ import annotations

import datetime
import decimal
import math
import uuid
import zoneinfo
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import numpy as np
import psycopg
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from psycopg import sql

from eosink.connectors.postgres import PostgresConfig, PostgresSink, _copy
from eosink.connectors.postgres._control import SEQ_COLUMN, TXN_COLUMN
from eosink.connectors.postgres._copy import binary_plan, copy_batch, copy_rows
from eosink.connectors.postgres._schema import Column, reflect
from eosink.connectors.postgres.testing import PostgresHarness
from eosink.contract import BatchRef, TaskRef
from eosink.errors import BadRecordError

HARNESS = PostgresHarness()
TXN = "eo1:test:app:1:1:0:a"
Db = tuple[psycopg.Connection[Any], str]
SEQ = sql.Identifier(SEQ_COLUMN)


@pytest.fixture(scope="module")
def db() -> Iterator[Db]:
    """An autocommit connection and a fresh schema (with an enum type), dropped afterwards."""
    schema = f"copyfmt_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(HARNESS.endpoint().url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        conn.execute(sql.SQL("CREATE TYPE {} AS ENUM ('ok', 'sad', 'ünï')").format(sql.Identifier(schema, "mood")))
        conn.execute(sql.SQL("CREATE DOMAIN {} AS integer CHECK (VALUE > 0)").format(sql.Identifier(schema, "pos")))
        conn.execute(
            sql.SQL("CREATE DOMAIN {} AS varchar(4) CHECK (VALUE <> 'no')").format(sql.Identifier(schema, "code"))
        )
        try:
            yield conn, schema
        finally:
            conn.execute(sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema)))


def _table(db: Db, types: dict[str, str]) -> tuple[sql.Identifier, list[Column]]:
    conn, schema = db
    name = f"t_{uuid.uuid4().hex[:10]}"
    cols = [
        sql.SQL("{} {}").format(
            sql.Identifier(n),
            sql.SQL(
                t.replace("MOOD", f'"{schema}".mood')
                .replace("POS", f'"{schema}".pos')
                .replace("CODE", f'"{schema}".code')
            ),
        )
        for n, t in types.items()
    ]
    ident = sql.Identifier(schema, name)
    conn.execute(
        sql.SQL("CREATE TABLE {} ({} text, {} bigint, {})").format(
            ident, sql.Identifier(TXN_COLUMN), SEQ, sql.SQL(", ").join(cols)
        )
    )
    target = reflect(conn, schema, name)
    assert target is not None
    return ident, [c for c in target.columns if c.name in types]


def _names(batch: pa.RecordBatch) -> sql.Composed:
    return sql.SQL(", ").join(sql.Identifier(n) for n in (TXN_COLUMN, SEQ_COLUMN, *batch.schema.names))


def _contents(conn: psycopg.Connection[Any], ident: sql.Identifier) -> list[str]:
    rows = conn.execute(sql.SQL("SELECT x::text FROM {} AS x ORDER BY {}").format(ident, SEQ)).fetchall()
    return [str(r[0]) for r in rows]


def _fast(
    db: Db, batch: pa.RecordBatch, types: dict[str, str], first_seq: int = 0
) -> tuple[sql.Identifier, list[Column]]:
    conn, _ = db
    ident, columns = _table(db, types)
    with conn.transaction():
        assert copy_rows(conn, ident, TXN, first_seq, batch, columns) == batch.num_rows
    return ident, columns


def _old(db: Db, batch: pa.RecordBatch, types: dict[str, str], first_seq: int = 0) -> sql.Identifier:
    conn, _ = db
    ident, columns = _table(db, types)
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(ident, _names(batch))
    with conn.transaction(), conn.cursor().copy(statement) as copy:
        assert copy_batch(copy, TXN, first_seq, batch, columns) == batch.num_rows
    return ident


def _same(db: Db, batch: pa.RecordBatch, types: dict[str, str], *, binary: bool) -> list[str]:
    """COPY ``batch`` both ways; assert the path taken and equal contents; the contents."""
    fast, columns = _fast(db, batch, types)
    assert (binary_plan(batch, columns, True) is not None) is binary
    got = _contents(db[0], fast)
    assert got == _contents(db[0], _old(db, batch, types))
    assert len(got) == batch.num_rows
    return got


def _values(db: Db, batch: pa.RecordBatch, types: dict[str, str]) -> list[tuple[Any, ...]]:
    ident, _ = _fast(db, batch, types)
    names = sql.SQL(", ").join(sql.Identifier(n) for n in batch.schema.names)
    return db[0].execute(sql.SQL("SELECT {} FROM {} ORDER BY {}").format(names, ident, SEQ)).fetchall()


UTC = datetime.timezone.utc
NY = zoneinfo.ZoneInfo("America/New_York")

# (Arrow array, PostgreSQL type, binary path expected)
PAIRS: list[tuple[str, pa.Array, str, bool]] = [
    ("int8->smallint", pa.array([-128, 0, 127, None], pa.int8()), "smallint", True),
    ("int16->smallint", pa.array([-(2**15), 2**15 - 1, None], pa.int16()), "smallint", True),
    ("int32->integer", pa.array([-(2**31), 2**31 - 1, None, 0], pa.int32()), "integer", True),
    ("int64->bigint", pa.array([-(2**63), 2**63 - 1, None, 5], pa.int64()), "bigint", True),
    ("int64->integer in range", pa.array([-(2**31), 2**31 - 1, None], pa.int64()), "integer", True),
    ("uint8->smallint", pa.array([0, 255, None], pa.uint8()), "smallint", True),
    ("uint16->integer", pa.array([0, 65535, None], pa.uint16()), "integer", True),
    ("uint32->bigint", pa.array([0, 2**32 - 1, None], pa.uint32()), "bigint", True),
    ("uint64->numeric big", pa.array([0, 2**64 - 1, None], pa.uint64()), "numeric(20,0)", False),
    ("uint64->numeric", pa.array([0, 2**63 - 1, None], pa.uint64()), "numeric(20,0)", True),
    ("int64->numeric", pa.array([-(2**63), 2**63 - 1, 0, -1, 10_000, None], pa.int64()), "numeric", True),
    ("int64->real", pa.array([2**24 + 1, -(2**62) - 3, None], pa.int64()), "real", True),
    ("int64->double", pa.array([2**53 + 1, -(2**63), None], pa.int64()), "double precision", True),
    ("float16->real", pa.array(np.array([0.5, -1.25, 65504], np.float16)), "real", True),
    ("float32->real", pa.array([0.1, -3.4e38, 1e-45, None], pa.float32()), "real", True),
    ("float32->double", pa.array([0.1, 1.17e-38, None], pa.float32()), "double precision", True),
    ("float64->double", pa.array([0.1, 1e308, 5e-324, -0.0, None]), "double precision", True),
    ("float64->real", pa.array([0.1, 1e30, None]), "real", False),
    ("float64->numeric", pa.array([0.1, -2.5, None]), "numeric", False),
    ("bool", pa.array([True, False, None]), "boolean", True),
    ("string->text", pa.array(["a", "", None]), "text", True),
    ("large_string->text", pa.array(["a", "", None], pa.large_string()), "text", True),
    ("string_view->text", pa.array(["a", "ü" * 40, None], pa.string_view()), "text", True),
    ("string->varchar", pa.array(["abc", "", None]), "varchar(5)", True),
    ("string->char", pa.array(["ab", "", None]), "char(4)", True),
    ("string->json", pa.array(['{"b": 1, "a": [1, 2.50]}', "null", None]), "json", True),
    ("string->jsonb", pa.array(['{"b": 1, "a": [1, 2.50]}', '"x"', None]), "jsonb", True),
    ("string->enum", pa.array(["ok", "ünï", None]), "MOOD", True),
    (
        "string->uuid",
        pa.array([str(uuid.UUID(int=2**128 - 1)), "A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", None]),
        "uuid",
        True,
    ),
    ("string->uuid braces", pa.array(["{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", None]), "uuid", False),
    ("string->integer", pa.array(["1", " 2 ", None]), "integer", False),
    ("string->timestamptz", pa.array(["2020-01-01 00:00+02", None]), "timestamptz", False),
    ("binary->bytea", pa.array([b"\x00\xff\\", b"", None]), "bytea", True),
    ("large_binary->bytea", pa.array([b"\x00\x01", None], pa.large_binary()), "bytea", True),
    ("fixed_binary->bytea", pa.array([b"\x00\x01\x02", None, b"abc"], pa.binary(3)), "bytea", True),
    (
        "date32->date",
        pa.array([datetime.date(1, 1, 2), datetime.date(1969, 12, 31), datetime.date(9999, 12, 30), None]),
        "date",
        True,
    ),
    ("date32->timestamp", pa.array([datetime.date(2020, 2, 29), None]), "timestamp", False),
    ("date64->date", pa.array([datetime.date(2020, 2, 29), None], pa.date64()), "date", False),
    ("null->integer", pa.nulls(3), "integer", True),
    ("all nulls->uuid", pa.array([None, None], pa.string()), "uuid", True),
    ("struct->jsonb", pa.array([{"a": 1, "b": "x\ty"}, None, {"a": None, "b": "ü"}]), "jsonb", True),
    ("map->json", pa.array([[("k", 1)], None, []], pa.map_(pa.string(), pa.int64())), "json", True),
    ("list->jsonb", pa.array([[1, 2], None, []], pa.list_(pa.int64())), "jsonb", True),
    ("list->int[]", pa.array([[1, None, 2], None, []], pa.list_(pa.int32())), "integer[]", False),
    (
        "decimal(12,2)",
        pa.array([decimal.Decimal("1.50"), decimal.Decimal("-9999999999.99"), None], pa.decimal128(12, 2)),
        "numeric(12,2)",
        True,
    ),
    (
        "decimal(18,0) extremes",
        pa.array(
            [decimal.Decimal(10**18 - 1), decimal.Decimal(-(10**18) + 1), decimal.Decimal(0)], pa.decimal128(18, 0)
        ),
        "numeric",
        True,
    ),
    (
        "decimal(18,18)",
        pa.array(
            [decimal.Decimal("0.000000000000000001"), decimal.Decimal("-0.999999999999999999"), None],
            pa.decimal128(18, 18),
        ),
        "numeric",
        True,
    ),
    (
        "decimal(7,3)",
        pa.array(
            [decimal.Decimal("1234.567"), decimal.Decimal("-0.001"), decimal.Decimal("0.000")], pa.decimal128(7, 3)
        ),
        "numeric",
        True,
    ),
    (
        "decimal(7,3)->numeric(6,1) rounds",
        pa.array([decimal.Decimal("1234.567"), decimal.Decimal("-0.050")], pa.decimal128(7, 3)),
        "numeric(6,1)",
        True,
    ),
    (
        "decimal(38,10)",
        pa.array([decimal.Decimal("-12345678901234567890.0123456789"), None], pa.decimal128(38, 10)),
        "numeric",
        False,
    ),
    ("decimal64(10,4)", pa.array([decimal.Decimal("-123456.7890"), None], pa.decimal64(10, 4)), "numeric", True),
    ("decimal->double", pa.array([decimal.Decimal("1.5")], pa.decimal128(5, 1)), "double precision", False),
    ("ts(s)->timestamp", pa.array([-(2**33), 0, None], pa.timestamp("s")), "timestamp", True),
    ("ts(ms)->timestamp", pa.array([-1, 1, None], pa.timestamp("ms")), "timestamp", True),
    (
        "ts(us)->timestamp",
        pa.array([-1, -62_135_596_800_000_000 + 86_400_000_000, None], pa.timestamp("us")),
        "timestamp",
        True,
    ),
    ("ts(ns)->timestamp cut", pa.array([-1, -1_999, 1_999, None], pa.timestamp("ns")), "timestamp", True),
    ("ts(us, UTC)->timestamptz", pa.array([-(10**15), 1, None], pa.timestamp("us", "UTC")), "timestamptz", True),
    (
        "ts(ns, NY)->timestamptz",
        pa.array([-1_500, 1_699_999_999_999_999_999, None], pa.timestamp("ns", "America/New_York")),
        "timestamptz",
        True,
    ),
    ("ts(us, +05:30)->timestamptz", pa.array([0, None], pa.timestamp("us", "+05:30")), "timestamptz", True),
    ("ts naive->timestamptz", pa.array([0, None], pa.timestamp("us")), "timestamptz", False),
    ("ts(UTC)->timestamp", pa.array([0, None], pa.timestamp("us", "UTC")), "timestamp", False),
    ("time->time", pa.array([datetime.time(1, 2, 3, 4), None]), "time", False),
    ("duration->interval", pa.array([datetime.timedelta(days=-1, seconds=5), None]), "interval", False),
]


@pytest.mark.parametrize(("arr", "pg_type", "binary"), [p[1:] for p in PAIRS], ids=[p[0] for p in PAIRS])
def test_pair_stores_what_the_text_path_stores(db: Db, arr: pa.Array, pg_type: str, binary: bool) -> None:
    _same(db, pa.record_batch({"v": arr}), {"v": pg_type}, binary=binary)


def test_a_fallback_column_sends_the_whole_batch_through_the_text_path(db: Db) -> None:
    batch = pa.record_batch({"a": pa.array([1, 2]), "l": pa.array([[1], [2, 3]], pa.list_(pa.int64()))})
    got = _same(db, batch, {"a": "bigint", "l": "bigint[]"}, binary=False)
    assert got[1].endswith(',2,"{2,3}")')


def test_a_nested_column_into_json_keeps_the_binary_path(db: Db) -> None:
    batch = pa.record_batch({"a": pa.array([1, None]), "j": pa.array([{"k": [1, 2]}, {"k": None}])})
    got = _same(db, batch, {"a": "bigint", "j": "jsonb"}, binary=True)
    assert got == [f'({TXN},0,1,"{{""k"": [1, 2]}}")', f'({TXN},1,,"{{""k"": null}}")']


TRICKY = [
    "",
    "\t",
    "a\tb",
    "line\nbreak\r\n",
    "back\\slash",
    "\\N",
    '"quoted"',
    "'single'",
    "a,b",
    "ünïcødé ✓ 𝄞",
    " ",
    "NULL",
]


def test_strings_with_escapes_and_empty_vs_null(db: Db) -> None:
    arr = pa.array([*TRICKY, None])
    _same(db, pa.record_batch({"v": arr}), {"v": "text"}, binary=True)
    got = [r[0] for r in _values(db, pa.record_batch({"v": arr}), {"v": "text"})]
    assert got == [*TRICKY, None]


def test_nan_and_infinities(db: Db) -> None:
    arr = pa.array([math.nan, math.inf, -math.inf, -0.0, None])
    _same(db, pa.record_batch({"v": arr}), {"v": "double precision"}, binary=True)
    got = [
        r[0]
        for r in _values(db, pa.record_batch({"v": arr, "r": arr.cast(pa.float32())}), {"v": "float8", "r": "float4"})
    ]
    assert math.isnan(got[0]) and got[1:4] == [math.inf, -math.inf, 0.0] and math.copysign(1, got[3]) == -1


def test_decimals_negative_and_huge(db: Db) -> None:
    values = [
        decimal.Decimal("-999999999999.999999"),
        decimal.Decimal("999999999999.999999"),
        decimal.Decimal("-0.000001"),
    ]
    batch = pa.record_batch({"v": pa.array(values, pa.decimal128(18, 6))})
    _same(db, batch, {"v": "numeric"}, binary=True)
    assert [r[0] for r in _values(db, batch, {"v": "numeric"})] == values
    assert str(_values(db, batch, {"v": "numeric"})[2][0]) == "-0.000001"


def test_timestamps_before_1970_time_zones_and_nanoseconds(db: Db) -> None:
    ns = pa.array([-1, -1_000, -1_001, 86_399_999_999_999, 1_000_000_999], pa.timestamp("ns"))
    aware = pa.array([-1_001, 0], pa.timestamp("ns", "Asia/Kolkata"))
    got = _values(db, pa.record_batch({"v": ns}), {"v": "timestamp"})
    epoch = datetime.datetime(1970, 1, 1)
    # An unsafe cast cuts towards zero: -1 ns and -1000 ns are the epoch and -1 us; -1001 ns is -1 us.
    us = datetime.timedelta(microseconds=1)
    assert [r[0] for r in got] == [
        epoch,
        epoch - us,
        epoch - us,
        epoch + datetime.timedelta(seconds=86_399, microseconds=999_999),
        epoch + datetime.timedelta(seconds=1),
    ]
    got = _values(db, pa.record_batch({"v": aware}), {"v": "timestamptz"})
    assert [r[0] for r in got] == [
        datetime.datetime(1969, 12, 31, 23, 59, 59, 999_999, UTC),
        datetime.datetime(1970, 1, 1, tzinfo=UTC),
    ]
    _same(db, pa.record_batch({"v": aware}), {"v": "timestamptz"}, binary=True)


def test_offsets_and_chunks(db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_copy, "_CHUNK_BYTES", 200)
    n = 1_000
    batch = pa.record_batch(
        {
            "i": pa.array([None if i % 7 == 0 else i for i in range(n)], pa.int32()),
            "s": pa.array([None if i % 5 == 0 else "x" * (i % 13) for i in range(n)]),
            "d": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(9, 2)),
            "b": pa.array([bytes([i % 256]) * (i % 3) for i in range(n)]),
        }
    ).slice(17, 900)
    types = {"i": "integer", "s": "text", "d": "numeric", "b": "bytea"}
    fast, _ = _fast(db, batch, types, first_seq=40)
    assert _contents(db[0], fast) == _contents(db[0], _old(db, batch, types, first_seq=40))
    seqs = (
        db[0]
        .execute(sql.SQL("SELECT min({s}), max({s}), count(DISTINCT {s}) FROM {t}").format(s=SEQ, t=fast))
        .fetchone()
    )
    assert seqs == (40, 939, 900)


@pytest.mark.parametrize(
    ("arr", "pg_type", "binary"),
    [
        (pa.array(["abcd"]), "varchar(3)", True),
        (pa.array(["{bad"]), "json", True),
        (pa.array(["{bad"]), "jsonb", True),
        (pa.array(["happy"]), "MOOD", True),
        (pa.array(["a\x00b"]), "text", True),
        (pa.array(["zzzzzzzz-9c0b-4ef8-bb6d-6bb9bd380a11"]), "uuid", False),
        (pa.array([2**31]), "integer", False),
        (pa.array([-(2**15) - 1], pa.int32()), "smallint", False),
        (pa.array([2**63], pa.uint64()), "bigint", False),
        (pa.array([decimal.Decimal("12345.67")], pa.decimal128(10, 2)), "numeric(6,2)", True),
        (pa.array([1e300]), "real", False),
        (pa.array([None], pa.int64()), "bigint NOT NULL", True),
        (pa.array([0]), "POS", True),
        (pa.array(["no"]), "CODE", True),
        (pa.array(["abcde"]), "CODE", True),
    ],
    ids=[
        "varchar",
        "json",
        "jsonb",
        "enum",
        "nul",
        "uuid",
        "int4",
        "int2",
        "uint64",
        "numeric-typmod",
        "real",
        "notnull",
        "domain-check",
        "domain-text-check",
        "domain-length",
    ],
)
def test_the_server_still_rejects_bad_values(db: Db, arr: pa.Array, pg_type: str, binary: bool) -> None:
    conn, _ = db
    batch = pa.record_batch({"v": arr})
    ident, columns = _table(db, {"v": pg_type})
    assert (binary_plan(batch, columns, True) is not None) is binary
    with pytest.raises((psycopg.DataError, psycopg.IntegrityError)) as fast, conn.transaction():
        copy_rows(conn, ident, TXN, 0, batch, columns)
    assert _contents(conn, ident) == []
    statement = sql.SQL("COPY {} ({}) FROM STDIN").format(ident, _names(batch))
    with pytest.raises(psycopg.Error) as old, conn.transaction(), conn.cursor().copy(statement) as copy:
        copy_batch(copy, TXN, 0, batch, columns)
    # The same refusal: the sink maps DataError and IntegrityError to BadRecordError. (The text path
    # refuses a NUL character in psycopg, before the server sees it: no SQLSTATE there.)
    assert isinstance(old.value, psycopg.DataError) is isinstance(fast.value, psycopg.DataError)
    assert old.value.sqlstate in (None, fast.value.sqlstate)


def test_the_sink_reports_a_value_refused_on_the_binary_path_as_a_bad_record(db: Db) -> None:
    conn, _ = db
    table = f"sinkbad_{uuid.uuid4().hex[:10]}"
    conn.execute(sql.SQL("CREATE TABLE {} (id bigint, code varchar(2))").format(sql.Identifier(table)))
    sink = PostgresSink(PostgresConfig(HARNESS.endpoint().url, table=table, control_schema=f"{table}_ctl"))
    try:
        txn = sink.begin(TaskRef(BatchRef("app_copyfmt", 0), 1, 0, uuid.uuid4().hex[:12], None, True))
        batch = pa.record_batch({"id": pa.array([1, 2]), "code": pa.array(["ok", "too long"])})
        with pytest.raises(BadRecordError, match="too long"):
            sink.write(txn, batch)
    finally:
        sink.close()
        HARNESS.drop(f"{table}_ctl", [sql.Identifier(table)])


def test_text_only_connection_encoding_keeps_the_text_path(db: Db) -> None:
    batch = pa.record_batch({"v": pa.array(["é"]), "n": pa.array([1])})
    _, columns = _table(db, {"v": "text", "n": "bigint"})
    assert binary_plan(batch, columns, False) is None
    assert binary_plan(batch.select(["n"]), [c for c in columns if c.name == "n"], False) is not None


ROWS = st.lists(
    st.tuples(
        st.none() | st.integers(-(2**63), 2**63 - 1),
        st.none() | st.integers(-(2**31), 2**31 - 1),
        st.none() | st.floats(allow_nan=True, allow_infinity=True),
        st.none() | st.floats(width=32),
        st.none() | st.text(alphabet=st.characters(exclude_characters="\x00", codec="utf-8")),
        st.none() | st.binary(max_size=20),
        st.none() | st.decimals(min_value=-(10**13), max_value=10**13, places=4, allow_nan=False),
    ),
    min_size=1,
    max_size=40,
)
PROPERTY_TYPES = {
    "i8": "bigint",
    "i4": "integer",
    "f8": "double precision",
    "f4": "real",
    "s": "text",
    "b": "bytea",
    "d": "numeric(18,4)",
}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=ROWS)
def test_property_binary_path_equals_the_text_path(db: Db, rows: list[tuple[Any, ...]]) -> None:
    cols = list(zip(*rows, strict=True))
    types = [pa.int64(), pa.int32(), pa.float64(), pa.float32(), pa.string(), pa.binary(), pa.decimal128(18, 4)]
    batch = pa.record_batch({n: pa.array(list(c), t) for n, c, t in zip(PROPERTY_TYPES, cols, types, strict=True)})
    _same(db, batch, PROPERTY_TYPES, binary=True)
