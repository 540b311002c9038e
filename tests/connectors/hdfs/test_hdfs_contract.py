"""HdfsSink passes the contract suite against the real MiniDFSCluster, NameNode RPC cuts included.

``make test`` runs the suite with Parquet files; JSON lines and column partitioning run it again in
``make test-full``.
"""

from __future__ import annotations

import pytest

from eosink.connectors.hdfs.testing import HdfsHarness
from eosink.contracts import contract_tests

TestHdfsContract = contract_tests(HdfsHarness())
TestHdfsJsonLinesContract = pytest.mark.full(
    contract_tests(HdfsHarness(format="jsonl"), name="TestHdfsJsonLinesContract")
)
