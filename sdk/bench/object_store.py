"""What the benchmark adapters of sinks on S3-compatible stores share (the S3 and Delta sinks).

:class:`ObjectStoreBench` is their common half: the harness's MinIO (started if it is not running,
or the store ``EOSINK_S3_*`` names), the bucket ``eosink-bench`` with one prefix per namespace
(``eosink-bench/<ns>/``, emptied after the run), the connection's details for the Spark job (in its
environment: the JVM's s3a reads credentials through the AWS SDK's environment provider, never argv or
Spark's configuration), and the Spark jars the baselines need, on the class path. Each adapter adds its
runs, goals, writers, verification and latency poll.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from eosink.errors import ConfigurationError

__all__ = ["BUCKET", "ROOT", "ObjectStoreBench", "app_id", "object_prefix"]

BUCKET = "eosink-bench"
ROOT = "eosink-bench"
_ENV = ("EOSINK_S3_ENDPOINT", "EOSINK_S3_ACCESS_KEY", "EOSINK_S3_SECRET_KEY", "EOSINK_S3_REGION")
_ENV_CREDENTIALS = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"


def object_prefix(ns: str) -> str:
    """The prefix of namespace ``ns``'s objects (and eosink's bookkeeping under it)."""
    return f"{ROOT}/{ns}"


def app_id(ns: str) -> str:
    """The app_id of namespace ``ns``'s eosink writer."""
    return f"bench-{ns}"


@dataclass(frozen=True, repr=False)
class _Store:
    """Where the store is and how to sign requests; the secret never in ``repr``."""

    endpoint_url: str
    access_key: str
    secret_key: str = field(repr=False)
    region: str = "us-east-1"

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> _Store | None:
        endpoint, access, secret = (env.get(name, "") for name in _ENV[:3])
        if not (endpoint and access and secret):
            return None
        return cls(endpoint, access, secret, env.get(_ENV[3]) or "us-east-1")

    def connection(self) -> Any:
        """The :class:`~eosink.stores.s3.S3Connection` of the store (path-style, as for any endpoint)."""
        from eosink.stores.s3 import S3Connection

        return S3Connection(
            self.endpoint_url, self.region, access_key_id=self.access_key, secret_access_key=self.secret_key
        )

    def env(self) -> dict[str, str]:
        """``EOSINK_S3_*`` for eosink, ``AWS_*`` for the JVM's s3a (the SDK's environment provider)."""
        return {
            _ENV[0]: self.endpoint_url,
            _ENV[1]: self.access_key,
            _ENV[2]: self.secret_key,
            _ENV[3]: self.region,
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": self.region,
        }

    def __repr__(self) -> str:
        return f"_Store({self.endpoint_url!r}, region={self.region!r})"


