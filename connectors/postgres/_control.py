"""The control schema of the PostgreSQL sink: its DDL, its version, and the names derived from it.

Tables (all in ``PostgresConfig.control_schema``, default ``eosink``)::

    version   (version)                      one row: the schema version this code created
    epochs    (app_id PK, epoch)             fence: +1 per writer; commit locks the row
    txns      (id PK, app_id, batch_id, ...)  one row per prepared committable, inserted INSIDE the
                                             prepared transaction: visible only once COMMIT PREPARED
                                             ran; state 'prepared' -> 'committed' | 'aborted'
    bundles   (app_id, batch_id PK, bundle)  the batch markers, inserted with the batch's rows
    s_<hash>  (eosink$txn, eosink$seq, <the target's columns>)
                                             staging template: one per target table shape, empty
                                             (version 1 staged every committable's rows here)
    t_<hash>  (LIKE s_<hash>)                a committable's own staging table, created in its
                                             transaction (so invisible until prepared work
                                             commits), dropped by the move or the abort
    maintenance (task PK, last_run)          (v2) when the cleanup last ran, claimed by one writer

The DDL is idempotent and runs under a transaction-scoped advisory lock, only when the
``version`` table is missing: ``CREATE ... IF NOT EXISTS`` is *not* run on every start, because
``CREATE INDEX IF NOT EXISTS`` locks its table before noticing the index exists, and a
left-over prepared transaction holding a lock on that table would block it forever.

Upgrades: the ``version`` row says which :data:`MIGRATIONS` ran. A newer eosink applies the
missing ones, in order, in one transaction under the same advisory lock (with a lock timeout:
it fails clearly rather than waiting behind a stuck lock). Migrations only *add* objects and
never touch ``txns``, staging tables or ``bundles`` rows, which in-doubt prepared transactions
may hold locks on: upgrading with work in doubt is safe, and recovery after it resolves that
work as before. An older eosink refuses a newer schema.
"""

from __future__ import annotations

import hashlib
import re

from psycopg import Connection, sql

from eosink.errors import ConfigurationError

__all__ = [
    "OWN_STAGING",
    "SCHEMA_VERSION",
    "SEQ_COLUMN",
    "TXN_COLUMN",
    "advisory_key",
    "ensure_control_schema",
    "gid_for",
    "gid_prefix",
    "parse_gid",
    "short_hash",
]

SCHEMA_VERSION = 2
TXN_COLUMN = "eosink$txn"
"""Staging column: the committable (gid) a staged row belongs to."""
OWN_STAGING = "t_"
"""Prefix of a committable's own staging table: ``t_<hash of its gid>``, a copy of the ``s_`` template."""
SEQ_COLUMN = "eosink$seq"
"""Staging column: the row's ordinal within its committable (the later row of a key wins an upsert)."""

_GID_VERSION = "eo1"
_ATTEMPT_OK = re.compile(r"[A-Za-z0-9_-]{1,32}")


def short_hash(text: str, nbytes: int = 8) -> str:
    """A stable hex digest of ``text`` (``2 * nbytes`` characters)."""
    return hashlib.blake2b(text.encode(), digest_size=nbytes).hexdigest()


