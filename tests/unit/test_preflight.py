"""Sink.preflight without a server: the checks a sink makes on the stream's schema before the stream starts."""

from __future__ import annotations

import pyarrow as pa
import pytest

from eosink.connectors.kafka import KafkaConfig, KafkaSink
from eosink.errors import SchemaError


def test_kafka_refuses_a_stream_without_a_value_column_before_it_starts() -> None:
    """Pass: a raw-format stream lacking 'value' is the SchemaError a batch would raise, found by preflight; a
    stream with a string value and key passes; preflight opens no connection (the broker address is unused)."""
    sink = KafkaSink(KafkaConfig("127.0.0.1:9", topic="payments"))
    with pytest.raises(SchemaError, match="value"):
        sink.preflight(pa.schema([("id", pa.int64())]), strategy="2pc", upsert_keys=None, transactional=True)
    fine = pa.schema([("key", pa.string()), ("value", pa.string())])
    sink.preflight(fine, strategy="2pc", upsert_keys=None, transactional=True)
    sink.preflight(None, strategy="2pc", upsert_keys=None, transactional=True)
