"""A private Kafka cluster for failover tests: three KRaft nodes, each behind a fault proxy of the test's own.

Every node is a broker and a controller in one JVM (Kafka :data:`~eosink.services.kafka.KAFKA_VERSION`, the
service's jars), on loopback, with a static three-voter quorum. The cluster is sized as production runs Kafka:

* topics replicated three times (``default.replication.factor=3``), ``min.insync.replicas=2``, no unclean
  leader election;
* the transaction state log and the offsets topic replicated three times with a minimum ISR of 2;
* ``txn_state_partitions`` partitions of the transaction state log (1 by default): with one, a single node
  coordinates every transaction, and :meth:`KafkaCluster.coordinator` names it.

Each node has two listeners. ``PLAINTEXT`` carries the brokers' own traffic and the harness's admin calls
(never faulted). ``PROXIED`` is advertised at the node's proxy port, where a :class:`FaultProxy` of this
process listens: a client bootstrapped at :attr:`KafkaCluster.bootstrap_servers` reaches every node through
that node's proxy, so a test can cut one node's connections (a partition), drop one reply, or hold one
request (:func:`kafka_request` picks it by API key) and deliver it late.

The operations: :meth:`~KafkaCluster.kill` (SIGKILL) and :meth:`~KafkaCluster.start_node` (same ports, same
data), :meth:`~KafkaCluster.pause` (SIGSTOP, a zombie once past ``broker.session.timeout.ms``) and
:meth:`~KafkaCluster.resume`, and :meth:`~KafkaCluster.proxy` for the network faults. Each node logs to
``node-<id>.log`` under the cluster's root; nodes are stopped by PID.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import signal
import struct
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError
from eosink.services._process import (
    Attempt,
    PortClash,
    Proc,
    free_ports,
    log_size,
    spawn,
    start_on_ports,
    stop,
    wait_until,
)
from eosink.services.kafka import (
    KafkaService,
    format_storage,
    java_command,
    new_cluster_id,
    server_properties,
    serves,
)
from eosink.services.proxy import FaultProxy

__all__ = ["API_KEYS", "KafkaCluster", "KafkaNode", "kafka_request"]

log = logging.getLogger("eosink.services")

#: The Kafka API keys of the requests a transactional writer sends (for :func:`kafka_request`).
API_KEYS = {
    "Produce": 0,
    "FindCoordinator": 10,
    "InitProducerId": 22,
    "AddPartitionsToTxn": 24,
    "AddOffsetsToTxn": 25,
    "EndTxn": 26,
    "TxnOffsetCommit": 28,
}

#: How long a node may go without a heartbeat before the controller fences it (Kafka's default is 9 s).
SESSION_TIMEOUT_MS = 6000


def kafka_request(api: str | int) -> re.Pattern[bytes]:
    """A fault proxy's match for a request of one API (``"EndTxn"`` or its key): its size (4 bytes), then its key.

    It matches a request that starts a chunk the proxy reads, which is how Kafka clients send them: one
    request per write, each read whole by the proxy unless it is larger than a chunk.
    """
    key = API_KEYS[api] if isinstance(api, str) else api
    return re.compile(rb"\A[\s\S]{4}" + re.escape(struct.pack(">h", key)))


@dataclass
class KafkaNode:
    """One node: its id and ports (kept across restarts), its process and the proxy in front of its clients."""

    node_id: int
    broker_port: int
    controller_port: int
    proxied_port: int
    proxy_port: int
    log_path: Path
    proc: Proc | None = None
    proxy: FaultProxy | None = None
    paused: bool = False

    @property
    def direct(self) -> str:
        """The node's own listener, ``127.0.0.1:port`` (the brokers' traffic and the harness's admin calls)."""
        return f"127.0.0.1:{self.broker_port}"


