"""The servers the harness knows, in start order, imported only when used."""

from __future__ import annotations

import importlib
from typing import Any

from eosink.errors import ServiceError
from eosink.services.base import Service

__all__ = ["SERVICE_NAMES", "get_service"]

_CLASSES = {
    "postgres": "eosink.services.postgres:PostgresService",
    "kafka": "eosink.services.kafka:KafkaService",
    "hdfs": "eosink.services.hdfs:HdfsService",
    "minio": "eosink.services.minio:MinioService",
}

#: Every service name, in the order ``up`` starts them.
SERVICE_NAMES: tuple[str, ...] = tuple(_CLASSES)


def get_service(name: str) -> Service[Any]:
    """A new handle on service ``name``."""
    try:
        module, cls = _CLASSES[name].split(":")
    except KeyError:
        names = ", ".join(SERVICE_NAMES)
        raise ServiceError(f"There is no service called {name!r}.", f"use one of: {names}.") from None
    service: Service[Any] = getattr(importlib.import_module(module), cls)()
    return service
