"""``kafka-cluster``: a :class:`~eosink.services.kafka_cluster.KafkaCluster` as a service.

``eosink services up kafka-cluster`` starts a supervisor process (``python -m
eosink.services.kafka_cluster_service serve ...``; :mod:`eosink.services._supervisor`) that builds the
three-node cluster (replication factor 3, ``min.insync.replicas=2``, one transaction-state partition, each node
behind a fault proxy), keeps it and its proxies alive, and takes commands on a Unix socket in the service's run
directory for a fixed list of operations (:data:`CLUSTER_OPS`, and the proxies' ``PROXY_OPS``).
:class:`KafkaClusterControl` sends them with :class:`~eosink.services.kafka_cluster.KafkaCluster`'s own
signatures, so a test written against a cluster of its own runs on this service too.

It is started only when named: ``eosink services up`` alone starts the plain servers. Clients bootstrap at
``EOSINK_KAFKA_CLUSTER_BOOTSTRAP`` (every node's proxy); ``EOSINK_KAFKA_CLUSTER_CONTROL`` is the control socket.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from eosink.errors import ServiceError
from eosink.services._process import Proc, stop
from eosink.services._supervisor import (
    Control,
    SupervisedService,
    Supervisor,
    run_supervisor,
    serve,
)
from eosink.services.base import Endpoint
from eosink.services.kafka import KafkaEndpoint, KafkaService
from eosink.services.kafka_cluster import KafkaCluster

__all__ = ["CLUSTER_OPS", "KafkaClusterControl", "KafkaClusterEndpoint", "KafkaClusterService", "main"]

NAME = "kafka-cluster"
#: The cluster's operations a client may ask for, with their arguments' types.
CLUSTER_OPS: dict[str, dict[str, type]] = {
    "ping": {},
    "endpoint": {},
    "kill": {"node_id": int},
    "stop_node": {"node_id": int},
    "start_node": {"node_id": int, "timeout_s": float},
    "pause": {"node_id": int},
    "resume": {"node_id": int},
    "running": {},
    "brokers": {},
    "coordinator": {},
    "leader": {"topic": str, "partition": int},
    "create_topic": {"topic": str, "partitions": int},
    "wait_in_sync": {"topic": str, "timeout_s": float},
    "wait_for_brokers": {"count": int, "timeout_s": float},
}
_REQUIRED = frozenset({"node", "node_id", "topic", "count"})
PIDS = "nodes.json"
"""The nodes' processes, as the supervisor last started them (to stop them if the supervisor itself died)."""


@dataclass(frozen=True)
class KafkaClusterEndpoint(Endpoint):
    """The cluster: ``bootstrap_servers`` is every node's fault proxy (what clients use), ``direct_bootstrap`` the
    nodes' own listeners (checks that must not meet a fault); ``ports`` each node's proxy port by node id."""

    bootstrap_servers: str
    direct_bootstrap: str
    ports: dict[str, int] = field(default_factory=dict)
    control: str = ""
    """The supervisor's control socket."""

    def env(self) -> dict[str, str]:
        return {"EOSINK_KAFKA_CLUSTER_BOOTSTRAP": self.bootstrap_servers, "EOSINK_KAFKA_CLUSTER_CONTROL": self.control}


class KafkaClusterControl(Control):
    """The operations of :class:`~eosink.services.kafka_cluster.KafkaCluster`, sent to the service's supervisor
    (one connection per call). A supervisor that is gone is a :class:`ServiceError` saying so."""

    service = NAME
    endpoint: KafkaClusterEndpoint

    def __repr__(self) -> str:
        return f"KafkaClusterControl({self.endpoint.control!r})"

    @property
    def bootstrap_servers(self) -> str:
        return self.endpoint.bootstrap_servers

    @property
    def direct_bootstrap(self) -> str:
        return self.endpoint.direct_bootstrap

    @property
    def nodes(self) -> list[int]:
        return sorted(int(n) for n in self.endpoint.ports)

    def kill(self, node_id: int) -> None:
        self.request("kill", node_id=node_id)

    def stop_node(self, node_id: int) -> None:
        self.request("stop_node", node_id=node_id)

    def start_node(self, node_id: int, *, timeout_s: float = 120.0) -> None:
        self.request("start_node", node_id=node_id, timeout_s=timeout_s)

    def pause(self, node_id: int) -> None:
        self.request("pause", node_id=node_id)

    def resume(self, node_id: int) -> None:
        self.request("resume", node_id=node_id)

    def running(self) -> list[int]:
        return [int(n) for n in self.request("running")]

    def brokers(self) -> list[int]:
        return [int(n) for n in self.request("brokers")]

    def coordinator(self) -> int:
        return int(self.request("coordinator"))

    def leader(self, topic: str, partition: int = 0) -> int:
        return int(self.request("leader", topic=topic, partition=partition))

    def create_topic(self, topic: str, partitions: int = 3) -> None:
        self.request("create_topic", topic=topic, partitions=partitions)

    def wait_in_sync(self, topic: str, timeout_s: float = 60.0) -> None:
        self.request("wait_in_sync", topic=topic, timeout_s=timeout_s)

    def wait_for_brokers(self, count: int, timeout_s: float = 60.0) -> None:
        self.request("wait_for_brokers", count=count, timeout_s=timeout_s)


