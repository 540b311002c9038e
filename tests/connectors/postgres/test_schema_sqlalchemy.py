"""Reflection and DDL through SQLAlchemy, and SQLAlchemy URLs as conninfo, against the real server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
import pytest
import sqlalchemy
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row
from sqlalchemy.engine import URL

from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres._schema import (
    TargetTable,
    _borrowing,
    check_batch,
    create_table_sql,
    ddl_type,
    reflect,
)
from eosink.connectors.postgres.testing import PostgresHarness
from eosink.contract import BatchRef, Bundle, Committable, Fingerprint, TaskRef
from eosink.errors import ConfigurationError, SchemaError
from eosink.services.postgres import PostgresEndpoint

APP = "app_schema_sa"
HARNESS = PostgresHarness()
HOSTILE = ['we"ird', "a.b", "with space", "ünï©ødé", '"; DROP TABLE x; --', "100%s", "Upper"]


@pytest.fixture
def admin(postgres_endpoint: PostgresEndpoint) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    with psycopg.connect(postgres_endpoint.url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def schema(admin: psycopg.Connection[tuple[Any, ...]]) -> Iterator[str]:
    """A fresh schema with a hostile name (dot, quote, space); dropped afterwards."""
    name = f'sa "{uuid.uuid4().hex[:10]}".s'
    admin.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(name)))
    yield name
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))


def _exec(conn: psycopg.Connection[Any], schema: str, statement: str) -> None:
    """Run ``statement`` with ``S`` standing for the quoted schema."""
    conn.execute(sql.SQL(statement).format(S=sql.Identifier(schema)))


def _reflect(conn: psycopg.Connection[Any], schema: str | None, table: str) -> TargetTable:
    target = reflect(conn, schema, table)
    assert target is not None
    return target


def _write(sink: PostgresSink, batch_id: int, data: pa.RecordBatch, keys: tuple[str, ...] | None = None) -> None:
    """One participant's batch, prepared and committed."""
    epoch = sink.fence(APP)
    task = TaskRef(BatchRef(APP, batch_id), epoch, 0, uuid.uuid4().hex[:16], keys, True)
    txn = sink.begin(task)
    sink.write(txn, data)
    committable: Committable = sink.pre_commit(txn)
    bundle = Bundle(task.batch, epoch, Fingerprint(), (committable.id,), None, "2pc")
    sink.commit(task.batch, [committable], bundle)


# -- reflection --------------------------------------------------------------------------------------


def test_hostile_names_reflect_and_create(admin: psycopg.Connection[tuple[Any, ...]], schema: str) -> None:
    """Names with quotes, dots, spaces, unicode, '%' and SQL survive DDL and reflection exactly."""
    canary = "x"  # what the hostile name would drop if it were ever spliced into SQL
    admin.execute(sql.SQL("CREATE TABLE {} (v int)").format(sql.Identifier(schema, canary)))
    arrow = pa.schema([pa.field(n, pa.int64()) for n in HOSTILE])
    for table in HOSTILE:
        admin.execute(create_table_sql(schema, table, arrow))
        target = _reflect(admin, schema, table)
        assert (target.schema, target.name, target.kind) == (schema, table, "r")
        assert [c.name for c in target.columns] == HOSTILE
        assert all(c.base == "int8" and not c.not_null for c in target.columns)
    tables = admin.execute(
        "SELECT relname FROM pg_class WHERE relnamespace = %s::regnamespace AND relkind = 'r' ORDER BY relname",
        (sql.Identifier(schema).as_string(admin),),
    ).fetchall()
    assert sorted(r[0] for r in tables) == sorted([*HOSTILE, canary])
    _exec(admin, schema, """CREATE TYPE {S}."50%d" AS ENUM ('a')""")
    _exec(admin, schema, 'CREATE TABLE {S}."typed%" (e {S}."50%d")')
    (col,) = _reflect(admin, schema, "typed%").columns
    assert (col.base, col.category) == ("50%d", "E") and col.type_sql.endswith('."50%d"')


