"""The Spark session the examples share: the master ``spark-submit --master`` gives, else ``local[2]``."""

from __future__ import annotations

import os
from typing import Any

from pyspark.sql import SparkSession


def builder(app_name: str) -> Any:
    """A SparkSession builder named ``app_name``, without Spark's UI. Under ``spark-submit`` (which starts this
    Python with ``PYSPARK_GATEWAY_PORT`` set) the master is the one it was given; run with plain ``python``, the
    example runs Spark in this process (``local[2]``)."""
    made = SparkSession.builder.appName(app_name).config("spark.ui.enabled", "false")
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        made = made.master("local[2]")
    return made
