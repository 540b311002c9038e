"""The PostgreSQL sink's admin (:class:`~eosink.admin.SinkAdmin`): what ``eosink status`` and ``eosink recover`` read.

The status comes from one read-only transaction over the control schema and
``pg_prepared_xacts`` (see the connector's ``_status`` module): per app_id its epoch, its last
bundle, its prepared gids and its staged-but-unmoved work, and the control schema's prepared gids
of no known app_id (orphans). Errors go through the connector's one translator, so a refused
login is a ConfigurationError here as in the sink.
"""

from __future__ import annotations

import contextlib
from typing import Any

from eosink.admin import AppStatus, InDoubtWork, SinkAdmin, SinkStatus
from eosink.connectors.postgres._status import AppStatus as _App
from eosink.connectors.postgres._status import ControlStatus, PreparedGid, read_status
from eosink.connectors.postgres.config import PostgresConfig
from eosink.connectors.postgres.sink import PostgresSink

__all__ = ["PostgresAdmin"]


class PostgresAdmin(SinkAdmin):
    """One PostgreSQL sink configuration (conninfo, table, control schema)."""

    def __init__(self, config: PostgresConfig) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"PostgresAdmin({self.config!r})"

    def describe(self) -> str:
        return f"control schema {self.config.control_schema!r} on {self.config.redacted_conninfo()}"

    def make_sink(self) -> PostgresSink:
        return PostgresSink(self.config)

    def control_status(self, app_id: str | None = None) -> ControlStatus:
        """The PostgreSQL-shaped status (timestamps, owners, databases), for this connector's own tools."""
        return read_status(self.config, app_id)

    def status(self, app_id: str | None = None) -> SinkStatus:
        from eosink.connectors.postgres._servers import survey

        found = self.control_status(app_id)
        where = f"control schema {found.control_schema!r}, database {found.database!r}"
        apps = tuple(_app(a, found) for a in found.apps)
        servers, replication = survey(self.config)
        notes: tuple[str, ...] = () if replication is None else (f"replication: {replication.promise()}",)
        if app_id is None and len(apps) > 1:
            notes += (
                f"the control schema keeps the app_ids of every table of the database, not only "
                f"{self.config.target[1]!r}'s: --app-id shows one",
            )
        orphans = tuple(_prepared(p) for p in found.orphans)
        return SinkStatus("postgres", where, found.exists, apps, orphans, notes=notes, servers=servers)

    def drop_app(self, app_id: str) -> None:
        """Abort the app_id's in-doubt work, then delete its epochs, txns and bundles rows (its data stays)."""
        from psycopg import sql

        from eosink.connectors.postgres._errors import translated
        from eosink.connectors.postgres.sink import _open_connection

        sink = self.make_sink()
        try:
            sink.abort(sink.recover(app_id))
        finally:
            sink.close()
        with translated(self.config, f"dropping app_id {app_id!r}"), _open_connection(self.config, True) as conn:
            for table in ("txns", "bundles", "epochs"):
                conn.execute(
                    sql.SQL("DELETE FROM {} WHERE app_id = %s").format(
                        sql.Identifier(self.config.control_schema, table)
                    ),
                    (app_id,),
                )

    def scrub(self, text: str) -> str:
        return self.config.scrub(text)

    def jdbc_url(self) -> str:
        """``jdbc:postgresql://host:port/db`` of the conninfo (user and password are not in it)."""
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.config.conninfo)
        host = str(params.get("host") or "localhost").split(",")[0]
        port = str(params.get("port") or "5432").split(",")[0] or "5432"
        return f"jdbc:postgresql://{host}:{port}/{params.get('dbname') or params.get('user') or 'postgres'}"

    def credentials(self) -> dict[str, str]:
        """User and password for a JDBC writer (never printed)."""
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(self.config.conninfo)
        return {"user": str(params.get("user") or ""), "password": str(params.get("password") or "")}


def _app(app: _App, found: ControlStatus) -> AppStatus:
    committed = None
    if app.last_committed_at is not None:
        with contextlib.suppress(TypeError):
            committed = max(0.0, (found.now - app.last_committed_at).total_seconds())
    work = [_prepared(p) for p in app.prepared]
    work += [InDoubtWork("staged", s.id, s.batch_id, s.participant, s.epoch, s.age_s, s.rows) for s in app.staged]
    return AppStatus(
        app.app_id,
        app.epoch,
        app.last_batch_id,
        app.last_rows,
        committed,
        app.last_strategy,
        app.last_checkpoint_id,
        tuple(work),
    )


def _prepared(p: PreparedGid) -> InDoubtWork:
    details: dict[str, Any] = {"owner": p.owner, "database": p.database}
    return InDoubtWork("prepared", p.gid, p.batch_id, p.participant, p.epoch, p.age_s, details=details)
