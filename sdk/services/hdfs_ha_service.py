"""``hdfs-ha``: a :class:`~eosink.services.hdfs_ha.HdfsHaCluster` as a service.

``eosink services up hdfs-ha`` starts a supervisor process (``python -m eosink.services.hdfs_ha_service serve
...``; :mod:`eosink.services._supervisor`) that builds the HA name service ``ns1`` (two NameNodes, each behind a
fault proxy, three JournalNodes, two DataNodes), keeps it and its proxies alive, and takes commands on a Unix socket
in the service's run directory for a fixed list of operations (:data:`CLUSTER_OPS`, and the proxies' ``PROXY_OPS``).
:class:`HdfsHaControl` sends them with :class:`~eosink.services.hdfs_ha.HdfsHaCluster`'s own signatures, so a test
written against a cluster of its own runs on this service too.

It is started only when named. Clients use ``EOSINK_HDFS_HA_URL`` (``hdfs://ns1``) with the NameNodes' proxies in
``EOSINK_HDFS_HA_NAMENODES`` (``nn0=127.0.0.1:<port>,nn1=...``); ``EOSINK_HDFS_HA_CONTROL`` is the control socket.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from eosink.errors import ServiceError
from eosink.services._process import Proc, stop
from eosink.services._supervisor import Control, SupervisedService, Supervisor, run_supervisor, serve
from eosink.services.base import Endpoint
from eosink.services.hdfs_ha import HdfsHaCluster, client_config, provision

__all__ = ["CLUSTER_OPS", "HdfsHaControl", "HdfsHaEndpoint", "HdfsHaService", "main"]

NAME = "hdfs-ha"
#: The cluster's operations a client may ask for, with their arguments' types.
CLUSTER_OPS: dict[str, dict[str, type]] = {
    "ping": {},
    "endpoint": {},
    "state": {},
    "active": {},
    "failover": {"to": int},
    "fail_back": {},
    "kill_active": {},
    "stop_namenode": {"nn": int},
    "start_namenode": {"nn": int},
    "stop_datanode": {"index": int},
    "start_datanode": {"index": int},
}
_REQUIRED = frozenset({"node", "to", "nn", "index"})
PIDS = "cluster.json"
"""The cluster's process, as the supervisor started it (to stop it if the supervisor itself died)."""


@dataclass(frozen=True)
class HdfsHaEndpoint(Endpoint):
    """The name service: ``url`` (``hdfs://ns1``), ``namenodes`` its NameNodes at their proxies (what clients use),
    ``direct`` at their own ports; ``ports`` each proxy's port by NameNode index."""

    url: str
    nameservice: str
    namenodes: dict[str, str] = field(default_factory=dict)
    direct: dict[str, str] = field(default_factory=dict)
    ports: dict[str, int] = field(default_factory=dict)
    control: str = ""
    """The supervisor's control socket."""

    def env(self) -> dict[str, str]:
        nodes = ",".join(f"{name}={address}" for name, address in self.namenodes.items())
        return {
            "EOSINK_HDFS_HA_URL": self.url,
            "EOSINK_HDFS_HA_NAMENODES": nodes,
            "EOSINK_HDFS_HA_CONTROL": self.control,
        }

    def client_config(self) -> dict[str, str]:
        """As :meth:`~eosink.services.hdfs_ha.HdfsHaCluster.client_config`."""
        return client_config(self.nameservice, self.namenodes)


class HdfsHaControl(Control):
    """The operations of :class:`~eosink.services.hdfs_ha.HdfsHaCluster`, sent to the service's supervisor (one
    connection per call). A supervisor that is gone is a :class:`ServiceError` saying so."""

    service = NAME
    endpoint: HdfsHaEndpoint

    def __repr__(self) -> str:
        return f"HdfsHaControl({self.endpoint.control!r})"

    @property
    def url(self) -> str:
        return self.endpoint.url

    @property
    def nameservice(self) -> str:
        return self.endpoint.nameservice

    def client_config(self) -> dict[str, str]:
        return self.endpoint.client_config()

    def spark_conf(self) -> dict[str, str]:
        return {f"spark.hadoop.{key}": value for key, value in self.client_config().items()}

    def state(self) -> dict[int, str]:
        return {int(nn): str(state) for nn, state in self.request("state").items()}

    def active(self) -> int:
        return int(self.request("active"))

    def failover(self, to: int) -> None:
        self.request("failover", to=to)

    def fail_back(self) -> None:
        self.request("fail_back")

    def kill_active(self) -> int:
        return int(self.request("kill_active"))

    def stop_namenode(self, nn: int) -> None:
        self.request("stop_namenode", nn=nn)

    def start_namenode(self, nn: int) -> None:
        self.request("start_namenode", nn=nn)

    def stop_datanode(self, index: int) -> None:
        self.request("stop_datanode", index=index)

    def start_datanode(self, index: int) -> None:
        self.request("start_datanode", index=index)


# -- the supervisor ---------------------------------------------------------------------------------------


def _supervise(cluster: HdfsHaCluster, control: Path) -> Supervisor:
    """The supervisor of ``cluster``: its operations, ``endpoint`` as JSON; its process recorded."""

    def cluster_op(op: str, args: dict[str, Any]) -> Any:
        if op == "endpoint":
            return _endpoint(cluster, control).to_json()
        return getattr(cluster, op)(**args)

    if cluster.proc is not None:
        (cluster.root / PIDS).write_text(json.dumps([cluster.proc.pid, cluster.proc.start_time]))
    return Supervisor(
        NAME,
        control,
        ops=CLUSTER_OPS,
        cluster_op=cluster_op,
        proxy_of=lambda n: cluster.proxy(int(n)),
        required=_REQUIRED,
    )


def _endpoint(cluster: HdfsHaCluster, control: Path) -> HdfsHaEndpoint:
    return HdfsHaEndpoint(
        url=cluster.url,
        nameservice=cluster.nameservice,
        namenodes=cluster.namenodes(),
        direct=cluster.namenodes(direct=True),
        ports={str(nn): cluster.proxy(nn).port for nn in (0, 1)},
        control=os.fspath(control),
    )


def main(argv: list[str] | None = None) -> int:
    """``python -m eosink.services.hdfs_ha_service serve ROOT CONTROL``."""
    parser = argparse.ArgumentParser(prog="python -m eosink.services.hdfs_ha_service")
    parser.add_argument("action", choices=["serve"])
    parser.add_argument("root", type=Path, help="the cluster's directory")
    parser.add_argument("control", type=Path, help="the control socket")
    args = parser.parse_args(argv)
    root, control = args.root, args.control
    return run_supervisor(
        lambda: serve(NAME, control, lambda: HdfsHaCluster(root).start(), lambda c: _supervise(c, control))
    )


# -- the service ------------------------------------------------------------------------------------------


class HdfsHaService(SupervisedService[HdfsHaEndpoint]):
    """The HA name service ``ns1``, each NameNode behind a fault proxy, run by a supervisor (module docstring)."""

    name = NAME
    endpoint_type = HdfsHaEndpoint
    start_timeout_s = 300.0
    module = "eosink.services.hdfs_ha_service"

    def external(self) -> HdfsHaEndpoint | None:
        return None  # failovers need the harness's own NameNodes

    def provision(self) -> None:
        provision()  # the hdfs service's jars, and the launcher compiled against them

    def clean_up(self) -> None:
        """The cluster a supervisor that died left running, by the PID it recorded."""
        with contextlib.suppress(OSError, ValueError):
            pid, start_time = json.loads((self.data / PIDS).read_text())
            cluster = Proc(int(pid), int(start_time))
            if cluster.alive():
                stop(cluster, what=f"{NAME} cluster", sig=signal.SIGKILL)

    def check(self, endpoint: HdfsHaEndpoint) -> str:
        """One NameNode active; a file written and read back through ``hdfs://ns1`` (the proxies)."""
        from hdfs_native import Client, WriteOptions

        started = time.monotonic()
        states = HdfsHaControl(endpoint).state()
        if sorted(states.values()) != ["active", "standby"]:
            raise ServiceError(
                f"{NAME}'s NameNodes are {states}, not one active and one standby.",
                f"`eosink services down {NAME}` then `up` starts it afresh.",
            )
        client = Client(endpoint.url, endpoint.client_config())
        path = f"/tmp/eosink-check-{uuid.uuid4().hex}"
        payload = os.urandom(64 * 1024)
        try:
            writer = client.create(path, WriteOptions())
            writer.write(payload)
            writer.close()
            reader = client.read(path)
            try:
                back = reader.readall()
            finally:
                reader.close()
        finally:
            with contextlib.suppress(Exception):
                client.delete(path)
        if back != payload:
            raise ServiceError(f"{NAME} returned different bytes for {path}.", f"read {self.log_path}.")
        ms = (time.monotonic() - started) * 1000
        return (
            f"{NAME} {endpoint.url}: NameNodes {states}; wrote and read back 64 KiB through the proxies in {ms:.0f} ms"
        )


if __name__ == "__main__":
    sys.exit(main())
