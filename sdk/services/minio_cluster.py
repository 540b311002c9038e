"""A private MinIO cluster for failover tests: four processes with two drives each, one erasure set of eight.

The build, environment and readiness are the single server's (:mod:`eosink.services.minio`). Every node gets the
same command (the eight drives as explicit URLs, ``http://127.0.0.1:<node's port>/<root>/n<i>/d<j>``: one pool,
one set) and the same environment, plus ``MINIO_CI_CD=1`` (the drives sit on the root filesystem, which MinIO
refuses in distributed mode otherwise); only ``--address`` and ``--console-address`` differ. With the default
parity EC:4, writes need 5 of the 8 drives and reads 4: one node down, the cluster reads and writes; two down, it
only reads.

Clients never talk to a node's own port. Each node has a :class:`~eosink.services.proxy.FaultProxy` of this process
in front of it (:meth:`MinioCluster.proxy`), and :attr:`MinioCluster.endpoint` is a round-robin
:class:`~eosink.services._balancer.Balancer` across those proxies, which skips a node that is down, as a load
balancer in front of a MinIO cluster does. The nodes' traffic among themselves uses their own ports, so a proxy's
fault cuts only clients. Each node logs to ``node-<i>.log`` under the root; nodes are stopped by PID.

A restarted node serves signed requests before it has connected its peers' drives (MinIO connects them up to a
second after its start): meanwhile it answers ``NoSuchKey`` for an object written while it was down, which none of
its own drives hold. :meth:`MinioCluster.start_node` therefore writes such an object first (into the harness's
bucket :data:`PROBE_BUCKET`, through a running node) and waits until the restarted node reads it.

Right after a node dies, a surviving node may refuse writes with 503 ``SlowDownWrite`` (too few drives online for
the write quorum, as it counts them) for a while, seen up to 12 s on a 2-core machine, while ``/minio/health/cluster``
answers 200 and the other nodes take writes: clients must retry (through the balancer, a new connection goes to the
next node).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import os
import secrets
import signal
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from eosink._waiting import wait_until as poll
from eosink.errors import ServiceError
from eosink.services._balancer import Backend, Balancer
from eosink.services._minio_admin import signed_request
from eosink.services._process import Attempt, Proc, free_ports, log_size, log_tail, spawn, start_on_ports, stop
from eosink.services.minio import (
    MinioService,
    S3Endpoint,
    _credentials,
    _http_ok,
    _server_argv,
    _server_env,
    _serves,
)
from eosink.services.proxy import FaultProxy

__all__ = ["DRIVES_PER_NODE", "NODES", "PROBE_BUCKET", "MinioCluster", "MinioNode"]

log = logging.getLogger("eosink.services")

#: The cluster's processes, and the drives of each (directories under the root): one erasure set of eight.
NODES = 4
DRIVES_PER_NODE = 2
#: The harness's own bucket: what a restarted node must read before it counts as started (see the module docstring).
PROBE_BUCKET = "eosink-harness"
#: How long a restart tries to write its probe object (with two nodes down, no write succeeds).
PROBE_WRITE_S = 10.0
_WHAT = "MinIO cluster"


@dataclass
class MinioNode:
    """One node: its number and ports (kept across restarts), its process and the proxy in front of its clients."""

    node_id: int
    port: int
    console_port: int
    log_path: Path
    proc: Proc | None = None
    proxy: FaultProxy | None = None
    paused: bool = False

    @property
    def direct_url(self) -> str:
        """The node's own S3 API (the other nodes' traffic and the harness's checks), past its proxy."""
        return f"http://127.0.0.1:{self.port}"


