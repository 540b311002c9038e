"""Read-only status of a PostgreSQL sink's control schema, for ``eosink status`` and ``eosink recover``.

Per app_id (a row of ``ctl.epochs``): its writer epoch, its last bundle, and its in-doubt work:

* prepared gids in ``pg_prepared_xacts`` with the app's prefix (participants that ran
  ``PREPARE TRANSACTION`` and were neither committed nor rolled back), and
* ``ctl.txns`` rows in state ``'prepared'`` (``COMMIT PREPARED`` ran: rows staged and
  committed, not yet moved into the target by the batch's commit).

gid prefixes hash the app_id (:func:`~eosink.connectors.postgres._control.gid_prefix`), so a
prepared gid is matched to its app by hashing every app_id of ``ctl.epochs``; gids with the
control schema's prefix whose app is unknown, or that belong to another database, are listed
as orphans. Every query runs in one read-only transaction: reading status changes nothing.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from eosink.connectors.postgres._control import gid_prefix, parse_gid, short_hash
from eosink.connectors.postgres._errors import translated
from eosink.connectors.postgres.config import PostgresConfig
from eosink.contract import Bundle
from eosink.errors import ConfigurationError

__all__ = ["AppStatus", "ControlStatus", "PreparedGid", "StagedTxn", "control_schema_exists", "read_status"]


@dataclass(frozen=True)
class PreparedGid:
    """One prepared transaction (a participant's work) of the control schema."""

    gid: str
    batch_id: int | None
    epoch: int | None
    participant: int | None
    prepared: dt.datetime
    age_s: float
    owner: str
    database: str

    def to_json(self) -> dict[str, Any]:
        return {
            "gid": self.gid,
            "batch_id": self.batch_id,
            "epoch": self.epoch,
            "participant": self.participant,
            "prepared": self.prepared.isoformat(),
            "age_s": round(self.age_s, 3),
            "owner": self.owner,
            "database": self.database,
        }


@dataclass(frozen=True)
class StagedTxn:
    """A ``ctl.txns`` row in state 'prepared': committed into staging, not yet moved into the target."""

    id: str
    batch_id: int
    epoch: int
    participant: int
    rows: int
    created_at: dt.datetime
    age_s: float

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "batch_id": self.batch_id,
            "epoch": self.epoch,
            "participant": self.participant,
            "rows": self.rows,
            "created_at": self.created_at.isoformat(),
            "age_s": round(self.age_s, 3),
        }


@dataclass(frozen=True)
class AppStatus:
    """One app_id: its writer epoch, its newest committed batch, and what is in doubt."""

    app_id: str
    epoch: int
    fenced_at: dt.datetime
    last_batch_id: int | None = None
    last_rows: int | None = None
    last_committed_at: dt.datetime | None = None
    last_strategy: str | None = None
    last_checkpoint_id: str | None = None
    prepared: tuple[PreparedGid, ...] = ()
    staged: tuple[StagedTxn, ...] = ()

    @property
    def in_doubt(self) -> int:
        """How many committables are in doubt (prepared gids plus staged, unmoved work)."""
        return len(self.prepared) + len(self.staged)

    def to_json(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "epoch": self.epoch,
            "fenced_at": self.fenced_at.isoformat(),
            "last_bundle": None
            if self.last_batch_id is None
            else {
                "batch_id": self.last_batch_id,
                "rows": self.last_rows,
                "committed_at": self.last_committed_at.isoformat() if self.last_committed_at else None,
                "strategy": self.last_strategy,
                "checkpoint_id": self.last_checkpoint_id,
            },
            "prepared": [p.to_json() for p in self.prepared],
            "staged": [s.to_json() for s in self.staged],
            "in_doubt": self.in_doubt,
        }


@dataclass(frozen=True)
class ControlStatus:
    """The status of one control schema (in the database the conninfo names)."""

    control_schema: str
    database: str
    exists: bool
    now: dt.datetime
    apps: tuple[AppStatus, ...] = ()
    orphans: tuple[PreparedGid, ...] = field(default=())

    @property
    def in_doubt(self) -> int:
        """In-doubt committables of every listed app, plus orphaned prepared gids."""
        return sum(a.in_doubt for a in self.apps) + len(self.orphans)

    def to_json(self) -> dict[str, Any]:
        return {
            "control_schema": self.control_schema,
            "database": self.database,
            "exists": self.exists,
            "now": self.now.isoformat(),
            "apps": [a.to_json() for a in self.apps],
            "orphans": [o.to_json() for o in self.orphans],
            "in_doubt": self.in_doubt,
        }


def _connect(config: PostgresConfig) -> psycopg.Connection[tuple[Any, ...]]:
    with translated(config, f"connecting to {config.redacted_conninfo()}"):
        conn: psycopg.Connection[tuple[Any, ...]] = psycopg.connect(config.conninfo, **config.connect_kwargs())
    conn.read_only = True
    return conn


