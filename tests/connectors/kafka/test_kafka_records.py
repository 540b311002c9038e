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
