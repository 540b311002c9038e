"""read_committed's edges: a prefix with nothing committed yet, and columns the batches do not have."""

from __future__ import annotations

from pathlib import Path

import pytest

from eosink.connectors.s3 import S3Sink, read_committed
from eosink.contracts._mini import VARIANTS, MemoryBatch, SparkOrderDriver
from eosink.errors import ConfigurationError

from .conftest import HARNESS

TWO_PC = next(v for v in VARIANTS if v.id == "2pc")


def test_nothing_committed_reads_as_an_empty_table_even_with_columns(prefix: str) -> None:
    table = read_committed(HARNESS.config(prefix), "app", columns=["id"])
    assert table.num_rows == 0


def test_a_column_the_batches_lack_is_a_configuration_error_naming_it(tmp_path: Path, prefix: str) -> None:
    """Pass: the committed column reads back; an unknown one raises ConfigurationError naming it and the
    columns there are."""
    driver = SparkOrderDriver(tmp_path, TWO_PC, HARNESS.config(prefix), S3Sink, app_id="app")
    driver.run([MemoryBatch([{"id": 1, "amount": 5}, {"id": 2, "amount": 6}])])
    assert read_committed(HARNESS.config(prefix), "app", columns=["amount"]).to_pylist() == [
        {"amount": 5},
        {"amount": 6},
    ]
    with pytest.raises(ConfigurationError) as err:
        read_committed(HARNESS.config(prefix), "app", columns=["id", "balance"])
    assert "balance" in str(err.value) and "amount" in str(err.value)
