"""Apache Kafka for the tests: one KRaft node (broker and controller in one JVM) on 127.0.0.1.

What runs: Apache Kafka :data:`KAFKA_VERSION` (Scala 2.13 build) from Maven Central's jars —
no tarball, no ZooKeeper — started as ``java -cp 'jars/*' kafka.Kafka server.properties`` with
``process.roles=broker,controller`` and ``node.id=1``, a static one-voter quorum, a broker and a
controller listener on free ports, all replication factors 1, and its log directory formatted by
Kafka's own ``kafka.tools.StorageTool`` at every start (data is fresh per run). Logging goes through
log4j2 (plus its SLF4J 1.x binding, as in Kafka's distribution) to the service log.

Why this version: kafka-python 3.0.x (the client of the connector and of :meth:`KafkaService.check`)
knows the protocol of brokers up to 4.3, so the newest 4.3 patch release is pinned. The formatted
cluster finalizes ``transaction.version=2`` (KIP-890), as any new Kafka 4 cluster does, but
kafka-python drives transactions with the older requests (EndTxn <= v3), which the broker serves
with the classic semantics: a producer keeps its producer ID and epoch across its transactions.
The JVM runs with a 512 MB heap, the serial GC and no C2 compiler (:data:`JVM_OPTS`).

``transaction.max.timeout.ms`` is set to one hour (:data:`TRANSACTION_MAX_TIMEOUT_MS`, broker
default 15 minutes): eosink's two-phase commit keeps a Kafka transaction open from the sink's
``pre_commit`` until Spark has committed the batch's checkpoint (and, after a crash, until
recovery commits or aborts it), so its producers ask for a long ``transaction.timeout.ms``. A
broker refuses ``InitProducerId`` from a producer whose timeout exceeds its maximum, and aborts
any transaction left open longer than the producer's timeout. :meth:`KafkaService.check` asks for
exactly this timeout, so a server that would refuse the connector fails the check.

:class:`KafkaServer` is a private broker of the same build for the chaos harness: it keeps its
ports and log directory across the restarts and crashes the harness causes (formatted once).

Your own broker: set ``EOSINK_KAFKA_BOOTSTRAP=host:port[,host:port...]`` and no local server is
started. It must allow transactions (``transaction.state.log.replication.factor`` and
``min.isr`` satisfiable) with ``transaction.max.timeout.ms`` of at least one hour, and let the
client create and delete topics.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import os
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from eosink.errors import ServiceError
from eosink.services import _jdk
from eosink.services._maven import Artifact, fetch_jars
from eosink.services._process import Attempt, Proc, free_ports, spawn, start_on_ports, stop, wait_until
from eosink.services.base import Endpoint, Service

__all__ = [
    "KAFKA_VERSION",
    "TRANSACTION_MAX_TIMEOUT_MS",
    "KafkaEndpoint",
    "KafkaServer",
    "KafkaService",
    "format_storage",
    "java_command",
    "new_cluster_id",
    "server_properties",
    "serves",
]

log = logging.getLogger("eosink.services")

#: The Apache Kafka release (newest whose protocol kafka-python 3.0.x knows).
KAFKA_VERSION = "4.3.1"
#: The log4j2 release Kafka 4.3.1 is built against; its SLF4J 1.x binding makes the broker log.
LOG4J_VERSION = "2.25.4"
#: The broker's longest allowed transaction (1 h), and the timeout :meth:`KafkaService.check` asks for.
TRANSACTION_MAX_TIMEOUT_MS = 3_600_000

ARTIFACTS = (
    Artifact("org.apache.kafka", "kafka_2.13", KAFKA_VERSION),
    Artifact("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
)
STORAGE_TOOL = "kafka.tools.StorageTool"
#: A small heap and no C2 compiler: a test broker on a busy 2-core machine starts about 40 % faster this way.
JVM_OPTS = ("-Xms256m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.awt.headless=true")

LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.clients.name = org.apache.kafka.clients
logger.clients.level = WARN
"""


