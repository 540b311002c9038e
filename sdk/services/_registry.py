"""The servers the harness knows, in start order, imported only when used."""

from __future__ import annotations

import importlib
from typing import Any

from eosink.errors import ServiceError
from eosink.services.base import Service

__all__ = ["PLAIN_SERVICE_NAMES", "SECURE_VARIANTS", "SERVICE_NAMES", "get_service"]

_CLASSES = {
    "postgres": "eosink.services.postgres:PostgresService",
    "kafka": "eosink.services.kafka:KafkaService",
    "hdfs": "eosink.services.hdfs:HdfsService",
    "minio": "eosink.services.minio:MinioService",
    "postgres-secure": "eosink.services.postgres_secure:SecurePostgresService",
    "kafka-secure": "eosink.services.kafka_secure:SecureKafkaService",
    "minio-secure": "eosink.services.minio_secure:SecureMinioService",
    "postgres-replicated": "eosink.services.postgres_replicated:ReplicatedPostgresService",
    "kafka-cluster": "eosink.services.kafka_cluster_service:KafkaClusterService",
    "minio-cluster": "eosink.services.minio_cluster_service:MinioClusterService",
    "hdfs-ha": "eosink.services.hdfs_ha_service:HdfsHaService",
}

#: Every secured variant (TLS, authentication, a least-privileged writer), by the plain service's name.
#: HDFS is its own: the harness's NameNode always checks permissions, and writers run as an ordinary user.
SECURE_VARIANTS: dict[str, str] = {
    "postgres": "postgres-secure",
    "kafka": "kafka-secure",
    "hdfs": "hdfs",
    "minio": "minio-secure",
}
#: Services started only when named, for failover tests: a replicated PostgreSQL and a Kafka cluster (three servers
#: and a supervisor each), a MinIO cluster (four servers, a balancer and a supervisor), an HA HDFS (one JVM behind
#: two NameNode proxies, and a supervisor).
_ON_REQUEST: tuple[str, ...] = ("postgres-replicated", "kafka-cluster", "minio-cluster", "hdfs-ha")
#: Every service name, in the order ``up`` starts them; ``up`` with no names starts the plain ones.
SERVICE_NAMES: tuple[str, ...] = tuple(_CLASSES)
_SECURE_ONLY = {secure for plain, secure in SECURE_VARIANTS.items() if secure != plain}
PLAIN_SERVICE_NAMES: tuple[str, ...] = tuple(n for n in _CLASSES if n not in _SECURE_ONLY and n not in _ON_REQUEST)


def get_service(name: str) -> Service[Any]:
    """A new handle on service ``name``."""
    try:
        module, cls = _CLASSES[name].split(":")
    except KeyError:
        names = ", ".join(SERVICE_NAMES)
        raise ServiceError(f"There is no service called {name!r}.", f"use one of: {names}.") from None
    service: Service[Any] = getattr(importlib.import_module(module), cls)()
    return service