def test_unqualified_name_resolves_through_search_path(
    postgres_endpoint: PostgresEndpoint, admin: psycopg.Connection[tuple[Any, ...]], schema: str
) -> None:
    _exec(admin, schema, 'CREATE TABLE {S}."Mixed Case" (id int)')
    with psycopg.connect(postgres_endpoint.url, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        target = _reflect(conn, None, "Mixed Case")
        assert (target.schema, target.name) == (schema, "Mixed Case")
        assert reflect(conn, None, "mixed case") is None  # exact names, no case folding
    assert reflect(admin, schema, "missing") is None


# One column per type the catalog-query reflection handled: (DDL, base, category).
TYPES = [
    ("bigint", "int8", "N"),
    ("integer", "int4", "N"),
    ("smallint", "int2", "N"),
    ("real", "float4", "N"),
    ("double precision", "float8", "N"),
    ("numeric(10,2)", "numeric", "N"),
    ("numeric", "numeric", "N"),
    ("boolean", "bool", "B"),
    ("text", "text", "S"),
    ('text COLLATE "C"', "text", "S"),
    ("varchar(5)", "varchar", "S"),
    ("char(2)", "bpchar", "S"),
    ("bytea", "bytea", "U"),
    ("date", "date", "D"),
    ("timestamp", "timestamp", "D"),
    ("timestamp(3) with time zone", "timestamptz", "D"),
    ("time", "time", "D"),
    ("timetz", "timetz", "D"),
    ("interval", "interval", "T"),
    ("json", "json", "U"),
    ("jsonb", "jsonb", "U"),
    ("uuid", "uuid", "U"),
    ("int[]", "_int4", "A"),
    ("text[][]", "_text", "A"),
    ("jsonb[]", "_jsonb", "A"),
    ("{S}.posint", "int8", "N"),  # domain: its base type
    ("{S}.posint[]", "_int8", "A"),
    ("{S}.mood", "mood", "E"),  # enum
    ("{S}.mood[]", "_mood", "A"),
    ("{S}.pair", "pair", "C"),  # composite: SQLAlchemy does not know it, the catalog does
    ("point", "point", "G"),  # types SQLAlchemy does not know
    ("pg_lsn", "pg_lsn", "U"),
    ("{S}.lsn", "pg_lsn", "U"),  # a domain over one
]


@pytest.fixture
def typed(admin: psycopg.Connection[tuple[Any, ...]], schema: str) -> TargetTable:
    """A table with one column ``c<i>`` per entry of TYPES."""
    _exec(admin, schema, "CREATE DOMAIN {S}.posint AS bigint CHECK (VALUE > 0)")
    _exec(admin, schema, "CREATE DOMAIN {S}.lsn AS pg_lsn")
    _exec(admin, schema, "CREATE TYPE {S}.mood AS ENUM ('sad', 'ok')")
    _exec(admin, schema, "CREATE TYPE {S}.pair AS (x int, y text)")
    columns = ", ".join(f"c{i} {ddl}" for i, (ddl, _, _) in enumerate(TYPES))
    _exec(admin, schema, f"CREATE TABLE {{S}}.typed ({columns})")
    return _reflect(admin, schema, "typed")


def test_every_type_reflects_its_base_and_category(typed: TargetTable) -> None:
    assert len(typed.columns) == len(TYPES)
    for i, (ddl, base, category) in enumerate(TYPES):
        col = typed.columns[i]
        assert (col.name, col.base, col.category) == (f"c{i}", base, category), ddl
        assert col.type_sql and not col.not_null and not col.has_default
    # Every column's type shows in the signature, so a changed type means another staging table.
    assert len({c.type_sql for c in typed.columns}) == len(TYPES)
    assert 'COLLATE "C"' in typed.columns[9].type_sql


def test_compatibility_follows_the_base_type(typed: TargetTable) -> None:
    """Arrow types are checked against domains', enums' and arrays' base types; unknown types take text."""
    by_ddl = {ddl: f"c{i}" for i, (ddl, _, _) in enumerate(TYPES)}

    def fits(ddl: str, values: pa.Array) -> bool:
        batch = pa.RecordBatch.from_arrays([values], names=[by_ddl[ddl]])
        try:
            check_batch(typed, batch, (), "test")
        except SchemaError:
            return False
        return True

    ints, strings = pa.array([1], pa.int64()), pa.array(["1"])
    int_lists = pa.array([[1]], pa.list_(pa.int64()))
    assert fits("{S}.posint", ints) and fits("{S}.posint[]", int_lists) and fits("int[]", int_lists)
    assert not fits("{S}.posint", pa.array([True]))
    assert fits("{S}.mood", strings) and not fits("{S}.mood", ints)
    assert fits("{S}.mood[]", pa.array([["ok"]]))
    assert fits("point", strings) and not fits("point", ints)
    assert fits("{S}.lsn", strings) and not fits("{S}.lsn", ints)
    assert fits("jsonb", pa.array([{"a": 1}])) and not fits("text", pa.array([{"a": 1}]))
    assert fits("timestamp(3) with time zone", pa.array([0], pa.timestamp("us", "UTC")))
    # Text goes into the types Spark has no type of its own for; into the others it is a forgotten cast.
    assert all(fits(ddl, strings) for ddl in ("uuid", "jsonb", "numeric", "interval", "time", "varchar(5)"))
    typed_in_spark = ("bigint", "smallint", "double precision", "boolean", "bytea", "date", "timestamp")
    assert not any(fits(ddl, strings) for ddl in (*typed_in_spark, "{S}.posint", "timestamp(3) with time zone"))


def test_nullability_defaults_identity_and_generated(admin: psycopg.Connection[tuple[Any, ...]], schema: str) -> None:
    _exec(admin, schema, "CREATE DOMAIN {S}.required AS text NOT NULL DEFAULT 'd'")
    _exec(
        admin,
        schema,
        "CREATE TABLE {S}.t (ida bigint GENERATED ALWAYS AS IDENTITY, idd int GENERATED BY DEFAULT AS IDENTITY, "
        "ser serial, dflt int NOT NULL DEFAULT 7, req {S}.required, plain text NOT NULL, opt text, "
        "gen bigint GENERATED ALWAYS AS (dflt * 2) STORED)",
    )
    cols = {c.name: c for c in _reflect(admin, schema, "t").columns}
    flags = {n: (c.not_null, c.has_default, c.generated, c.identity_always) for n, c in cols.items()}
    assert flags == {
        "ida": (True, True, False, True),
        "idd": (True, True, False, False),
        "ser": (True, True, False, False),
        "dflt": (True, True, False, False),
        "req": (True, True, False, False),  # NOT NULL and the default come from the domain
        "plain": (True, False, False, False),
        "opt": (False, False, False, False),
        "gen": (False, True, True, False),
    }


def test_unique_keys(admin: psycopg.Connection[tuple[Any, ...]], schema: str) -> None:
    """Primary key, unique constraints and plain unique indexes count; partial and expression indexes do not."""
    _exec(
        admin,
        schema,
        'CREATE TABLE {S}.t (id int PRIMARY KEY, a int, b text, c int, d int, e int, "Odd col" int, UNIQUE (a, b))',
    )
    _exec(admin, schema, 'CREATE UNIQUE INDEX ON {S}.t ("Odd col", c)')
    _exec(admin, schema, "CREATE UNIQUE INDEX ON {S}.t (d) WHERE d > 0")
    _exec(admin, schema, "CREATE UNIQUE INDEX ON {S}.t (lower(b))")
    _exec(admin, schema, "CREATE UNIQUE INDEX ON {S}.t (e) INCLUDE (c)")
    _exec(admin, schema, "CREATE INDEX ON {S}.t (c)")
    target = _reflect(admin, schema, "t")
    assert set(target.unique_keys) == {
        frozenset({"id"}),
        frozenset({"a", "b"}),
        frozenset({"Odd col", "c"}),
        frozenset({"e"}),
    }
    assert target.has_unique(["b", "a"]) and not target.has_unique(["d"]) and not target.has_unique(["c"])


def test_partitioned_table_and_view(admin: psycopg.Connection[tuple[Any, ...]], schema: str) -> None:
    _exec(admin, schema, "CREATE TABLE {S}.p (k int, v text, PRIMARY KEY (k)) PARTITION BY RANGE (k)")
    _exec(admin, schema, "CREATE TABLE {S}.p1 PARTITION OF {S}.p FOR VALUES FROM (0) TO (100)")
    _exec(admin, schema, "CREATE UNIQUE INDEX ON {S}.p (k, v)")
    _exec(admin, schema, "CREATE VIEW {S}.v AS SELECT k, v FROM {S}.p")
    _exec(admin, schema, "CREATE SEQUENCE {S}.seq")
    part = _reflect(admin, schema, "p")
    assert part.kind == "p" and [c.name for c in part.columns] == ["k", "v"]
    assert set(part.unique_keys) == {frozenset({"k"}), frozenset({"k", "v"})}
    view = _reflect(admin, schema, "v")
    assert view.kind == "v" and [c.base for c in view.columns] == ["int4", "text"]
    assert _reflect(admin, schema, "seq").kind == "S"


# -- the caller's connection -------------------------------------------------------------------------


def test_reflection_leaves_the_connection_as_it_was(postgres_endpoint: PostgresEndpoint, schema: str) -> None:
    """No transaction left open, none of the caller's ended, no notice handler added, any row factory."""
    with psycopg.connect(postgres_endpoint.url, autocommit=True) as conn:
        _exec(conn, schema, "CREATE TABLE {S}.t (id int PRIMARY KEY)")
        handlers = len(getattr(conn, "_notice_handlers", []))
        for _ in range(3):
            assert _reflect(conn, schema, "t").has_unique(["id"])
        assert conn.info.transaction_status == TransactionStatus.IDLE and conn.autocommit
        assert len(getattr(conn, "_notice_handlers", [])) == handlers
    with psycopg.connect(postgres_endpoint.url, row_factory=dict_row) as conn:  # not autocommit
        assert [c.name for c in _reflect(conn, schema, "t").columns] == ["id"]
        assert conn.info.transaction_status == TransactionStatus.IDLE  # the reflection's own one ended
        with conn.transaction():
            _exec(conn, schema, "CREATE TABLE {S}.uncommitted (a text)")
            assert [c.name for c in _reflect(conn, schema, "uncommitted").columns] == ["a"]
            assert conn.info.transaction_status == TransactionStatus.INTRANS  # the caller's one goes on
            conn.execute("SELECT 1")
        assert _reflect(conn, schema, "uncommitted").kind == "r"  # committed by the caller, not rolled back


def test_psycopg_errors_come_out_unwrapped(admin: psycopg.Connection[tuple[Any, ...]]) -> None:
    """The sink classifies psycopg errors, so SQLAlchemy's DBAPIError wrapper is taken off."""
    with pytest.raises(psycopg.errors.DivisionByZero), _borrowing(admin) as conn:
        conn.exec_driver_sql("SELECT 1 / 0")
    assert admin.info.transaction_status == TransactionStatus.IDLE


# -- create_table ------------------------------------------------------------------------------------


DDL = [
    (pa.bool_(), "BOOLEAN", "bool"),
    (pa.int8(), "SMALLINT", "int2"),
    (pa.uint8(), "SMALLINT", "int2"),
    (pa.int16(), "SMALLINT", "int2"),
    (pa.uint16(), "INTEGER", "int4"),
    (pa.int32(), "INTEGER", "int4"),
    (pa.uint32(), "BIGINT", "int8"),
    (pa.int64(), "BIGINT", "int8"),
    (pa.uint64(), "NUMERIC(20, 0)", "numeric"),
    (pa.float16(), "REAL", "float4"),
    (pa.float32(), "REAL", "float4"),
    (pa.float64(), "DOUBLE PRECISION", "float8"),
    (pa.decimal128(12, 3), "NUMERIC(12, 3)", "numeric"),
    (pa.string(), "TEXT", "text"),
    (pa.large_string(), "TEXT", "text"),
    (pa.null(), "TEXT", "text"),
    (pa.binary(), "BYTEA", "bytea"),
    (pa.binary(4), "BYTEA", "bytea"),
    (pa.date32(), "DATE", "date"),
    (pa.timestamp("us"), "TIMESTAMP WITHOUT TIME ZONE", "timestamp"),
    (pa.timestamp("ns", "Europe/Paris"), "TIMESTAMP WITH TIME ZONE", "timestamptz"),
    (pa.time64("us"), "TIME WITHOUT TIME ZONE", "time"),
    (pa.duration("s"), "INTERVAL", "interval"),
    (pa.list_(pa.int32()), "INTEGER[]", "_int4"),
    (pa.large_list(pa.timestamp("us", "UTC")), "TIMESTAMP WITH TIME ZONE[]", "_timestamptz"),
    (pa.list_(pa.list_(pa.int32())), "JSONB", "jsonb"),
    (pa.list_(pa.null()), "JSONB", "jsonb"),
    (pa.struct([("a", pa.int32())]), "JSONB", "jsonb"),
    (pa.map_(pa.string(), pa.int32()), "JSONB", "jsonb"),
]


def test_create_table_types_and_nullability(admin: psycopg.Connection[tuple[Any, ...]], schema: str) -> None:
    """The same Arrow -> PostgreSQL mapping as before; NOT NULL where the Arrow field is not nullable."""
    fields = [pa.field(f"f{i}", t, nullable=i % 2 == 0 or pa.types.is_null(t)) for i, (t, _, _) in enumerate(DDL)]
    for t, text, _ in DDL:
        assert ddl_type(t) == text, t
    admin.execute(create_table_sql(schema, "made", pa.schema(fields)))
    admin.execute(create_table_sql(schema, "made", pa.schema(fields)))  # IF NOT EXISTS
    target = _reflect(admin, schema, "made")
    for i, (t, _, base) in enumerate(DDL):
        col = target.columns[i]
        assert (col.name, col.base) == (f"f{i}", base), t
        assert col.not_null is not fields[i].nullable, t
    assert sum(c.not_null for c in target.columns) == sum(not f.nullable for f in fields) > 10


def test_create_table_refusals() -> None:
    with pytest.raises(SchemaError, match="knows no PostgreSQL type"):
        create_table_sql(None, "t", pa.schema([("d", pa.dictionary(pa.int8(), pa.string()))]))
    with pytest.raises(SchemaError, match="duplicate column names"):
        create_table_sql(None, "t", pa.schema([("a", pa.int8()), ("a", pa.int16())]))


# -- through the sink --------------------------------------------------------------------------------


@pytest.fixture
def ctl() -> Iterator[str]:
    name = f"sa_ctl_{uuid.uuid4().hex[:10]}"
    yield name
    HARNESS.drop(name, [])


def test_sink_omits_identity_and_default_columns_and_refuses_views(
    postgres_endpoint: PostgresEndpoint, admin: psycopg.Connection[tuple[Any, ...]], schema: str, ctl: str
) -> None:
    _exec(
        admin,
        schema,
        "CREATE TABLE {S}.t (ida bigint GENERATED ALWAYS AS IDENTITY, idd int GENERATED BY DEFAULT AS IDENTITY, "
        "dflt int NOT NULL DEFAULT 7, name text NOT NULL, PRIMARY KEY (idd))",
    )
    _exec(admin, schema, "CREATE VIEW {S}.v AS SELECT * FROM {S}.t")
    sink = PostgresSink(PostgresConfig(postgres_endpoint.url, table=(schema, "t"), control_schema=ctl))
    try:
        _write(sink, 0, pa.RecordBatch.from_pydict({"name": ["a", "b"]}))
        rows = HARNESS.read_rows(schema, "t")
        assert sorted((r["ida"], r["idd"], r["dflt"], r["name"]) for r in rows) == [(1, 1, 7, "a"), (2, 2, 7, "b")]
        with pytest.raises(SchemaError, match="generated by the server"):
            _write(sink, 1, pa.RecordBatch.from_pydict({"ida": [5], "name": ["c"]}))
    finally:
        sink.close()
    view_sink = PostgresSink(PostgresConfig(postgres_endpoint.url, table=(schema, "v"), control_schema=ctl))
    try:
        with pytest.raises(SchemaError, match="is not a table"):
            _write(view_sink, 0, pa.RecordBatch.from_pydict({"name": ["a"]}))
    finally:
        view_sink.close()


def test_sink_upserts_into_a_partitioned_table_by_its_unique_index(
    postgres_endpoint: PostgresEndpoint, admin: psycopg.Connection[tuple[Any, ...]], schema: str, ctl: str
) -> None:
    _exec(admin, schema, "CREATE TABLE {S}.p (k int, v text) PARTITION BY LIST (k)")
    _exec(admin, schema, "CREATE TABLE {S}.p_all PARTITION OF {S}.p DEFAULT")
    _exec(admin, schema, "CREATE UNIQUE INDEX ON {S}.p (k)")
    config = PostgresConfig(
        postgres_endpoint.url, table=(schema, "p"), control_schema=ctl, mode="upsert", key_columns="k"
    )
    sink = PostgresSink(config)
    try:
        _write(sink, 0, pa.RecordBatch.from_pydict({"k": pa.array([1, 2], pa.int32()), "v": ["a", "b"]}))
        _write(sink, 1, pa.RecordBatch.from_pydict({"k": pa.array([2, 3], pa.int32()), "v": ["B", "c"]}))
    finally:
        sink.close()
    assert sorted((r["k"], r["v"]) for r in HARNESS.read_rows(schema, "p")) == [(1, "a"), (2, "B"), (3, "c")]


# -- SQLAlchemy URLs ---------------------------------------------------------------------------------

PASSWORD = "p@ss:w/o%rd?#&' \"\\ü"


@pytest.fixture
def role(postgres_endpoint: PostgresEndpoint, admin: psycopg.Connection[tuple[Any, ...]]) -> Iterator[str]:
    """A login role whose password has every URL-special character, owning a schema of its own name."""
    name = f"sa_role_{uuid.uuid4().hex[:10]}"
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(name), sql.Literal(PASSWORD)))
    admin.execute(sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(sql.Identifier(name), sql.Identifier(name)))
    admin.execute(
        sql.SQL("GRANT CREATE ON DATABASE {} TO {}").format(
            sql.Identifier(postgres_endpoint.dbname), sql.Identifier(name)
        )
    )
    yield name
    admin.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))
    admin.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(name)))
    admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(name)))


