"""A streaming job through Spark Connect (``SparkSession.builder.remote``): no py4j in the client.

Under Spark Connect, foreachBatch runs in a separate Python process on the server, which
receives the pickled BatchWriter; eosink must work there without any JVM gateway.
Usage: connect_job.py INPUT CHECKPOINT SINK STRATEGY; a STRATEGY of ``datasource:<strategy>`` writes
through ``format("eosink")`` instead, registered from the client.
"""

import os
import sys

from pyspark.sql import SparkSession

import eosink
import eosink.spark
from eosink.connectors.reference import ReferenceSink


def main() -> int:
    source, checkpoint, sink_path, strategy = sys.argv[1:5]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
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
    spark.stop()  # ends the server-side foreachBatch worker, whose exit hook commits what Spark committed
    return 0


if __name__ == "__main__":
    sys.exit(main())
