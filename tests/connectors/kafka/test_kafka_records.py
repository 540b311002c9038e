"""Rows to Kafka records, without a broker: the columns Spark's Kafka sink reserves."""

from __future__ import annotations

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
    assert [r.key for r in records] == expected


def test_a_null_in_a_key_column_names_its_first_row() -> None:
    from eosink.connectors.kafka._records import to_records
    from eosink.errors import BadRecordError

    data = pa.RecordBatch.from_arrays([pa.array([1, 2, None]), pa.array(["a", None, "c"])], names=["a", "b"])
    with pytest.raises(BadRecordError, match=r"Row 1 of x has a null in key column 'b'"):
        to_records(data, value_format="json", default_topic="t", upsert_keys=["a", "b"], limit=1 << 20, where="x")
