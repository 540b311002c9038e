"""How an HdfsSink finds its cluster, against the real MiniDFSCluster: an HA name service whose first
NameNode is unreachable (hdfs-native fails over to the second), and ``fs.defaultFS`` plus the name
service read from a Hadoop configuration directory, given as ``hadoop_conf_dir`` or ``$HADOOP_CONF_DIR``.

Each test commits a batch through the configuration under test and reads it back through a plain
``hdfs://host:port`` configuration of the same directory: the same cluster, the same rows.
"""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink, read_committed
from eosink.contracts._steps import canon

from .conftest import prepared_batch

APP = "config-app"
NAME_SERVICE = "eons"
DEAD_NAMENODE = "127.0.0.1:1"  # nothing listens on port 1: the client must fail over


def _ha_settings(target: str) -> dict[str, str]:
    parts = urllib.parse.urlsplit(target)
    return {
        "dfs.nameservices": NAME_SERVICE,
        f"dfs.ha.namenodes.{NAME_SERVICE}": "nn1,nn2",
        f"dfs.namenode.rpc-address.{NAME_SERVICE}.nn1": DEAD_NAMENODE,
        f"dfs.namenode.rpc-address.{NAME_SERVICE}.nn2": f"{parts.hostname}:{parts.port}",
    }


def _commit_one_batch(config: HdfsConfig) -> list[dict[str, Any]]:
    sink = HdfsSink(config)
    work = prepared_batch(sink, APP)
    sink.commit(work.batch, work.committables, work.bundle)
    return work.rows


def _write_conf_dir(folder: Path, target: str) -> Path:
    folder.mkdir()
    (folder / "core-site.xml").write_text(
        f"<configuration><property><name>fs.defaultFS</name><value>hdfs://{NAME_SERVICE}</value></property>"
        "</configuration>\n"
    )
    props = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in _ha_settings(target).items())
    (folder / "hdfs-site.xml").write_text(f"<configuration>{props}</configuration>\n")
    return folder


def test_an_ha_name_service_fails_over_from_an_unreachable_namenode(target: str) -> None:
    path = urllib.parse.urlsplit(target).path
    config = HdfsConfig(f"hdfs://{NAME_SERVICE}{path}", client_config=_ha_settings(target))
    assert config.namenode == f"hdfs://{NAME_SERVICE}" and config.path == path
    expected = _commit_one_batch(config)
    assert canon(read_committed(HdfsConfig(target)).to_pylist()) == canon(expected)


@pytest.mark.parametrize("given", ["argument", "environment"])
def test_a_path_resolves_against_the_default_fs_of_a_hadoop_conf_dir(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str
) -> None:
    conf = _write_conf_dir(tmp_path / "hadoop-conf", target)
    path = urllib.parse.urlsplit(target).path
    if given == "environment":
        monkeypatch.setenv("HADOOP_CONF_DIR", str(conf))
        config = HdfsConfig(f"hdfs://{path}")  # hdfs:///path: Hadoop's "the default file system"
    else:
        config = HdfsConfig(path, hadoop_conf_dir=str(conf))
    assert config.hadoop_conf_dir == str(conf)
    assert config.target_url == f"hdfs://{NAME_SERVICE}{path}"
    expected = _commit_one_batch(config)
    assert canon(read_committed(HdfsConfig(target)).to_pylist()) == canon(expected)
