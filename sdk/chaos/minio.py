"""What the chaos targets on S3-compatible stores share (the S3 and Delta sinks): a private MinIO.

:class:`MinioSide` is the runner's side of such a target: a :class:`~eosink.services.minio.MinioServer`
of its own that the harness restarts and crashes on purpose, its bucket, the address the fault proxy
forwards to, and the job's environment: the store through the proxy (``EOSINK_S3_ENDPOINT``), the
store directly for the plain baseline (:data:`DIRECT_VAR`), and the Spark jars and static settings the
baseline's writer needs. A target adds what is its sink's: how it reads, what it leaves in doubt, the
job's sink and baseline writer.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eosink.chaos.target import ServerSide

__all__ = ["BUCKET", "CONF_VAR", "DIRECT_VAR", "ENDPOINT_VAR", "JARS_VAR", "MinioSide"]

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
        from eosink.services.minio import MinioServer
        from eosink.services.spark_jars import SparkJars

        for group in self.jar_groups:
            SparkJars().fetch(group)  # the baseline's jars, fetched once into the cache

        self.root = self.dir.open()
        self.server = self.dir.serve(lambda root: MinioServer(root / "minio"))
        from eosink.stores.s3 import ensure_bucket

        ensure_bucket(self._client(), BUCKET)

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
