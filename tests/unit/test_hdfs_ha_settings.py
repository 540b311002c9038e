"""An HA name service given as HdfsConfig(namenodes=...): the settings hdfs-native and Spark get, what is refused."""

from __future__ import annotations

import pytest

from eosink.connectors.hdfs import HdfsConfig
from eosink.errors import ConfigurationError
from eosink.stores.hdfs import HdfsConnection

NAMENODES = {"nn0": "10.0.0.1:8020", "nn1": "10.0.0.2:8020"}


def test_the_name_services_namenodes_reach_the_client_and_spark() -> None:
    """Pass: hdfs-native gets the name service, its NameNodes and more failover patience than a single NameNode's;
    a user's own client_config still wins; Spark gets the same keys under spark.hadoop."""
    config = HdfsConfig(
        "hdfs://ns1/data/events", namenodes=NAMENODES, client_config={"dfs.client.failover.max.attempts": "5"}
    )
    settings = config.client_kwargs()["config"]
    assert settings["dfs.ha.namenodes.ns1"] == "nn0,nn1"
    assert settings["dfs.namenode.rpc-address.ns1.nn1"] == "10.0.0.2:8020"
    assert settings["dfs.client.failover.max.attempts"] == "5"
    spark = config.spark_conf()
    assert spark["spark.hadoop.dfs.nameservices"] == "ns1"
    assert spark["spark.hadoop.dfs.namenode.rpc-address.ns1.nn0"] == "10.0.0.1:8020"
    assert int(spark["spark.hadoop.dfs.client.failover.max.attempts"]) > 2
    assert HdfsConfig("hdfs://nn:8020/data").spark_conf() == {}
    assert HdfsConnection("hdfs://ns1/t", namenodes=NAMENODES).client_kwargs()["config"]["dfs.nameservices"] == "ns1"


@pytest.mark.parametrize(
    ("url", "namenodes", "named"),
    [
        ("hdfs://ns1:8020/data", NAMENODES, "not a name service"),
        ("hdfs://ns1/data", {"nn0": "10.0.0.1"}, "host:port"),
        ("hdfs://ns1/data", {"nn 0": "10.0.0.1:8020"}, "host:port"),
    ],
)
def test_a_bad_name_service_is_refused_at_construction(url: str, namenodes: dict[str, str], named: str) -> None:
    """Pass: a ConfigurationError that names the problem, before any client exists."""
    with pytest.raises(ConfigurationError, match=named):
        HdfsConfig(url, namenodes=namenodes)


def test_a_delta_table_on_the_name_service_gets_the_same_settings() -> None:
    """Pass: delta-rs's storage options carry the name service (eosink's own HDFS client of the table gets
    ``config.namenodes``, checked as HdfsConnection's above); namenodes on a table not on HDFS are refused."""
    from eosink.connectors.delta import DeltaConfig

    config = DeltaConfig("hdfs://ns1/tables/t", namenodes=NAMENODES)
    assert config.delta_options()["dfs.namenode.rpc-address.ns1.nn0"] == "10.0.0.1:8020"
    assert config.namenodes == NAMENODES
    with pytest.raises(ConfigurationError, match="only for hdfs"):
        DeltaConfig("/tmp/t", namenodes=NAMENODES)


def test_a_checkpoint_on_the_sinks_name_service_is_read_with_its_namenodes() -> None:
    """The driver reads Spark's checkpoint with a client built from its location alone. Pass: once a sink's config
    in the process named the name service's NameNodes, a checkpoint on that name service gets them; one on another
    name service, or on a plain NameNode, gets none (HADOOP_CONF_DIR decides there)."""
    from eosink.connectors.hdfs.checkpoint_fs import open_location

    HdfsConfig("hdfs://ns7/lake/payments", namenodes=NAMENODES)
    fs, path = open_location("hdfs://ns7/checkpoints/q1")
    assert path == "/checkpoints/q1"
    assert fs.config.client_kwargs()["config"]["dfs.namenode.rpc-address.ns7.nn0"] == "10.0.0.1:8020"
    assert not open_location("hdfs://ns8/checkpoints/q1")[0].config.namenodes
    assert not open_location("hdfs://nn:8020/checkpoints/q1")[0].config.namenodes
