"""Tests of the S3 connector need the MinIO service (``eosink services up minio``)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from eosink.connectors.s3.testing import S3Harness, empty_prefix
from eosink.services.fixtures import *  # noqa: F403

HARNESS = S3Harness()


@pytest.fixture
def prefix() -> Iterator[str]:
    """A fresh prefix of the test's own in the harness's bucket; emptied afterwards."""
    made = f"s3t-{uuid.uuid4().hex[:10]}"
    yield made
    empty_prefix(HARNESS.client(), HARNESS.bucket, made)
