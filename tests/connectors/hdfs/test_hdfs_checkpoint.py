"""Spark checkpoints on HDFS: SparkCheckpoint serves ``hdfs://`` through the connector's CheckpointFS."""

from __future__ import annotations

from eosink.checkpoint import Manifest, SparkCheckpoint
from eosink.connectors.hdfs.checkpoint_fs import HdfsCheckpointFS
from eosink.connectors.hdfs.config import HdfsConfig
from eosink.contract import BatchRef, Bundle, Fingerprint
from eosink.stores.hdfs import Fs


def _put(fs: Fs, path: str, data: bytes) -> None:
    writer = fs.create(path, overwrite=True, parents=True)
    writer.write(data)
    writer.close()


def test_the_commit_log_and_offsets_written_as_spark_writes_them_read_back(target: str) -> None:
    """Pass: an ``hdfs://`` location opens on the connector's file system (polled every 20 ms); Spark's
    files are read back: the commit log in numeric order (10 after 2), offsets, the query id."""
    location = f"{target}/checkpoint"
    ckpt = SparkCheckpoint(location)
    assert isinstance(ckpt._fs, HdfsCheckpointFS) and ckpt.poll_interval_s == HdfsCheckpointFS.poll_interval_s
    assert not ckpt.exists() and ckpt.committed_batches() == []
    config = HdfsConfig(location)
    fs = Fs(config)
    _put(fs, f"{config.path}/metadata", b'{"id":"q-1"}\n')
    for n in (0, 1, 2, 10):
        _put(fs, f"{config.path}/offsets/{n}", b"v1\n{}\n")
        _put(fs, f"{config.path}/commits/{n}", b"v1\n{}\n")
    assert ckpt.exists() and ckpt.query_id() == "q-1"
    assert ckpt.committed_batches() == [0, 1, 2, 10] and ckpt.last_committed() == 10
    assert ckpt.has_commit_file(2) and not ckpt.has_commit_file(3) and ckpt.has_offsets(10)


def test_manifests_are_replaced_atomically_listed_and_deleted(target: str) -> None:
    """Pass: a manifest written twice reads back as the second (the rename over the old one leaves no
    temporary file beside it), is listed by batch, and is gone after delete_manifest (twice: no error)."""
    ckpt = SparkCheckpoint(f"{target}/checkpoint")
    first = Manifest((), Bundle(BatchRef("app", 3), 1, Fingerprint(2, 5, 7), ("c1",), "ckpt-1", "2pc"))
    second = Manifest((), Bundle(BatchRef("app", 3), 2, Fingerprint(2, 5, 7), ("c2",), "ckpt-1", "2pc"))
    ckpt.write_manifest("app", 3, first)
    ckpt.write_manifest("app", 3, second)
    assert ckpt.manifest_batches("app") == [3]
    assert ckpt.read_manifest("app", 3) == second
    config = HdfsConfig(f"{target}/checkpoint")
    leftovers = [s.path for s in Fs(config).walk_files(config.path) if s.path.endswith(".tmp")]
    assert leftovers == []
    ckpt.delete_manifest("app", 3)
    ckpt.delete_manifest("app", 3)
    assert ckpt.manifest_batches("app") == [] and ckpt.read_manifest("app", 3) is None
