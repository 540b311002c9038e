"""What a Delta table asks of every row written to it, beyond column types.

eosink writes Parquet files from Arrow and names them in the log; no expression engine checks the
rows on the way. So the rules a table declares are either enforced here or refused up front:

- NOT NULL columns (top level, and fields nested in structs, arrays and maps): a batch holding a
  null where the table forbids one is a :class:`BadRecordError` before the rows reach a file;
  a batch lacking such a column altogether is a :class:`SchemaError`.
- CHECK constraints, column invariants, generated and identity columns, column mapping and row
  tracking: refused with a :class:`SchemaError` when the sink opens the table, since a file written
  without them would break the table for every writer that honours them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eosink.errors import BadRecordError, SchemaError

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

__all__ = ["TableRules", "table_rules"]

# field metadata keys of rules eosink does not evaluate, and what each is called
_FIELD_RULES = (
    ("delta.invariants", "column invariant"),
    ("delta.generationExpression", "generated column"),
    ("delta.identity.", "identity column"),
)


def _holds_required(kind: Any) -> bool:
    """Whether a Delta type (JSON) has a NOT NULL field, element or value anywhere inside."""
    if not isinstance(kind, dict):
        return False
    if kind.get("type") == "struct":
        return any(not f["nullable"] or _holds_required(f["type"]) for f in kind["fields"])
    if kind.get("type") == "array":
        return not kind["containsNull"] or _holds_required(kind["elementType"])
    if kind.get("type") == "map":
        return not kind["valueContainsNull"] or _holds_required(kind["valueType"])
    return False


def _field_rules(fields: list[dict[str, Any]], prefix: str = "") -> list[str]:
    found = []
    for f in fields:
        path = f"{prefix}{f['name']}"
        for key, what in _FIELD_RULES:
            if any(k.startswith(key) for k in f.get("metadata", {})):
                found.append(f"{what} {path!r}")
        kind = f["type"]
        if isinstance(kind, dict) and kind.get("type") == "struct":
            found += _field_rules(kind["fields"], f"{path}.")
    return found


def _nulls(path: str, kind: Any, arr: pa.Array, nullable: bool, outer_nulls: int, found: dict[str, int]) -> None:
    """Count nulls where ``path`` forbids them; ``arr`` carries its parents' nulls, ``outer_nulls`` of them."""
    import pyarrow as pa

    if not nullable and arr.null_count > outer_nulls:
        found[path] = arr.null_count - outer_nulls
    if not isinstance(kind, dict):
        return
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if kind.get("type") == "struct" and isinstance(arr, pa.StructArray):
        for f, child in zip(kind["fields"], arr.flatten(), strict=True):  # children with the struct's nulls
            _nulls(f"{path}.{f['name']}", f["type"], child, f["nullable"], arr.null_count, found)
    elif kind.get("type") == "array" and isinstance(arr, pa.ListArray | pa.LargeListArray):
        _nulls(f"{path}[]", kind["elementType"], arr.flatten(), kind["containsNull"], 0, found)
    elif kind.get("type") == "map" and isinstance(arr, pa.MapArray):
        values = arr.flatten().field(1)
        _nulls(f"{path}{{}}", kind["valueType"], values, kind["valueContainsNull"], 0, found)


def _declared(kind: pa.DataType, delta: Any) -> pa.DataType:
    """``kind`` with the nullability of its nested fields as the table declares them (``delta``, JSON)."""
    import pyarrow as pa

    if not isinstance(delta, dict):
        return kind
    if delta.get("type") == "struct" and pa.types.is_struct(kind):
        by_name = {f["name"]: f for f in delta["fields"]}
        fields = []
        for i in range(kind.num_fields):
            child, decl = kind.field(i), by_name.get(kind.field(i).name)
            if decl is not None:
                child = child.with_type(_declared(child.type, decl["type"])).with_nullable(decl["nullable"])
            fields.append(child)
        return pa.struct(fields)
    if delta.get("type") == "array" and (pa.types.is_list(kind) or pa.types.is_large_list(kind)):
        value = kind.value_field
        value = value.with_type(_declared(value.type, delta["elementType"])).with_nullable(delta["containsNull"])
        return pa.list_(value) if pa.types.is_list(kind) else pa.large_list(value)
    return kind


@dataclass(frozen=True)
class TableRules:
    """The table's NOT NULL columns, as Delta JSON fields (only those that are, or hold, one)."""

    required: tuple[dict[str, Any], ...] = ()

    @property
    def required_columns(self) -> tuple[str, ...]:
        """Top-level columns declared NOT NULL: a batch must have them."""
        return tuple(f["name"] for f in self.required if not f["nullable"])

    def check_rows(self, data: pa.RecordBatch, where: str) -> None:
        """Refuse ``data`` if it holds a null where the table forbids one (BadRecordError naming each place)."""
        found: dict[str, int] = {}
        for f in self.required:
            if f["name"] in data.schema.names:
                _nulls(f["name"], f["type"], data.column(f["name"]), f["nullable"], 0, found)
        if found:
            places = ", ".join(f"{path} ({n} null{'s' if n > 1 else ''})" for path, n in found.items())
            raise BadRecordError(
                f"{where} holds nulls where the Delta table declares NOT NULL: {places}.",
                "Filter or fill those rows in the query (e.g. coalesce), or make the columns nullable in the table.",
            )

    def conform(self, data: pa.RecordBatch) -> pa.RecordBatch:
        """``data`` (checked) declared as nullable as the table says, so that its files read back under the
        table's schema (a reader casts each file to it, and refuses nulls stored where the table forbids them,
        even under a null struct)."""
        import pyarrow as pa

        if not self.required:
            return data
        by_name = {f["name"]: f for f in self.required}
        fields, columns = [], []
        for field, column in zip(data.schema, data.columns, strict=True):
            decl = by_name.get(field.name)
            if decl is not None:
                field = field.with_type(_declared(field.type, decl["type"])).with_nullable(decl["nullable"])
                column = column.cast(field.type)
            fields.append(field)
            columns.append(column)
        return pa.RecordBatch.from_arrays(columns, schema=pa.schema(fields, data.schema.metadata))


def table_rules(table: DeltaTable, where: str) -> TableRules:
    """The rules of ``table`` eosink enforces; a SchemaError for a rule it would not (see the module)."""
    doc = json.loads(table.schema().to_json())
    config = table.metadata().configuration
    unenforced = [
        f"CHECK constraint {k.removeprefix('delta.constraints.')!r} ({v})"
        for k, v in config.items()
        if k.startswith("delta.constraints.")
    ]
    unenforced += _field_rules(doc["fields"])
    if config.get("delta.columnMapping.mode", "none") != "none":
        unenforced.append(f"column mapping (mode {config['delta.columnMapping.mode']!r})")
    if config.get("delta.enableRowTracking", "false").lower() == "true":
        unenforced.append("row tracking")
    if unenforced:
        raise SchemaError(
            f"The Delta table at {where} declares rules eosink's writer does not enforce: {', '.join(unenforced)}. "
            "Files written without them would break the table for every writer that honours them.",
            "Write to a table without them (check such rules in the query instead: filter, or compute the column), "
            "or drop them from the table (DeltaTable.alter.drop_constraint for a CHECK constraint).",
        )
    return TableRules(tuple(f for f in doc["fields"] if not f["nullable"] or _holds_required(f["type"])))
