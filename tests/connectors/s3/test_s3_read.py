"""read_committed's edges: a prefix with nothing committed yet, columns the batches do not have, and a reading
process that must exit cleanly afterwards."""

from __future__ import annotations

import subprocess
import sys
import textwrap
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


_COUNT_THREADS = textwrap.dedent(
    """
    import os, sys
    from eosink.connectors.s3 import read_committed
    from eosink.connectors.s3.testing import S3Harness

    def threads():
        # jemalloc's background purging thread (pyarrow's allocator) starts on its own schedule and is harmless
        names = {}
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/comm") as f:
                names[task] = f.read().strip()
        return {t: n for t, n in names.items() if not n.startswith("jemalloc_bg_thd")}

    config = S3Harness().config(sys.argv[1], format=sys.argv[2])
    before = threads()
    rows = read_committed(config, "app").to_pylist()
    new = sorted(n for t, n in threads().items() if t not in before)
    print(len(rows), len(new), *new)
    """
)


@pytest.mark.parametrize("file_format", ["parquet", "jsonl"])
def test_reading_starts_no_native_threads_so_the_reader_exits_cleanly(
    tmp_path: Path, prefix: str, file_format: str
) -> None:
    """Pass: a fresh process reads both committed rows and has no more threads than before, and exits 0.
    Arrow's pools, once started, can abort a process at exit (``terminate called without an active
    exception``): the examples' readers hit it."""
    config = HARNESS.config(prefix, format=file_format)
    driver = SparkOrderDriver(tmp_path, TWO_PC, config, S3Sink, app_id="app")
    driver.run([MemoryBatch([{"id": 1, "amount": 5}, {"id": 2, "amount": 6}])])
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_THREADS, prefix, file_format], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["2", "0"], f"rows read, threads started and their names: {done.stdout}"