def _url(endpoint: PostgresEndpoint, user: str, **query: str) -> URL:
    return URL.create(
        "postgresql+psycopg",
        username=user,
        password=PASSWORD,
        host=endpoint.host,
        port=endpoint.port,
        database=endpoint.dbname,
        query=query,
    )


def test_sqlalchemy_url_objects_connect_with_special_password(
    postgres_endpoint: PostgresEndpoint, role: str, ctl: str
) -> None:
    url = _url(postgres_endpoint, role, sslmode="disable")
    for given in (url, url.render_as_string(hide_password=False), sqlalchemy.create_engine(url)):
        config = PostgresConfig(given, table=(role, "t"), control_schema=ctl, create_table=True)  # type: ignore[arg-type]
        params = conninfo_to_dict(config.conninfo)
        assert params["password"] == PASSWORD and params["sslmode"] == "disable" and params["user"] == role
        assert PASSWORD not in repr(config) and "***" in repr(config)
        with psycopg.connect(config.conninfo, **config.connect_kwargs()) as conn:
            assert conn.execute("SELECT current_user").fetchone() == (role,)
    sink = PostgresSink(PostgresConfig(url, table=(role, "t"), control_schema=ctl, create_table=True))  # type: ignore[arg-type]
    try:
        _write(sink, 0, pa.RecordBatch.from_pydict({"id": [1, 2]}))
    finally:
        sink.close()
    assert sorted(r["id"] for r in HARNESS.read_rows(role, "t")) == [1, 2]


