"""Spark's extra jars work: one Spark session writes to and reads from PostgreSQL (JDBC), Kafka and MinIO (s3a)."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from eosink.services.kafka import KafkaEndpoint
from eosink.services.minio import S3Endpoint
from eosink.services.postgres import PostgresEndpoint
from eosink.services.spark_jars import SparkJars

pytestmark = pytest.mark.spark

ROWS = [(i, f"row-{i}") for i in range(50)]


@pytest.fixture(scope="module")
def spark(s3_endpoint: S3Endpoint) -> Iterator[Any]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("eosink-spark-jars-test")
    settings = {
        **SparkJars().spark_conf(),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.hadoop.fs.s3a.endpoint": s3_endpoint.endpoint_url,
        "spark.hadoop.fs.s3a.access.key": s3_endpoint.access_key,
        "spark.hadoop.fs.s3a.secret.key": s3_endpoint.secret_key,
        "spark.hadoop.fs.s3a.endpoint.region": s3_endpoint.region,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    yield session
    session.stop()


def test_spark_jdbc_writes_and_reads_postgres(spark: Any, postgres_endpoint: PostgresEndpoint) -> None:
    """Spark's JDBC writer (PostgreSQL driver from the harness) round-trips 50 rows through a new table."""
    table = f"spark_jdbc_{uuid.uuid4().hex[:10]}"
    options = {
        "url": postgres_endpoint.jdbc_url(),
        "driver": "org.postgresql.Driver",  # jars added by spark.jars are not on DriverManager's classpath
        "dbtable": table,
        "user": postgres_endpoint.user,
        "password": postgres_endpoint.password,
    }
    spark.createDataFrame(ROWS, "id long, v string").write.format("jdbc").options(**options).save()
    back = spark.read.format("jdbc").options(**options).load()
    assert sorted(tuple(r) for r in back.collect()) == ROWS


def test_spark_kafka_writes_and_reads(spark: Any, kafka_endpoint: KafkaEndpoint) -> None:
    """Spark's Kafka sink and batch source (spark-sql-kafka) round-trip 50 records through a new topic."""
    topic = f"spark-jars-{uuid.uuid4().hex[:10]}"
    frame = spark.createDataFrame([(str(i), v) for i, v in ROWS], "key string, value string")
    frame.write.format("kafka").option("kafka.bootstrap.servers", kafka_endpoint.bootstrap_servers).option(
        "topic", topic
    ).save()
    back = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka_endpoint.bootstrap_servers)
        .option("subscribe", topic)
        .load()
        .selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")
    )
    assert sorted((int(k), v) for k, v in back.collect()) == ROWS


def test_spark_s3a_writes_and_reads_minio(spark: Any, s3_endpoint: S3Endpoint) -> None:
    """Spark writes Parquet to MinIO through s3a (hadoop-aws + AWS SDK bundle) and reads it back."""
    import boto3

    bucket = f"spark-jars-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client(
        "s3",
        endpoint_url=s3_endpoint.endpoint_url,
        aws_access_key_id=s3_endpoint.access_key,
        aws_secret_access_key=s3_endpoint.secret_key,
        region_name=s3_endpoint.region,
    )
    s3.create_bucket(Bucket=bucket)
    path = f"s3a://{bucket}/table"
    spark.createDataFrame(ROWS, "id long, v string").write.parquet(path)
    assert sorted(tuple(r) for r in spark.read.parquet(path).collect()) == ROWS