def control_schema_exists(config: PostgresConfig) -> bool:
    """Whether the control schema's tables exist (a read-only check; nothing is created)."""
    with _connect(config) as conn, translated(config, "reading the control schema"):
        return _exists(conn, config.control_schema)


def _exists(conn: psycopg.Connection[tuple[Any, ...]], schema: str) -> bool:
    row = conn.execute("SELECT to_regclass(format('%%I.epochs', %s::text)) IS NOT NULL", (schema,)).fetchone()
    return bool(row and row[0])


def read_status(config: PostgresConfig, app_id: str | None = None) -> ControlStatus:
    """Status of every app_id of the control schema (or of ``app_id`` alone), in one read-only transaction.

    Raises ConfigurationError when ``app_id`` is given but the control schema does not know it.
    """
    schema = config.control_schema
    with _connect(config) as conn, translated(config, f"reading the status of control schema {schema!r}"):
        return _read(conn, schema, app_id)


def _read(conn: psycopg.Connection[tuple[Any, ...]], schema: str, app_id: str | None) -> ControlStatus:
    head = conn.execute("SELECT current_database(), now()").fetchone()
    assert head is not None
    database, now = str(head[0]), head[1]
    prefix = gid_prefix(schema)
    gids = conn.execute(
        "SELECT gid::text, prepared, owner::text, database::text, extract(epoch FROM now() - prepared)::float8 "
        "FROM pg_prepared_xacts WHERE left(gid, %s) = %s ORDER BY prepared, gid",
        (len(prefix), prefix),
    ).fetchall()
    if not _exists(conn, schema):
        return ControlStatus(schema, database, False, now, orphans=tuple(_prepared(r) for r in gids))
    t = {name: sql.Identifier(schema, name) for name in ("epochs", "bundles", "txns")}
    rows = conn.execute(
        sql.SQL(
            "SELECT e.app_id, e.epoch, e.fenced_at, b.batch_id, b.bundle, b.committed_at FROM {e} e "
            "LEFT JOIN LATERAL (SELECT batch_id, bundle, committed_at FROM {b} WHERE app_id = e.app_id "
            "                   ORDER BY batch_id DESC LIMIT 1) b ON true "
            "WHERE %(app)s::text IS NULL OR e.app_id = %(app)s ORDER BY e.app_id"
        ).format(e=t["epochs"], b=t["bundles"]),
        {"app": app_id},
    ).fetchall()
    if app_id is not None and not rows:
        raise ConfigurationError(
            f"The control schema {schema!r} (database {database!r}) knows no app_id {app_id!r}.",
            "Check --app-id (run without it to list every app_id) and --control-schema.",
        )
    staged = conn.execute(
        sql.SQL(
            "SELECT app_id, id, batch_id, epoch, participant, rows, created_at, "
            "extract(epoch FROM now() - created_at)::float8 FROM {} "
            "WHERE state = 'prepared' AND (%(app)s::text IS NULL OR app_id = %(app)s) ORDER BY batch_id, id"
        ).format(t["txns"]),
        {"app": app_id},
    ).fetchall()
    by_hash = {short_hash(str(r[0])): str(r[0]) for r in rows}
    prepared: dict[str, list[PreparedGid]] = {}
    orphans: list[PreparedGid] = []
    for r in gids:
        owner_app = by_hash.get(str(r[0])[len(prefix) :].split(".", 1)[0]) if r[3] == database else None
        if owner_app is not None:
            prepared.setdefault(owner_app, []).append(_prepared(r))
        elif app_id is None:  # with --app-id, other apps' gids are not this app's orphans
            orphans.append(_prepared(r))
    staged_by_app: dict[str, list[StagedTxn]] = {}
    for s in staged:
        staged_by_app.setdefault(str(s[0]), []).append(
            StagedTxn(str(s[1]), int(s[2]), int(s[3]), int(s[4]), int(s[5]), s[6], float(s[7]))
        )
    apps = []
    for app, epoch, fenced_at, batch_id, bundle_json, committed_at in rows:
        bundle = Bundle.from_json(bundle_json) if bundle_json is not None else None
        apps.append(
            AppStatus(
                str(app),
                int(epoch),
                fenced_at,
                None if batch_id is None else int(batch_id),
                bundle.fingerprint.rows if bundle else None,
                committed_at,
                (bundle.strategy or None) if bundle else None,
                bundle.checkpoint_id if bundle else None,
                tuple(prepared.get(str(app), ())),
                tuple(staged_by_app.get(str(app), ())),
            )
        )
    return ControlStatus(schema, database, True, now, tuple(apps), tuple(orphans))


def _prepared(row: tuple[Any, ...]) -> PreparedGid:
    gid, prepared, owner, database, age = row
    parsed = parse_gid(str(gid))
    batch_id, epoch, participant = parsed if parsed is not None else (None, None, None)
    return PreparedGid(str(gid), batch_id, epoch, participant, prepared, float(age), str(owner), str(database))
