"""Spark checkpoints on S3: SparkCheckpoint serves ``s3a://`` and ``s3://`` through the connector's CheckpointFS."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eosink.checkpoint import SparkCheckpoint
from eosink.connectors.s3.checkpoint_fs import POLL_INTERVAL_S, S3CheckpointFS, register
from eosink.connectors.s3.testing import empty_prefix
from eosink.errors import ConfigurationError

from .conftest import HARNESS


@pytest.fixture
def location(prefix: str) -> Iterator[str]:
    """An ``s3a://`` checkpoint location in the harness's bucket, this process's connection registered for it."""
    register(HARNESS.bucket, HARNESS.config(prefix).connection())
    yield f"s3a://{HARNESS.bucket}/{prefix}/checkpoint"
    empty_prefix(HARNESS.client(), HARNESS.bucket, prefix)


def test_the_commit_log_and_offsets_written_as_spark_writes_them_read_back(location: str) -> None:
    """Pass: the location opens on the connector's file system (polled every 25 ms), Spark's files written
    as Spark's S3A writes them (one object per log entry, no folder objects) are read back: the commit log
    in numeric order, offsets, the query id."""
    ckpt = SparkCheckpoint(location)
    assert isinstance(ckpt._fs, S3CheckpointFS) and ckpt.poll_interval_s == POLL_INTERVAL_S
    assert not ckpt.exists() and ckpt.committed_batches() == []
    s3, root = HARNESS.client(), location.split("/", 3)[3]
    s3.put_object(Bucket=HARNESS.bucket, Key=f"{root}/metadata", Body=b'{"id":"q-1"}\n')
    for n in (0, 1, 2, 10):
        s3.put_object(Bucket=HARNESS.bucket, Key=f"{root}/offsets/{n}", Body=b"v1\n{}\n")
        s3.put_object(Bucket=HARNESS.bucket, Key=f"{root}/commits/{n}", Body=b"v1\n{}\n")
    assert ckpt.exists() and ckpt.query_id() == "q-1"
    assert ckpt.committed_batches() == [0, 1, 2, 10] and ckpt.last_committed() == 10
    assert ckpt.has_commit_file(2) and not ckpt.has_commit_file(3) and ckpt.has_offsets(10)


def test_manifests_are_written_read_listed_and_deleted(location: str) -> None:
    """Pass: a manifest written through the location reads back equal, is listed by batch, and is gone
    after delete_manifest (a second delete is no error)."""
    from eosink.checkpoint import Manifest
    from eosink.contract import BatchRef, Bundle, Fingerprint

    ckpt = SparkCheckpoint(location)
    bundle = Bundle(BatchRef("app", 3), 1, Fingerprint(2, 5, 7), ("c1",), "ckpt-1", "2pc")
    manifest = Manifest((), bundle)
    ckpt.write_manifest("app", 3, manifest)
    assert ckpt.manifest_batches("app") == [3]
    assert ckpt.read_manifest("app", 3) == manifest
    ckpt.delete_manifest("app", 3)
    ckpt.delete_manifest("app", 3)
    assert ckpt.manifest_batches("app") == [] and ckpt.read_manifest("app", 3) is None


def test_a_location_in_a_missing_bucket_is_a_configuration_error(prefix: str) -> None:
    register("eosink-no-such-bucket", HARNESS.config(prefix).connection())
    ckpt = SparkCheckpoint(f"s3a://eosink-no-such-bucket/{prefix}/checkpoint")
    with pytest.raises(ConfigurationError, match="eosink-no-such-bucket"):
        ckpt.committed_batches()
