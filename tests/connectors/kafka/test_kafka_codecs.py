"""Each codec Spark's Kafka sink offers, written by the sink and read back by Kafka's own Java consumer.

The sink compresses its record batches with kafka-python's codecs over C libraries (zlib,
python-snappy, lz4, zstandard); a consumer of another client must decode them: the test reads
every batch with the Java console consumer of the broker's own Kafka version, at
``read_committed``, and checks that the log's batches carry the codec.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosink.connectors.kafka import _wire
from eosink.connectors.kafka.config import COMPRESSIONS
from eosink.connectors.kafka.testing import KafkaHarness, java_consume
from eosink.contracts.harness import Namespace

from .conftest import HARNESS
from .test_kafka_bad_input import TWO_PC, Driver, batches, expected

CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
"""The codec number in a record batch's attributes."""


@pytest.mark.parametrize("codec", COMPRESSIONS)
def test_each_codec_is_read_back_by_kafkas_java_consumer(tmp_path: Path, ns: Namespace, codec: str) -> None:
    HARNESS.create_topics(ns)
    config = HARNESS.config(ns, compression=codec)
    driver = Driver(tmp_path, TWO_PC, config)
    work = batches(4)
    driver.run(work)
    driver.close()
    admin, topic = HARNESS.admin(), HARNESS.topic(ns)
    codecs = {
        batch.compression_type
        for p in range(KafkaHarness.partitions)
        for batch, _ in _wire._fetch(admin, topic, p, 0)[2]
        if not batch.is_control_batch
    }
    assert codecs == {CODEC_IDS[codec]}, f"the log's batches carry codecs {codecs}"
    want = expected(work)
    read = java_consume(config.bootstrap_servers, topic, sum(want.values()))  # type: ignore[arg-type]
    assert Counter(json.dumps(json.loads(value), sort_keys=True) for _, value in read) == want


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Namespace]:
    made = Namespace(f"codec{uuid.uuid4().hex[:8]}", tmp_path / "ns")
    yield made
    HARNESS.cleanup(made)
