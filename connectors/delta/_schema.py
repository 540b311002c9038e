"""Schemas compared as Delta sees them: each column's Delta type (``long``, ``string``, ``decimal(10,2)``, structs).

Arrow types that Delta stores alike (``string`` and ``large_string``) compare equal; nullability
and field metadata are not compared (Spark's columns are nullable, and a Delta reader fills a
column a file lacks with nulls).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from eosink.errors import SchemaError

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

__all__ = ["check_batch", "delta_columns", "table_columns", "widened"]


def _plain(kind: Any) -> Any:
    """A Delta type's JSON without nullability or metadata, for comparing."""
    if isinstance(kind, dict):
        if kind.get("type") == "struct":
            return {"struct": [(f["name"], _plain(f["type"])) for f in kind["fields"]]}
        return {k: _plain(v) for k, v in kind.items() if k not in ("containsNull", "valueContainsNull")}
    return kind


def delta_columns(schema: pa.Schema) -> dict[str, Any]:
    """Column -> its Delta type, for an Arrow schema (a SchemaError names a type Delta cannot store)."""
    from deltalake import Schema

    try:
        doc = json.loads(Schema.from_arrow(schema).to_json())
    except Exception as exc:  # delta-rs raises its own kinds for unsupported types
        raise SchemaError(
            f"A column's type cannot be stored in a Delta table: {exc}.",
            "Cast the column in the query (e.g. to string, timestamp or decimal).",
        ) from None
    return {f["name"]: _plain(f["type"]) for f in doc["fields"]}


def table_columns(table: DeltaTable) -> dict[str, Any]:
    """Column -> its Delta type, for the table's current schema."""
    doc = json.loads(table.schema().to_json())
    return {f["name"]: _plain(f["type"]) for f in doc["fields"]}


def check_batch(
    table: dict[str, Any],
    batch: dict[str, Any],
    partition_by: tuple[str, ...],
    evolve: bool,
    where: str,
    allowed: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
) -> None:
    """Refuse a batch whose columns do not fit the table's, before anything of it is written.

    Every column the batch has must have the table's type; without ``evolve`` the batch must have
    every column of the table and no other; ``allowed`` columns (eosink's own key column) may be
    there or not; with ``evolve``, new columns are allowed (and added at commit), and columns may be
    left out, but never a ``required`` (NOT NULL) one."""
    wrong = [f"{c} ({batch[c]} where the table has {table[c]})" for c in batch if c in table and batch[c] != table[c]]
    if wrong:
        raise SchemaError(
            f"The columns of {where} do not have the Delta table's types: {', '.join(wrong)}.",
            "Cast them in the query to the table's types (eosink never changes a column's type).",
        )
    missing = [c for c in table if c not in batch and c not in partition_by and c not in allowed]
    extra = [c for c in batch if c not in table and c not in allowed]
    if missing and (not evolve or any(c in partition_by or c in required for c in missing)):
        raise SchemaError(
            f"{where} lacks the Delta table's columns {missing}.",
            "Select every column of the table in the query (or write to another table)"
            + (f"; {[c for c in missing if c in required]} are NOT NULL in the table." if evolve else "."),
        )
    if extra and not evolve:
        raise SchemaError(
            f"{where} has columns the Delta table does not have: {extra}.",
            "Drop them in the query, or configure the sink with schema_evolution='add_columns' to add them.",
        )


def widened(table_schema: pa.Schema, batch_schemas: list[pa.Schema]) -> pa.Schema | None:
    """The table's schema with the batch's new columns appended (nullable), or None when nothing is new."""
    import pyarrow as pa

    known = set(table_schema.names)
    added: list[pa.Field] = []
    for schema in batch_schemas:
        for f in schema:
            if f.name not in known:
                known.add(f.name)
                added.append(f.with_nullable(True))
    if not added:
        return None
    return pa.schema([*table_schema, *added])
