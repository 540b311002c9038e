"""The target table as the sink sees it: reflection, Arrow -> PostgreSQL types, and the checks before a write.

Reflection goes through SQLAlchemy's :class:`~sqlalchemy.engine.reflection.Inspector` over the
caller's own psycopg connection (no second connection, no password needed): one process-wide
Engine per server version whose pool hands out a non-closing proxy of that connection. Where
SQLAlchemy has no answer (which relation a possibly unqualified name resolves to and its
relkind; the base of a type SQLAlchemy does not know) a small catalog query over psycopg fills in.
``create_table`` compiles a SQLAlchemy ``Table`` with the PostgreSQL dialect.

Every check here runs before a row is sent, so a batch that does not fit raises
:class:`~eosink.errors.SchemaError` (or :class:`~eosink.errors.BadRecordError` for a null key)
while nothing of it exists anywhere.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
from psycopg import Connection, sql
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

from eosink.errors import BadRecordError, ConfigurationError, SchemaError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from sqlalchemy.engine.interfaces import ReflectedColumn
    from sqlalchemy.types import TypeEngine

__all__ = ["Column", "TargetTable", "check_batch", "create_table_sql", "reflect"]

_INTS = {"int2", "int4", "int8"}
_FLOATS = {"float4", "float8"}
_JSON = {"json", "jsonb"}
# Column types Spark has a type of its own for, and that type's name for a cast. A text column of the stream is
# refused for them: it is a query that forgot a cast, found before a row is sent rather than as a refused row.
# Text still goes into the types Spark has none for (uuid, json, enums, inet, numeric beyond 38 digits, ...).
_SPARK_CAST = {
    "int2": "smallint",
    "int4": "int",
    "int8": "bigint",
    "float4": "float",
    "float8": "double",
    "bool": "boolean",
    "date": "date",
    "timestamp": "timestamp_ntz",
    "timestamptz": "timestamp",
    "bytea": "binary",
}

# Which relation the (possibly unqualified: search_path) name resolves to, and its relkind: SQLAlchemy
# reflects a given schema's objects only, and tells no relkind.
_RELATION = sql.SQL(
    "SELECT n.nspname, c.relname, c.relkind, c.oid FROM pg_catalog.pg_class c "
    "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = pg_catalog.to_regclass(%s)"
)
# Types SQLAlchemy does not know (extensions' types, composite types, ...): their text and base type.
_UNKNOWN_TYPES = sql.SQL(
    "SELECT a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), COALESCE(bt.typname, t.typname), "
    "COALESCE(bt.typcategory, t.typcategory) FROM pg_catalog.pg_attribute a "
    "JOIN pg_catalog.pg_type t ON t.oid = a.atttypid "
    "LEFT JOIN pg_catalog.pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype "
    "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped AND a.attname = ANY(%s)"
)
_WITH_COLUMNS = frozenset("rpvmf")  # relkinds the Inspector reflects columns of


@dataclass(frozen=True)
class Column:
    """One column of the target."""

    name: str
    type_sql: str
    """The type as the PostgreSQL dialect writes it (for messages and the staging table's signature)."""
    base: str
    """The base type's name (of a domain: its base type), e.g. ``int8``, ``text``, ``_int4``."""
    category: str
    """Like ``pg_type.typcategory``: N numeric, S string, A array, D date/time, ..."""
    not_null: bool
    has_default: bool
    """A default (its own or its domain's, a sequence's), an identity or a generation: the batch may omit it."""
    generated: bool
    identity_always: bool


@dataclass(frozen=True)
class TargetTable:
    """The reflected target table."""

    schema: str
    name: str
    kind: str
    columns: tuple[Column, ...]
    unique_keys: tuple[frozenset[str], ...]

    @property
    def ident(self) -> sql.Identifier:
        return sql.Identifier(self.schema, self.name)

    @property
    def display(self) -> str:
        """The table's name as SQL (quoted where needed), safe to show in a suggested statement."""
        return self.ident.as_string(None)

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def signature(self) -> str:
        """What the staging table depends on: the qualified name and every column's name and type."""
        cols = "\x01".join(f"{c.name}\x02{c.type_sql}" for c in self.columns)
        return f"{self.schema}\x00{self.name}\x00{cols}"

    def has_unique(self, keys: Sequence[str]) -> bool:
        return frozenset(keys) in self.unique_keys


# -- SQLAlchemy over the caller's connection ---------------------------------------------------------


def _require_sqlalchemy() -> None:
    try:
        import sqlalchemy
    except ImportError as exc:
        raise ConfigurationError(
            "The PostgreSQL connector needs SQLAlchemy 2 to reflect and create tables.",
            "pip install 'eosink[postgres]'.",
        ) from exc
    if int(sqlalchemy.__version__.split(".")[0]) < 2:
        raise ConfigurationError(
            f"The PostgreSQL connector needs SQLAlchemy 2; {sqlalchemy.__version__} is installed.",
            "pip install 'sqlalchemy>=2.0' (or 'eosink[postgres]').",
        )


class _Borrowed:
    """The caller's psycopg connection as SQLAlchemy's pool sees it.

    ``close`` leaves it open and ``rollback``/``commit`` leave its transaction alone (both are the
    caller's; :func:`reflect` ends a transaction only it began); SQLAlchemy's per-checkout notice
    handler is not piled onto the connection; cursors return tuples whatever its row factory.
    """

    def __init__(self, conn: Connection[Any]) -> None:
        self._conn = conn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("row_factory", tuple_row)
        return self._conn.cursor(*args, **kwargs)

    def rollback(self) -> None:
        """Nothing: see the class docstring."""

    def commit(self) -> None:
        """Nothing: see the class docstring."""

    def close(self) -> None:
        """Nothing: the connection belongs to the caller."""

    def add_notice_handler(self, handler: Any) -> None:
        """Nothing: SQLAlchemy would add one handler per checkout to the caller's connection."""


_LENT: ContextVar[_Borrowed | None] = ContextVar("eosink_postgres_reflecting", default=None)
_ENGINES: dict[int, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _lent() -> _Borrowed:
    conn = _LENT.get()
    if conn is None:  # pragma: no cover - only _borrowing() checks connections out
        raise RuntimeError("eosink's reflection engine was used without a connection to lend it.")
    return conn


def _engine(server_version: int) -> Engine:
    """The process's Engine for servers of this version (the dialect initialises once, on first use).

    It never connects by itself: its pool (``NullPool``) wraps whatever connection
    :func:`_borrowing` lends it for the duration of one reflection.
    """
    with _ENGINES_LOCK:
        engine = _ENGINES.get(server_version)
        if engine is None:
            from sqlalchemy import create_engine
            from sqlalchemy.pool import NullPool

            # use_native_hstore=False: the dialect would otherwise register hstore adapters on the connection.
            engine = create_engine("postgresql+psycopg://", creator=_lent, poolclass=NullPool, use_native_hstore=False)
            _ENGINES[server_version] = engine
        return engine


@contextmanager
def _borrowing(conn: Connection[Any]) -> Iterator[Any]:
    """A SQLAlchemy ``Connection`` over ``conn``; psycopg errors come out as themselves, not wrapped."""
    from sqlalchemy import exc

    engine = _engine(conn.info.server_version)
    token = _LENT.set(_Borrowed(conn))
    try:
        with engine.connect() as sa_conn:
            yield sa_conn
    except exc.DBAPIError as err:
        if isinstance(err.orig, psycopg.Error):
            raise err.orig from None  # the sink classifies psycopg errors (transient, privileges, ...)
        raise
    finally:
        _LENT.reset(token)


def reflect(conn: Connection[Any], schema: str | None, table: str) -> TargetTable | None:
    """The target table, or None if it does not exist.

    ``conn`` is left as it was: in autocommit, or inside the caller's transaction (which goes on);
    outside autocommit with no transaction open, the one the reflection's queries began is rolled back.
    """
    idle = conn.info.transaction_status == TransactionStatus.IDLE
    try:
        return _reflect(conn, schema, table)
    finally:
        if idle and conn.info.transaction_status != TransactionStatus.IDLE:
            with suppress(psycopg.Error):  # a broken connection: the error on its way out says so
                conn.rollback()


def _reflect(conn: Connection[Any], schema: str | None, table: str) -> TargetTable | None:
    name = sql.Identifier(table) if schema is None else sql.Identifier(schema, table)
    row = conn.cursor(row_factory=tuple_row).execute(_RELATION, (name.as_string(conn),)).fetchone()
    if row is None:
        return None
    nsp, rel, kind, oid = str(row[0]), str(row[1]), str(row[2]), int(row[3])
    if kind not in _WITH_COLUMNS:
        return TargetTable(nsp, rel, kind, (), ())  # a sequence, an index, a composite type: refused by the sink
    _require_sqlalchemy()
    from sqlalchemy import exc, inspect

    try:
        with _borrowing(conn) as sa_conn, warnings.catch_warnings():
            # SQLAlchemy warns of every type it does not know; those are resolved below.
            warnings.simplefilter("ignore", exc.SAWarning)
            inspector = inspect(sa_conn)
            reflected = inspector.get_columns(rel, schema=nsp)
            pk = inspector.get_pk_constraint(rel, schema=nsp)
            indexes = inspector.get_indexes(rel, schema=nsp)  # without the primary key's
    except exc.NoSuchTableError:
        return None  # dropped since it was resolved
    columns = _columns(conn, oid, reflected)
    unique: list[frozenset[str]] = []
    if pk.get("constrained_columns"):
        unique.append(frozenset(pk["constrained_columns"]))
    for index in indexes:
        options = index.get("dialect_options") or {}
        # Unique constraints are among the indexes. ON CONFLICT infers only a valid, non-partial unique
        # index on plain columns (its key columns: INCLUDE columns are not part of the key).
        usable = not (index.get("expressions") or options.get("postgresql_where") or options.get("postgresql_invalid"))
        if index["unique"] and usable:
            unique.append(frozenset(c for c in index["column_names"] if c is not None))
    return TargetTable(nsp, rel, kind, columns, tuple(dict.fromkeys(unique)))


def _columns(conn: Connection[Any], oid: int, reflected: list[ReflectedColumn]) -> tuple[Column, ...]:
    known: dict[str, tuple[str, str, str]] = {}
    for c in reflected:
        type_sql, base = _type_sql(c["type"]), _base(c["type"])
        if type_sql is not None and base is not None:
            known[c["name"]] = (type_sql, *base)
    unknown = [c["name"] for c in reflected if c["name"] not in known]
    if unknown:
        for r in conn.cursor(row_factory=tuple_row).execute(_UNKNOWN_TYPES, (oid, unknown)):
            known[str(r[0])] = (str(r[1]), str(r[2]), str(r[3]))
    columns = []
    for c in reflected:
        if c["name"] not in known:  # pragma: no cover - the column was dropped in between
            continue
        identity, computed = c.get("identity"), c.get("computed")
        columns.append(
            Column(
                name=c["name"],
                type_sql=known[c["name"]][0],
                base=known[c["name"]][1],
                category=known[c["name"]][2],
                not_null=not c["nullable"],
                has_default=c.get("default") is not None or identity is not None or computed is not None,
                generated=computed is not None,
                identity_always=bool(identity and identity.get("always")),
            )
        )
    return tuple(columns)


def _type_sql(t: TypeEngine[Any]) -> str | None:
    """The type as the dialect writes it, e.g. ``NUMERIC(10, 2)[]``, ``TEXT COLLATE "C"``, ``s.my_domain``."""
    from sqlalchemy.types import NullType

    if isinstance(t, NullType):
        return None
    try:
        return str(t.compile(dialect=_ddl_dialect()))
    except Exception:  # a type the dialect cannot write: the catalog says what it is
        return None


def _base(t: TypeEngine[Any]) -> tuple[str, str] | None:
    """(base type name, category) of a reflected type, or None if SQLAlchemy did not recognise it."""
    from sqlalchemy import types as st
    from sqlalchemy.dialects import postgresql as pg

    if isinstance(t, pg.DOMAIN):
        return _base(t.data_type)
    if isinstance(t, st.ARRAY):
        inner = _base(t.item_type)
        return None if inner is None else (f"_{inner[0]}", "A")
    if isinstance(t, st.NullType):
        return None
    if isinstance(t, pg.ENUM):
        return str(t.name), "E"
    if isinstance(t, st.DateTime):
        return ("timestamptz" if t.timezone else "timestamp"), "D"
    if isinstance(t, st.Time):
        return ("timetz" if t.timezone else "time"), "D"
    for cls, base, category in _sa_bases():
        if isinstance(t, cls):
            return base, category
    return type(t).__name__.lower(), "U"  # inet, tsvector, ranges, ...: only text fits them


@cache
def _sa_bases() -> tuple[tuple[type[Any], str, str], ...]:
    from sqlalchemy import types as st
    from sqlalchemy.dialects import postgresql as pg

    return (  # most specific first
        (pg.CITEXT, "citext", "S"),
        (st.Boolean, "bool", "B"),
        (st.SmallInteger, "int2", "N"),
        (st.BigInteger, "int8", "N"),
        (st.Integer, "int4", "N"),
        (st.Double, "float8", "N"),
        (st.Float, "float4", "N"),
        (st.Numeric, "numeric", "N"),
        (pg.JSONB, "jsonb", "U"),
        (st.JSON, "json", "U"),
        (st.LargeBinary, "bytea", "U"),
        (st.Date, "date", "D"),
        (pg.INTERVAL, "interval", "T"),
        (st.Interval, "interval", "T"),
        (st.Uuid, "uuid", "U"),
        (st.CHAR, "bpchar", "S"),
        (st.VARCHAR, "varchar", "S"),
        (st.String, "text", "S"),
    )


# -- create_table -----------------------------------------------------------------------------------


def sa_type(t: pa.DataType) -> TypeEngine[Any] | None:
    """The PostgreSQL type ``create_table`` gives an Arrow type (a fixed vocabulary), or None."""
    from sqlalchemy.dialects import postgresql as pg

    if pa.types.is_boolean(t):
        return pg.BOOLEAN()
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return pg.SMALLINT()
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return pg.INTEGER()
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return pg.BIGINT()
    if pa.types.is_uint64(t):
        return pg.NUMERIC(20, 0)
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return pg.REAL()
    if pa.types.is_float64(t):
        return pg.DOUBLE_PRECISION()
    if pa.types.is_decimal(t):
        return pg.NUMERIC(int(t.precision), int(t.scale))
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t) or pa.types.is_null(t):
        return pg.TEXT()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return pg.BYTEA()
    if pa.types.is_date(t):
        return pg.DATE()
    if pa.types.is_timestamp(t):
        return pg.TIMESTAMP(timezone=t.tz is not None)
    if pa.types.is_time(t):
        return pg.TIME()
    if pa.types.is_duration(t):
        return pg.INTERVAL()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = t.value_type
        nested = pa.types.is_nested(inner) or pa.types.is_null(inner)
        element = None if nested else sa_type(inner)
        return pg.JSONB() if element is None else pg.ARRAY(element)
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return pg.JSONB()
    return None


def ddl_type(t: pa.DataType) -> str | None:
    """``sa_type`` as SQL text, e.g. ``BIGINT`` or ``TIMESTAMP WITH TIME ZONE[]``."""
    _require_sqlalchemy()
    made = sa_type(t)
    return None if made is None else str(made.compile(dialect=_ddl_dialect()))


def _is_string_view(t: pa.DataType) -> bool:
    check = getattr(pa.types, "is_string_view", None)
    return bool(check(t)) if check else False


@cache
def _ddl_dialect() -> Any:
    """The PostgreSQL dialect that DDL and type names are compiled with.

    Its paramstyle is ``named``: with psycopg's ``pyformat`` the dialect would double every ``%`` in
    identifiers, and the statement is executed without parameters, so they would stay doubled.
    """
    from sqlalchemy.dialects.postgresql.base import PGDialect

    return PGDialect(paramstyle="named")  # type: ignore[no-untyped-call]


def create_table_sql(schema: str | None, table: str, arrow: pa.Schema) -> sql.SQL:
    """``CREATE TABLE IF NOT EXISTS`` the target with one column per Arrow field (NOT NULL if the field is).

    Compiled by SQLAlchemy's PostgreSQL dialect, every identifier quoted by it (quoted always, so the
    names are exact whatever their case), from a fixed vocabulary of types.
    """
    _require_sqlalchemy()
    from sqlalchemy import Column as SAColumn
    from sqlalchemy import MetaData, Table
    from sqlalchemy.schema import CreateTable
    from sqlalchemy.sql.elements import quoted_name

    names = arrow.names
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise SchemaError(f"The batch has duplicate column names {dupes}.", "Rename or drop them.")
    columns = []
    for f in arrow:
        pg_type = sa_type(f.type)
        if pg_type is None:
            raise SchemaError(
                f"Column {f.name!r} has Arrow type {f.type}, for which create_table knows no PostgreSQL type.",
                "Create the table yourself (create_table=False), or cast the column in the query.",
            )
        columns.append(SAColumn(quoted_name(f.name, True), pg_type, nullable=f.nullable))
    target = Table(
        quoted_name(table, True),
        MetaData(),
        *columns,
        schema=None if schema is None else quoted_name(schema, True),
    )
    ddl = str(CreateTable(target, if_not_exists=True).compile(dialect=_ddl_dialect())).strip()
    return sql.SQL(ddl)  # compiled from dialect-quoted identifiers and a fixed vocabulary of types


# -- checks ------------------------------------------------------------------------------------------


def compatible(t: pa.DataType, col: Column) -> bool:
    """Whether values of Arrow type ``t`` can be written into ``col`` without guessing."""
    base = col.base
    if pa.types.is_null(t):
        return True
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        return base not in _SPARK_CAST  # text is the input format of the types Spark has no type for
    if pa.types.is_boolean(t):
        return base == "bool"
    if pa.types.is_integer(t):
        return base in _INTS | _FLOATS | {"numeric"}
    if pa.types.is_floating(t) or pa.types.is_decimal(t):
        return base in _FLOATS | {"numeric"}
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return base == "bytea"
    if pa.types.is_date(t):
        return base in ("date", "timestamp", "timestamptz")
    if pa.types.is_timestamp(t):
        return base in ("timestamp", "timestamptz")
    if pa.types.is_time(t):
        return base in ("time", "timetz")
    if pa.types.is_duration(t):
        return base == "interval"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return col.category == "A" or base in _JSON
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return base in _JSON
    return False


def _q(name: str) -> str:
    """An identifier as SQL text, quoted where needed (for messages that suggest statements)."""
    return sql.Identifier(name).as_string(None)


def check_batch(target: TargetTable, batch: pa.RecordBatch, keys: Sequence[str], where: str) -> None:
    """Raise SchemaError / BadRecordError unless every row of ``batch`` can go into ``target``."""
    names = batch.schema.names
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise SchemaError(f"The batch has duplicate column names {dupes} ({where}).", "Rename or drop them.")
    table = target.display
    for f in batch.schema:
        col = target.column(f.name)
        if col is None:
            near = [c.name for c in target.columns if c.name.lower() == f.name.lower()]
            hint = f" (the table has {near[0]!r}: names are case-sensitive)" if near else ""
            raise SchemaError(
                f"Column {f.name!r} of the batch is not in table {table}{hint}.",
                f"Add it (ALTER TABLE {table} ADD COLUMN ...), or drop/rename it in the query.",
            )
        if col.generated or col.identity_always:
            raise SchemaError(
                f"Column {f.name!r} of table {table} is generated by the server and cannot be written.",
                "Drop the column from the query's output.",
            )
        if not compatible(f.type, col):
            cast = _SPARK_CAST.get(col.base)
            how = f"col({f.name!r}).cast({cast!r})" if cast else f"a type that fits {col.type_sql}"
            raise SchemaError(
                f"Column {f.name!r}: the stream's type {f.type} cannot be written into {table}.{_q(col.name)} of "
                f"type {col.type_sql}.",
                f"Cast the column in the query ({how}), or ALTER the column's type.",
            )
        if col.not_null and batch.column(names.index(f.name)).null_count and f.name not in keys:
            raise SchemaError(
                f"Column {f.name!r} has null values, but {table}.{_q(col.name)} is NOT NULL.",
                f"Filter or fill the nulls in the query, or ALTER TABLE {table} ALTER COLUMN {_q(col.name)} DROP "
                "NOT NULL.",
            )
    for col in target.columns:
        if col.not_null and not col.has_default and not col.generated and col.name not in names:
            raise SchemaError(
                f"Column {col.name!r} of table {table} is NOT NULL without a default, and the batch lacks it.",
                f"Add {col.name!r} to the query's output, or give the column a default.",
            )
    missing = [k for k in keys if k not in names]
    if missing:
        raise SchemaError(
            f"Key column(s) {missing} are not in the batch (columns: {names}) ({where}).",
            "Select the key columns in the query, or change the sink's key columns.",
        )
    for k in keys:
        if batch.column(names.index(k)).null_count:
            raise BadRecordError(
                f"A row has a null in key column {k!r} and cannot be upserted ({where}).",
                f"Filter out or fill rows where {k!r} is null before writing.",
            )
