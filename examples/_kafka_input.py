"""The input side the Kafka examples share: JSON payments produced to a topic, and a Spark session
with Spark's Kafka connector (from Maven Central, unless ``EOSINK_EXAMPLE_SPARK_JARS`` lists local jars)."""

from __future__ import annotations

import json
import os
import random

from _spark import builder as session_builder
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

VALUE_SCHEMA = "id LONG, account STRING, amount LONG"


def produce(bootstrap: str, topic: str, n: int, seed: int) -> None:
    """Send ``n`` payments (ids continue from a seed-derived block) and wait until the broker has them."""
    from kafka import KafkaProducer

    rng = random.Random(seed)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    base = seed * 1_000_000
    for i in range(n):
        payment = {"id": base + i, "account": f"acct-{rng.randrange(5)}", "amount": rng.randrange(1, 500)}
        producer.send(topic, json.dumps(payment).encode(), key=payment["account"].encode())
    producer.flush()
    producer.close()


def session(name: str = "eosink-example-kafka") -> SparkSession:
    builder = session_builder(name)
    jars = os.environ.get("EOSINK_EXAMPLE_SPARK_JARS")
    if jars:
        builder = builder.config("spark.jars", jars)
    else:
        import pyspark

        scala = "2.13"
        builder = builder.config(
            "spark.jars.packages", f"org.apache.spark:spark-sql-kafka-0-10_{scala}:{pyspark.__version__}"
        )
    return builder.config("spark.ui.enabled", "false").getOrCreate()


def read_payments(spark: SparkSession, bootstrap: str, topic: str, max_offsets: int) -> DataFrame:
    """The topic's payments as a stream (from the earliest offset, at most ``max_offsets`` records per
    micro-batch): ``id``, ``account``, ``amount`` and the record's ``kafka_partition``, ``kafka_offset``."""
    records = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", max_offsets)
        .load()
    )
    return records.select(
        F.from_json(F.col("value").cast("string"), VALUE_SCHEMA).alias("p"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
    ).select("p.*", "kafka_partition", "kafka_offset")
