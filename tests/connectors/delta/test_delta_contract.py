"""DeltaSink passes the contract suite on local disk, against MinIO and against HDFS (the fault proxy cuts the
reply to the request that writes the log entry: the PUT on S3, the rename on HDFS)."""

from __future__ import annotations

from eosink.connectors.delta.testing import DeltaHarness
from eosink.contracts import contract_tests

TestDeltaLocalContract = contract_tests(DeltaHarness("file"), name="TestDeltaLocalContract")
TestDeltaS3Contract = contract_tests(DeltaHarness("s3"), name="TestDeltaS3Contract")
TestDeltaHdfsContract = contract_tests(DeltaHarness("hdfs"), name="TestDeltaHdfsContract")
