"""KafkaSink passes the contract suite against a real broker, network faults included."""

from __future__ import annotations

from eosink.connectors.kafka.testing import KafkaHarness
from eosink.contracts import contract_tests
from eosink.contracts.fanout import fanout_contract_tests

TestKafkaContract = contract_tests(KafkaHarness())
TestKafkaFanOut = fanout_contract_tests(KafkaHarness())