@dataclass(frozen=True)
class KafkaEndpoint(Endpoint):
    """A Kafka cluster: its bootstrap servers, ``host:port[,host:port...]`` (plaintext, no auth).

    A broker started here also has a second listener for fault tests, ``PROXIED`` on
    ``proxied_port``, which advertises ``127.0.0.1:proxy_port``: a fault proxy listening on
    ``proxy_port`` and forwarding to ``proxied_port`` then carries every request of a client
    bootstrapped through it (a broker tells clients where to connect, so a proxy on the plain
    listener would only see the first request). Both are 0 for your own broker.
    """

    bootstrap_servers: str
    proxied_port: int = 0
    proxy_port: int = 0

    def env(self) -> dict[str, str]:
        env = {"EOSINK_KAFKA_BOOTSTRAP": self.bootstrap_servers}
        if self.proxy_port:
            env["EOSINK_KAFKA_PROXIED"] = f"{self.proxied_port}:{self.proxy_port}"
        return env


class KafkaService(Service[KafkaEndpoint]):
    """Apache Kafka in KRaft mode: one combined broker and controller, transactions enabled."""

    #: The replication factor of the health check's topic (a cluster's ``min.insync.replicas`` needs more than 1).
    check_replicas: ClassVar[int] = 1

    name = "kafka"
    endpoint_type = KafkaEndpoint
    override_vars: ClassVar[tuple[str, ...]] = ("EOSINK_KAFKA_BOOTSTRAP",)

    @property
    def jars(self) -> Path:
        """Kafka's runtime classpath, fetched from Maven Central."""
        return self.home / "jars"

    def external(self) -> KafkaEndpoint | None:
        bootstrap = os.environ.get("EOSINK_KAFKA_BOOTSTRAP", "").strip()
        if not bootstrap:
            return None
        proxied = os.environ.get("EOSINK_KAFKA_PROXIED", "").strip()  # as `eosink services env kafka` prints it
        if not proxied:
            return KafkaEndpoint(bootstrap)
        port, _, proxy = proxied.partition(":")
        if not (port.isdigit() and proxy.isdigit()):
            raise ServiceError(
                f"EOSINK_KAFKA_PROXIED={proxied!r} is not PORT:PROXY_PORT.",
                "Set it as `eosink services env kafka` prints it, or unset it (the network fault cases then fail).",
            )
        return KafkaEndpoint(bootstrap, proxied_port=int(port), proxy_port=int(proxy))

    def tools(self) -> Path:
        """Kafka's command-line tools (the Java console consumer, the producer benchmark), fetched at first use:
        the directory of their classpath's jars."""
        tools = self.home / "tools-jars"
        fetch_jars([Artifact("org.apache.kafka", "kafka-tools", KAFKA_VERSION)], tools, what="Kafka's tools")
        return tools

    def provision(self) -> None:
        fetch_jars(ARTIFACTS, self.jars, what=f"Apache Kafka {KAFKA_VERSION}")
        (self.home / "log4j2.properties").write_text(LOG4J2_PROPERTIES)

    def launch(self) -> tuple[Proc, KafkaEndpoint]:
        """Format a new cluster and start its broker on free ports; on fresh ports (and a new cluster) again if one
        was taken before the broker bound it."""
        config = self.run / "server.properties"
        java = java_command(self.jars, self.home)

        def start(attempt: Attempt) -> tuple[Proc, KafkaEndpoint]:
            broker_port, controller_port, proxied_port, proxy_port = attempt.ports
            log_dir = self.data / "kraft"
            config.write_text(
                server_properties(broker_port, controller_port, log_dir, proxied=(proxied_port, proxy_port))
            )
            fresh_storage(java, config, self.jars, log_dir)
            endpoint = KafkaEndpoint(f"127.0.0.1:{broker_port}", proxied_port, proxy_port)
            proc = start_broker(java, config, self.jars, self.log_path, endpoint, self.start_timeout_s, attempt)
            return proc, endpoint

        # broker, controller, the proxied listener, the proxy in front of it
        return start_on_ports(start, free_ports(4), log_path=self.log_path, what="Kafka", may_move=True)

    def client_options(self, endpoint: KafkaEndpoint) -> dict[str, Any]:
        """kafka-python settings that reach ``endpoint`` as its administrator (a hook: TLS and SASL)."""
        return {}

    def check(self, endpoint: KafkaEndpoint) -> str:
        from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

        started = time.monotonic()
        bootstrap = endpoint.bootstrap_servers
        tag = uuid.uuid4().hex[:12]
        topic, txn_id = f"eosink-check-{tag}", f"eosink-check-{tag}"
        common: dict[str, Any] = {"bootstrap_servers": bootstrap, "bootstrap_timeout_ms": 10_000}
        common.update(self.client_options(endpoint))
        common["request_timeout_ms"] = 10_000
        where = "your broker's log" if self.external() is not None else f"the log: {self.log_path}"
        fix = f"check that Kafka at {bootstrap} runs and allows transactions ({where})."
        step = "connecting the admin client"
        admin = producer = consumer = None
        created = False
        try:
            admin = KafkaAdminClient(**common)
            step = f"creating topic {topic}"
            replicas = {"num_partitions": 1, "replication_factor": self.check_replicas}
            admin.create_topics({topic: replicas}, wait_for_metadata=True)
            created = True
            step = f"initializing a transactional producer (transaction.timeout.ms={TRANSACTION_MAX_TIMEOUT_MS})"
            producer = KafkaProducer(
                transactional_id=txn_id,
                transaction_timeout_ms=TRANSACTION_MAX_TIMEOUT_MS,
                max_block_ms=10_000,
                **common,
            )
            producer.init_transactions()
            for value, commit in ((b"committed-1", True), (b"aborted", False), (b"committed-2", True)):
                step = f"{'committing' if commit else 'aborting'} a transaction with {value!r}"
                producer.begin_transaction()
                producer.send(topic, value).get(timeout=10)
                if commit:
                    producer.commit_transaction()
                else:
                    producer.abort_transaction()
            version = ".".join(map(str, producer.config["api_version"]))

            step = "reading the topic with isolation_level=read_committed"
            consumer = KafkaConsumer(
                isolation_level="read_committed", auto_offset_reset="earliest", enable_auto_commit=False, **common
            )
            partition = TopicPartition(topic, 0)
            consumer.assign([partition])
            end = consumer.end_offsets([partition])[partition]
            seen: list[bytes] = []
            deadline = time.monotonic() + 15
            while consumer.position(partition) < end and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    seen.extend(r.value for r in records)
            if seen != [b"committed-1", b"committed-2"]:
                raise ServiceError(
                    f"Kafka at {bootstrap}: a read_committed consumer of {topic} read {seen!r} up to offset "
                    f"{consumer.position(partition)} of {end}, expected exactly [b'committed-1', b'committed-2'].",
                    fix,
                )
        except ServiceError:
            raise
        except Exception as exc:
            if "InvalidTransactionTimeout" in repr(exc):
                fix = f"set transaction.max.timeout.ms={TRANSACTION_MAX_TIMEOUT_MS} (or more) in the broker's config."
            raise ServiceError(f"Kafka at {bootstrap} failed while {step}: {exc!r}.", fix) from exc
        finally:
            with contextlib.suppress(Exception):
                if consumer is not None:
                    consumer.close(autocommit=False, timeout_ms=5000)
            with contextlib.suppress(Exception):
                if producer is not None:
                    producer.close(timeout=5)
            with contextlib.suppress(Exception):
                if admin is not None:
                    if created:
                        admin.delete_topics([topic])
                    admin.close()
        return (
            f"kafka {version} at {bootstrap}: transactional produce + read_committed consume ok "
            f"({time.monotonic() - started:.1f} s)"
        )


