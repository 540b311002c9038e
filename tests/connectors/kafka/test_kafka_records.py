"""Rows to Kafka records, without a broker: the columns Spark's Kafka sink reserves."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.kafka._records import check_schema
from eosink.errors import SchemaError

ROWS = pa.schema([("key", pa.string()), ("amount", pa.int64()), ("_eosink_key", pa.string())])


def test_a_key_column_the_idempotent_strategy_would_drop_is_refused() -> None:
    # Under idempotent writes the record key is made of the strategy's key columns: a column
    # named 'key' would be neither the record key nor in the JSON value.
    with pytest.raises(SchemaError) as info:
        check_schema(ROWS, "json", "t", ["_eosink_key"])
    assert "'key'" in str(info.value) and "withColumnRenamed" in str(info.value)


@pytest.mark.parametrize("upsert_keys", [[], ["key"], ["key", "amount"]])
def test_a_key_column_that_keys_the_records_is_accepted(upsert_keys: list[str]) -> None:
    check_schema(ROWS, "json", "t", upsert_keys)


def test_murmur2_of_many_keys_is_kafka_pythons_murmur2_of_each() -> None:
    """Every key length's word loop and tail (0 to 40 bytes), bytes with the high bit set included."""
    import random

    from kafka.partitioner.default import murmur2

    from eosink.connectors.kafka._murmur2 import murmur2_many, partitions_of

    rng = random.Random(7)
    keys = [bytes(rng.randrange(256) for _ in range(rng.randrange(41))) for _ in range(3000)] + [b"", b"\xff" * 9]
    assert murmur2_many(keys).tolist() == [murmur2(k) for k in keys]
    assert partitions_of(keys, 7).tolist() == [(murmur2(k) & 0x7FFFFFFF) % 7 for k in keys]


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        (pa.array([7, -3], pa.int64()), [b"[7]", b"[-3]"]),
        (pa.array([True, False]), [b"[true]", b"[false]"]),
        (pa.array(["a", "b"]), [b"a", b"b"]),
        (pa.array([1.5, 2.0]), [b"[1.5]", b"[2.0]"]),
    ],
)
def test_record_keys_of_one_key_column_are_its_json_list_or_its_text(column: pa.Array, expected: list[bytes]) -> None:
    from eosink.connectors.kafka._records import to_records

    data = pa.RecordBatch.from_arrays([column, pa.array([1, 2])], names=["k", "v"])
    records = to_records(data, value_format="json", default_topic="t", upsert_keys=["k"], limit=1 << 20, where="x")
    assert [r.key for r in records.rows()] == expected


def test_a_null_in_a_key_column_names_its_first_row() -> None:
    from eosink.connectors.kafka._records import to_records
    from eosink.errors import BadRecordError

    data = pa.RecordBatch.from_arrays([pa.array([1, 2, None]), pa.array(["a", None, "c"])], names=["a", "b"])
    with pytest.raises(BadRecordError, match=r"Row 1 of x has a null in key column 'b'"):
        to_records(data, value_format="json", default_topic="t", upsert_keys=["a", "b"], limit=1 << 20, where="x")


def _data(**columns: pa.Array) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def _records(data: pa.RecordBatch, **kwargs: Any) -> Any:
    from eosink.connectors.kafka._records import to_records

    options: dict[str, Any] = {"value_format": "raw", "default_topic": "t", "upsert_keys": [], "limit": 1 << 20}
    return to_records(data, **{**options, **kwargs}, where="batch 3")


def test_records_carry_spark_kafka_sinks_columns() -> None:
    headers = pa.array([[{"key": "h", "value": b"1"}, {"key": "n", "value": None}], None, []])
    data = _data(
        value=pa.array(["a", "é", ""]),
        key=pa.array([b"k", None, b""]),
        headers=headers,
        topic=pa.array(["x", None, "y"]),
        partition=pa.array([None, 2, 0], pa.int64()),
    )
    records = _records(data)
    assert [(r.topic, r.value, r.key, r.headers, r.partition) for r in records.rows()] == [
        ("x", b"a", b"k", [("h", b"1"), ("n", None)], None),
        ("t", "é".encode(), None, None, 2),
        ("y", b"", b"", None, 0),
    ]
    assert records.sizes().tolist() == [1 + 1 + (1 + 1) + (1 + 0), 2, 0]


@pytest.mark.parametrize(
    ("columns", "options", "message"),
    [
        ({"value": pa.array(["a", None, None])}, {}, r"Row 1 of batch 3 has a null value"),
        (
            {"value": pa.array(["a", "b"]), "topic": pa.array(["ok", None])},
            {"default_topic": None},
            r"Row 1 .* null topic",
        ),
        ({"value": pa.array(["a", "b", "c"]), "topic": pa.array(["ok", "t", "b/d"])}, {}, r"Row 2 .* topic 'b/d'"),
        ({"value": pa.array(["a", "b"]), "partition": pa.array([0, -1])}, {}, r"Row 1 of batch 3 names partition -1"),
        ({"value": pa.array(["a", "bcd"])}, {"limit": 2}, r"Row 1 of batch 3 makes a record of 3 bytes"),
        (
            {"value": pa.array(["a", "b"]), "headers": pa.array([[], [{"key": None, "value": b"x"}]])},
            {},
            r"Row 1 of batch 3 has a header with a null key",
        ),
        # the first bad row is named, whatever its problem
        ({"value": pa.array(["a", "bcd", None])}, {"limit": 2}, r"Row 1 of batch 3 makes a record"),
    ],
)
def test_the_first_bad_record_is_named(columns: dict[str, pa.Array], options: dict[str, Any], message: str) -> None:
    from eosink.errors import BadRecordError

    with pytest.raises(BadRecordError, match=message):
        _records(_data(**columns), **options)


def test_json_values_and_keys_are_json_of_each_row() -> None:
    import json

    data = _data(id=pa.array([1, 2]), name=pa.array(["ä", 'q"']), at=pa.array([0, 1], pa.timestamp("us", "UTC")))
    records = _records(data, value_format="json", upsert_keys=["id", "name"])
    value_json = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False).encode
    key_json = json.JSONEncoder(separators=(",", ":"), default=str).encode
    rows = data.to_pylist()
    assert [r.value for r in records.rows()] == [value_json(row).encode() for row in rows]
    assert [r.key for r in records.rows()] == [key_json([row["id"], row["name"]]).encode() for row in rows]
