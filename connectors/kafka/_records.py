"""Arrow rows into Kafka records, with Spark's Kafka-sink column conventions.

Columns: ``value`` (string or binary, required with ``value_format="raw"``), and optionally
``key`` (string or binary), ``headers`` (a list of ``{key: string, value: binary}``), ``topic``
(string) and ``partition`` (int). With ``value_format="json"`` the value is every other column
as one JSON object. Every row of an Arrow batch is converted and checked before any is sent, so
a bad record stops the participant with nothing of that batch sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from eosink.connectors.kafka.config import TOPIC_NAME_RULE, is_topic_name
from eosink.errors import BadRecordError, SchemaError

__all__ = ["KAFKA_COLUMNS", "Record", "to_records"]

KAFKA_COLUMNS = ("key", "value", "headers", "topic", "partition")
"""Columns with a meaning of their own, as in ``df.write.format("kafka")``."""

Header = tuple[str, bytes | None]

_value_json = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
_key_json = json.JSONEncoder(separators=(",", ":"), default=str).encode


@dataclass(frozen=True)
class Record:
    """One record to send."""

    topic: str
    value: bytes | None
    key: bytes | None
    headers: list[Header] | None
    partition: int | None

    @property
    def size(self) -> int:
        """Bytes of key, value and headers (what counts against the broker's record size limit)."""
        n = len(self.value or b"") + len(self.key or b"")
        for name, value in self.headers or ():
            n += len(name.encode()) + len(value or b"")
        return n


def _is_text(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def _is_bytes(t: pa.DataType) -> bool:
    return bool(pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t))


def check_schema(schema: pa.Schema, value_format: str, default_topic: str | None, upsert_keys: Sequence[str]) -> None:
    """SchemaError naming the column when ``schema`` cannot be written as Kafka records."""
    names = schema.names
    fix_types = "Cast it in the query, as for Spark's Kafka sink: df.selectExpr('CAST(value AS STRING) AS value', ...)."
    for name in ("key", "value"):
        if name in names and not (_is_text(schema.field(name).type) or _is_bytes(schema.field(name).type)):
            if name == "value" and value_format == "json":
                continue
            raise SchemaError(
                f"Column {name!r} is {schema.field(name).type}; Kafka records need string or binary.", fix_types
            )
    if value_format == "raw" and "value" not in names:
        raise SchemaError(
            f"The rows have no 'value' column (columns: {names}); a Kafka record needs one.",
            "Select a string or binary column AS value, or use KafkaConfig(value_format='json') to send each row "
            "as a JSON object.",
        )
    if "topic" in names and not _is_text(schema.field("topic").type):
        raise SchemaError(f"Column 'topic' is {schema.field('topic').type}, not a string.", fix_types)
    if "topic" not in names and default_topic is None:
        raise SchemaError(
            "The rows have no 'topic' column and the sink has no topic.",
            "Pass KafkaConfig(topic=...) or add a string column 'topic'.",
        )
    if "partition" in names and not pa.types.is_integer(schema.field("partition").type):
        raise SchemaError(f"Column 'partition' is {schema.field('partition').type}, not an integer.", fix_types)
    if "headers" in names:
        t = schema.field("headers").type
        listed = pa.types.is_list(t) or pa.types.is_large_list(t)
        item = t.value_type if listed else None
        if item is None or not pa.types.is_struct(item) or not {f.name for f in item} >= {"key", "value"}:
            raise SchemaError(
                f"Column 'headers' is {t}; Kafka headers are a list of structs (key string, value binary).",
                "Build it as in Spark's Kafka sink: array(struct('h1' AS key, CAST(x AS BINARY) AS value)).",
            )
    if upsert_keys and "key" in names and "key" not in upsert_keys:
        raise SchemaError(
            f"Column 'key' would be the records' key, but the idempotent strategy keys them by {list(upsert_keys)}: "
            "the column would be lost.",
            "Rename it to keep it in the value (df.withColumnRenamed('key', ...)), or key the records by it: "
            "Idempotent(['key']).",
        )
    missing = [k for k in upsert_keys if k not in names]
    if missing:
        raise SchemaError(
            f"Key column(s) {missing} are not in the rows (columns: {names}).",
            "Select the key columns in the query, or change the sink's key columns.",
        )


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    return bytes(value)


def to_records(
    data: pa.RecordBatch,
    *,
    value_format: str,
    default_topic: str | None,
    upsert_keys: Sequence[str],
    limit: int,
    where: str,
) -> list[Record]:
    """Every row of ``data`` as a record; BadRecordError for the first row that cannot be one."""
    check_schema(data.schema, value_format, default_topic, upsert_keys)
    names = data.schema.names
    n = data.num_rows
    column = {name: data.column(names.index(name)).to_pylist() for name in KAFKA_COLUMNS if name in names}
    if value_format == "json":
        rest = [name for name in names if name not in KAFKA_COLUMNS]
        rows = data.select(rest).to_pylist()
        values: list[bytes | None] = [_value_json(row).encode() for row in rows]
    else:
        values = [_as_bytes(v) for v in column["value"]]
    keys = _keys(data, upsert_keys, column.get("key"), n, where)
    topics = column.get("topic") or [default_topic] * n
    partitions = column.get("partition") or [None] * n
    headers = column.get("headers") or [None] * n
    out: list[Record] = []
    for i in range(n):
        if values[i] is None:
            raise BadRecordError(
                f"Row {i} of {where} has a null value; a record needs one.",
                "Filter out rows with a null value, or give them one (coalesce).",
            )
        topic = topics[i]
        if topic is None:
            raise BadRecordError(
                f"Row {i} of {where} has a null topic and the sink has no default topic.",
                "Fill the topic column, or pass KafkaConfig(topic=...).",
            )
        if topic != default_topic and not is_topic_name(topic):
            raise BadRecordError(
                f"Row {i} of {where} names topic {topic!r}, not a valid Kafka topic name.", TOPIC_NAME_RULE
            )
        partition = partitions[i]
        if partition is not None and partition < 0:
            raise BadRecordError(f"Row {i} of {where} names partition {partition}.", "Use a partition number >= 0.")
        hs = [(str(h["key"]), _as_bytes(h["value"])) for h in headers[i]] if headers[i] else None
        record = Record(str(topic), values[i], keys[i], hs, partition)
        if record.size > limit:
            raise BadRecordError(
                f"Row {i} of {where} makes a record of {record.size} bytes, over the limit of {limit} bytes.",
                "Make the record smaller, or raise the limit: the topic's max.message.bytes and the producer's "
                "max_request_size (KafkaConfig(producer_options={'max_request_size': ...}), max_record_bytes).",
            )
        out.append(record)
    return out


def _keys(
    data: pa.RecordBatch, upsert_keys: Sequence[str], key_column: list[Any] | None, n: int, where: str
) -> list[bytes | None]:
    """Record keys: the upsert key columns when given (idempotent writes), else the ``key`` column, else none."""
    if not upsert_keys:
        return [_as_bytes(k) for k in key_column] if key_column is not None else [None] * n
    arrays = [data.column(data.schema.names.index(k)) for k in upsert_keys]
    nulls = [i for a in arrays if a.null_count for i, valid in enumerate(a.is_valid().to_pylist()) if not valid]
    if nulls:
        i = min(nulls)
        name = next(k for k, a in zip(upsert_keys, arrays, strict=True) if not a[i].is_valid)
        raise BadRecordError(
            f"Row {i} of {where} has a null in key column {name!r}; its record key would be null.",
            f"Filter out or fill rows where {name!r} is null before writing.",
        )
    columns = [a.to_pylist() for a in arrays]
    if len(columns) == 1:
        if pa.types.is_integer(arrays[0].type):  # what _key_json makes of [v], without its cost per row
            return [b"[%d]" % v for v in columns[0]]
        return [_as_bytes(v) if isinstance(v, str | bytes) else _key_json([v]).encode() for v in columns[0]]
    return [_key_json(list(values)).encode() for values in zip(*columns, strict=True)]
