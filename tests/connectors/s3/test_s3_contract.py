"""S3Sink passes the contract suite against the real MinIO, network faults included, in both formats.

``make test`` runs the suite with Parquet objects; the JSON-lines format's whole suite runs in
``make test-full``, and so does the suite with segments of 2 batches (a range is folded as soon as
a newer marker exists: folds run at almost every commit, under every crash and network fault).
"""

from __future__ import annotations

import pytest

from eosink.connectors.s3.testing import S3Harness
from eosink.contracts import contract_tests
from eosink.contracts.fanout import fanout_contract_tests

TestS3Contract = contract_tests(S3Harness())
TestS3FanOut = fanout_contract_tests(S3Harness())
TestS3JsonLinesContract = pytest.mark.full(contract_tests(S3Harness(format="jsonl"), name="TestS3JsonLinesContract"))
TestS3SegmentsContract = pytest.mark.full(contract_tests(S3Harness(segment_batches=2), name="TestS3SegmentsContract"))
