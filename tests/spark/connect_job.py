"""A streaming job through Spark Connect (``SparkSession.builder.remote``): no py4j in the client.

Under Spark Connect, foreachBatch runs in a separate Python process on the server, which
receives the pickled BatchWriter; eosink must work there without any JVM gateway.
Usage: connect_job.py INPUT CHECKPOINT SINK STRATEGY
"""

import os
import sys

from pyspark.sql import SparkSession

import eosink
from eosink.connectors.reference import ReferenceSink


def main() -> int:
    source, checkpoint, sink_path, strategy = sys.argv[1:5]
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = SparkSession.builder.remote("local[2]").getOrCreate()
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    writer = eosink.foreach_batch(
        ReferenceSink(sink_path), app_id="connect-app", strategy=strategy, checkpoint_location=checkpoint
    )
    df = spark.readStream.schema("id LONG, account STRING, amount LONG").option("maxFilesPerTrigger", 1).json(source)
    query = df.writeStream.option("checkpointLocation", checkpoint).foreachBatch(writer)
    query.trigger(availableNow=True).start().awaitTermination()
    spark.stop()  # ends the server-side foreachBatch worker, whose exit hook commits what Spark committed
    return 0


if __name__ == "__main__":
    sys.exit(main())
