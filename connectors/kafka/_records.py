"""Arrow rows into Kafka records, with Spark's Kafka-sink column conventions.

Columns: ``value`` (string or binary, required with ``value_format="raw"``), and optionally
``key`` (string or binary), ``headers`` (a list of ``{key: string, value: binary}``), ``topic``
(string) and ``partition`` (int). With ``value_format="json"`` the value is every other column
as one JSON object. Every row of an Arrow batch is converted and checked before any is sent, so
a bad record stops the participant with nothing of that batch sent.

The records stay columns (:class:`Records`: Arrow arrays of values, keys, headers, topics and
partitions): values and keys are computed by Arrow's kernels (``_json``), checks are array
operations, and the bulk sender frames them into record batches from the arrays. No Python
object is made per record.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from eosink.connectors.kafka._json import json_arrays, json_objects
from eosink.connectors.kafka.config import TOPIC_NAME_RULE, is_topic_name
from eosink.errors import BadRecordError, SchemaError

__all__ = ["KAFKA_COLUMNS", "Record", "Records", "lengths", "to_records"]

KAFKA_COLUMNS = ("key", "value", "headers", "topic", "partition")
"""Columns with a meaning of their own, as in ``df.write.format("kafka")``."""

Header = tuple[str, bytes | None]

_BINARY = pa.binary()
_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


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


@dataclass(frozen=True)
class Records:
    """A batch's records, column by column (equal-length Arrow arrays)."""

    values: pa.Array
    """Binary, no nulls."""
    keys: pa.Array | None
    """Binary, null for a record with no key; None when no record has one."""
    headers: pa.Array | None
    """``list<struct<key: string, value: binary>>``; None when no record has headers."""
    topics: pa.Array | None
    """String, one per record; None when every record goes to ``topic``."""
    topic: str | None
    partitions: pa.Array | None
    """int32, null where the partitioner chooses; None when it chooses for every record."""

    def __len__(self) -> int:
        return len(self.values)

    def take(self, rows: Any) -> Records:
        """The records at ``rows`` (indices), in that order."""

        def pick(a: pa.Array | None) -> pa.Array | None:
            return None if a is None else a.take(rows)

        values = self.values.take(rows)
        return Records(
            values, pick(self.keys), pick(self.headers), pick(self.topics), self.topic, pick(self.partitions)
        )

    def sizes(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Bytes of each record's key, value and headers (what counts against the record size limit)."""
        n = lengths(self.values)
        if self.keys is not None:
            n += lengths(self.keys)
        if self.headers is not None:
            entries = self.headers.values.flatten()
            per_entry = lengths(entries[0]) + lengths(entries[1])
            ends = np.concatenate([[0], np.cumsum(per_entry)])
            offsets = self.headers.offsets.to_numpy()
            n += ends[offsets[1:]] - ends[offsets[:-1]]
        return n

    def rows(self) -> list[Record]:
        """One :class:`Record` per record (for tests, and brokers too old for bulk batches)."""
        n = len(self)
        topics = pc.fill_null(self.topics, self.topic).to_pylist() if self.topics is not None else [self.topic] * n
        keys = self.keys.to_pylist() if self.keys is not None else [None] * n
        partitions = self.partitions.to_pylist() if self.partitions is not None else [None] * n
        headers: list[Any] = self.headers.to_pylist() if self.headers is not None else [None] * n
        return [
            Record(
                str(topics[i]),
                v,
                keys[i],
                [(h["key"], h["value"]) for h in headers[i]] if headers[i] else None,
                partitions[i],
            )
            for i, v in enumerate(self.values.to_pylist())
        ]

    @classmethod
    def of(cls, records: Sequence[Record]) -> Records:
        """The columns of ``records`` (for tests)."""
        topics = {r.topic for r in records}
        keys = [r.key for r in records]
        headers = [None if r.headers is None else [{"key": k, "value": v} for k, v in r.headers] for r in records]
        partitions = [r.partition for r in records]
        return cls(
            pa.array([r.value for r in records], _BINARY),
            pa.array(keys, _BINARY) if any(k is not None for k in keys) else None,
            pa.array(headers, _HEADERS) if any(h is not None for h in headers) else None,
            None if len(topics) <= 1 else pa.array([r.topic for r in records], pa.string()),
            next(iter(topics)) if len(topics) == 1 else None,
            pa.array(partitions, pa.int32()) if any(p is not None for p in partitions) else None,
        )


def to_records(
    data: pa.RecordBatch,
    *,
    value_format: str,
    default_topic: str | None,
    upsert_keys: Sequence[str],
    limit: int,
    where: str,
) -> Records:
    """Every row of ``data`` as a record; BadRecordError for the first row that cannot be one."""
    check_schema(data.schema, value_format, default_topic, upsert_keys)
    names = data.schema.names

    def column(name: str) -> pa.Array | None:
        return data.column(names.index(name)) if name in names else None

    if value_format == "json":
        values = json_objects(data, [name for name in names if name not in KAFKA_COLUMNS]).cast(_BINARY)
    else:
        values = _binary(column("value"))
    keys = _keys(data, upsert_keys, column("key"), where)
    topics = column("topic")
    partitions = column("partition")
    headers = column("headers")
    records = Records(
        values,
        keys,
        None if headers is None else _headers(headers),
        None if topics is None else topics.cast(pa.string()),
        default_topic,
        None if partitions is None else partitions.cast(pa.int32()),
    )
    _check(records, limit, where)
    return records


def _check(records: Records, limit: int, where: str) -> None:
    """BadRecordError for the first record that cannot be sent (a row's own checks in this order)."""
    found: list[tuple[int, int, str, str]] = []  # (row, check, problem, fix)

    def first(mask: pa.Array | np.ndarray[Any, Any]) -> int | None:
        if isinstance(mask, pa.Array | pa.ChunkedArray):
            mask = pc.fill_null(mask, False).to_numpy(zero_copy_only=False)
        rows = np.flatnonzero(mask)
        return int(rows[0]) if len(rows) else None

    def add(check: int, i: int | None, problem: str, fix: str) -> None:
        if i is not None:
            found.append((i, check, problem.replace("{i}", str(i)), fix))

    add(
        0,
        first(records.values.is_null()),
        f"Row {{i}} of {where} has a null value; a record needs one.",
        "Filter out rows with a null value, or give them one (coalesce).",
    )
    topics = records.topics
    if topics is not None:
        if records.topic is None:
            add(
                1,
                first(topics.is_null()),
                f"Row {{i}} of {where} has a null topic and the sink has no default topic.",
                "Fill the topic column, or pass KafkaConfig(topic=...).",
            )
        bad = [t for t in pc.unique(topics.drop_null()).to_pylist() if t != records.topic and not is_topic_name(t)]
        i = first(pc.is_in(topics, pa.array(bad, pa.string()))) if bad else None
        if i is not None:
            add(
                2,
                i,
                f"Row {{i}} of {where} names topic {topics[i].as_py()!r}, not a valid Kafka topic name.",
                TOPIC_NAME_RULE,
            )
    if records.partitions is not None:
        i = first(pc.less(records.partitions, 0))
        if i is not None:
            add(
                3,
                i,
                f"Row {{i}} of {where} names partition {records.partitions[i].as_py()}.",
                "Use a partition number >= 0.",
            )
    if records.headers is not None:
        add(
            4,
            first(_null_header_keys(records.headers)),
            f"Row {{i}} of {where} has a header with a null key.",
            "Give every header a key (a string).",
        )
    sizes = records.sizes()
    i = first(sizes > limit)
    if i is not None:
        add(
            5,
            i,
            f"Row {{i}} of {where} makes a record of {int(sizes[i])} bytes, over the limit of {limit} bytes.",
            "Make the record smaller, or raise the limit: the topic's max.message.bytes and the producer's "
            "max_request_size (KafkaConfig(producer_options={'max_request_size': ...}), max_record_bytes).",
        )
    if found:
        _, _, problem, fix = min(found)
        raise BadRecordError(problem, fix)


def _null_header_keys(headers: pa.Array) -> np.ndarray[Any, Any]:
    """Per record, whether one of its headers has a null key."""
    entries = headers.values.flatten()
    null_key = entries[0].is_null().cast(pa.int64()).to_numpy(zero_copy_only=False)
    ends = np.concatenate([[0], np.cumsum(null_key)])
    offsets = headers.offsets.to_numpy()
    flagged: np.ndarray[Any, Any] = (ends[offsets[1:]] - ends[offsets[:-1]]) > 0
    return flagged


def _headers(array: pa.Array) -> pa.Array:
    """A headers column as ``list<struct<key: string, value: binary>>`` (other struct fields dropped)."""
    if pa.types.is_large_list(array.type):
        array = array.cast(pa.list_(array.type.value_field))
    entries = array.values
    fields = pa.StructArray.from_arrays(
        [entries.field("key").cast(pa.string()), entries.field("value").cast(_BINARY)],
        names=["key", "value"],
        mask=entries.is_null() if entries.null_count else None,
    )
    return pa.ListArray.from_arrays(array.offsets, fields, mask=array.is_null() if array.null_count else None)


def _binary(array: pa.Array | None) -> pa.Array:
    assert array is not None
    if pa.types.is_dictionary(array.type):
        array = array.dictionary_decode()
    return array if array.type == _BINARY else array.cast(_BINARY)


def lengths(array: pa.Array) -> np.ndarray[Any, np.dtype[np.int64]]:
    """Byte length of each value, 0 for nulls."""
    found: np.ndarray[Any, np.dtype[np.int64]] = (
        pc.fill_null(pc.binary_length(array), 0).cast(pa.int64()).to_numpy(zero_copy_only=False).copy()
    )
    return found


def _keys(data: pa.RecordBatch, upsert_keys: Sequence[str], key_column: pa.Array | None, where: str) -> pa.Array | None:
    """Record keys: the upsert key columns when given (idempotent writes), else the ``key`` column, else none.

    From key columns: one string or binary column is its bytes, one integer column ``[n]``, any
    other column or several the JSON list of the row's values in ASCII, as ``json.dumps`` makes it.
    """
    if not upsert_keys:
        return None if key_column is None else _binary(key_column)
    names = data.schema.names
    arrays = [data.column(names.index(k)) for k in upsert_keys]
    arrays = [a.dictionary_decode() if pa.types.is_dictionary(a.type) else a for a in arrays]
    nulls = [
        (int(np.flatnonzero(a.is_null().to_numpy(zero_copy_only=False))[0]), k)
        for k, a in zip(upsert_keys, arrays, strict=True)
        if a.null_count
    ]
    if nulls:
        i, name = min(nulls, key=lambda found: found[0])
        raise BadRecordError(
            f"Row {i} of {where} has a null in key column {name!r}; its record key would be null.",
            f"Filter out or fill rows where {name!r} is null before writing.",
        )
    if len(arrays) == 1:
        t = arrays[0].type
        if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
            return _binary(arrays[0])
    return json_arrays(arrays, ascii_only=True).cast(_BINARY)
