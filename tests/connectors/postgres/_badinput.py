"""Helpers of the bad-input catalogue: the real Coordinator driven into the real PostgreSQL, and what to check.

* :class:`Driver` runs batches in Spark's order through the real Coordinator, restarts as new
  driver processes (:class:`~eosink.contracts._mini.SparkOrderDriver` with a PostgreSQL sink).
* :class:`SinkState` reads what a reader and the sink's bookkeeping hold, with an admin connection.
* :func:`assert_refused` checks an error's class, that it names the problem and the fix, and
  that no secret appears anywhere in it (message, repr, traceback).
* :class:`ArrowBatch` is a :class:`~eosink.contracts._mini.MemoryBatch` with a schema of its own.
* :class:`PrivatePostgres` is a second PostgreSQL server of this test module, whose
  ``max_prepared_transactions`` a test may change and restart (the shared server is never restarted).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from eosink._rowhash import row_hashes
from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres._control import gid_prefix
from eosink.contracts._mini import MemoryBatch, SparkOrderDriver, Variant
from eosink.contracts.secrets import assert_secret_free
from eosink.errors import EosinkError
from eosink.services.postgres import PostgresServer

__all__ = ["APP", "ArrowBatch", "Driver", "PrivatePostgres", "SinkState", "assert_refused", "canon"]

APP = "app_bad"


def canon(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Counter[str]:
    """The multiset of rows projected onto ``columns`` (generated keys and extra target columns ignored;
    numerics compared as floats, so a numeric(5,2) column and the batch's float64 agree)."""
    return Counter(
        json.dumps({c: float(r[c]) if isinstance(r[c], Decimal) else r[c] for c in columns}, sort_keys=True)
        for r in rows
    )


class ArrowBatch(MemoryBatch):
    """A MemoryBatch whose rows have their own Arrow ``schema`` (e.g. hostile column names)."""

    def __init__(self, rows: Sequence[dict[str, Any]], schema: pa.Schema, **kwargs: Any) -> None:
        super().__init__(rows, **kwargs)
        self.schema = schema

    def shares(self, by_hash: bool = False) -> list[list[pa.RecordBatch]]:
        p = self.participants
        if by_hash and self.rows:
            hashes = row_hashes(pa.RecordBatch.from_pylist(self.rows, schema=self.schema))
            groups: list[list[dict[str, Any]]] = [[] for _ in range(p)]
            for row, h in zip(self.rows, hashes, strict=True):
                groups[int(h) % p].append(row)
        else:
            size = -(-len(self.rows) // p) if self.rows else 0
            groups = [self.rows[i * size : (i + 1) * size] for i in range(p)]
        return [
            [
                pa.RecordBatch.from_pylist(g[i : i + self.chunk], schema=self.schema)
                for i in range(0, len(g), self.chunk)
            ]
            for g in groups
        ]


class Driver(SparkOrderDriver[PostgresConfig]):
    """:class:`~eosink.contracts._mini.SparkOrderDriver` around :class:`PostgresSink`."""

    def __init__(self, tmp_path: Path, variant: Variant, config: PostgresConfig) -> None:
        super().__init__(tmp_path, variant, config, PostgresSink, APP)


class SinkState:
    """What a reader sees in the target, and what the sink keeps for APP in its control schema."""

    def __init__(self, url: str, table: tuple[str, str], control_schema: str) -> None:
        self.url, self.table, self.ctl = url, table, control_schema

    def _admin(self) -> psycopg.Connection[tuple[Any, ...]]:
        return psycopg.connect(self.url, autocommit=True)

    def rows(self) -> list[dict[str, Any]]:
        with self._admin() as conn, conn.cursor(row_factory=psycopg.rows.dict_row) as cur:
            if not _exists(conn, *self.table):
                return []
            return cur.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(*self.table))).fetchall()

    def visible(self, columns: Sequence[str]) -> Counter[str]:
        return canon(self.rows(), columns)

    def bundles(self) -> list[int]:
        """The batch ids of APP's bundles (the sink's commit records)."""
        with self._admin() as conn:
            if not _exists(conn, self.ctl, "bundles"):
                return []
            query = sql.SQL("SELECT batch_id FROM {} WHERE app_id = %s ORDER BY batch_id")
            return [r[0] for r in conn.execute(query.format(sql.Identifier(self.ctl, "bundles")), (APP,))]

    def prepared_gids(self) -> list[str]:
        """APP's transactions still PREPAREd on the server (each holds locks and a slot)."""
        prefix = gid_prefix(self.ctl, APP)
        with self._admin() as conn:
            return [
                r[0]
                for r in conn.execute(
                    "SELECT gid FROM pg_prepared_xacts WHERE left(gid, %s) = %s", (len(prefix), prefix)
                ).fetchall()
            ]

    def nothing_of(self, committed: Sequence[MemoryBatch], columns: Sequence[str]) -> None:
        """Only the ``committed`` batches are visible and have bundles; no transaction is left prepared."""
        assert self.visible(columns) == canon([r for b in committed for r in b.rows], columns)
        assert self.bundles() == list(range(len(committed)))
        assert self.prepared_gids() == []

    def exactly(self, driver: Driver, batches: Sequence[MemoryBatch], columns: Sequence[str]) -> None:
        """Every batch exactly once, each with its bundle; nothing in doubt; no manifest left."""
        assert self.visible(columns) == canon([r for b in batches for r in b.rows], columns)
        assert self.bundles() == list(range(len(batches)))
        sink = PostgresSink(driver.config)
        try:
            assert sink.recover(APP) == []
            last = sink.fetch_last_bundle(APP)
            assert last is not None
            assert last.fingerprint == batches[-1].expected_fingerprint(driver.variant.make().fingerprint_version())
        finally:
            sink.close()
        assert self.prepared_gids() == []
        assert driver.ckpt.spark().manifest_batches(APP) == []


