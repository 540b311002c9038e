"""What the demo's targets on S3-compatible stores share (the S3 and Delta sinks): a private MinIO.

:class:`MinioDemo` is their runner's half: a :class:`~eosink.services.minio.MinioServer` of the
demo's own with the bucket ``eosink-demo``, each side's fault proxy forwarding to it, the job's
environment (each side's endpoint through its proxy, the demo's keys, the plain writer's Spark jars
and static settings), and the secret kept out of every message. A target adds where each side
writes, how it is read, and the job's writers.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eosink.demo.target import CONF_VAR, JARS_VAR, Side

__all__ = ["ACCESS_VAR", "BUCKET", "ENDPOINT_VARS", "REGION", "SECRET_VAR", "MinioDemo"]

BUCKET = "eosink-demo"
ENDPOINT_VARS: dict[Side, str] = {"eosink": "EOSINK_DEMO_EOSINK_S3", "plain": "EOSINK_DEMO_PLAIN_S3"}
ACCESS_VAR = "EOSINK_DEMO_S3_ACCESS_KEY"
SECRET_VAR = "EOSINK_DEMO_S3_SECRET_KEY"
REGION = "us-east-1"


class MinioDemo:
    """The runner's half of a demo target on a private MinIO (see the module docstring)."""

    jar_groups: tuple[str, ...] = ("s3",)
    """Spark's jar groups the plain writer needs."""
    spark_conf: Mapping[str, str] = {}
    """Static Spark settings the plain writer needs (a session extension)."""

    def __init__(self, root: Path | None = None, prefix: str = "eosink-demo-s3-") -> None:
        from eosink.chaos.target import PrivateRoot

        self.dir = PrivateRoot(root, prefix)
        self.server: Any = None

    def start(self) -> None:
        from eosink.services.minio import MinioServer
        from eosink.services.spark_jars import SparkJars
        from eosink.stores.s3 import ensure_bucket

        for group in self.jar_groups:
            SparkJars().fetch(group)  # the plain writer's jars, fetched once into the cache
        self.server = MinioServer(self.dir.open() / "minio")
        self.server.start()
        ensure_bucket(self._client(), BUCKET)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None
        self.dir.close()

    def address(self, side: Side) -> tuple[str, int]:
        return "127.0.0.1", int(self.server.port)

    def proxy_port(self, side: Side) -> int:
        return 0

    def job_env(self, proxy_ports: dict[Side, int]) -> dict[str, str]:
        from eosink.services.spark_jars import SparkJars

        env = {ENDPOINT_VARS[side]: f"http://127.0.0.1:{port}" for side, port in proxy_ports.items()}
        env[ACCESS_VAR] = self.server.endpoint.access_key
        env[SECRET_VAR] = self.server.endpoint.secret_key
        env[JARS_VAR] = SparkJars().spark_conf(*self.jar_groups)["spark.jars"]
        if self.spark_conf:
            env[CONF_VAR] = json.dumps(dict(self.spark_conf))
        return env

    def scrub(self, text: str) -> str:
        secret = os.environ.get(SECRET_VAR) or (self.server.endpoint.secret_key if self.server else "")
        return text.replace(secret, "***") if secret else text

    def connection(self, side: Side | None = None) -> Any:
        """The store's :class:`~eosink.stores.s3.S3Connection`: directly (``side`` None, the runner), or as the
        job reaches it through ``side``'s proxy (from the job's environment)."""
        from eosink.stores.s3 import S3Connection

        if side is None:
            ep = self.server.endpoint
            return S3Connection(ep.endpoint_url, REGION, access_key_id=ep.access_key, secret_access_key=ep.secret_key)
        return S3Connection(
            os.environ[ENDPOINT_VARS[side]],
            REGION,
            access_key_id=os.environ[ACCESS_VAR],
            secret_access_key=os.environ[SECRET_VAR],
        )

    def _client(self) -> Any:
        from eosink.stores.s3 import client

        return client(self.connection())
