"""kafka-python's own log records never show a secret setting (its admin client logs its settings at DEBUG)."""

from __future__ import annotations

import logging

import pytest

import eosink.connectors.kafka  # noqa: F401  (installs the filter)


def test_the_admin_clients_settings_are_logged_without_secrets(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="kafka")
    settings = {"bootstrap_servers": "b:9092", "sasl_plain_password": "s3cret-pw", "ssl_password": "key-pw"}
    logging.getLogger("kafka.admin.client").debug("Starting KafkaAdminClient with configuration: %s", settings)
    assert "b:9092" in caplog.text
    assert "s3cret-pw" not in caplog.text and "key-pw" not in caplog.text
    assert caplog.text.count("***") == 2


def test_the_real_admin_client_logs_no_password(caplog: pytest.LogCaptureFixture) -> None:
    """kafka-python's own call, not a copy of it: an admin client that cannot bootstrap still logs its settings."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    caplog.set_level(logging.DEBUG, logger="kafka")
    with pytest.raises(KafkaError):
        KafkaAdminClient(
            bootstrap_servers="127.0.0.1:1",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username="writer",
            sasl_plain_password="s3cret-pw",
            bootstrap_timeout_ms=200,
        )
    assert "Starting KafkaAdminClient" in caplog.text
    assert "s3cret-pw" not in caplog.text
