"""The chaos harness's Kafka target (:class:`~eosink.chaos.target.ChaosTarget`).

A private :class:`~eosink.services.kafka.KafkaServer` that the harness restarts and crashes on
purpose; :class:`~eosink.connectors.kafka.KafkaSink` writing JSON records into the schedule's
topic (two partitions); Spark's own Kafka sink as the plain baseline. The fault proxy listens
where the broker's ``PROXIED`` listener is advertised (:meth:`KafkaChaosTarget.proxy_port`), so
every connection of the job (metadata, produce, EndTxn) goes through it. Kafka batches are not
atomic for readers (a ``read_committed`` consumer sees a batch participant by participant), so
the reader's partial views are counted, not failures.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosink.chaos.oracle import Row
from eosink.chaos.target import KEY_ALIAS, Names, ServerSide, Snapshot, key_of
from eosink.connectors.kafka.testing import committed_json

__all__ = ["PARTITIONS", "KafkaChaosTarget", "progress_topic"]

BOOTSTRAP_VAR = "EOSINK_CHAOS_KAFKA_BOOTSTRAP"
DIRECT_VAR = "EOSINK_CHAOS_KAFKA_DIRECT"
JARS_VAR = "EOSINK_CHAOS_JARS"
TUNING_VAR = "EOSINK_CHAOS_KAFKA_TUNING"
"""KafkaConfig options for the job's sink, as JSON (a cluster's target shortens the timeouts its faults outlast)."""
PARTITIONS = 2
KEY = KEY_ALIAS
"""The job's ``key`` column, renamed in the records' JSON values (see :meth:`KafkaChaosTarget.job_frame`)."""


def progress_topic(control_schema: str) -> str:
    return f"{control_schema}_progress"


class KafkaChaosTarget(ServerSide):
    """Kafka: a private :class:`~eosink.services.kafka.KafkaServer` (restarted and crashed on purpose),
    :class:`~eosink.connectors.kafka.KafkaSink` with JSON values, and Spark's Kafka sink as the baseline."""

    name = "kafka"

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root, "eosink-chaos-kafka-")
        self._admin: Any = None

    # -- the runner's side -------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.kafka import KafkaServer
        from eosink.services.spark_jars import SparkJars

        SparkJars().fetch("kafka")  # the baseline's Kafka sink, fetched once into the cache

        self.server = self.dir.serve(lambda root: KafkaServer(root / "kafka"))

    def close(self) -> None:
        self._close_admin()
        super().close()

    def restart(self, *, crash: bool) -> None:
        self._close_admin()
        super().restart(crash=crash)

    def address(self) -> tuple[str, int]:
        return "127.0.0.1", int(self.server.proxied_port)

    def proxy_port(self) -> int:
        return int(self.server.proxy_port)

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        from eosink.services.spark_jars import SparkJars

        direct = self._direct()
        via = direct if proxy_port is None else f"127.0.0.1:{proxy_port}"
        return {BOOTSTRAP_VAR: via, DIRECT_VAR: direct, JARS_VAR: SparkJars().spark_conf("kafka")["spark.jars"]}

    def _direct(self) -> str:
        """The broker's own listener, past the fault proxy: the harness's reads and admin calls."""
        return str(self.server.endpoint.bootstrap_servers)

    def atomic(self, strategy: str) -> bool:
        return False  # KafkaSink's capabilities: a batch becomes readable participant by participant

    def _admin_client(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(
                bootstrap_servers=self._direct(),
                client_id="eosink-chaos",
                request_timeout_ms=10_000,
            )
        return self._admin

    def _close_admin(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None

    def read_rows(self, names: Names) -> list[Row]:
        from kafka.errors import UnknownTopicOrPartitionError

        try:
            values = committed_json(self._admin_client(), names.table)
        except UnknownTopicOrPartitionError:
            return []
        return [
            (
                int(v["batch_id"]),
                key_of(v),
                int(v["running_sum"]),
                str(v["concat"]),
                int(v["n_tokens"]),
            )
            for v in values
        ]

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        """A poll function: committed records per batch and the app's bundles; None while the broker is
        down or the topics do not exist yet (Kafka has no snapshot across topics: batches are not atomic)."""
        from kafka.errors import KafkaError

        from eosink.connectors.kafka._progress import ProgressView

        state: dict[str, Any] = {"admin": None, "view": None}

        def poll() -> Snapshot | None:
            try:
                if state["admin"] is None:
                    from kafka import KafkaAdminClient

                    state["admin"] = KafkaAdminClient(
                        bootstrap_servers=self._direct(),
                        client_id="eosink-chaos-reader",
                        request_timeout_ms=5_000,
                        bootstrap_timeout_ms=5_000,
                    )
                    state["view"] = ProgressView(progress_topic(names.control_schema))
                admin = state["admin"]
                topics = set(admin.list_topics())
                if names.table not in topics or progress_topic(names.control_schema) not in topics:
                    return None
                counts: dict[int, int] = {}
                for value in committed_json(admin, names.table):
                    counts[int(value["batch_id"])] = counts.get(int(value["batch_id"]), 0) + 1
                view = state["view"]
                view.refresh(admin)
                bundles = frozenset(b.batch.batch_id for b in view.bundles(names.app_id))
                return Snapshot(counts, bundles)
            except (KafkaError, OSError, TimeoutError):
                with contextlib.suppress(Exception):
                    if state["admin"] is not None:
                        state["admin"].close()
                state["admin"] = None
                return None

        return poll

    def _config(self, names: Names) -> Any:
        from eosink.connectors.kafka import KafkaConfig

        return KafkaConfig(
            self._direct(),
            topic=names.table,
            progress_topic=progress_topic(names.control_schema),
            transactional_id_prefix=names.control_schema,
        )

    def leftovers(self, names: Names) -> dict[str, int]:
        """In-doubt work of the schedule left behind: the app's open transactions."""
        from eosink.connectors.kafka.admin import KafkaAdmin
        from eosink.errors import ConfigurationError

        try:
            apps = KafkaAdmin(self._config(names)).status(names.app_id).apps
        except ConfigurationError:  # the app never wrote anything
            return {"open_transactions": 0}
        return {"open_transactions": sum(len(a.in_doubt) for a in apps)}

    def drop(self, names: Names) -> None:
        from eosink.connectors.kafka.admin import KafkaAdmin

        with contextlib.suppress(Exception):
            KafkaAdmin(self._config(names)).drop_app(names.app_id)
        admin = self._admin_client()
        for topic in (names.table, progress_topic(names.control_schema)):
            with contextlib.suppress(Exception):
                admin.delete_topics([topic])

    def scrub(self, text: str) -> str:
        return text  # the test broker has no credentials

    # -- the job's side ----------------------------------------------------------------------

    def job_sink(self, table: str, control_schema: str) -> Any:
        """The eosink sink, connected through the fault proxy (``EOSINK_CHAOS_KAFKA_BOOTSTRAP``)."""
        from eosink.connectors.kafka import KafkaConfig, KafkaSink

        tuning = json.loads(os.environ.get(TUNING_VAR, "{}"))
        config = KafkaConfig(
            os.environ[BOOTSTRAP_VAR],
            topic=table,
            value_format="json",
            progress_topic=progress_topic(control_schema),
            transactional_id_prefix=control_schema,
            create_topic=True,
            topic_partitions=PARTITIONS,
            **tuning,
        )
        return KafkaSink(config)

    def job_frame(self, df: Any) -> Any:
        """The job's ``key`` column renamed: a column named ``key`` would become the records' key."""
        return df.withColumnRenamed("key", KEY)

    def job_naive_writer(self, table: str) -> Callable[[Any, int], None]:
        """Spark's Kafka sink, appending each batch as JSON records (at-least-once: what eosink replaces)."""

        bootstrap = os.environ[DIRECT_VAR]

        def write(df: Any, batch_id: int) -> None:
            out = df.selectExpr("to_json(struct(*)) AS value")
            writer = out.write.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("kafka.acks", "all")
            writer.option("topic", table).save()

        return write