def test_sqlalchemy_url_query_options_reach_libpq(postgres_endpoint: PostgresEndpoint) -> None:
    """sslmode passes through: 'require' against this server (ssl off) fails where 'disable' connects."""
    with psycopg.connect(postgres_endpoint.url) as conn:
        ssl = conn.execute("SHOW ssl").fetchone()
    assert ssl == ("off",)
    url = _url(postgres_endpoint, postgres_endpoint.user).set(password=postgres_endpoint.password)
    ok = PostgresConfig(url.update_query_dict({"sslmode": "disable"}), table="t")  # type: ignore[arg-type]
    with psycopg.connect(ok.conninfo, **ok.connect_kwargs()) as conn:
        assert conn.execute("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").fetchone() == (False,)
    refused = PostgresConfig(url.update_query_dict({"sslmode": "require"}), table="t")  # type: ignore[arg-type]
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(refused.conninfo, **refused.connect_kwargs()).close()


def test_sqlalchemy_url_forms() -> None:
    config = PostgresConfig("postgresql+psycopg://u@/db?host=h1:5432&host=h2:5433&host=/tmp/s", table="t")
    params = conninfo_to_dict(config.conninfo)
    assert (params["host"], params["port"], params["dbname"]) == ("h1,h2,/tmp/s", "5432,5433,", "db")
    assert conninfo_to_dict(PostgresConfig("postgresql+asyncpg://u@[::1]:7/d", table="t").conninfo)["host"] == "::1"
    for bad, match in [
        ("mysql+pymysql://u:secret@h/d", "not a valid libpq"),
        (URL.create("mysql+pymysql", password="secret", host="h"), "is for 'mysql'"),
        ("postgresql+psycopg://u:secret@h/d?sslmode=a&sslmode=b", "more than once"),
        ("postgresql+psycopg://u:secret@h/d?bogus_option=1", "not a valid libpq"),
        (42, "not a int"),
    ]:
        with pytest.raises(ConfigurationError, match=match) as info:
            PostgresConfig(bad, table="t")  # type: ignore[arg-type]
        assert "secret" not in str(info.value)