class ObjectStoreBench:
    """The half of a bench adapter that reaches the store (see the module docstring)."""

    all_modes: tuple[str, ...] = ("default",)
    jar_groups: tuple[str, ...] = ("s3",)
    """Spark's jar groups the job needs (the baselines' writers)."""
    settings: Mapping[str, str] = {}
    """What the report says about the target."""

    def __init__(self, modes: tuple[str, ...] = ("default",), *, topology: str = "single") -> None:
        self.modes = modes
        self.topology = topology
        """``single`` (the harness's MinIO, or ``EOSINK_S3_*``) or ``cluster`` (a private four-node MinIO)."""
        self._started = False
        self._store: _Store | None = _Store.from_env(os.environ)
        self._bucket_made = False
        self._cluster: Any = None

    def start(self) -> dict[str, Any]:
        from eosink.services import get_service
        from eosink.services.spark_jars import SparkJars

        if self.topology == "cluster":
            return self._start_cluster()
        service = get_service("minio")
        if service.external() is None and service.pid() is None:
            service.up()
            self._started = True
        ep: Any = service.endpoint()
        self._store = _Store(str(ep.endpoint_url), str(ep.access_key), str(ep.secret_key), str(ep.region))
        for group in self.jar_groups:
            SparkJars().fetch(group)  # cached: a no-op once fetched
        self._ensure_bucket()
        return {
            "server_version": "MinIO (harness)" if service.external() is None else "external",
            "settings": dict(self.settings),
            "started_by_bench": self._started,
        }

    def _start_cluster(self) -> dict[str, Any]:
        """A private four-node MinIO under the cache, reached through its balancer (nothing is failed)."""
        import shutil

        from eosink.services._layout import cache_root
        from eosink.services.minio_cluster import DRIVES_PER_NODE, NODES, MinioCluster
        from eosink.services.spark_jars import SparkJars

        root = cache_root() / "bench" / "minio-cluster"
        shutil.rmtree(root, ignore_errors=True)
        self._cluster = MinioCluster(root).start()
        ep = self._cluster.endpoint
        self._store = _Store(str(ep.endpoint_url), str(ep.access_key), str(ep.secret_key), str(ep.region))
        for group in self.jar_groups:
            SparkJars().fetch(group)
        self._ensure_bucket()
        nodes = {"nodes": f"{NODES} MinIO processes, {DRIVES_PER_NODE} drives each, one erasure set, a balancer"}
        return {"server_version": "MinIO cluster (harness)", "settings": {**nodes, **self.settings}}

    def stop(self) -> None:
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        if self._started:
            from eosink.services import get_service

            get_service("minio").down()
            self._started = False

    def child_env(self) -> dict[str, str]:
        return self._require_store().env()

    def prepare(self, ns: str, *, keyed: bool = False) -> None:
        """Nothing to create but the bucket: a namespace is a fresh prefix (``keyed`` needs nothing of the store)."""
        self._ensure_bucket()

    def drop(self, ns: str) -> None:
        """Abort the prefix's uploads and delete its objects."""
        from eosink.stores.s3 import empty_prefix

        with contextlib.suppress(Exception):
            empty_prefix(self._client(), BUCKET, object_prefix(ns))

    def spark_conf(self) -> dict[str, str]:
        """The s3a jars and where the store is; credentials come from the environment (never the conf: PySpark
        hands its conf to the JVM on the command line).

        The jars go on the class path, not in ``spark.jars``: those are copied into every session's scratch
        directory (the AWS SDK bundle alone is some 650 MB), which would put that much disk writing beside
        every run. The driver and executors run on this machine, so the cached jars serve them in place.
        """
        from eosink.services.spark_jars import SparkJars

        store = self._require_store()
        classpath = os.pathsep.join(str(p) for p in SparkJars().jars(*self.jar_groups))
        hadoop = "spark.hadoop.fs.s3a."
        return {
            "spark.driver.extraClassPath": classpath,
            "spark.executor.extraClassPath": classpath,
            f"{hadoop}endpoint": store.endpoint_url,
            f"{hadoop}endpoint.region": store.region,
            f"{hadoop}path.style.access": "true",
            f"{hadoop}connection.ssl.enabled": str(store.endpoint_url.startswith("https://")).lower(),
            f"{hadoop}aws.credentials.provider": _ENV_CREDENTIALS,
        }

    def scrub(self, text: str) -> str:
        """``text`` without the secret key."""
        if self._store is None or not self._store.secret_key:
            return text
        return text.replace(self._store.secret_key, "***")

    def _require_store(self) -> _Store:
        if self._store is None:
            raise ConfigurationError("The benchmark has no S3 store yet.", "Call start() first.")
        return self._store

    def _client(self) -> Any:
        from eosink.stores.s3 import client

        return client(self._require_store().connection())

    def _ensure_bucket(self) -> None:
        if not self._bucket_made:
            from eosink.stores.s3 import ensure_bucket

            ensure_bucket(self._client(), BUCKET)
            self._bucket_made = True