def java_command(jars: Path, home: Path) -> list[str]:
    java = [_jdk.java("Kafka"), *JVM_OPTS, f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}"]
    return [*java, "-cp", f"{jars}{os.sep}*"]


def _fix(config: Path, jars: Path) -> str:
    return f"check {config} and that {jars} holds Kafka {KAFKA_VERSION} (delete it to fetch it again)."


def format_storage(
    java: list[str], config: Path, jars: Path, extra: Sequence[str] = (), *, cluster_id: str | None = None
) -> None:
    """Format the log directory of ``config`` with Kafka's storage tool (``cluster_id``, else a new one); ``extra``:
    more of the tool's arguments (SCRAM credentials)."""
    started = time.monotonic()
    try:
        fmt = subprocess.run(
            [*java, STORAGE_TOOL, "format", "-t", cluster_id or new_cluster_id(), "-c", str(config), *extra],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ServiceError(
            f"Kafka's storage tool did not format the log directory of {config} in 120 s.", _fix(config, jars)
        ) from None
    if fmt.returncode != 0:
        raise ServiceError(
            f"Kafka's storage tool could not format the log of {config}:\n{(fmt.stdout + fmt.stderr)[-3000:]}",
            _fix(config, jars),
        )
    log.info("[kafka] storage formatted in %.1f s", time.monotonic() - started)


def fresh_storage(java: list[str], config: Path, jars: Path, log_dir: Path, extra: Sequence[str] = ()) -> None:
    """Empty ``log_dir`` and format it for ``config``: a first start, also one retried on other ports after a
    failed one, begins with a new cluster."""
    shutil.rmtree(log_dir, ignore_errors=True)
    format_storage(java, config, jars, extra)


def start_broker(
    java: list[str],
    config: Path,
    jars: Path,
    log_path: Path,
    endpoint: KafkaEndpoint,
    timeout_s: float,
    attempt: Attempt | None = None,
    client: Mapping[str, Any] | None = None,
) -> Proc:
    """Start the broker of ``config`` (its storage formatted) and wait until it serves ``endpoint``; stop it if it
    does not. ``attempt``: the ports it was given (see :func:`~eosink.services._process.start_on_ports`);
    ``client``: the client settings that reach it (TLS, SASL)."""
    log.info("[kafka] starting broker on %s", endpoint.bootstrap_servers)
    proc = spawn([*java, "kafka.Kafka", str(config)], log_path, cwd=config.parent)
    try:
        wait_until(
            lambda: serves(endpoint.bootstrap_servers, client),
            what=f"Kafka {KAFKA_VERSION}",
            proc=proc,
            log_path=log_path,
            timeout_s=timeout_s,
            fix=f"read {log_path} (the broker was stopped), then try again.",
            attempt=attempt,
        )
    except BaseException:
        # No state is recorded for a failed start, so nothing else could stop this broker later.
        stop(proc, what="kafka")
        raise
    return proc


class KafkaServer:
    """A private broker in ``root`` that keeps its ports and data across restarts and crashes.

    The chaos harness restarts and SIGKILLs it on purpose (the shared service is never
    restarted). Like the service's broker, it has a ``PROXIED`` listener advertised at
    :attr:`proxy_port`, where a fault proxy in front of it must listen.
    """

    def __init__(self, root: Path, start_timeout_s: float = 120.0, settings: Mapping[str, str] | None = None) -> None:
        self.root = root
        self.start_timeout_s = start_timeout_s
        self.settings = dict(settings or {})
        """Broker settings over the harness's own (:func:`server_properties`)."""
        self.proc: Proc | None = None
        self._use_ports(free_ports(4))
        self._started = False
        """Whether a start succeeded: from then on the ports and the data are kept."""

    @property
    def log_path(self) -> Path:
        return self.root / "kafka.log"

    def _use_ports(self, ports: Sequence[int]) -> None:
        """Take ``ports`` as (broker, controller, proxied listener, proxy): picked free when made, and moved by a
        first start that finds one taken; kept from then on."""
        self.broker_port, self.controller_port, self.proxied_port, self.proxy_port = ports
        self.endpoint = KafkaEndpoint(f"127.0.0.1:{self.broker_port}", self.proxied_port, self.proxy_port)

    def start(self) -> KafkaEndpoint:
        """Start the broker and wait until it serves: on a new cluster until a start succeeded, on its data after.

        The first start moves to fresh ports if one of its own was taken meanwhile; a later one keeps them
        and fails with a :class:`~eosink.services._process.PortClash` naming the port and who took it."""
        service = KafkaService()
        service.provisioned()  # the jars, fetched once into the service's cache
        self.root.mkdir(parents=True, exist_ok=True)
        config = self.root / "server.properties"
        java = java_command(service.jars, service.home)

        def start(attempt: Attempt) -> None:
            self._use_ports(attempt.ports)
            log_dir = self.root / "kraft"
            config.write_text(
                server_properties(
                    self.broker_port,
                    self.controller_port,
                    log_dir,
                    proxied=(self.proxied_port, self.proxy_port),
                    extra=self.settings,
                )
            )
            if not self._started:
                fresh_storage(java, config, service.jars, log_dir)
            self.proc = start_broker(
                java, config, service.jars, self.log_path, self.endpoint, self.start_timeout_s, attempt
            )

        ports = (self.broker_port, self.controller_port, self.proxied_port, self.proxy_port)
        start_on_ports(start, ports, log_path=self.log_path, what="private Kafka", may_move=not self._started)
        self._started = True
        return self.endpoint

    def stop(self) -> None:
        if self.proc is not None:
            stop(self.proc, what="kafka")
            self.proc = None

    def kill(self) -> None:
        if self.proc is not None:
            stop(self.proc, what="kafka", sig=signal.SIGKILL)
            self.proc = None

    def restart(self, *, crash: bool = False) -> KafkaEndpoint:
        """Stop (or SIGKILL) the broker and start it again: same ports, same data."""
        self.kill() if crash else self.stop()
        return self.start()

    def close(self) -> None:
        """Stop the broker and remove its directory."""
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def server_properties(
    broker_port: int,
    controller_port: int,
    log_dir: Path,
    *,
    proxied: tuple[int, int] | None = None,
    extra: Mapping[str, str] | None = None,
) -> str:
    """One KRaft node that is broker and controller, on 127.0.0.1 only, sized for tests.

    ``proxied=(port, proxy_port)`` adds the ``PROXIED`` listener on ``port``, advertised at
    ``proxy_port`` (see :class:`KafkaEndpoint`); ``extra`` broker settings override these.
    """
    listeners = f"PLAINTEXT://127.0.0.1:{broker_port},CONTROLLER://127.0.0.1:{controller_port}"
    advertised = f"PLAINTEXT://127.0.0.1:{broker_port}"
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if proxied is not None:
        listeners += f",PROXIED://127.0.0.1:{proxied[0]}"
        advertised += f",PROXIED://127.0.0.1:{proxied[1]}"
        protocols += ",PROXIED:PLAINTEXT"
    settings = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": listeners,
        "advertised.listeners": advertised,
        "listener.security.protocol.map": protocols,
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # eosink's 2PC keeps transactions open until Spark's checkpoint commit (see the module docstring).
        "transaction.max.timeout.ms": str(TRANSACTION_MAX_TIMEOUT_MS),
        # Transactions past their timeout are aborted within a second (broker default: 10 s), so a test of an
        # expired transaction does not wait long.
        "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
        **(extra or {}),
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def new_cluster_id() -> str:
    """A random cluster ID in Kafka's form: a UUID, URL-safe base64 without padding, not starting with '-'."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def serves(bootstrap: str, client: Mapping[str, Any] | None = None) -> bool:
    """Whether the broker answers a metadata request and lists itself (it is registered and unfenced)."""
    from kafka import KafkaAdminClient

    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap, bootstrap_timeout_ms=3000, request_timeout_ms=3000, **(client or {})
        )
    except Exception:
        return False
    try:
        return bool(admin.describe_cluster().get("brokers"))
    except Exception:
        return False
    finally:
        with contextlib.suppress(Exception):
            admin.close()