class KafkaCluster:
    """Three KRaft nodes under ``root`` (see the module docstring); :meth:`start` it, :meth:`close` it."""

    def __init__(
        self,
        root: Path,
        *,
        nodes: int = 3,
        txn_state_partitions: int = 1,
        settings: Mapping[str, str] | None = None,
        start_timeout_s: float = 180.0,
    ) -> None:
        if nodes < 3:
            raise ValueError("a failover cluster has 3 nodes or more (min.insync.replicas=2 must survive one)")
        self.root = root
        self.txn_state_partitions = txn_state_partitions
        self.settings = dict(settings or {})
        """Broker settings over the cluster's own."""
        self.start_timeout_s = start_timeout_s
        self.nodes: dict[int, KafkaNode] = {}
        self._use_ports(free_ports(4 * nodes), count=nodes)
        self._cluster_id = new_cluster_id()
        self._started = False

    def __repr__(self) -> str:
        return f"KafkaCluster({self.root}, nodes={sorted(self.nodes)})"

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Where clients connect: every node's fault proxy."""
        return self._proxies(list(self.nodes))

    @property
    def live_bootstrap(self) -> str:
        """The fault proxies of the nodes running now (:meth:`running`; every node's if none is): for a check's own
        client, which would otherwise pick a paused node's proxy at random and wait out its request timeout there."""
        return self._proxies(self.running()) or self.bootstrap_servers

    def _proxies(self, node_ids: list[int]) -> str:
        return ",".join(f"127.0.0.1:{self.nodes[i].proxy_port}" for i in node_ids)

    @property
    def direct_bootstrap(self) -> str:
        """Every node's own listener, past the proxies (for checks that must not meet a fault)."""
        return ",".join(n.direct for n in self.nodes.values())

    def proxy(self, node_id: int) -> FaultProxy:
        """The fault proxy in front of node ``node_id``'s clients."""
        proxy = self._node(node_id).proxy
        if proxy is None:
            raise ServiceError(f"node {node_id}'s proxy is not running.", "start() the cluster first.")
        return proxy

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> KafkaCluster:
        """Start every node (formatting a new cluster at the first start) and their proxies; wait until all three
        brokers are registered and unfenced. A first start moves to fresh ports if one was taken meanwhile."""
        service = KafkaService()
        service.provisioned()
        self.root.mkdir(parents=True, exist_ok=True)
        java = java_command(service.jars, service.home)

        def start(attempt: Attempt) -> None:
            self._use_ports(attempt.ports, count=len(self.nodes))
            configs = {i: self._write_config(i) for i in self.nodes}
            if not self._started:
                for i, config in configs.items():
                    shutil.rmtree(self._log_dir(i), ignore_errors=True)
                    format_storage(java, config, service.jars, cluster_id=self._cluster_id)
            since = {i: log_size(n.log_path) for i, n in self.nodes.items()}
            try:
                for i in self.nodes:
                    self._spawn(i, java, configs[i])
                for i, node in self.nodes.items():
                    self._wait_serving(node, Attempt(self._ports_of(node), node.log_path, since[i]))
            except (PortClash, ServiceError):
                for node in self.nodes.values():
                    self._stop_node(node, crash=True)
                raise

        ports = [p for n in self.nodes.values() for p in self._ports_of(n)]
        first_log = next(iter(self.nodes.values())).log_path
        start_on_ports(start, ports, log_path=first_log, what="Kafka cluster", may_move=not self._started)
        self._started = True
        for node in self.nodes.values():
            if node.proxy is None:
                node.proxy = FaultProxy("127.0.0.1", node.proxied_port, listen_port=node.proxy_port).start()
        self.wait_for_brokers(len(self.nodes))
        self._create_transaction_state()
        return self

    def _create_transaction_state(self) -> None:
        """Kafka creates its transaction state log at the first transactional producer: make one, so that
        :meth:`coordinator` answers before the test's first transaction."""
        from kafka import KafkaProducer

        producer = KafkaProducer(
            bootstrap_servers=self.direct_bootstrap, transactional_id="eosink-cluster-harness", max_block_ms=60_000
        )
        try:
            producer.init_transactions()
        finally:
            producer.close(timeout=5)
        self.wait_in_sync("__transaction_state")

    def close(self) -> None:
        """Stop every node and proxy, and remove the cluster's directory."""
        for node in self.nodes.values():
            if node.proxy is not None:
                with contextlib.suppress(Exception):
                    node.proxy.close()
                node.proxy = None
            self._stop_node(node, crash=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults on a node --------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (its proxy stays: clients are refused by the dead node behind it)."""
        self._stop_node(self._node(node_id), crash=True)

    def stop_node(self, node_id: int) -> None:
        """Stop node ``node_id`` cleanly (SIGTERM: a controlled shutdown moves its leaderships away first)."""
        self._stop_node(self._node(node_id), crash=False)

    def start_node(self, node_id: int, *, timeout_s: float | None = None) -> None:
        """Start node ``node_id`` again on its ports and data; wait until it serves."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.alive():
            return
        service = KafkaService()
        java = java_command(service.jars, service.home)
        self._spawn(node_id, java, self.root / f"node-{node_id}.properties")
        self._wait_serving(node, Attempt(self._ports_of(node), node.log_path, log_size(node.log_path)), timeout_s)

    def pause(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: it neither answers nor heartbeats; past the session timeout the controller
        fences it and its partitions move, while it still believes it leads them (a zombie until resumed)."""
        node = self._node(node_id)
        if node.proc is None:
            raise ServiceError(f"node {node_id} is not running.", "start_node() it first.")
        os.killpg(node.proc.pid, signal.SIGSTOP)
        node.paused = True

    def resume(self, node_id: int) -> None:
        """SIGCONT node ``node_id`` after :meth:`pause`."""
        node = self._node(node_id)
        if node.proc is not None and node.paused:
            os.killpg(node.proc.pid, signal.SIGCONT)
        node.paused = False

    # -- what the cluster says ---------------------------------------------------------------------

    def admin(self, via: int | None = None) -> Any:
        """A kafka-python admin client on the running nodes' own listeners, or on node ``via``'s only (the caller
        closes it)."""
        from kafka import KafkaAdminClient

        nodes = [via] if via is not None else self.running()
        running = ",".join(self.nodes[i].direct for i in nodes) or self.direct_bootstrap
        return KafkaAdminClient(
            bootstrap_servers=running, request_timeout_ms=10_000, client_id="eosink-cluster-harness"
        )

    def running(self) -> list[int]:
        """The nodes started and neither killed, stopped nor paused."""
        return [i for i, n in self.nodes.items() if n.proc is not None and not n.paused]

    def brokers(self) -> list[int]:
        """The ids of the brokers the cluster's metadata lists: registered ones, fenced ones too (a dead or paused
        node shows in the partitions it no longer leads or follows: :meth:`wait_in_sync`)."""
        admin = self.admin()
        try:
            return sorted(int(b["broker_id"]) for b in admin.describe_cluster().get("brokers", []))
        finally:
            admin.close()

    def wait_for_brokers(self, count: int, timeout_s: float = 60.0) -> None:
        """Wait until exactly ``count`` brokers are listed (:meth:`brokers`: a started cluster, a node that
        registered again after its restart)."""

        def listed() -> bool:
            with contextlib.suppress(Exception):
                return len(self.brokers()) == count
            return False

        if not poll(listed, timeout_s, max_interval_s=0.5):
            raise ServiceError(
                f"the Kafka cluster under {self.root} did not list {count} brokers within {timeout_s:.0f} s.",
                f"read the nodes' logs under {self.root}.",
            )

    def create_topic(self, topic: str, partitions: int = 3) -> None:
        """Create ``topic`` replicated on every node; wait until every partition has a leader and a full ISR."""
        admin = self.admin()
        try:
            admin.create_topics(
                {topic: {"num_partitions": partitions, "replication_factor": len(self.nodes)}}, wait_for_metadata=True
            )
        finally:
            admin.close()
        self.wait_in_sync(topic)

    def partitions(self, topic: str, *, via: int | None = None) -> dict[int, tuple[int, list[int]]]:
        """Each partition of ``topic``: its leader's node id (-1 while none) and its in-sync replicas, as a running
        node (or node ``via``) knows them."""
        admin = self.admin(via)
        try:
            described = admin.describe_topics([topic])
        finally:
            admin.close()
        found: dict[int, tuple[int, list[int]]] = {}
        for t in described:
            if t.get("name") != topic:
                continue
            for p in t.get("partitions", []):
                found[int(p["partition_index"])] = (int(p["leader_id"]), sorted(int(r) for r in p["isr_nodes"]))
        return found

    def leader(self, topic: str, partition: int = 0) -> int:
        """The node that leads ``topic``'s ``partition``."""
        leader, _ = self.partitions(topic).get(partition, (-1, []))
        if leader < 0:
            raise ServiceError(f"{topic}-{partition} has no leader.", "wait_in_sync() first, or start its nodes.")
        return leader

    def coordinator(self) -> int:
        """The node that coordinates every transaction: the leader of the transaction state log's one partition."""
        if self.txn_state_partitions != 1:
            raise ServiceError(
                f"the cluster has {self.txn_state_partitions} transaction state partitions: no one coordinator.",
                "make the cluster with txn_state_partitions=1.",
            )
        return self.leader("__transaction_state", 0)

    def wait_in_sync(self, topic: str, timeout_s: float = 60.0) -> None:
        """Wait until, as every running node knows it, every partition of ``topic`` is led by a running node and
        has every running node in its ISR (after a kill or a pause: once the controller has fenced the node and
        moved its leaderships; after a resume: once the node, a zombie with old metadata, has caught up)."""
        running = set(self.running())

        def synced(parts: dict[int, tuple[int, list[int]]]) -> bool:
            return bool(parts) and all(leader in running and running <= set(isr) for leader, isr in parts.values())

        def in_sync() -> bool:
            with contextlib.suppress(Exception):
                return all(synced(self.partitions(topic, via=i)) for i in running)
            return False

        if not poll(in_sync, timeout_s, max_interval_s=0.5):
            raise ServiceError(
                f"{topic} did not get a leader and nodes {sorted(running)} in sync within {timeout_s:.0f} s: "
                f"{self.partitions(topic)}.",
                f"read the nodes' logs under {self.root}.",
            )

    # -- inside ------------------------------------------------------------------------------------

    def _node(self, node_id: int) -> KafkaNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise ValueError(f"no node {node_id}: the nodes are {sorted(self.nodes)}") from None

    @staticmethod
    def _ports_of(node: KafkaNode) -> tuple[int, int, int, int]:
        return node.broker_port, node.controller_port, node.proxied_port, node.proxy_port

    def _use_ports(self, ports: Sequence[int], *, count: int) -> None:
        for k in range(count):
            broker, controller, proxied, proxy = ports[4 * k : 4 * k + 4]
            node_id = k + 1
            old = self.nodes.get(node_id)
            self.nodes[node_id] = KafkaNode(
                node_id, broker, controller, proxied, proxy, self.root / f"node-{node_id}.log", proxy=None
            )
            if old is not None and old.proxy is not None:  # ports move only before a first start: no proxy yet
                old.proxy.close()

    def _log_dir(self, node_id: int) -> Path:
        return self.root / f"kraft-{node_id}"

    def _write_config(self, node_id: int) -> Path:
        node = self.nodes[node_id]
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes.values())
        replicas = str(len(self.nodes))
        settings = {
            "node.id": str(node_id),
            "controller.quorum.voters": voters,
            "default.replication.factor": replicas,
            "min.insync.replicas": "2",
            "unclean.leader.election.enable": "false",
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": "2",
            "transaction.state.log.num.partitions": str(self.txn_state_partitions),
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": "2",
            "broker.session.timeout.ms": str(SESSION_TIMEOUT_MS),
            "broker.heartbeat.interval.ms": "1000",
            **self.settings,
        }
        config = self.root / f"node-{node_id}.properties"
        config.write_text(
            server_properties(
                node.broker_port,
                node.controller_port,
                self._log_dir(node_id),
                proxied=(node.proxied_port, node.proxy_port),
                extra=settings,
            )
        )
        return config

    def _spawn(self, node_id: int, java: list[str], config: Path) -> None:
        node = self.nodes[node_id]
        log.info("[kafka-cluster] starting node %d on %s", node_id, node.direct)
        node.proc = spawn([*java, "kafka.Kafka", str(config)], node.log_path, cwd=self.root)
        node.paused = False

    def _wait_serving(self, node: KafkaNode, attempt: Attempt, timeout_s: float | None = None) -> None:
        assert node.proc is not None
        wait_until(
            lambda: serves(node.direct),
            what=f"Kafka cluster node {node.node_id}",
            proc=node.proc,
            log_path=node.log_path,
            timeout_s=timeout_s or self.start_timeout_s,
            fix=f"read {node.log_path}, then try again.",
            attempt=attempt,
        )

    def _stop_node(self, node: KafkaNode, *, crash: bool) -> None:
        if node.proc is None:
            return
        if node.paused:  # a stopped process takes no SIGTERM: let it run to die
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.proc.pid, signal.SIGCONT)
            node.paused = False
        started = time.monotonic()
        stop(node.proc, what=f"kafka node {node.node_id}", sig=signal.SIGKILL if crash else signal.SIGTERM)
        log.info("[kafka-cluster] node %d stopped in %.1f s", node.node_id, time.monotonic() - started)
        node.proc = None
