"""The SparkSession every test, demo and chaos driver uses (:func:`job_session`), and the demo's input schema."""

from __future__ import annotations

import os
from typing import Any

from eosink.faults import CRASH_SCOPE_VARS, export_crash_scope

__all__ = ["JAVA_OPTS", "SCHEMA", "job_session"]

JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Quick JVM start for short runs: C1 compiler only, serial GC."""
SCHEMA = "id LONG, account STRING, amount LONG"
"""The payments the demo and the kill-and-restart tests stream: one JSON object per line."""


def job_session(master: str, app_name: str) -> Any:
    """A SparkSession for a test or demo job: no UI, small files split into several participants,
    fault points armed on executors from ``EOSINK_FAULTS`` (a ``kill`` there crashes the whole driver,
    see :func:`eosink.faults.export_crash_scope`), and ``spark.driver.maxResultSize=1m`` so that a
    driver collecting rows would fail."""
    from pyspark.sql import SparkSession

    if not any(os.environ.get(v) for v in CRASH_SCOPE_VARS):
        export_crash_scope()
    java_opts = f"{JAVA_OPTS} {os.environ.get('EOSINK_DRIVER_JAVA_OPTS', '')}".strip()
    builder = SparkSession.builder
    tmp = os.environ.get("EOSINK_DRIVER_TMP")
    if tmp:  # the run's own directory, not /tmp: a killed driver leaves its files there (eosink._procs.driver_env)
        java_opts += f' "-Djava.io.tmpdir={tmp}"'
        builder = builder.config("spark.local.dir", tmp)
    for var in CRASH_SCOPE_VARS:
        builder = builder.config(f"spark.executorEnv.{var}", os.environ.get(var, ""))
    spark = (
        builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.driver.extraJavaOptions", java_opts)
        .config("spark.executor.extraJavaOptions", JAVA_OPTS)
        .config("spark.driver.maxResultSize", "1m")  # the driver collects committables, never rows
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.files.maxPartitionBytes", "2048")  # several participants per small file
        .config("spark.sql.files.openCostInBytes", "0")
        .config("spark.executorEnv.EOSINK_FAULTS", os.environ.get("EOSINK_FAULTS", ""))
        .config("spark.executorEnv.EOSINK_FAULT_LOG", os.environ.get("EOSINK_FAULT_LOG", ""))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark
