"""HdfsSink passes the contract suite against the real MiniDFSCluster, NameNode RPC cuts included.

``make test`` runs the suite with Parquet files; ``make test-full`` runs it whole, and again with
JSON lines and with Parquet in Hive partitions by the suite's ``tag`` column (null tags included),
at ``make test``'s strength.
"""

from __future__ import annotations

import pytest

from eosink.connectors.hdfs.testing import HdfsHarness
from eosink.contracts import contract_tests
from eosink.contracts.fanout import fanout_contract_tests

TestHdfsContract = contract_tests(HdfsHarness())
TestHdfsFanOut = fanout_contract_tests(HdfsHarness())
TestHdfsJsonLinesContract = pytest.mark.full(
    contract_tests(HdfsHarness(format="jsonl"), name="TestHdfsJsonLinesContract")
)
TestHdfsPartitionedContract = pytest.mark.full(
    contract_tests(HdfsHarness(partition_by=("tag",)), name="TestHdfsPartitionedContract")
)
