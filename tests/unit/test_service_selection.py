"""Which servers ``eosink services up|check|down [--secure] [NAME...]`` acts on (no server started)."""

from __future__ import annotations

import pytest

from eosink.services.cli import selected


@pytest.mark.parametrize(
    ("names", "secure", "expected"),
    [
        ([], False, ["postgres", "kafka", "hdfs", "minio", "spark-jars"]),
        ([], True, ["postgres-secure", "kafka-secure", "hdfs", "minio-secure"]),
        (["minio", "hdfs"], True, ["hdfs", "minio-secure"]),
        (["hdfs"], True, ["hdfs"]),
        (["kafka-secure"], True, ["kafka-secure"]),
        (["minio", "postgres"], False, ["postgres", "minio"]),
    ],
)
def test_secure_starts_every_servers_secured_variant_hdfs_included(
    names: list[str], secure: bool, expected: list[str]
) -> None:
    """``make services-up SECURE=1`` is ``services up --secure``. Pass: it names the secured variant of every
    server, HDFS included (its NameNode always checks permissions: it is its own secured variant), in start
    order; a named server maps to its variant, never to nothing."""
    assert selected(names, secure=secure) == expected