def _exists(conn: psycopg.Connection[Any], schema: str, table: str) -> bool:
    row = conn.execute("SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL", (schema, table))
    found = row.fetchone()
    return bool(found and found[0])


def assert_refused(
    err: EosinkError, *, problem: Sequence[str], fix: Sequence[str], secrets: Sequence[str] = ()
) -> None:
    """``err`` names the problem (each of ``problem`` in ``err.problem``) and the fix (each of ``fix`` in
    ``err.fix``; case ignored, so SQL keywords may be written either way), and no secret appears in its
    text, repr, arguments or formatted traceback, nor in any error chained to it, suppressed or not."""
    for part in problem:
        assert part.lower() in err.problem.lower(), f"{part!r} not in the problem: {err.problem!r}"
    assert err.fix, "the error gives no fix"
    for part in fix:
        assert part.lower() in err.fix.lower(), f"{part!r} not in the fix: {err.fix!r}"
    assert_secret_free(err, secrets)


class PrivatePostgres:
    """A PostgreSQL server of this test module (:class:`~eosink.services.postgres.PostgresServer`),
    restarted only when ``max_prepared_transactions`` must change; stopped by its own PID."""

    def __init__(self) -> None:
        home = Path(tempfile.mkdtemp(prefix="eosink-badinput-"))
        home.chmod(0o755)  # the server's user must reach its directory
        self.server = PostgresServer(home / "pg", max_connections="40")
        self.url, self.password = self.server.url, self.server.password

    def start(self, max_prepared: int) -> None:
        """(Re)start the server with ``max_prepared_transactions = max_prepared`` (no-op if already so)."""
        self.server.start(max_prepared_transactions=str(max_prepared), fsync="off")

    def stop(self) -> None:
        self.server.stop()

    def destroy(self) -> None:
        self.server.close()
        shutil.rmtree(self.server.root.parent, ignore_errors=True)