# -- the supervisor ---------------------------------------------------------------------------------------


def _supervise(cluster: KafkaCluster, control: Path) -> Supervisor:
    """The supervisor of ``cluster``: its operations, ``endpoint`` as JSON; the nodes' processes recorded after
    every start."""

    def cluster_op(op: str, args: dict[str, Any]) -> Any:
        if op == "endpoint":
            return _endpoint(cluster, control).to_json()
        result = getattr(cluster, op)(**args)
        if op == "start_node":
            _record(cluster)
        return result

    _record(cluster)
    return Supervisor(
        NAME,
        control,
        ops=CLUSTER_OPS,
        cluster_op=cluster_op,
        proxy_of=lambda n: cluster.proxy(int(n)),
        required=_REQUIRED,
    )


def _endpoint(cluster: KafkaCluster, control: Path) -> KafkaClusterEndpoint:
    return KafkaClusterEndpoint(
        bootstrap_servers=cluster.bootstrap_servers,
        direct_bootstrap=cluster.direct_bootstrap,
        ports={str(i): cluster.proxy(i).port for i in cluster.nodes},
        control=os.fspath(control),
    )


def _record(cluster: KafkaCluster) -> None:
    procs = {str(i): [n.proc.pid, n.proc.start_time] for i, n in cluster.nodes.items() if n.proc is not None}
    (cluster.root / PIDS).write_text(json.dumps(procs))


def main(argv: list[str] | None = None) -> int:
    """``python -m eosink.services.kafka_cluster_service serve ROOT CONTROL``."""
    parser = argparse.ArgumentParser(prog="python -m eosink.services.kafka_cluster_service")
    parser.add_argument("action", choices=["serve"])
    parser.add_argument("root", type=Path, help="the cluster's directory")
    parser.add_argument("control", type=Path, help="the control socket")
    args = parser.parse_args(argv)
    root, control = args.root, args.control

    def make() -> KafkaCluster:
        return KafkaCluster(root, txn_state_partitions=1).start()

    return run_supervisor(lambda: serve(NAME, control, make, lambda c: _supervise(c, control)))


# -- the service ------------------------------------------------------------------------------------------


class _ReplicatedCheck(KafkaService):
    """The Kafka health check on a topic replicated three times (``min.insync.replicas=2`` refuses fewer)."""

    check_replicas: ClassVar[int] = 3


class KafkaClusterService(SupervisedService[KafkaClusterEndpoint]):
    """Three KRaft nodes, each behind a fault proxy, run by a supervisor (see the module docstring)."""

    name = NAME
    endpoint_type = KafkaClusterEndpoint
    start_timeout_s = 300.0
    module = "eosink.services.kafka_cluster_service"

    def external(self) -> KafkaClusterEndpoint | None:
        return None  # node failures need the harness's own servers

    def provision(self) -> None:
        KafkaService().provisioned()  # the same jars as the single broker

    def clean_up(self) -> None:
        """The nodes a supervisor that died left running, by the PIDs it recorded."""
        with contextlib.suppress(OSError, ValueError):
            for pid, start_time in json.loads((self.data / PIDS).read_text()).values():
                node = Proc(int(pid), int(start_time))
                if node.alive():
                    stop(node, what=f"{NAME} node", sig=signal.SIGKILL)

    def check(self, endpoint: KafkaClusterEndpoint) -> str:
        """Three brokers listed; a transactional produce and a ``read_committed`` read through the nodes' proxies,
        on a topic replicated three times."""
        started = time.monotonic()
        brokers = KafkaClusterControl(endpoint).brokers()
        if len(brokers) != 3:
            raise ServiceError(
                f"{NAME} lists brokers {brokers}, not three.",
                f"see `eosink services status {NAME}`; `eosink services down {NAME}` then `up` starts it afresh.",
            )
        summary = _ReplicatedCheck().check(KafkaEndpoint(bootstrap_servers=endpoint.bootstrap_servers))
        return f"{NAME}: brokers {brokers} through their proxies; {summary} ({time.monotonic() - started:.1f} s)"


if __name__ == "__main__":
    sys.exit(main())
