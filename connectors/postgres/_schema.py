"""The target table as the sink sees it: reflection, Arrow -> PostgreSQL types, and the checks before a write.

Every check here runs before a row is sent, so a batch that does not fit raises
:class:`~eosink.errors.SchemaError` (or :class:`~eosink.errors.BadRecordError` for a null key)
while nothing of it exists anywhere.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from psycopg import Connection, sql

from eosink.errors import BadRecordError, SchemaError

__all__ = ["Column", "Target", "check_batch", "create_table_sql", "reflect"]

_INTS = {"int2", "int4", "int8"}
_FLOATS = {"float4", "float8"}
_JSON = {"json", "jsonb"}

_REFLECT = """
SELECT n.nspname, c.relname, c.relkind, a.attname, format_type(a.atttypid, a.atttypmod),
       COALESCE(bt.typname, t.typname), COALESCE(bt.typcategory, t.typcategory),
       a.attnotnull, a.atthasdef, a.attgenerated <> '', a.attidentity = 'a'
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
LEFT JOIN pg_catalog.pg_type bt ON t.typtype = 'd' AND bt.oid = t.typbasetype
WHERE c.oid = to_regclass(CASE WHEN %(schema)s::text IS NULL THEN format('%%I', %(table)s::text)
                               ELSE format('%%I.%%I', %(schema)s::text, %(table)s::text) END)
ORDER BY a.attnum
"""
_UNIQUE = """
SELECT ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) AS k(n)
             JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.n)
FROM pg_catalog.pg_index i
WHERE i.indrelid = format('%%I.%%I', %s::text, %s::text)::regclass
  AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
"""


@dataclass(frozen=True)
class Column:
    """One column of the target."""

    name: str
    type_sql: str
    """As ``format_type`` shows it (for messages)."""
    base: str
    """The base type's name (of a domain: its base type), e.g. ``int8``, ``text``, ``_int4``."""
    category: str
    """``pg_type.typcategory``: N numeric, S string, A array, D date/time, ..."""
    not_null: bool
    has_default: bool
    generated: bool
    identity_always: bool


@dataclass(frozen=True)
class Target:
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
        return f"{self.schema}.{self.name}"

    def column(self, name: str) -> Column | None:
        return next((c for c in self.columns if c.name == name), None)

    def signature(self) -> str:
        """What the staging table depends on: the qualified name and every column's name and type."""
        cols = "\x01".join(f"{c.name}\x02{c.type_sql}" for c in self.columns)
        return f"{self.schema}\x00{self.name}\x00{cols}"

    def has_unique(self, keys: Sequence[str]) -> bool:
        return frozenset(keys) in self.unique_keys


def reflect(conn: Connection[Any], schema: str | None, table: str) -> Target | None:
    """The target table, or None if it does not exist."""
    rows = conn.execute(_REFLECT, {"schema": schema, "table": table}).fetchall()
    if not rows:
        return None
    nsp, rel, kind = str(rows[0][0]), str(rows[0][1]), str(rows[0][2])
    columns = tuple(
        Column(str(r[3]), str(r[4]), str(r[5]), str(r[6]), bool(r[7]), bool(r[8]), bool(r[9]), bool(r[10]))
        for r in rows
    )
    unique = tuple(frozenset(str(n) for n in r[0]) for r in conn.execute(_UNIQUE, (nsp, rel)).fetchall())
    return Target(nsp, rel, kind, columns, unique)


def ddl_type(t: pa.DataType) -> str | None:
    """The PostgreSQL type ``create_table`` gives an Arrow type (a fixed vocabulary, never user text)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return "smallint"
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return "integer"
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return "bigint"
    if pa.types.is_uint64(t):
        return "numeric(20,0)"
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return "real"
    if pa.types.is_float64(t):
        return "double precision"
    if pa.types.is_decimal(t):
        return f"numeric({int(t.precision)},{int(t.scale)})"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t) or pa.types.is_null(t):
        return "text"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "bytea"
    if pa.types.is_date(t):
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp with time zone" if t.tz is not None else "timestamp without time zone"
    if pa.types.is_time(t):
        return "time without time zone"
    if pa.types.is_duration(t):
        return "interval"
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = t.value_type
        nested = pa.types.is_nested(inner) or pa.types.is_null(inner)
        element = None if nested else ddl_type(inner)
        return f"{element}[]" if element else "jsonb"
    if pa.types.is_struct(t) or pa.types.is_map(t):
        return "jsonb"
    return None


def _is_string_view(t: pa.DataType) -> bool:
    check = getattr(pa.types, "is_string_view", None)
    return bool(check(t)) if check else False


def create_table_sql(schema: str | None, table: str, arrow: pa.Schema) -> sql.Composed:
    """``CREATE TABLE IF NOT EXISTS`` the target with one column per Arrow field."""
    columns = []
    for f in arrow:
        pg_type = ddl_type(f.type)
        if pg_type is None:
            raise SchemaError(
                f"Column {f.name!r} has Arrow type {f.type}, for which create_table knows no PostgreSQL type.",
                "Create the table yourself (create_table=False), or cast the column in the query.",
            )
        columns.append(sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(pg_type)))
    name = sql.Identifier(table) if schema is None else sql.Identifier(schema, table)
    return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(name, sql.SQL(", ").join(columns))


def compatible(t: pa.DataType, col: Column) -> bool:
    """Whether values of Arrow type ``t`` can be written into ``col`` without guessing."""
    base = col.base
    if pa.types.is_null(t) or pa.types.is_string(t) or pa.types.is_large_string(t) or _is_string_view(t):
        return True  # text is every type's input format: the server parses (and rejects) per value
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


def check_batch(target: Target, batch: pa.RecordBatch, keys: Sequence[str], where: str) -> None:
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
            raise SchemaError(
                f"Column {f.name!r}: Arrow type {f.type} cannot be written into {table}.{col.name} of type "
                f"{col.type_sql}.",
                f"Cast the column in the query to a type that fits {col.type_sql}, or ALTER the column's type.",
            )
        if col.not_null and batch.column(names.index(f.name)).null_count and f.name not in keys:
            raise SchemaError(
                f"Column {f.name!r} has null values, but {table}.{col.name} is NOT NULL.",
                f"Filter or fill the nulls in the query, or ALTER TABLE {table} ALTER COLUMN ... DROP NOT NULL.",
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
