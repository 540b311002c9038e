"""S3Sink passes the contract suite against the real MinIO, network faults included, in both formats.

``make test`` runs the suite with Parquet objects; the JSON-lines format's whole suite runs in
``make test-full``.
"""

from __future__ import annotations

import pytest

from eosink.connectors.s3.testing import S3Harness
from eosink.contracts import contract_tests

TestS3Contract = contract_tests(S3Harness())
TestS3JsonLinesContract = pytest.mark.full(contract_tests(S3Harness(format="jsonl"), name="TestS3JsonLinesContract"))
