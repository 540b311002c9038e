"""Kafka connector: :class:`KafkaSink`, exactly-once writes into Kafka topics, every strategy.

Needs ``pip install 'eosink[kafka]'`` (kafka-python 3.0). See :mod:`eosink.connectors.kafka.sink`
for how each operation of the sink contract maps onto Kafka transactions.
"""

from eosink.connectors.kafka import _redact
from eosink.connectors.kafka.config import KafkaConfig
from eosink.connectors.kafka.sink import KafkaSink

_redact.install()  # kafka-python's admin client logs its configuration, SASL password included

__all__ = ["KafkaConfig", "KafkaSink"]
