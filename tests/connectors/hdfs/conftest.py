"""Tests of the HDFS connector need the HDFS service (``eosink services up hdfs``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink
from eosink.connectors.hdfs.testing import TEST_ROOT, HdfsHarness
from eosink.contract import BatchRef, Bundle, Committable
from eosink.contracts._steps import bundle_for, prepare, rows_for
from eosink.services.fixtures import *  # noqa: F403

HARNESS = HdfsHarness()


@pytest.fixture
def target(hdfs_endpoint: object) -> Iterator[str]:
    """A fresh target URL of the test's own on the shared cluster; deleted afterwards."""
    url = f"{HARNESS.url()}{TEST_ROOT}/t-{uuid.uuid4().hex[:10]}"
    yield url
    sink = HdfsSink(HdfsConfig(url))
    sink.fs.delete(sink.root)


@dataclass
class Prepared:
    """One 2pc batch of an app, written by two participants and prepared, with the bundle to commit it."""

    batch: BatchRef
    committables: list[Committable]
    bundle: Bundle
    rows: list[dict[str, Any]]


def prepared_batch(sink: HdfsSink, app: str, batch_id: int = 0, rows: int = 4) -> Prepared:
    """Set the app up, fence a writer and prepare batch ``batch_id`` (two participants of ``rows`` rows)."""
    sink.setup(app)
    epoch = sink.fence(app)
    batch = BatchRef(app, batch_id)
    shares = [rows_for(app, batch_id, p, rows) for p in range(2)]
    committables = [prepare(sink, batch, epoch, p, share) for p, share in enumerate(shares)]
    return Prepared(batch, committables, bundle_for(batch, epoch, committables), [r for s in shares for r in s])
