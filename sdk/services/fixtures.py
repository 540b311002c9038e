"""pytest fixtures for tests that need real servers: import them into a ``conftest.py``.

    from eosink.services.fixtures import *  # noqa: F403

Session fixtures return the endpoints of the running harness (``make services-up``) or of
your own servers (``EOSINK_*`` variables). A service that is not there fails the test with
what to do — never a skip, so a missing server cannot pass unnoticed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

from eosink.errors import ServiceError
from eosink.services._registry import get_service
from eosink.services.proxy import FaultProxy

if TYPE_CHECKING:
    from eosink.services.hdfs import HdfsEndpoint
    from eosink.services.kafka import KafkaEndpoint
    from eosink.services.minio import S3Endpoint
    from eosink.services.postgres import PostgresEndpoint

__all__ = ["fault_proxy", "hdfs_endpoint", "kafka_endpoint", "postgres_endpoint", "s3_endpoint"]


def _endpoint(name: str) -> Any:
    try:
        return get_service(name).endpoint()
    except ServiceError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def postgres_endpoint() -> PostgresEndpoint:
    """The PostgreSQL server (``max_prepared_transactions`` >= 64 when local)."""
    endpoint: PostgresEndpoint = _endpoint("postgres")
    return endpoint


@pytest.fixture(scope="session")
def kafka_endpoint() -> KafkaEndpoint:
    """The Kafka broker (KRaft, transactions enabled)."""
    endpoint: KafkaEndpoint = _endpoint("kafka")
    return endpoint


@pytest.fixture(scope="session")
def hdfs_endpoint() -> HdfsEndpoint:
    """The HDFS cluster (NameNode RPC and WebHDFS)."""
    endpoint: HdfsEndpoint = _endpoint("hdfs")
    return endpoint


@pytest.fixture(scope="session")
def s3_endpoint() -> S3Endpoint:
    """The S3 endpoint (MinIO; credentials per run)."""
    endpoint: S3Endpoint = _endpoint("minio")
    return endpoint


@pytest.fixture
def fault_proxy() -> Iterator[Callable[[str, int], FaultProxy]]:
    """A factory: ``fault_proxy(host, port)`` starts a :class:`FaultProxy`; all are closed after the test."""
    proxies: list[FaultProxy] = []

    def make(host: str, port: int) -> FaultProxy:
        proxy = FaultProxy(host, port).start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        proxy.close()
