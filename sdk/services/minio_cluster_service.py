"""``minio-cluster``: a :class:`~eosink.services.minio_cluster.MinioCluster` as a service.

``eosink services up minio-cluster`` starts a supervisor process (``python -m
eosink.services.minio_cluster_service serve ...``; :mod:`eosink.services._supervisor`) that builds the four-node
cluster (one erasure set of eight drives, each node behind a fault proxy, a round-robin balancer in front), keeps
it alive, and takes commands on a Unix socket in the service's run directory for a fixed list of operations
(:data:`CLUSTER_OPS`, and the proxies' ``PROXY_OPS``). :class:`MinioClusterControl` sends them with the cluster's
own signatures, so a test written against a cluster of its own runs on this service too.

It is started only when named. Clients use ``EOSINK_MINIO_CLUSTER_ENDPOINT`` (the balancer) with
``EOSINK_MINIO_CLUSTER_ACCESS_KEY`` and ``..._SECRET_KEY``; ``EOSINK_MINIO_CLUSTER_CONTROL`` is the control socket.
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
from typing import Any

from eosink.errors import ServiceError
from eosink.services._process import Proc, stop
from eosink.services._supervisor import Control, SupervisedService, Supervisor, run_supervisor, serve
from eosink.services.minio import MinioService, S3Endpoint
from eosink.services.minio_cluster import MinioCluster

__all__ = ["CLUSTER_OPS", "MinioClusterControl", "MinioClusterEndpoint", "MinioClusterService", "main"]

NAME = "minio-cluster"
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
    "healthy": {},
    "wait_healthy": {"timeout_s": float},
}
_REQUIRED = frozenset({"node", "node_id"})
PIDS = "nodes.json"
"""The nodes' processes, as the supervisor last started them (to stop them if the supervisor itself died)."""


@dataclass(frozen=True)
class MinioClusterEndpoint(S3Endpoint):
    """The cluster as an S3 endpoint: ``endpoint_url`` is the balancer; ``ports`` each node's proxy port and
    ``direct`` its own port, by node id."""

    ports: dict[str, int] = field(default_factory=dict)
    direct: dict[str, int] = field(default_factory=dict)
    control: str = ""
    """The supervisor's control socket."""

    def env(self) -> dict[str, str]:
        return {
            "EOSINK_MINIO_CLUSTER_ENDPOINT": self.endpoint_url,
            "EOSINK_MINIO_CLUSTER_ACCESS_KEY": self.access_key,
            "EOSINK_MINIO_CLUSTER_SECRET_KEY": self.secret_key,
            "EOSINK_MINIO_CLUSTER_REGION": self.region,
            "EOSINK_MINIO_CLUSTER_CONTROL": self.control,
        }


class MinioClusterControl(Control):
    """The operations of :class:`~eosink.services.minio_cluster.MinioCluster`, sent to the service's supervisor
    (one connection per call). A supervisor that is gone is a :class:`ServiceError` saying so."""

    service = NAME
    endpoint: MinioClusterEndpoint

    def __repr__(self) -> str:
        return f"MinioClusterControl({self.endpoint.control!r})"

    @property
    def nodes(self) -> list[int]:
        return sorted(int(n) for n in self.endpoint.ports)

    def node_endpoint(self, node_id: int) -> S3Endpoint:
        return self._s3(self.endpoint.ports[str(node_id)])

    def direct_endpoint(self, node_id: int) -> S3Endpoint:
        return self._s3(self.endpoint.direct[str(node_id)])

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

    def healthy(self) -> bool:
        return bool(self.request("healthy"))

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        self.request("wait_healthy", timeout_s=timeout_s)

    def _s3(self, port: int) -> S3Endpoint:
        ep = self.endpoint
        return S3Endpoint(f"http://127.0.0.1:{port}", ep.access_key, ep.secret_key, ep.region)


# -- the supervisor ---------------------------------------------------------------------------------------


def _supervise(cluster: MinioCluster, control: Path) -> Supervisor:
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


def _endpoint(cluster: MinioCluster, control: Path) -> MinioClusterEndpoint:
    s3 = cluster.endpoint
    return MinioClusterEndpoint(
        s3.endpoint_url,
        s3.access_key,
        s3.secret_key,
        s3.region,
        ports={str(i): cluster.proxy(i).port for i in cluster.nodes},
        direct={str(i): n.port for i, n in cluster.nodes.items()},
        control=os.fspath(control),
    )


def _record(cluster: MinioCluster) -> None:
    procs = {str(i): [n.proc.pid, n.proc.start_time] for i, n in cluster.nodes.items() if n.proc is not None}
    (cluster.root / PIDS).write_text(json.dumps(procs))


def main(argv: list[str] | None = None) -> int:
    """``python -m eosink.services.minio_cluster_service serve ROOT CONTROL``."""
    parser = argparse.ArgumentParser(prog="python -m eosink.services.minio_cluster_service")
    parser.add_argument("action", choices=["serve"])
    parser.add_argument("root", type=Path, help="the cluster's directory")
    parser.add_argument("control", type=Path, help="the control socket")
    args = parser.parse_args(argv)
    root, control = args.root, args.control

    def make() -> MinioCluster:
        return MinioCluster(root).start()

    return run_supervisor(lambda: serve(NAME, control, make, lambda c: _supervise(c, control)))


# -- the service ------------------------------------------------------------------------------------------


class MinioClusterService(SupervisedService[MinioClusterEndpoint]):
    """Four MinIO nodes, one erasure set, each behind a fault proxy, a balancer in front, run by a supervisor."""

    name = NAME
    endpoint_type = MinioClusterEndpoint
    start_timeout_s = 300.0
    module = "eosink.services.minio_cluster_service"

    def external(self) -> MinioClusterEndpoint | None:
        return None  # node failures need the harness's own servers

    def provision(self) -> None:
        MinioService().provisioned()  # the same binary as the single server

    def clean_up(self) -> None:
        """The nodes a supervisor that died left running, by the PIDs it recorded."""
        with contextlib.suppress(OSError, ValueError):
            for pid, start_time in json.loads((self.data / PIDS).read_text()).values():
                node = Proc(int(pid), int(start_time))
                if node.alive():
                    stop(node, what=f"{NAME} node", sig=signal.SIGKILL)

    def check(self, endpoint: MinioClusterEndpoint) -> str:
        """Four nodes running and the cluster healthy; the single server's S3 check through the balancer."""
        started = time.monotonic()
        control = MinioClusterControl(endpoint)
        running = control.running()
        if running != [1, 2, 3, 4] or not control.healthy():
            raise ServiceError(
                f"{NAME} runs nodes {running}, not [1, 2, 3, 4], or reports no write quorum.",
                f"see `eosink services status {NAME}`; `eosink services down {NAME}` then `up` starts it afresh.",
            )
        summary = MinioService().check(endpoint)
        return f"{NAME}: nodes {running} healthy; {summary} ({time.monotonic() - started:.1f} s)"


if __name__ == "__main__":
    sys.exit(main())
