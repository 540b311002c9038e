"""hdfs-native's errors as eosink's: what a lost DataNode raises is retryable."""

from __future__ import annotations

import pytest

from eosink.connectors.hdfs import HdfsConfig
from eosink.connectors.hdfs._errors import translate
from eosink.errors import EosinkError, TransientError

CONFIG = HdfsConfig("hdfs://127.0.0.1:1/t")


@pytest.mark.parametrize(
    "text",
    [
        'DataTransferError("All nodes failed for write")',  # every DataNode of a block's pipeline lost
        'DataTransferError("Failed to replay packets during recovery")',
        'DataTransferError("Datanode connection closed while waiting for ack")',
    ],
)
def test_a_failure_talking_to_datanodes_is_transient(text: str) -> None:
    assert type(translate(CONFIG, RuntimeError(text), "write")) is TransientError


def test_another_runtime_error_stays_an_eosink_error() -> None:
    assert type(translate(CONFIG, RuntimeError('InternalError("boom")'), "write")) is EosinkError