class MinioCluster:
    """Four MinIO nodes under ``root`` behind a balancer (see the module docstring); :meth:`start`, then
    :meth:`close`. Ports, data and credentials are kept across restarts of a node or of the whole cluster."""

    def __init__(self, root: Path, *, start_timeout_s: float = 180.0) -> None:
        self.root = root.absolute()
        self.start_timeout_s = start_timeout_s
        self.nodes: dict[int, MinioNode] = {}
        self.balancer: Balancer | None = None
        self._keys = _credentials()
        self._use_ports(free_ports(2 * NODES))
        self._started = False

    def __repr__(self) -> str:
        where = f"127.0.0.1:{self.balancer.port}" if self.balancer is not None else "not started"
        return f"MinioCluster({where}, root={str(self.root)!r}, nodes={sorted(self.nodes)})"

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def endpoint(self) -> S3Endpoint:
        """The balancer's S3 endpoint with the root credentials: what clients use."""
        if self.balancer is None:
            raise ServiceError("the MinIO cluster's balancer is not running.", "start() the cluster first.")
        return self._s3(self.balancer.port)

    def node_endpoint(self, node_id: int) -> S3Endpoint:
        """Node ``node_id``'s S3 endpoint through its proxy (a client pinned to one node)."""
        return self._s3(self.proxy(node_id).port)

    def direct_endpoint(self, node_id: int) -> S3Endpoint:
        """Node ``node_id``'s own S3 endpoint, past its proxy (checks that must not meet a fault)."""
        return self._s3(self._node(node_id).port)

    def proxy(self, node_id: int) -> FaultProxy:
        """The fault proxy in front of node ``node_id``'s clients."""
        proxy = self._node(node_id).proxy
        if proxy is None:
            raise ServiceError(f"node {node_id}'s proxy is not running.", "start() the cluster first.")
        return proxy

    # -- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> MinioCluster:
        """Start every node that is not running (all at once: they format and join together), building MinIO first
        if needed; wait until each serves and the cluster is healthy; then the proxies and the balancer. A first
        start moves to fresh ports if one was taken meanwhile."""
        MinioService().provisioned()
        for i in self.nodes:
            for j in range(1, DRIVES_PER_NODE + 1):
                self._drive(i, j).mkdir(parents=True, exist_ok=True)
        self._certs.mkdir(parents=True, exist_ok=True)

        def start(attempt: Attempt) -> None:
            self._use_ports(attempt.ports)
            self._start_nodes([i for i, n in self.nodes.items() if not _alive(n)], self.start_timeout_s)

        ports = [p for n in self.nodes.values() for p in (n.port, n.console_port)]
        start_on_ports(start, ports, log_path=self.nodes[1].log_path, what=_WHAT, may_move=not self._started)
        self._started = True
        try:
            self.wait_healthy(self.start_timeout_s)
            if self._s3_call(self.running()[0], "PUT", PROBE_BUCKET) not in (200, 409):  # 409: made before
                raise ServiceError(f"the {_WHAT} refused to create its bucket {PROBE_BUCKET}.", "read the nodes' logs.")
        except BaseException:
            self.stop(crash=True)
            raise
        for node in self.nodes.values():
            if node.proxy is None:
                node.proxy = FaultProxy("127.0.0.1", node.port).start()
        if self.balancer is None:
            backends = [Backend("127.0.0.1", self.proxy(i).port, health_port=n.port) for i, n in self.nodes.items()]
            self.balancer = Balancer(backends).start()
        return self

    def stop(self, *, crash: bool = False) -> None:
        """Stop every node (SIGTERM, or SIGKILL with ``crash``); the proxies and the balancer stay, on their ports."""
        self._stop_nodes(self.nodes.values(), crash=crash)

    def close(self) -> None:
        """Stop every node, proxy and the balancer; the files stay under the root."""
        if self.balancer is not None:
            with contextlib.suppress(Exception):
                self.balancer.close()
            self.balancer = None
        for node in self.nodes.values():
            if node.proxy is not None:
                with contextlib.suppress(Exception):
                    node.proxy.close()
                node.proxy = None
        self._stop_nodes(self.nodes.values(), crash=False)

    def __enter__(self) -> MinioCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- faults on a node --------------------------------------------------------------------------

    def kill(self, node_id: int) -> None:
        """SIGKILL node ``node_id`` (its proxy stays, refused by the dead node behind it; the balancer skips it)."""
        self._stop_nodes([self._node(node_id)], crash=True)

    def stop_node(self, node_id: int) -> None:
        """Stop node ``node_id`` cleanly (SIGTERM)."""
        self._stop_nodes([self._node(node_id)], crash=False)

    def start_node(self, node_id: int, *, timeout_s: float | None = None) -> None:
        """Start node ``node_id`` again on its ports, drives and credentials; wait until it serves, and reads an
        object written while it was down (when the others could write one); it heals the rest in the background."""
        node = self._node(node_id)
        if _alive(node):
            return
        wait_s = timeout_s or self.start_timeout_s
        probe = self._write_probe()

        def start(attempt: Attempt) -> None:
            self._start_nodes([node_id], wait_s, probe)

        start_on_ports(start, (node.port, node.console_port), log_path=node.log_path, what=_WHAT, may_move=False)

    def pause(self, node_id: int) -> None:
        """SIGSTOP node ``node_id``: it accepts connections but answers nothing (the balancer still sends clients
        to it, who time out, as behind a real balancer until its health check gives up)."""
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

    def running(self) -> list[int]:
        """The nodes started and neither killed, stopped, exited nor paused."""
        return [i for i, n in self.nodes.items() if _alive(n) and not n.paused]

    def healthy(self) -> bool:
        """Whether a running node answers ``/minio/health/cluster`` with 200 (the cluster has its write quorum)."""
        return any(_http_ok(f"{self.nodes[i].direct_url}/minio/health/cluster") for i in self.running())

    def wait_healthy(self, timeout_s: float = 60.0) -> None:
        """Wait until :meth:`healthy`."""
        self._wait_until(self.healthy, timeout_s, "did not report healthy")

    def wait_can_lose_a_node(self, timeout_s: float = 60.0) -> None:
        """Wait until every node is running and each says the cluster keeps its write quorum without it
        (``/minio/health/cluster?maintenance=true``): a node started a moment ago may not count yet, and killing
        another one then leaves the cluster unwritable (``SlowDownWrite``), a fault no test asked for."""

        def ready() -> bool:
            running = self.running()
            return len(running) == len(self.nodes) and all(
                _http_ok(f"{self.nodes[i].direct_url}/minio/health/cluster?maintenance=true") for i in running
            )

        self._wait_until(ready, timeout_s, "could not lose a node")

    def _wait_until(self, ready: Callable[[], bool], timeout_s: float, failed: str) -> None:
        """Poll ``ready`` for up to ``timeout_s``; ServiceError saying the cluster ``failed`` (and which nodes ran)."""
        if not poll(ready, timeout_s, interval_s=0.05, max_interval_s=0.5):
            raise ServiceError(
                f"the {_WHAT} under {self.root} {failed} within {timeout_s:.0f} s (running nodes: {self.running()}).",
                f"read the nodes' logs under {self.root}.",
            )

    def incomplete_uploads(self, bucket: str, prefix: str) -> list[tuple[str, str]]:
        """(key, upload id) of every incomplete multipart upload under ``prefix/``: each running node's own
        listing together (a node lists only the uploads it knows of itself), those the store still has
        (``ListParts``)."""
        from eosink.stores.s3 import S3Connection, client, incomplete_uploads

        found: set[tuple[str, str]] = set()
        for node in self.running():
            ep = self.direct_endpoint(node)
            conn = S3Connection(ep.endpoint_url, ep.region)
            conn = dataclasses.replace(conn, access_key_id=ep.access_key, secret_access_key=ep.secret_key)
            s3 = client(conn)
            found |= {(str(u["Key"]), str(u["UploadId"])) for u in incomplete_uploads(s3, bucket, prefix)}
        return sorted(found)

    # -- inside ------------------------------------------------------------------------------------

    @property
    def _certs(self) -> Path:
        return self.root / "certs"  # empty: no TLS, and never ~/.minio/certs

    def _s3(self, port: int) -> S3Endpoint:
        return S3Endpoint(f"http://127.0.0.1:{port}", *self._keys, "us-east-1")

    def _node(self, node_id: int) -> MinioNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise ValueError(f"no node {node_id}: the nodes are {sorted(self.nodes)}") from None

    def _drive(self, node_id: int, drive: int) -> Path:
        return self.root / f"n{node_id}" / f"d{drive}"

    def _use_ports(self, ports: Sequence[int]) -> None:
        """Take ``ports`` as each node's (S3 API, console), node 1 first; moved only before a first start."""
        for k in range(NODES):
            node_id = k + 1
            node = self.nodes.setdefault(node_id, MinioNode(node_id, 0, 0, self.root / f"node-{node_id}.log"))
            node.port, node.console_port = ports[2 * k], ports[2 * k + 1]

    def _argv(self, node: MinioNode) -> list[str | os.PathLike[str]]:
        """The same drive list for every node (one pool, one set); only the node's own addresses differ."""
        drives = [
            f"http://127.0.0.1:{n.port}{quote(os.fspath(self._drive(i, j)))}"
            for i, n in self.nodes.items()
            for j in range(1, DRIVES_PER_NODE + 1)
        ]
        return _server_argv(MinioService().binary, drives, node.port, node.console_port, self._certs)

    def _env(self, node: MinioNode) -> dict[str, str]:
        """The same ``MINIO_*`` environment for every node (peers compare it when they join).

        ``_MINIO_SERVER_LOCAL`` (not compared) names the node's own address: in a container (``/.dockerenv``)
        MinIO takes no loopback address for its own, waiting for it to resolve elsewhere, unless this says so."""
        env = _server_env(*self._keys)
        env.update(MINIO_CI_CD="1", MINIO_ERASURE_SET_DRIVE_COUNT=str(NODES * DRIVES_PER_NODE))
        env["_MINIO_SERVER_LOCAL"] = f"127.0.0.1:{node.port}"
        return env

    def _s3_call(self, node_id: int, method: str, path: str) -> int | None:
        """A signed S3 request without a body to node ``node_id``'s own port: its HTTP status, None if unanswered."""
        url = f"{self.nodes[node_id].direct_url}/{path}"
        try:
            with urllib.request.urlopen(signed_request(method, url, b"", *self._keys, "us-east-1"), timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as err:
            return int(err.code)
        except OSError:
            return None

    def _write_probe(self) -> str | None:
        """An object written now through a running node (the key), or None when none could write it."""
        key = f"{PROBE_BUCKET}/restart-{secrets.token_hex(6)}"

        def written() -> bool:  # right after a node died, the others may answer 503 (SlowDown) for a moment
            return any(self._s3_call(i, "PUT", key) == 200 for i in self.running())

        if poll(written, PROBE_WRITE_S, interval_s=0.05, max_interval_s=0.5):
            return key
        log.info("[minio-cluster] no running node took a probe object: a restarted node is not checked for reads")
        return None

    def _reads(self, node_id: int, probe: str) -> bool:
        if self._s3_call(node_id, "HEAD", probe) != 200:
            return False
        self._s3_call(node_id, "DELETE", probe)
        return True

    def _start_nodes(self, ids: list[int], timeout_s: float, probe: str | None = None) -> None:
        """Spawn nodes ``ids`` at once and wait until each serves signed requests (and reads ``probe``, an object
        written while they were down); on failure stop them again."""
        since = {i: log_size(self.nodes[i].log_path) for i in ids}
        for i in ids:
            node = self.nodes[i]
            log.info("[minio-cluster] starting node %d on %s", i, node.direct_url)
            node.proc = spawn(self._argv(node), node.log_path, env=self._env(node), cwd=self.root)
            node.paused = False
        try:
            self._wait_serving(ids, since, timeout_s)
            for i in ids if probe is not None else ():
                assert probe is not None
                reads = functools.partial(self._reads, i, probe)
                if not poll(reads, timeout_s, interval_s=0.05, max_interval_s=0.25):
                    raise ServiceError(
                        f"{_WHAT} node {i} serves, but did not read {probe} (written while it was down) within "
                        f"{timeout_s:.0f} s: it does not reach the other nodes' drives.",
                        f"read {self.nodes[i].log_path}.",
                    )
        except BaseException:
            self._stop_nodes([self.nodes[i] for i in ids], crash=True)
            raise

    def _wait_serving(self, ids: list[int], since: dict[int, int], timeout_s: float) -> None:
        """Poll every node in ``ids`` until each serves; a port taken (any node's log) or a node that exited fails
        at once."""
        pending = set(ids)

        def done() -> bool:
            for i in sorted(pending):
                node = self.nodes[i]
                assert node.proc is not None
                attempt = Attempt((node.port, node.console_port), node.log_path, since[i])
                if (taken := attempt.clash(f"{_WHAT} node {i}", node.proc)) is not None:
                    raise taken
                if _serves(self._s3(node.port), None):
                    pending.discard(i)
                elif not node.proc.alive():
                    raise ServiceError(
                        f"{_WHAT} node {i} exited while starting (pid {node.proc.pid}). "
                        f"Last lines of {node.log_path}:\n{log_tail(node.log_path)}",
                        f"read {node.log_path}; if the binary is broken, delete {MinioService().home} to rebuild it.",
                    )
            return not pending

        if not poll(done, timeout_s, interval_s=0.05, max_interval_s=0.5):
            first = self.nodes[min(pending)]
            raise ServiceError(
                f"{_WHAT} nodes {sorted(pending)} did not become ready within {timeout_s:.0f} s. "
                f"Last lines of {first.log_path}:\n{log_tail(first.log_path)}",
                f"read the nodes' logs under {self.root}.",
            )

    def _stop_nodes(self, nodes: Iterable[MinioNode], *, crash: bool) -> None:
        """Signal every node first (they shut down together), then wait for each."""
        nodes = [n for n in nodes if n.proc is not None]
        sig = signal.SIGKILL if crash else signal.SIGTERM
        for node in nodes:
            assert node.proc is not None
            if node.paused:  # a stopped process takes no SIGTERM: let it run to die
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(node.proc.pid, signal.SIGCONT)
                node.paused = False
            if node.proc.alive():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(node.proc.pid, sig)
        for node in nodes:
            assert node.proc is not None
            stop(node.proc, what=f"{_WHAT} node {node.node_id}", sig=sig)
            node.proc = None


def _alive(node: MinioNode) -> bool:
    return node.proc is not None and node.proc.alive()
