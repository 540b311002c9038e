"""DeltaSink passes the contract suite on local disk, against MinIO and against HDFS (the fault proxy cuts the
reply to the request that writes the log entry: the PUT on S3, the rename on HDFS).

HDFS runs on a private cluster with HDFS's default ``num-committed-allowed`` (0), which delta-rs needs
(docs/connectors/delta.md, "On HDFS"); the shared cluster allows 1.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from eosink.connectors.delta.testing import DeltaHarness
from eosink.contracts import contract_tests
from eosink.contracts.fanout import fanout_contract_tests
from eosink.services.hdfs import HdfsServer

_HDFS = DeltaHarness("hdfs")


@pytest.fixture(scope="class")
def private_hdfs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    server = HdfsServer(tmp_path_factory.mktemp("hdfs"), close_before_report=False)
    _HDFS.use_hdfs(server.start().url)
    try:
        yield
    finally:
        server.stop()


TestDeltaLocalContract = contract_tests(DeltaHarness("file"), name="TestDeltaLocalContract")
TestDeltaS3Contract = contract_tests(DeltaHarness("s3"), name="TestDeltaS3Contract")
TestDeltaS3FanOut = fanout_contract_tests(DeltaHarness("s3"), name="TestDeltaS3FanOut")
TestDeltaHdfsContract = pytest.mark.usefixtures("private_hdfs")(contract_tests(_HDFS, name="TestDeltaHdfsContract"))
