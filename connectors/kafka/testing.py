"""The Kafka sink's harness for the contract suite and the connector's own tests.

It writes against the service harness's Kafka (``eosink services up kafka``, or your own broker
through ``EOSINK_KAFKA_BOOTSTRAP``); a missing broker is an error, never a skip. Each namespace
gets its own topic (two partitions), progress topic and transactional-id prefix.

What "visible" means here is what a ``read_committed`` consumer ends up reading: the records of
committed transactions (and records written without one), wherever they are in the log. A
consumer reads them in log order, so records committed after a transaction that is still open
reach it only once that one ends; the suite keeps transactions open on purpose, so the harness
reads the log itself (:func:`read_topic`) instead of waiting. Records with a key count once per
key, the last one winning (a compacted topic, or a consumer keeping the last record per key).
"""

from __future__ import annotations

import contextlib
import json
import threading
from typing import Any

from eosink._waiting import wait_until
from eosink.connectors.kafka import KafkaConfig, KafkaSink, _wire
from eosink.connectors.kafka._names import COMMIT_REQUEST
from eosink.contracts import Namespace, SinkHarness

__all__ = ["KafkaHarness", "by_key", "committed_json", "java_consume", "read_topic"]


def read_topic(admin: Any, topic: str, partitions: int, max_wait_s: float = 30.0) -> list[_wire.LogRecord]:
    """Every committed record of ``topic`` (all ``partitions``), open transactions notwithstanding; each partition
    read within ``max_wait_s``."""
    out: list[_wire.LogRecord] = []
    for p in range(partitions):
        out.extend(_wire.read_log(admin, topic, p, max_wait_s=max_wait_s).committed)
    return out


def by_key(records: list[_wire.LogRecord]) -> list[_wire.LogRecord]:
    """Keyed records once per key (the last wins), unkeyed ones all: what a compacted topic keeps."""
    last: dict[bytes, _wire.LogRecord] = {}
    out: list[_wire.LogRecord] = []
    for r in records:
        if r.key is None:
            out.append(r)
        else:
            last[r.key] = r
    return out + list(last.values())


def java_consume(bootstrap: str, topic: str, count: int, timeout_s: float = 60.0) -> list[tuple[str, str]]:
    """The first ``count`` committed records of ``topic`` as Kafka's own Java console consumer (of the harness's
    Kafka version, ``read_committed``) reads them: ``(key, value)`` as text, the key ``"null"`` when absent."""
    import subprocess

    from eosink.services import _jdk
    from eosink.services.kafka import KafkaService

    argv = [_jdk.java("Kafka's console consumer"), "-cp", f"{KafkaService().tools()}/*"]
    argv += ["org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", bootstrap, "--topic", topic]
    argv += ["--from-beginning", "--isolation-level", "read_committed", "--max-messages", str(count)]
    argv += ["--timeout-ms", str(int(timeout_s * 1000)), "--formatter-property", "print.key=true"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s + 60, check=False)
    lines = [line for line in done.stdout.splitlines() if line]
    if done.returncode != 0 and len(lines) < count:
        raise AssertionError(f"the Java consumer failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")
    return [(key, value) for key, _, value in (line.partition("\t") for line in lines)]


def committed_json(admin: Any, topic: str) -> list[dict[str, Any]]:
    """The JSON values of ``topic``'s committed records, keyed ones once per key (as :func:`by_key`);
    none while the topic does not exist."""
    described = [t for t in admin.describe_topics([topic]) if t.get("name") == topic and not t.get("error_code")]
    if not described:
        return []
    records = by_key(read_topic(admin, topic, len(described[0].get("partitions") or [])))
    return [json.loads(r.value) for r in records if r.value is not None]


