"""``spark.read.parquet`` of each target URL given, in a process of its own; one JSON line per target on stdout.

Run by ``test_hdfs_readers.py``: Spark starts its JVM by ``fork`` with a ``preexec_fn``, which deadlocks in
a process whose hdfs-native client already runs threads (the test process), so Spark reads from here.
Each line: ``{"url", "columns", "dtypes", "rows", "dropped"}``, ``dropped`` being the columns left after
``.drop("eosink_range", "eosink_batch")``.
"""

from __future__ import annotations

import json
import sys


def main(urls: list[str]) -> None:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[1]")
        .appName("eosink-hdfs-readers")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    try:
        for url in urls:
            frame = spark.read.parquet(url)
            rows = [row.asDict() for row in frame.collect()]
            dropped = frame.drop("eosink_range", "eosink_batch").columns
            print(
                json.dumps(
                    {
                        "url": url,
                        "columns": frame.columns,
                        "dtypes": dict(frame.dtypes),
                        "rows": rows,
                        "dropped": dropped,
                    }
                ),
                flush=True,
            )
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
