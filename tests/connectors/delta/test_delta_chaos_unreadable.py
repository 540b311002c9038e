"""Which errors of the Delta chaos reader's engines skip a poll (the store's state at the moment) and which fail
the run (a wrong read): eosink.connectors.delta._chaos_reads.unreadable_now."""

from __future__ import annotations

import pytest

from eosink.connectors.delta._chaos_reads import unreadable_now


@pytest.mark.parametrize(
    "message",
    [
        "Generic S3 error: error sending request: operation timed out",
        "IO Error: Connection refused (os error 111)",
        "Kernel error: File not found: t/_delta_log/00000000000000000008.json",
        "Object at location t/_delta_log/00000000000000000008.json not found: NotFound",
        "Parquet error: Failed to fetch metadata for file t/part-00000-1eee-c000.snappy.parquet: Object Store error: "
        "Object at location t/part-00000-1eee-c000.snappy.parquet not found: Error performing GET "
        "http://127.0.0.1:1/b/t/part-00000-1eee-c000.snappy.parquet: 404 Not Found: <Code>NoSuchKey</Code>",
    ],
)
def test_the_store_down_or_listing_ahead_of_its_reads_skips_the_poll(message: str) -> None:
    assert unreadable_now(RuntimeError(message))


@pytest.mark.parametrize(
    "message",
    [
        "Schema error: column 'batch_id' not in the table",
        "Invalid JSON in log record, version=8",
        "Kernel error: Invalid data: Parquet file is corrupt",
    ],
)
def test_a_wrong_read_fails_the_run(message: str) -> None:
    assert not unreadable_now(RuntimeError(message))