class KafkaHarness(SinkHarness):
    """One topic ``eo_<ns>`` (JSON values), progress topic and transactional-id prefix per namespace."""

    commit_request_marker = COMMIT_REQUEST
    partitions = 2

    def __init__(self, **options: Any) -> None:
        self.options = options  # KafkaConfig options every sink of this harness gets
        self._admin: Any = None
        self._endpoint: Any = None
        self._made: set[str] = set()
        self._lock = threading.Lock()

    # -- the broker ------------------------------------------------------------------------------

    def endpoint(self) -> Any:
        """The service harness's broker (or yours, through ``EOSINK_KAFKA_BOOTSTRAP``), resolved at first use."""
        if self._endpoint is None:
            from eosink.services import get_service

            self._endpoint = get_service("kafka").endpoint()  # ServiceError: start the broker
        return self._endpoint

    def bootstrap(self) -> str:
        return str(self.endpoint().bootstrap_servers)

    def _proxied(self) -> tuple[int, int] | None:
        """(the listener advertised at the proxy's port, that port); None for a broker without one."""
        endpoint = self.endpoint()
        return (endpoint.proxied_port, endpoint.proxy_port) if getattr(endpoint, "proxy_port", 0) else None

    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(bootstrap_servers=self.bootstrap(), client_id="eosink-test")
        return self._admin

    # -- the suite's hooks -----------------------------------------------------------------------

    def config(self, ns: Namespace, bootstrap: str | None = None, **options: Any) -> KafkaConfig:
        settings: dict[str, Any] = {
            "topic": self.topic(ns),
            "value_format": "json",
            "progress_topic": f"eo_{ns.name}_progress",
            "transactional_id_prefix": f"eo-{ns.name}",
            **self.options,
            **options,
        }
        return KafkaConfig(bootstrap or self.bootstrap(), **settings)

    def topic(self, ns: Namespace) -> str:
        return f"eo_{ns.name}"

    def make_sink(self, ns: Namespace) -> KafkaSink:
        self.create_topics(ns)
        return KafkaSink(self.config(ns))

    def fault_endpoint(self) -> tuple[str, int] | None:
        proxied = self._proxied()
        return None if proxied is None else ("127.0.0.1", proxied[0])

    def fault_proxy_port(self) -> int:
        proxied = self._proxied()
        return 0 if proxied is None else proxied[1]

    def make_sink_via(self, ns: Namespace, host: str, port: int) -> KafkaSink:
        self.create_topics(ns)
        return KafkaSink(self.config(ns, bootstrap=f"{host}:{port}"))

    def create_topics(self, ns: Namespace) -> None:
        """The namespace's topic and progress topic, once."""
        from kafka.errors import TopicAlreadyExistsError

        from eosink.connectors.kafka._progress import ensure_progress_topic

        with self._lock:
            if ns.name in self._made:
                return
            admin = self.admin()
            with contextlib.suppress(TopicAlreadyExistsError):
                admin.create_topics(
                    {self.topic(ns): {"num_partitions": self.partitions, "replication_factor": 1}},
                    wait_for_metadata=True,
                )
            ensure_progress_topic(admin, f"eo_{ns.name}_progress")
            self._made.add(ns.name)

    def read_records(self, ns: Namespace) -> list[_wire.LogRecord]:
        """Every committed record of the namespace's topic, keyed ones once per key."""
        with self._lock:
            return by_key(read_topic(self.admin(), self.topic(ns), self.partitions))

    def read_committed(self, ns: Namespace) -> list[dict[str, Any]]:
        return [json.loads(r.value) for r in self.read_records(ns) if r.value is not None]

    def cleanup(self, ns: Namespace) -> None:
        with self._lock:
            if ns.name not in self._made:
                return
            self._made.discard(ns.name)
            with contextlib.suppress(Exception):
                self.admin().delete_topics([self.topic(ns), f"eo_{ns.name}_progress"])


class SecureKafkaHarness(KafkaHarness):
    """The suite as the secured broker's ``writer``: SASL_SSL (SCRAM-SHA-512, the CA checked), and exactly the
    documented ACLs on each namespace's topics and transactional-id prefix
    (:func:`~eosink.connectors.kafka.grants.writer_acls`). Topics are made by the ``admin`` user.

    No fault proxy: it would have to terminate TLS, so the network-fault cases run on the plain broker.
    """

    def endpoint(self) -> Any:
        if self._endpoint is None:
            from eosink.services import get_service

            self._endpoint = get_service("kafka-secure").endpoint()
        return self._endpoint

    def admin(self) -> Any:
        if self._admin is None:
            from kafka import KafkaAdminClient

            self._admin = KafkaAdminClient(
                bootstrap_servers=self.bootstrap(), client_id="eosink-test", **self.endpoint().admin_options()
            )
        return self._admin

    def config(self, ns: Namespace, bootstrap: str | None = None, **options: Any) -> KafkaConfig:
        producer = {**self.endpoint().writer_options(), **options.pop("producer_options", {})}
        config = super().config(ns, bootstrap, producer_options=producer, **options)
        self.grant(config)
        return config

    def grant(self, config: KafkaConfig, *, leave_out: str | None = None, principal: str | None = None) -> None:
        """Create ``config``'s documented ACLs for the writer (all but ``leave_out``) as the administrator."""
        from eosink.connectors.kafka.grants import writer_acls

        who = principal or f"User:{self.endpoint().writer}"
        self.allow([a.acl(who) for a in writer_acls(config) if a.name != leave_out], who)

    def allow(self, acls: list[Any], who: str) -> None:
        """Create kafka-python ``acls`` (all for principal ``who``) and wait until the broker applies them."""
        with self._lock:
            self.admin().create_acls(acls)
            # The broker applies new ACLs from the metadata log a moment later: wait until it lists them all.
            wanted = {str(a) for a in acls}
            if not wait_until(lambda: wanted <= {str(a) for a in self._acls(who)}, 30.0):
                raise AssertionError(f"the broker did not list the ACLs created for {who} within 30 s")

    def _acls(self, principal: str) -> list[Any]:
        from kafka.admin import (
            ACLFilter,
            ACLOperation,
            ACLPermissionType,
            ACLResourcePatternType,
            ResourcePatternFilter,
            ResourceType,
        )

        pattern = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)
        found = self.admin().describe_acls(ACLFilter(principal, "*", ACLOperation.ANY, ACLPermissionType.ANY, pattern))
        return list(found[0])

    def cleanup(self, ns: Namespace) -> None:
        """The namespace's topics, and every ACL on them and on its transactional-id prefix."""
        from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ResourcePatternFilter

        super().cleanup(ns)
        names = {self.topic(ns), f"eo_{ns.name}_progress", f"eo-{ns.name}"}
        with self._lock, contextlib.suppress(Exception):
            mine = [
                a for a in self._acls(f"User:{self.endpoint().writer}") if a.resource_pattern.resource_name in names
            ]
            filters = [
                ACLFilter(
                    a.principal,
                    "*",
                    ACLOperation.ANY,
                    ACLPermissionType.ANY,
                    ResourcePatternFilter(
                        a.resource_pattern.resource_type,
                        a.resource_pattern.resource_name,
                        a.resource_pattern.pattern_type,
                    ),
                )
                for a in mine
            ]
            if filters:
                self.admin().delete_acls(filters)

    def fault_endpoint(self) -> tuple[str, int] | None:
        return None
