"""Every service answers the health check its connector relies on (the same check as `make services-check`)."""

from __future__ import annotations

import pytest

from eosink.services import PLAIN_SERVICE_NAMES, get_service
from eosink.services.spark_jars import SparkJars


@pytest.mark.parametrize("name", PLAIN_SERVICE_NAMES)
def test_service_health(name: str) -> None:
    """Passes when the service is up and its real client round-trip works (see each module's ``check``). The
    secured variants are checked by ``make test-secured``, which starts them."""
    service = get_service(name)
    summary = service.check(service.endpoint())
    assert name in summary.lower() or "s3" in summary.lower()


def test_spark_jars_match_installed_pyspark() -> None:
    """Spark's extra jars were fetched for the installed PySpark's Spark, Scala and Hadoop versions."""
    import pyspark

    jars = SparkJars()
    assert jars.versions.spark == pyspark.__version__
    names = [p.name for p in jars.jars("kafka")]
    assert f"spark-sql-kafka-0-10_{jars.versions.scala}-{pyspark.__version__}.jar" in names
    assert any(n.startswith(f"hadoop-aws-{jars.versions.hadoop}") for n in (p.name for p in jars.jars("s3")))
    jars.check()
