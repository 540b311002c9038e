"""What the chaos targets on S3-compatible stores share (the S3 and Delta sinks): a private MinIO.

:class:`MinioSide` is the runner's side of such a target: a :class:`~eosink.services.minio.MinioServer`
of its own that the harness restarts and crashes on purpose, its bucket, the address the fault proxy
forwards to, and the job's environment: the store through the proxy (``EOSINK_S3_ENDPOINT``), the
store directly for the plain baseline (:data:`DIRECT_VAR`), and the Spark jars and static settings the
baseline's writer needs. A target adds what is its sink's: how it reads, what it leaves in doubt, the
job's sink and baseline writer.

:class:`MinioClusterSide` puts such a target on a private four-node MinIO
(:class:`~eosink.services.minio_cluster.MinioCluster`, one erasure set, each node behind a fault proxy, a balancer
in front): the job and the readers reach it through the balancer, the runner's fault proxy in front of that cuts a
commit's reply, and its node fault (``--topology cluster``) SIGKILLs one node, started again when the run ends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eosink.chaos.schedule import ClusterFaults
from eosink.chaos.target import ServerSide

__all__ = ["BUCKET", "CONF_VAR", "DIRECT_VAR", "ENDPOINT_VAR", "JARS_VAR", "MinioClusterSide", "MinioSide"]

BUCKET = "eosink-chaos"
ENDPOINT_VAR = "EOSINK_S3_ENDPOINT"
DIRECT_VAR = "EOSINK_CHAOS_S3_DIRECT"
JARS_VAR = "EOSINK_CHAOS_JARS"
CONF_VAR = "EOSINK_CHAOS_SPARK_CONF"


class MinioSide(ServerSide):
    """The runner's side of a chaos target on a private MinIO (restarted and crashed on purpose): the server,
    its bucket, the job's environment (the store through the fault proxy), the baseline's Spark jars."""

    #: Spark's jar groups the job's plain baseline needs (fetched once, at start), and static settings it needs.
    jar_groups: tuple[str, ...] = ("s3",)
    spark_conf: dict[str, str] = {}

    def __init__(self, root: Path | None = None, prefix: str = "eosink-chaos-s3-") -> None:
        super().__init__(root, prefix)
        self.root = Path()

    def start(self) -> None:
        from eosink.services.spark_jars import SparkJars

        for group in self.jar_groups:
            SparkJars().fetch(group)  # the baseline's jars, fetched once into the cache

        self.root = self.dir.open()
        self.server = self.dir.serve(self._server_at)
        from eosink.stores.s3 import ensure_bucket

        ensure_bucket(self._client(), BUCKET)

    def _server_at(self, root: Path) -> Any:
        from eosink.services.minio import MinioServer

        return MinioServer(root / "minio")

    def job_env(self, proxy_port: int | None) -> dict[str, str]:
        from eosink.services.spark_jars import SparkJars

        direct = self.server.endpoint
        env = direct.env()
        if proxy_port is not None:
            env[ENDPOINT_VAR] = f"http://127.0.0.1:{proxy_port}"
        jars = SparkJars().spark_conf(*self.jar_groups)["spark.jars"]
        conf = {CONF_VAR: json.dumps(self.spark_conf)} if self.spark_conf else {}
        return {**env, DIRECT_VAR: direct.endpoint_url, JARS_VAR: jars, **conf}

    def scrub(self, text: str) -> str:
        if self.server is None:
            return text
        return text.replace(self.server.endpoint.secret_key, "***")

    def _client(self) -> Any:
        from eosink.stores.s3 import client

        return client(self.connection())

    def empty(self, prefix: str) -> None:
        """Abort every upload and delete every object under ``prefix/`` (a schedule's table)."""
        from eosink.stores.s3 import empty_prefix

        empty_prefix(self._client(), BUCKET, prefix)

    def connection(self) -> Any:
        """The :class:`~eosink.stores.s3.S3Connection` of the private server, reached directly."""
        from eosink.stores.s3 import S3Connection

        ep = self.server.endpoint
        return S3Connection(ep.endpoint_url, ep.region, access_key_id=ep.access_key, secret_access_key=ep.secret_key)


class MinioClusterSide(MinioSide):
    """A :class:`MinioSide` on a private four-node MinIO behind a balancer (see the module docstring); a sink's
    cluster target derives from it and from the sink's target, this first."""

    cluster_faults = ClusterFaults(("storage",), pause=False)
    _victim = 0
    """The node killed last (they are killed in turn)."""

    def _server_at(self, root: Path) -> Any:
        from eosink.services.minio_cluster import MinioCluster

        return MinioCluster(root / "minio-cluster")

    def address(self) -> tuple[str, int]:
        """The balancer, which the runner's fault proxy fronts."""
        return "127.0.0.1", int(self.server.endpoint.endpoint_url.rsplit(":", 1)[1])

    def restart(self, *, crash: bool) -> None:
        """Every node stopped (``crash``: SIGKILLed) and started again."""
        self.server.stop(crash=crash)
        self.server.start()

    def kill_node(self, role: str) -> str:
        """SIGKILL the next running node in turn (a store node of the erasure set; the balancer skips it)."""
        running = self.server.running()
        ids = sorted(self.server.nodes)
        for _ in ids:
            self._victim = self._victim % len(ids) + 1
            if self._victim in running:
                self.server.kill(self._victim)
                return f"storage node {self._victim} SIGKILLed"
        return "no storage node running to kill"

    def heal(self) -> None:
        """Start every killed node again and wait until the cluster has its write quorum."""
        for node_id in sorted(self.server.nodes):
            if node_id not in self.server.running():
                self.server.start_node(node_id)
        self.server.wait_healthy()
