"""Benchmarks on servers of several nodes: which sinks offer which topology, and what the HDFS adapter hands the job
on an HA name service (its NameNodes, for the sink and for Spark's own Hadoop client)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from eosink.bench.runner import get_adapter
from eosink.errors import ConfigurationError

URL_ENV = "EOSINK_HDFS_URL"
NAMENODES_ENV = "EOSINK_BENCH_HDFS_NAMENODES"
"""What the HDFS bench adapter reads in the job (set by its parent's child_env)."""


def test_s3_runs_on_a_minio_cluster_hdfs_on_an_ha_name_service_kafka_on_three_nodes() -> None:
    """Pass: each adapter is made for its topology; a topology a sink lacks is refused naming the ones there are."""
    assert get_adapter("s3", "cluster").topology == "cluster"
    assert get_adapter("hdfs", "ha").topology == "ha"
    assert get_adapter("kafka", "cluster").topology == "cluster"
    with pytest.raises(ConfigurationError, match="--sink hdfs --topology ha"):
        get_adapter("hdfs", "cluster")


def test_the_hdfs_job_is_told_the_name_services_namenodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the job (a child of the bench), the adapter is rebuilt from its environment. Pass: with the NameNodes in
    it, the sink's config names them and Spark's conf carries the name service; without, neither."""
    monkeypatch.setenv(URL_ENV, "hdfs://ns1")
    monkeypatch.setenv(NAMENODES_ENV, json.dumps({"nn0": "127.0.0.1:9001", "nn1": "127.0.0.1:9002"}))
    adapter = get_adapter("hdfs", "ha")
    config: Any = adapter.config("x")
    assert dict(config.namenodes) == {"nn0": "127.0.0.1:9001", "nn1": "127.0.0.1:9002"}
    conf = adapter.spark_conf()
    assert conf.get("spark.hadoop.dfs.nameservices") == "ns1", conf
    assert json.loads(adapter.child_env()[NAMENODES_ENV]) == {"nn0": "127.0.0.1:9001", "nn1": "127.0.0.1:9002"}
    monkeypatch.delenv(NAMENODES_ENV)
    monkeypatch.setenv(URL_ENV, "hdfs://127.0.0.1:9000")
    single = get_adapter("hdfs")
    assert not single.config("x").namenodes and single.spark_conf() == {}
