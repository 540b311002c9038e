"""A private HA HDFS for failover tests: name service ``ns1``, two NameNodes, each behind a fault proxy of its own.

What runs: ``MiniHdfsHa.java`` (next to this module) in one JVM: three JournalNodes (the quorum journal that holds
the NameNodes' shared edit log), NameNodes ``nn0`` and ``nn1``, and two DataNodes that report to both. It is
compiled against the jars of the ``hdfs`` service (no jars of its own) and maps that service's class-data-sharing
archive. Failover is manual (no ZooKeeper): :meth:`HdfsHaCluster.failover`, :meth:`~HdfsHaCluster.kill_active`
and :meth:`~HdfsHaCluster.fail_back` send the launcher commands on a pipe only this object holds.

Clients reach the NameNodes through the proxies: :meth:`~HdfsHaCluster.client_config` is the ``hdfs_native``
configuration of ``hdfs://ns1`` (both proxies, and a failover patience of some 5 s instead of the harness's
fail-fast 2 attempts), :meth:`~HdfsHaCluster.spark_conf` the same for Spark's Hadoop client. The NameNodes and
DataNodes talk to each other directly, so a proxy fault (:meth:`~HdfsHaCluster.proxy`) cuts only what a client
sees of one NameNode. The NameNode ports and the proxies are kept across NameNode restarts and whole-cluster
restarts (:meth:`~eosink.services._process.ServerProcess.restart`, on the same data); the cluster is stopped by its
own PID's process group.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

from eosink.errors import ServiceError
from eosink.services._layout import cache_lock
from eosink.services._process import Attempt, Proc, ServerProcess, free_ports, log_after, start_on_ports, wait_until
from eosink.services.hdfs import HdfsService, _jdk, compile_launcher, send_command, spawn_with_commands
from eosink.services.proxy import FaultProxy
from eosink.stores.hdfs import ha_settings

__all__ = ["FAILOVER_PATIENCE", "NAMENODES", "HdfsHaCluster", "client_config", "provision"]

log = logging.getLogger("eosink.services")

NAMENODES = 2
#: How long a client keeps trying the NameNodes (hdfs-native and Hadoop's client alike): 15 switches, backing off
#: 0.2 s doubling to 1 s (jittered) after each round over both, some 5 s in all, where the harness's clients
#: (``FAIL_FAST``) give up after 2 switches.
FAILOVER_PATIENCE = {
    "dfs.client.failover.max.attempts": "15",
    "dfs.client.failover.sleep.base.millis": "100",
    "dfs.client.failover.sleep.max.millis": "1000",
}

_MAIN = "MiniHdfsHa"
_JAR = "minihdfs-ha.jar"
#: As the hdfs service's JVM, with more heap: five servers and two DataNodes share it.
_JVM_OPTS = ("-Xmx1g", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true")
_QUICK_DATANODE_EXPIRY = "-Dminihdfs.quickDataNodeExpiry=true"
_CLOSE_AFTER_REPORT = "-Dminihdfs.numCommittedAllowed=0"
_READY = re.compile(
    r"^READY ns=ns1 nn0=127\.0\.0\.1:(\d+)/(\d+) nn1=127\.0\.0\.1:(\d+)/(\d+) active=(\d)$", re.MULTILINE
)
_STATE = r"STATE nn0=(?P<nn0>\S+) nn1=(?P<nn1>\S+)"


class HdfsHaCluster(ServerProcess):
    """Name service ``ns1`` under ``root`` (see the module docstring): :meth:`start` it, :meth:`close` it.

    ``close_before_report`` as :class:`~eosink.services.hdfs.HdfsServer`'s. DataNodes silent for 12 s are dead, as
    on that server. Commands wait at most ``command_timeout_s``.
    """

    what = "private HA HDFS"
    nameservice = "ns1"
    url = "hdfs://ns1"

    def __init__(
        self,
        root: Path,
        start_timeout_s: float = 240.0,
        *,
        close_before_report: bool = True,
        command_timeout_s: float = 120.0,
    ) -> None:
        self.root = root
        self.start_timeout_s = start_timeout_s
        self.close_before_report = close_before_report
        self.command_timeout_s = command_timeout_s
        self.proc: Proc | None = None
        self._ports: tuple[int, ...] = free_ports(2 * NAMENODES)
        """Each NameNode's RPC and HTTP port: nn0's, then nn1's."""
        self._proxies: list[FaultProxy] = []
        self._formatted = False
        self._last_active = 0
        """The NameNode made active last (by a start or a failover): a restart makes it active again."""
        self._commands: BinaryIO | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HdfsHaCluster({self.url}, root={str(self.root)!r})"

    @property
    def log_path(self) -> Path:
        return self.root / "hdfs-ha.log"

    # -- addresses ---------------------------------------------------------------------------------

    def rpc_port(self, nn: int) -> int:
        """NameNode ``nn``'s own RPC port (the NameNodes' and DataNodes' traffic; clients use :meth:`proxy`)."""
        return self._ports[2 * _index(nn)]

    def http_port(self, nn: int) -> int:
        """NameNode ``nn``'s HTTP port (web UI, JMX, WebHDFS)."""
        return self._ports[2 * _index(nn) + 1]

    def proxy(self, nn: int) -> FaultProxy:
        """The fault proxy in front of NameNode ``nn``'s RPC port, where clients reach it."""
        if not self._proxies:
            raise ServiceError(f"{self!r} has no proxies yet.", "start() the cluster first.")
        return self._proxies[_index(nn)]

    def namenodes(self, *, direct: bool = False) -> dict[str, str]:
        """``{"nn0": "127.0.0.1:<port>", "nn1": ...}``: the proxies, or with ``direct`` the NameNodes' own ports."""
        return {f"nn{i}": f"127.0.0.1:{self.rpc_port(i) if direct else self.proxy(i).port}" for i in range(NAMENODES)}

    def client_config(self, *, direct: bool = False) -> dict[str, str]:
        """The ``hdfs_native.Client`` configuration of :attr:`url`: both NameNodes (through their proxies, or
        ``direct``) and :data:`FAILOVER_PATIENCE` (the harness's clients give up after 2 attempts otherwise)."""
        return client_config(self.nameservice, self.namenodes(direct=direct))

    def spark_conf(self) -> dict[str, str]:
        """Spark settings (``spark.hadoop.*``) under which ``hdfs://ns1/...`` (a checkpoint location, say) reaches
        the name service through the proxies; Hadoop's client fails over by itself, as hdfs-native's does."""
        return {f"spark.hadoop.{key}": value for key, value in self.client_config().items()}

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> HdfsHaCluster:
        """Start the cluster (compiling the launcher first if needed) and wait until it is up, with the NameNode
        made active last (nn0 at the first start) active: on fresh data the first time, on the data it left at every
        later start. A first start moves to fresh ports if one was taken meanwhile; a later one keeps them."""
        service = provision()
        java, _ = _jdk()
        extra = [*service._cds_options(java), _QUICK_DATANODE_EXPIRY]
        if not self.close_before_report:
            extra.append(_CLOSE_AFTER_REPORT)
        data = self.root / "data"

        def start(attempt: Attempt) -> tuple[int, ...]:
            (data / "tmp").mkdir(parents=True, exist_ok=True)  # a failed try's JVM removes it as it exits
            self._ports = attempt.ports
            argv = [
                java,
                *_JVM_OPTS,
                f"-Djava.io.tmpdir={data / 'tmp'}",
                *extra,
                "-cp",
                # The hdfs service's class path first, as its archive was made with: the JVM maps the archive for
                # a class path that extends that one.
                os.pathsep.join(str(service.home / name) for name in ("minihdfs.jar", "jars/*", _JAR)),
                _MAIN,
                str(data),
                *map(str, self._ports),
                str(self._last_active),
                *(["keep"] if self._formatted else []),
            ]
            return self._launch(argv, attempt)

        log.info("[hdfs-ha] starting %s on %s", self, self.log_path)
        ready = start_on_ports(start, self._ports, log_path=self.log_path, what=self.what, may_move=not self._formatted)
        self._formatted = True
        if ready[:-1] != self._ports:
            raise ServiceError(
                f"{self!r} came up on ports {ready[:-1]}, not {self._ports}.",
                f"read {self.log_path}; MiniHdfsHa binds the NameNode ports it is given.",
            )
        self._last_active = ready[-1]
        if not self._proxies:
            self._proxies = [FaultProxy("127.0.0.1", self.rpc_port(i)) for i in range(NAMENODES)]
        for proxy in self._proxies:
            proxy.start()  # listening again after a stop
        return self

    def _launch(self, argv: list[str], attempt: Attempt) -> tuple[int, ...]:
        """Start the launcher on a new command pipe; wait for its READY line: the ports it bound and the active
        NameNode. Stop it (SIGKILL) if it does not get there."""
        commands, self._commands = self._commands, None
        proc, self._commands = spawn_with_commands(argv, self.log_path, replacing=commands)
        self.proc = proc
        found: list[tuple[int, ...]] = []

        def ready() -> bool:
            match = _READY.search(log_after(self.log_path, attempt.since))
            if match:
                found.append(tuple(int(g) for g in match.groups()))
            return bool(match)

        try:
            wait_until(
                ready,
                what=self.what,
                proc=proc,
                log_path=self.log_path,
                timeout_s=self.start_timeout_s,
                fix=f"read {self.log_path}; a JDK 17+ and about 1.5 GB of free memory are needed.",
                attempt=attempt,
            )
        except BaseException:
            self.stop(crash=True)
            raise
        return found[0]

    def stop(self, *, crash: bool = False) -> None:
        """Stop the whole cluster (``crash``: SIGKILL) and close its command pipe. The proxies refuse connections
        until the next start, as the NameNodes' own ports would (see :meth:`stop_namenode`)."""
        for proxy in self._proxies:
            proxy.refuse()
        super().stop(crash=crash)
        commands, self._commands = self._commands, None
        if commands is not None:
            commands.close()

    def close(self) -> None:
        """Stop the cluster and its proxies."""
        self.stop()
        proxies, self._proxies = self._proxies, []
        for proxy in proxies:
            proxy.close()

    def __enter__(self) -> HdfsHaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- NameNodes ---------------------------------------------------------------------------------

    def state(self) -> dict[int, str]:
        """Each NameNode's HA state: ``active``, ``standby`` or ``stopped`` (or a transition's)."""
        match = self._command("state", _STATE)
        return {0: match["nn0"], 1: match["nn1"]}

    def active(self) -> int:
        """The index of the active NameNode."""
        states = self.state()
        for nn, state in states.items():
            if state == "active":
                return nn
        raise ServiceError(f"{self!r} has no active NameNode: {states}.", "failover() to a running NameNode.")

    def failover(self, to: int) -> None:
        """Make NameNode ``to`` active: the active one (if any) becomes standby first, as a manual failover does;
        returns once ``to`` takes writes."""
        to = _index(to)
        source = next((nn for nn, state in self.state().items() if state == "active"), 1 - to)
        self._command(f"failover {source} {to}", f"ACTIVE {to}")
        self._last_active = to

    def fail_back(self) -> None:
        """Make nn0 active again (starting it first if it is stopped), after a failover to nn1."""
        if self.state()[0] == "stopped":
            self.start_namenode(0)
        self.failover(0)

    def kill_active(self) -> int:
        """Stop the active NameNode and make the other one active: a NameNode lost mid-commit, and the failover
        that follows. Returns the stopped NameNode's index. An in-JVM stop of that NameNode (not a SIGKILL of a
        process); its clients find its proxy refusing connections (:meth:`stop_namenode`)."""
        killed = self.active()
        self.stop_namenode(killed)
        self.failover(1 - killed)
        return killed

    def stop_namenode(self, nn: int) -> None:
        """Stop NameNode ``nn``; the other one keeps its state (no failover). Its proxy refuses connections (and cuts
        the open ones) from then on, as the NameNode's own port does: a proxy that accepted and then reset them would
        make every write sent there ambiguous, which hdfs-native (rightly) does not replay on the other NameNode."""
        self.proxy(nn).refuse()
        self._command(f"stop-namenode {_index(nn)}", f"NAMENODE {nn} STOPPED")

    def start_namenode(self, nn: int) -> None:
        """Start NameNode ``nn`` again on its ports and data, as a standby; returns once it has the DataNodes'
        block reports (it can take over at once) and its proxy listens again."""
        self._command(f"start-namenode {_index(nn)}", f"NAMENODE {nn} STARTED")
        self.proxy(nn).start()

    # -- DataNodes ---------------------------------------------------------------------------------

    def stop_datanode(self, index: int) -> None:
        """Stop DataNode ``index`` (0 or 1) at once, as :meth:`~eosink.services.hdfs.HdfsServer.stop_datanode`."""
        self._command(f"stop-datanode {index}", f"DATANODE {index} STOPPED")

    def start_datanode(self, index: int) -> None:
        """Start DataNode ``index`` again; returns once every running NameNode has its block report."""
        self._command(f"start-datanode {index}", f"DATANODE {index} STARTED")

    def _command(self, command: str, done: str) -> re.Match[str]:
        with self._lock:
            return send_command(
                repr(self), self.proc, self._commands, self.log_path, command, done, self.command_timeout_s
            )


def provision() -> HdfsService:
    """The ``hdfs`` service provisioned (its jars, and the archive the launcher's JVM maps), with the launcher
    compiled against its jars (cached); that service, whose directory holds it all."""
    service = HdfsService()
    service.provisioned()
    _, javac = _jdk()
    with cache_lock(f"provision-{service.name}"):
        jars = sorted((service.home / "jars").glob("*.jar"))
        compile_launcher(service.home, javac, jars, f"{_MAIN}.java", service.home / _JAR, service.home / "classes-ha")
    return service


def client_config(nameservice: str, namenodes: Mapping[str, str]) -> dict[str, str]:
    """Hadoop's (and hdfs-native's) client settings of the HA name service ``nameservice`` served by ``namenodes``
    (``{"nn0": "host:port", ...}``, :func:`~eosink.stores.hdfs.ha_settings`), with :data:`FAILOVER_PATIENCE`."""
    return {**ha_settings(f"hdfs://{nameservice}", namenodes), **FAILOVER_PATIENCE}


def _index(nn: int) -> int:
    if nn not in range(NAMENODES):
        raise ValueError(f"there is no NameNode {nn!r}: they are 0 and 1")
    return nn
