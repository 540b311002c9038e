"""The chaos harness's reads of a Delta table (deltalake and DuckDB), in a spawned process of their own.

delta-rs keeps the GIL while it waits on the store. On a four-node MinIO the store's balancer and the nodes'
fault proxies are threads of the runner's process, so a read made there stalls them: its own requests wait on
threads that wait on it until delta-rs gives up (30 s a request), and the job's requests through them wait too
(a first chaos run failed so, a fence's GET timing out before any fault). :class:`ReadsProcess` runs the reads
in one worker process, which keeps each table's readers between polls (DuckDB's connection, the batches already
seen committed).
"""

from __future__ import annotations

import multiprocessing
import sys
from typing import Any

from eosink.connectors.delta.config import DeltaConfig
from eosink.connectors.delta.readers import CommittedBatches, DeltaLakeReader, DuckDBReader, ReadSnapshot

__all__ = ["ReadsProcess"]

_Readers = tuple[CommittedBatches, list[DeltaLakeReader | DuckDBReader], list[int]]
_OPEN: dict[tuple[str, str], _Readers] = {}
"""In the worker: each (table, app_id)'s batches seen committed, its engines, and whose turn it is."""


def _snapshot(config: DeltaConfig, app_id: str) -> ReadSnapshot | None:
    """One poll in the worker, by the next engine in turn; None when the store cannot be read now (see
    :func:`unreadable_now`), noted on stderr."""
    from botocore.exceptions import BotoCoreError, ClientError

    from eosink.errors import EosinkError

    key = (config.table, app_id)
    if key not in _OPEN:
        _OPEN[key] = (CommittedBatches(config, app_id), [DeltaLakeReader(config), DuckDBReader(config)], [0])
    batches, engines, turn = _OPEN[key]
    engine = engines[turn[0] % len(engines)]
    turn[0] += 1
    try:
        return engine.snapshot(batches)
    except (BotoCoreError, ClientError, EosinkError, OSError) as exc:
        _skipped(engine.name, exc)
        return None
    except Exception as exc:  # deltalake's and DuckDB's own errors: only the store's state now is expected
        if unreadable_now(exc):
            _skipped(engine.name, exc)
            return None
        raise RuntimeError(f"{engine.name} failed reading {config.table}: {type(exc).__name__}: {exc}") from None


def _skipped(engine: str, exc: Exception) -> None:
    print(f"chaos reader: {engine} skipped a read: {type(exc).__name__}: {str(exc)[:300]}", file=sys.stderr)


def _forget(table: str, app_id: str) -> None:
    found = _OPEN.pop((table, app_id), None)
    for engine in found[1] if found else []:
        if isinstance(engine, DuckDBReader):
            engine.close()


def _rows(config: DeltaConfig, columns: list[str]) -> list[dict[str, Any]]:
    table = DeltaLakeReader(config).table(columns)
    return [] if table is None else table.to_pylist()


class ReadsProcess:
    """A worker process for the reads (see the module docstring), started at the first; a read that has not
    returned after ``timeout_s`` is a TimeoutError, and the worker is killed and started anew at the next."""

    def __init__(self, timeout_s: float = 300.0) -> None:
        self.timeout_s = timeout_s
        self._pool: Any = None

    def snapshot(self, config: DeltaConfig, app_id: str) -> ReadSnapshot | None:
        """The next engine's read of the table, paired with the batches committed (None: the store is down)."""
        found: ReadSnapshot | None = self._call(_snapshot, config, app_id)
        return found

    def rows(self, config: DeltaConfig, columns: list[str]) -> list[dict[str, Any]]:
        """Every row of the table's newest snapshot, through deltalake (none while there is no table)."""
        found: list[dict[str, Any]] = self._call(_rows, config, columns)
        return found

    def forget(self, config: DeltaConfig, app_id: str) -> None:
        """Drop the readers of a table the worker keeps (its schedule is over)."""
        if self._pool is not None:
            self._call(_forget, config.table, app_id)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None

    def _call(self, fn: Any, *args: Any) -> Any:
        if self._pool is None:
            self._pool = multiprocessing.get_context("spawn").Pool(1)
        try:
            return self._pool.apply_async(fn, args).get(self.timeout_s)
        except multiprocessing.TimeoutError:
            self.close()
            raise TimeoutError(f"a Delta read in the chaos reader process took over {self.timeout_s:g} s") from None


def unreadable_now(exc: Exception) -> bool:
    """Whether a reader's error is the store's state at the moment, not a wrong read: a node down or restarting
    (on purpose), or a MinIO node listing a log entry that a read through the others does not find (a node lists
    from drives of its own, which may hold the start of a PUT that failed or has not finished; pyarrow's S3
    reader gets FileNotFoundError there, an OSError), or a data file answered ``NoSuchKey`` through a node that had
    just been started again (no eosink request deletes a file the log names: delta-rs names its merges' and
    compactions' files, eosink deletes only its own prepared ones). A log entry or file that truly vanished fails
    the schedule's final read, which is not guarded, and shows in later polls as vanished rows."""
    text = f"{type(exc).__name__}: {exc}".lower()
    words = ("connection refused", "connect", "timed out", "timeout", "broken pipe", "reset by peer", "io error")
    missing = ("file not found", "notfound", "nosuchkey")
    return any(word in text for word in (*words, *missing))
