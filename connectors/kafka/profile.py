"""The Kafka sink's profile: how eosink's tooling finds and drives this connector."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eosink.connectors.kafka._names import COMMIT_REQUEST
from eosink.profiles import SinkProfile

if TYPE_CHECKING:
    from eosink.admin import SinkAdmin
    from eosink.bench.runs import BenchAdapter
    from eosink.chaos.target import ChaosTarget
    from eosink.contracts.harness import SinkHarness
    from eosink.demo.target import DemoTarget

__all__ = ["PROFILE", "KafkaProfile"]


class KafkaProfile(SinkProfile):
    """Kafka: transactions resumed by producer id and epoch, ListTransactions, keyed records."""

    name = "kafka"
    title = "Kafka"
    summary = "records produced from Arrow into a topic; transactions ended by the driver (2pc), idempotent keys"
    extra = "kafka"
    docs = "connectors/kafka.md"
    datasource = ("eosink.connectors.kafka", "KafkaConfig", "KafkaSink")
    services = ("kafka",)
    #: A batch's commit ends with the EndTxn (commit) of its bundle transaction, sent by the driver's admin client
    #: ``eosink-bundles``: the API key and version, a correlation id, then that client id.
    commit_request_marker = COMMIT_REQUEST

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--bootstrap-servers", required=True, help="host:port[,host:port...] of the brokers")
        parser.add_argument("--topic", help="the sink's topic, as in KafkaConfig(topic=...)")
        parser.add_argument(
            "--progress-topic", default="eosink_progress", help="KafkaConfig.progress_topic (default: eosink_progress)"
        )
        parser.add_argument(
            "--transactional-id-prefix", default="eosink", help="KafkaConfig.transactional_id_prefix (default: eosink)"
        )

    def admin(self, args: argparse.Namespace) -> SinkAdmin:
        from eosink.connectors.kafka.admin import KafkaAdmin
        from eosink.connectors.kafka.config import KafkaConfig

        return KafkaAdmin(
            KafkaConfig(
                args.bootstrap_servers,
                topic=args.topic,
                progress_topic=args.progress_topic,
                transactional_id_prefix=args.transactional_id_prefix,
            )
        )

    def secrets_note(self) -> str:
        return (
            "SASL and TLS settings are not command-line options here: set them in a KafkaConfig(producer_options=...) "
            "and call KafkaAdmin(config).status() from Python. They are never printed."
        )

    def contract_harness(self, **options: Any) -> SinkHarness:
        from eosink.connectors.kafka.testing import KafkaHarness

        return KafkaHarness(**options)

    def chaos_target(self, root: Path | None = None) -> ChaosTarget:
        from eosink.connectors.kafka._chaos import KafkaChaosTarget

        return KafkaChaosTarget(root)

    def bench_adapter(self) -> BenchAdapter:
        from eosink.connectors.kafka._bench import KafkaAdapter

        return KafkaAdapter()

    def demo_target(self) -> DemoTarget:
        from eosink.connectors.kafka._demo import KafkaDemoTarget

        return KafkaDemoTarget()


PROFILE = KafkaProfile()
