"""Tests of the HDFS connector need the HDFS service (``eosink services up hdfs``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink
from eosink.connectors.hdfs.testing import TEST_ROOT, HdfsHarness
from eosink.services.fixtures import *  # noqa: F403

HARNESS = HdfsHarness()


@pytest.fixture
def target(hdfs_endpoint: object) -> Iterator[str]:
    """A fresh target URL of the test's own on the shared cluster; deleted afterwards."""
    url = f"{HARNESS.url()}{TEST_ROOT}/t-{uuid.uuid4().hex[:10]}"
    yield url
    sink = HdfsSink(HdfsConfig(url))
    sink.fs.delete(sink.root)
