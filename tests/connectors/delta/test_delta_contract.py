"""DeltaSink passes the contract suite on local disk and against MinIO (the S3 case cuts the log entry's PUT)."""

from __future__ import annotations

from eosink.connectors.delta.testing import DeltaHarness
from eosink.contracts import contract_tests

TestDeltaLocalContract = contract_tests(DeltaHarness("file"), name="TestDeltaLocalContract")
TestDeltaS3Contract = contract_tests(DeltaHarness("s3"), name="TestDeltaS3Contract")
