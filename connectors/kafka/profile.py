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


def _security_options(args: argparse.Namespace) -> dict[str, Any]:
    """The TLS and SASL settings of the command line as kafka-python options (the password from its variable)."""
    import os

    options: dict[str, Any] = {}
    for arg, option in (
        ("security_protocol", "security_protocol"),
        ("sasl_mechanism", "sasl_mechanism"),
        ("sasl_username", "sasl_plain_username"),
        ("ssl_cafile", "ssl_cafile"),
        ("ssl_certfile", "ssl_certfile"),
        ("ssl_keyfile", "ssl_keyfile"),
    ):
        value = getattr(args, arg, None)
        if value:
            options[option] = value
    password = os.environ.get(getattr(args, "sasl_password_env", None) or "EOSINK_KAFKA_SASL_PASSWORD")
    if password and options.get("sasl_plain_username"):
        options["sasl_plain_password"] = password
    return options


class KafkaProfile(SinkProfile):
    """Kafka: transactions resumed by producer id and epoch, ListTransactions, keyed records."""

    name = "kafka"
    title = "Kafka"
    summary = "records produced from Arrow into a topic; transactions ended by the driver (2pc), idempotent keys"
    extra = "kafka"
    docs = "connectors/kafka.md"
    datasource = ("eosink.connectors.kafka", "KafkaConfig", "KafkaSink")
    services = ("kafka",)
    bench_topologies = ("single", "cluster")
    chaos_topologies = ("single", "cluster")
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
        secured = parser.add_argument_group("TLS and SASL (as in KafkaConfig.producer_options)")
        secured.add_argument("--security-protocol", choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
        secured.add_argument("--sasl-mechanism", help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
        secured.add_argument("--sasl-username", help="the SASL user (sasl_plain_username)")
        secured.add_argument(
            "--sasl-password-env",
            metavar="VAR",
            default="EOSINK_KAFKA_SASL_PASSWORD",
            help="the environment variable holding the SASL password (default: EOSINK_KAFKA_SASL_PASSWORD)",
        )
        secured.add_argument("--ssl-cafile", help="the CA certificate(s) that signed the brokers' (PEM)")
        secured.add_argument("--ssl-certfile", help="this client's certificate, for mutual TLS (PEM)")
        secured.add_argument("--ssl-keyfile", help="this client's private key, for mutual TLS (PEM)")

    def admin(self, args: argparse.Namespace) -> SinkAdmin:
        from eosink.connectors.kafka.admin import KafkaAdmin
        from eosink.connectors.kafka.config import KafkaConfig

        return KafkaAdmin(
            KafkaConfig(
                args.bootstrap_servers,
                topic=args.topic,
                progress_topic=args.progress_topic,
                transactional_id_prefix=args.transactional_id_prefix,
                producer_options=_security_options(args),
            )
        )

    def secrets_note(self) -> str:
        return (
            "The SASL password never goes on the command line: it is read from the variable --sasl-password-env "
            "names (EOSINK_KAFKA_SASL_PASSWORD by default). It is never printed."
        )

    def contract_harness(self, **options: Any) -> SinkHarness:
        from eosink.connectors.kafka.testing import KafkaHarness

        return KafkaHarness(**options)

    def chaos_target(self, root: Path | None = None, *, topology: str = "single") -> ChaosTarget:
        if topology == "cluster":
            from eosink.connectors.kafka._chaos_cluster import KafkaClusterChaosTarget

            return KafkaClusterChaosTarget(root)
        from eosink.connectors.kafka._chaos import KafkaChaosTarget

        return KafkaChaosTarget(root)

    def bench_adapter(self, *, topology: str = "single") -> BenchAdapter:
        from eosink.connectors.kafka._bench import KafkaAdapter

        return KafkaAdapter(topology=topology)

    def demo_target(self) -> DemoTarget:
        from eosink.connectors.kafka._demo import KafkaDemoTarget

        return KafkaDemoTarget()


PROFILE = KafkaProfile()
