"""Tests of the Kafka connector need the Kafka service (``eosink services up kafka``)."""

from __future__ import annotations

from eosink.connectors.kafka.testing import KafkaHarness
from eosink.services.fixtures import *  # noqa: F403

HARNESS = KafkaHarness()