def advisory_key(*parts: str) -> int:
    """A signed 64-bit key for ``pg_advisory_xact_lock`` from ``parts``."""
    digest = hashlib.blake2b("\x00".join(("eosink", *parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def gid_prefix(control_schema: str, app_id: str | None = None) -> str:
    """The prefix of every gid of a control schema (and, given, of one app_id within it).

    gids are global to the PostgreSQL cluster; ``pg_prepared_xacts.database`` tells the database.
    """
    prefix = f"{_GID_VERSION}.{short_hash(control_schema, 4)}."
    return prefix if app_id is None else f"{prefix}{short_hash(app_id)}."


def gid_for(control_schema: str, app_id: str, batch_id: int, epoch: int, participant: int, attempt: str) -> str:
    """``eo1.<schema hash 8>.<app_id hash 16>.<batch>.<epoch>.<participant>.<attempt>``: < 200 bytes, ASCII.

    The attempt is kept when it is short and plain (``[A-Za-z0-9_-]{1,32}``), else hashed.
    The gid is also the committable's id, and :func:`parse_gid` reads batch, epoch and
    participant back, so ``recover`` can list prepared work whose ``txns`` row is still
    invisible inside its prepared transaction.
    """
    tag = attempt if _ATTEMPT_OK.fullmatch(attempt) else short_hash(attempt)
    return f"{gid_prefix(control_schema, app_id)}{batch_id}.{epoch}.{participant}.{tag}"


def parse_gid(gid: str) -> tuple[int, int, int] | None:
    """(batch_id, epoch, participant) of a gid made by :func:`gid_for`, or None."""
    parts = gid.split(".")
    if len(parts) != 7 or parts[0] != _GID_VERSION:
        return None
    try:
        return int(parts[3]), int(parts[4]), int(parts[5])
    except ValueError:
        return None


def _ddl(schema: str) -> list[sql.Composed]:
    s = sql.Identifier(schema)
    statements = [
        "CREATE SCHEMA IF NOT EXISTS {s}",
        "CREATE TABLE IF NOT EXISTS {s}.version (version integer NOT NULL)",
        """CREATE TABLE IF NOT EXISTS {s}.epochs (
            app_id    text PRIMARY KEY,
            epoch     bigint NOT NULL,
            fenced_at timestamptz NOT NULL DEFAULT now()
        )""",
        """CREATE TABLE IF NOT EXISTS {s}.txns (
            id            text PRIMARY KEY,
            app_id        text NOT NULL,
            batch_id      bigint NOT NULL,
            epoch         bigint NOT NULL,
            participant   integer NOT NULL,
            attempt       text NOT NULL,
            state         text NOT NULL CHECK (state IN ('prepared', 'committed', 'aborted')),
            transactional boolean NOT NULL,
            staging       text,
            target        text[],
            columns       text[],
            upsert_keys   text[],
            rows          bigint NOT NULL DEFAULT 0,
            created_at    timestamptz NOT NULL DEFAULT now(),
            updated_at    timestamptz
        )""",
        "CREATE INDEX IF NOT EXISTS txns_by_app_state ON {s}.txns (app_id, state, batch_id)",
        """CREATE TABLE IF NOT EXISTS {s}.bundles (
            app_id       text NOT NULL,
            batch_id     bigint NOT NULL,
            bundle       jsonb NOT NULL,
            committed_at timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (app_id, batch_id)
        )""",
    ]
    return [sql.SQL(stmt).format(s=s) for stmt in statements]


MIGRATIONS: dict[int, tuple[str, ...]] = {
    2: ("CREATE TABLE IF NOT EXISTS {s}.maintenance (task text PRIMARY KEY, last_run timestamptz NOT NULL)",),
}
"""Version -> the statements that upgrade the previous version to it (additive only; see above)."""


def ensure_control_schema(conn: Connection[tuple[object, ...]], schema: str, *, version: int = SCHEMA_VERSION) -> None:
    """Create, upgrade (to ``version``) or check the control schema. ``conn`` is in autocommit mode."""
    s = sql.Identifier(schema)
    found = _version(conn, schema)
    if found is None or found < version:
        with conn.transaction():
            conn.execute("SET LOCAL lock_timeout = '30s'")
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("control", schema),))
            found = _version(conn, schema)
            if found is None:
                exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
                for n, statement in enumerate(_ddl(schema)):
                    if n or exists is None:  # CREATE SCHEMA needs CREATE on the database, even IF NOT EXISTS
                        conn.execute(statement)
                conn.execute(sql.SQL("INSERT INTO {}.version (version) VALUES (1)").format(s))
                found = 1
            for step in range(found + 1, version + 1):
                for text in MIGRATIONS[step]:
                    conn.execute(sql.SQL(text).format(s=s))
            if found < version:
                conn.execute(sql.SQL("UPDATE {}.version SET version = %s").format(s), (version,))
            found = max(found, version)
    if found != version:
        raise ConfigurationError(
            f"The control schema {schema!r} has version {found}, newer than this eosink's {version}.",
            "Upgrade eosink on every driver and executor, or point control_schema at another schema.",
        )


def _version(conn: Connection[tuple[object, ...]], schema: str) -> int | None:
    row = conn.execute("SELECT to_regclass(format('%%I.version', %s::text)) IS NOT NULL", (schema,)).fetchone()
    if not (row and row[0]):
        return None
    found = conn.execute(sql.SQL("SELECT max(version) FROM {}.version").format(sql.Identifier(schema))).fetchone()
    return int(str(found[0])) if found and found[0] is not None else None
