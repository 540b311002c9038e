"""The demo's Kafka target (:class:`~eosink.demo.target.DemoTarget`).

A private :class:`~eosink.services.kafka.KafkaServer` of the demo's own and two topics of payments
(JSON records): ``payments_eosink``, written by :class:`~eosink.connectors.kafka.KafkaSink`, and
``payments_plain``, written by what Spark users have today, Spark's built-in Kafka sink
(``df.write.format("kafka")`` in ``foreachBatch``, at-least-once: a replayed batch is written
again). Both are read back as a ``read_committed`` consumer ends up reading them; under the
idempotent strategy eosink's records are keyed by payment id and count once per key (a compacted
topic).

eosink's fault proxy listens where the broker's ``PROXIED`` listener is advertised, so every
connection of the sink (metadata, produce, EndTxn) goes through it and an EndTxn reply can be cut.
Spark's Kafka sink reaches the broker's own listener: its producer is idempotent, so a cut reply
would be retried without a duplicate; its duplicates come from replayed batches.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosink.demo.target import JARS_VAR, Payment, Side

__all__ = ["KafkaDemoTarget"]

TOPICS: dict[Side, str] = {"eosink": "payments_eosink", "plain": "payments_plain"}
BOOTSTRAP_VARS: dict[Side, str] = {"eosink": "EOSINK_DEMO_EOSINK_BOOTSTRAP", "plain": "EOSINK_DEMO_PLAIN_BOOTSTRAP"}
PROGRESS_TOPIC = "eosink_demo_progress"
TXN_PREFIX = "eosink-demo"
PARTITIONS = 2


class KafkaDemoTarget:
    """Kafka, as the demo drives it."""

    title = "a private Kafka broker"
    plain_cuts = False
    plain_title = "Spark's Kafka sink"

    def __init__(self, root: Path | None = None) -> None:
        from eosink.chaos.target import PrivateRoot

        self.dir = PrivateRoot(root, "eosink-demo-kafka-")
        self.server: Any = None
        self._admin: Any = None

    def where(self, side: Side) -> str:
        return f"topic {TOPICS[side]}"

    # -- the runner's side ------------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.kafka import KafkaServer
        from eosink.services.spark_jars import SparkJars

        SparkJars().fetch("kafka")  # the plain writer's Kafka sink, fetched once into the cache

        self.server = KafkaServer(self.dir.open() / "kafka")
        self.server.start()
        self.admin().create_topics(
            {topic: {"num_partitions": PARTITIONS, "replication_factor": 1} for topic in TOPICS.values()},
            wait_for_metadata=True,
        )

    def close(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None
        if self.server is not None:
            self.server.close()
            self.server = None
        self.dir.close()

    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(
                bootstrap_servers=self.server.endpoint.bootstrap_servers,
                client_id="eosink-demo",
                request_timeout_ms=10_000,
            )
        return self._admin

    def address(self, side: Side) -> tuple[str, int]:
        port = self.server.proxied_port if side == "eosink" else self.server.broker_port
        return "127.0.0.1", int(port)

    def proxy_port(self, side: Side) -> int:
        return int(self.server.proxy_port) if side == "eosink" else 0

    def job_env(self, proxy_ports: dict[Side, int]) -> dict[str, str]:
        from eosink.services.spark_jars import SparkJars

        env = {BOOTSTRAP_VARS[side]: f"127.0.0.1:{port}" for side, port in proxy_ports.items()}
        env[JARS_VAR] = SparkJars().spark_conf("kafka")["spark.jars"]
        return env

    def counts(self) -> dict[Side, tuple[int, int]] | None:
        try:
            out: dict[Side, tuple[int, int]] = {}
            for side in TOPICS:
                ids = [int(v["id"]) for v in self._values(side)]
                out[side] = (len(ids), len(ids) - len(set(ids)))
            return out
        except Exception:  # the broker is busy or restarting: the view waits for the next poll
            return None

    def payments(self, side: Side) -> Counter[Payment]:
        return Counter((int(v["id"]), str(v["account"]), int(v["amount"])) for v in self._values(side))

    def _values(self, side: Side) -> list[dict[str, Any]]:
        from eosink.connectors.kafka.testing import committed_json

        return committed_json(self.admin(), TOPICS[side])

    def in_doubt(self) -> int:
        from eosink.connectors.kafka.admin import KafkaAdmin

        apps = KafkaAdmin(self._config(self.server.endpoint.bootstrap_servers)).status().apps
        return sum(len(app.in_doubt) for app in apps)

    # -- the job's side ------------------------------------------------------------------------------

    def _config(self, bootstrap: str) -> Any:
        from eosink.connectors.kafka import KafkaConfig

        return KafkaConfig(
            bootstrap,
            topic=TOPICS["eosink"],
            value_format="json",
            progress_topic=PROGRESS_TOPIC,
            transactional_id_prefix=TXN_PREFIX,
        )

    def job_sink(self, app_id: str) -> Any:
        from eosink.connectors.kafka import KafkaSink

        return KafkaSink(self._config(os.environ[BOOTSTRAP_VARS["eosink"]]))

    def job_plain_writer(self) -> Callable[[Any, int], None]:
        bootstrap, topic = os.environ[BOOTSTRAP_VARS["plain"]], TOPICS["plain"]

        def write(df: Any, batch_id: int) -> None:
            out = df.selectExpr("to_json(struct(*)) AS value")
            out.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("topic", topic).save()

        return write

    def scrub(self, text: str) -> str:
        return text  # the demo's broker has no credentials
