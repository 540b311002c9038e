"""Broker settings are read from the first listed broker that answers: a node that died stays listed (until the
controller fences it) and must not stop a query's setup on a cluster that still serves (kafka-python refuses to
ask a broker it dropped from its metadata: UnknownBrokerIdError)."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.errors import KafkaConnectionError, UnknownBrokerIdError

from eosink.connectors.kafka import KafkaConfig, KafkaSink, _wire
from eosink.connectors.kafka._two_phase import _ask
from eosink.errors import ConfigurationError

NAME = "transaction.max.timeout.ms"


class _Admin:
    """describe_cluster lists brokers 1 to 3; ``dead`` ones raise, the others answer ``values[broker]``."""

    def __init__(self, values: dict[int, str], dead: dict[int, Exception]) -> None:
        self.values, self.dead, self.asked = values, dead, []

    def describe_cluster(self) -> dict[str, Any]:
        return {"brokers": [{"broker_id": b} for b in (1, 2, 3)]}

    def describe_configs(self, resources: list[Any], config_filter: str) -> Any:
        broker = int(resources[0].name)
        self.asked.append(broker)
        if broker in self.dead:
            raise self.dead[broker]
        return [{"resources": [{"configs": {resources[0].configs[0]: {"value": self.values[broker]}}}]}]

    def api_versions(self) -> dict[Any, tuple[int, int]]:
        from kafka.protocol.api_key import ApiKey

        return {ApiKey.InitProducerId: (0, 6)}


def test_a_dead_listed_broker_is_passed_over_for_the_next_that_answers() -> None:
    admin = _Admin({2: "900000", 3: "1"}, {1: UnknownBrokerIdError(1)})
    assert next(_wire.broker_settings(admin, NAME)) == "900000"
    assert admin.asked == [1, 2]  # the first that answers is enough


def test_setup_checks_the_transaction_timeout_against_a_broker_that_answers() -> None:
    sink = KafkaSink(KafkaConfig("127.0.0.1:9", topic="t", transaction_timeout_ms=600_000))
    sink._check_timeout(_Admin({2: "900000"}, {1: UnknownBrokerIdError(1)}))  # within broker 2's limit
    with pytest.raises(ConfigurationError, match=r"transaction\.max\.timeout\.ms=300000"):
        sink._check_timeout(_Admin({2: "300000"}, {1: UnknownBrokerIdError(1)}))


def test_no_broker_answering_is_the_last_error() -> None:
    admin = _Admin({}, {b: KafkaConnectionError(f"node {b}") for b in (1, 2, 3)})
    with pytest.raises(KafkaConnectionError, match="node 3"):
        list(_wire.broker_settings(admin, NAME))


def test_two_phase_commit_is_decided_by_the_brokers_that_answer() -> None:
    assert _ask(_Admin({2: "true", 3: "true"}, {1: UnknownBrokerIdError(1)}))
    assert not _ask(_Admin({2: "true", 3: "false"}, {1: UnknownBrokerIdError(1)}))
    assert not _ask(_Admin({}, {b: UnknownBrokerIdError(b) for b in (1, 2, 3)}))
