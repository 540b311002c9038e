"""A streaming job through Spark Connect (``SparkSession.builder.remote``): no py4j in the client.

As with ``builder.remote("local")``, the server runs in this process, started first; the job talks to it
only through a Connect session.

Under Spark Connect, foreachBatch runs in a separate Python process on the server, which
receives the pickled BatchWriter; eosink must work there without any JVM gateway.
Usage: connect_job.py INPUT CHECKPOINT SINK STRATEGY; a STRATEGY of ``datasource:<strategy>`` writes
through ``format("eosink")`` instead, registered from the client.
"""

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

import eosink
import eosink.spark
from eosink.connectors.reference import ReferenceSink


def start_server() -> tuple[SparkSession, int]:
    """A local Spark Connect server on 127.0.0.1 and a port of the system's choosing; the server, its port.

    (``builder.remote("local")`` would bind every address on port 15002, so two jobs at once collide.)"""
    server = (
        SparkSession.builder.master("local[2]")
        .config("spark.plugins", "org.apache.spark.sql.connect.SparkConnectPlugin")
        .config("spark.connect.grpc.binding.address", "127.0.0.1")
        .config("spark.connect.grpc.binding.port", "0")
        .config("spark.sql.artifact.isolation.enabled", "true")
        .config("spark.sql.artifact.isolation.alwaysApplyClassloader", "true")
        .getOrCreate()
    )
    service = getattr(getattr(server._jvm, "org.apache.spark.sql.connect.service.SparkConnectService$"), "MODULE$")
    return server, int(service.localPort())


def main() -> int:
    source, checkpoint, sink_path, strategy = sys.argv[1:5]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    server, port = start_server()
    spark = RemoteSparkSession.builder.remote(f"sc://127.0.0.1:{port}").getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    df = spark.readStream.schema("id LONG, account STRING, amount LONG").option("maxFilesPerTrigger", 1).json(source)
    stream = df.writeStream.option("checkpointLocation", checkpoint)
    if strategy.startswith("datasource:"):
        eosink.spark.register(spark)
        stream = (
            stream.format("eosink")
            .option("sink", "reference")
            .option("reference.path", sink_path)
            .option("app_id", "connect-app")
            .option("strategy", strategy.split(":", 1)[1])
        )
    else:
        writer = eosink.foreach_batch(
            ReferenceSink(sink_path), app_id="connect-app", strategy=strategy, checkpoint_location=checkpoint
        )
        stream = stream.foreachBatch(writer)
    stream.trigger(availableNow=True).start().awaitTermination()
    spark.stop()
    server.stop()  # ends the server-side foreachBatch worker, whose exit hook commits what Spark committed
    return 0


if __name__ == "__main__":
    sys.exit(main())
