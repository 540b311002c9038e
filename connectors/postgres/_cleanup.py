"""Housekeeping of the control schema: old bookkeeping and orphaned staged rows.

Finished ``txns`` rows and every bundle but the newest of each app_id are only needed while
a commit of their batch might still be retried; after ``retention_s`` they go. Staging tables
and staged rows that no live ('prepared') committable owns can only be left by a manual
intervention (or an interrupted abort) and are dropped. In-doubt work (prepared transactions,
'prepared' txns rows and their staged rows) is never touched: only recovery resolves it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import Connection, sql

from eosink.connectors.postgres._control import OWN_STAGING, TXN_COLUMN

__all__ = ["CleanupReport", "claim_cleanup", "run_cleanup"]


@dataclass(frozen=True)
class CleanupReport:
    """What one cleanup removed."""

    txns: int = 0
    bundles: int = 0
    staged_rows: int = 0
    staging_tables: int = 0

    def __str__(self) -> str:
        return (
            f"{self.txns} txns rows, {self.bundles} bundles, {self.staging_tables} orphaned staging tables, "
            f"{self.staged_rows} orphaned staged rows deleted"
        )


def claim_cleanup(conn: Connection[tuple[Any, ...]], schema: str, interval_s: float) -> bool:
    """True for exactly one caller per ``interval_s`` across every process using ``schema``."""
    row = conn.execute(
        sql.SQL(
            "INSERT INTO {} AS m (task, last_run) VALUES ('cleanup', now()) ON CONFLICT (task) DO UPDATE "
            "SET last_run = now() WHERE m.last_run < now() - make_interval(secs => %s) RETURNING 1"
        ).format(sql.Identifier(schema, "maintenance")),
        (float(interval_s),),
    ).fetchone()
    return row is not None


def run_cleanup(conn: Connection[tuple[Any, ...]], schema: str, retention_s: float) -> CleanupReport:
    """Delete what is older than ``retention_s`` and no longer needed (see the module docstring)."""
    txns, bundles = sql.Identifier(schema, "txns"), sql.Identifier(schema, "bundles")
    age = {"secs": float(retention_s)}
    with conn.transaction():
        gone_txns = conn.execute(
            sql.SQL(
                "DELETE FROM {} WHERE state IN ('committed', 'aborted') "
                "AND coalesce(updated_at, created_at) < now() - make_interval(secs => %(secs)s)"
            ).format(txns),
            age,
        ).rowcount
        gone_bundles = conn.execute(
            sql.SQL(
                "DELETE FROM {b} AS old WHERE committed_at < now() - make_interval(secs => %(secs)s) "
                "AND EXISTS (SELECT 1 FROM {b} AS newer WHERE newer.app_id = old.app_id "
                "AND newer.batch_id > old.batch_id)"
            ).format(b=bundles),
            age,
        ).rowcount
    staged = 0
    tables = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname ~ '^s_[0-9a-f]{16}$' ORDER BY 1",
        (schema,),
    ).fetchall()
    dropped = 0
    owned = conn.execute(
        "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND c.relkind = 'r' AND c.relname ~ %s ORDER BY 1",
        (schema, f"^{OWN_STAGING}[0-9a-f]{{24}}$"),
    ).fetchall()
    for (name,) in owned:  # tables of prepared or running work are not visible here: never dropped
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '5s'")
            live = conn.execute(
                sql.SQL("SELECT 1 FROM {} WHERE staging = %s AND state = 'prepared' FOR SHARE").format(txns), (name,)
            ).fetchone()
            if live is None:
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(schema, name)))
                dropped += 1
    for (name,) in tables:
        staged += conn.execute(
            sql.SQL(
                "DELETE FROM {s} AS r WHERE NOT EXISTS "
                "(SELECT 1 FROM {t} AS t WHERE t.id = r.{c} AND t.state = 'prepared')"
            ).format(s=sql.Identifier(schema, name), t=txns, c=sql.Identifier(TXN_COLUMN)),
        ).rowcount
    return CleanupReport(max(gone_txns, 0), max(gone_bundles, 0), max(staged, 0), dropped)
