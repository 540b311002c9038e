"""PostgresSink: exactly-once writes into one PostgreSQL table (psycopg 3), batch-atomic.

The contract maps onto PostgreSQL like this (``ctl`` is ``PostgresConfig.control_schema``; the
tables are described in :mod:`eosink.connectors.postgres._control`)::

    setup(app_id)          the control schema (idempotent DDL under an advisory lock, versioned)
    fence(app_id)          ctl.epochs: INSERT .. ON CONFLICT DO UPDATE SET epoch = epoch + 1
                           RETURNING epoch, in its own transaction
    begin, write,          participants (executors), one transaction T per attempt: COPY the rows
    pre_commit             into staging (or, where T makes them visible, the target); then
                           PREPARE TRANSACTION (2pc), COMMIT (txid-check: staged, invisible) or
                           upsert and COMMIT (idempotent). Step by step: ``_write_side``
    commit, abort,         the coordinator (driver): COMMIT PREPARED each gid, then ONE
    commit_status,         transaction moves the batch's staged rows into the target and writes
    recover,               its bundle; abort discards; commit_status asks pg_xact_status() after
    fetch_last_bundle      a lost COMMIT reply; recover lists in-doubt work. Step by step:
                           ``_commit_side``

This module is the sink's core, which both sides use: configuration, connections, error
translation, fencing, setup, metrics and cleanup. ``_base`` declares what the sides take
from it, so that each type-checks on its own.

Why this is exactly-once and batch-atomic: a batch's rows reach the target only in the
commit's one transaction, which also writes the bundle, so readers see all of a batch or
none of it, and the bundle exists exactly when the rows do. A crash anywhere leaves each
committable either prepared (a gid) or staged and committed (a txns row 'prepared'), both of
which ``commit`` completes and ``abort`` discards; that transaction finds the bundle if a
previous attempt finished. It locks the epochs row of the app_id, which serialises commits
and aborts of an app_id with ``fence``.

Prepared transactions never hold a lock that another eosink operation waits for: T only
inserts (staged rows, its own new txns row) and reads epochs without locking it. All DDL
(control schema, target, staging, unique index) runs in separate, short transactions before
T writes. Staging tables are regular (logged) tables: an UNLOGGED one would be emptied by a
server crash while its txns rows survive.

Identifiers are composed only with :class:`psycopg.sql.Identifier`; values are always bound.
The sink pickles to its configuration alone and opens connections lazily, per process (and a
control connection per thread); ``close()`` closes this process's connections.
"""

from __future__ import annotations

import functools
import logging
import time
from contextlib import AbstractContextManager
from typing import Any

from psycopg import sql

from eosink._extras import require
from eosink.connectors.postgres._cleanup import CleanupReport, claim_cleanup, run_cleanup
from eosink.connectors.postgres._commit_side import _CommitSide
from eosink.connectors.postgres._connect import newer_primary, open_connection, server_addresses
from eosink.connectors.postgres._control import ensure_control_schema, gid_prefix
from eosink.connectors.postgres._errors import grants_fix, prepared_disabled, translated
from eosink.connectors.postgres._lineage import Lineage, epoch_floor
from eosink.connectors.postgres._pool import Conn, Connections
from eosink.connectors.postgres._replication import Replication, read_replication
from eosink.connectors.postgres._write_side import _Txn, _WriteSide
from eosink.connectors.postgres.config import PostgresConfig
from eosink.connectors.postgres.grants import missing_grants, writer_grants
from eosink.connectors.postgres.metrics import MetricsSnapshot, PostgresMetrics
from eosink.contract import Capabilities, Sink
from eosink.errors import ConfigurationError, EosinkError, FencedError, PermissionDeniedError

__all__ = ["PostgresSink"]

log = logging.getLogger("eosink.postgres")

_SEGMENT_BYTES = 32 << 20
"""Keyed direct writes per savepoint: few subtransactions (PostgreSQL caches 64 per transaction),
little held in memory to stage again after a conflict. Read per write by ``_write_side``."""


class PostgresSink(_WriteSide, _CommitSide, Sink[_Txn]):
    """A batch-atomic, exactly-once sink for one PostgreSQL table (see the module docstring).

    ``PostgresSink(PostgresConfig(...))`` or ``PostgresSink(conninfo, table=..., **options)``.
    Picklable with no open connection; safe to share between threads and processes. The
    participant side (begin, write, pre_commit) comes from ``_WriteSide``, the coordinator side
    (commit, abort, commit_status, recover, fetch_last_bundle) from ``_CommitSide``.
    """

    lost_work_hint = (
        "someone ran ROLLBACK PREPARED on the batch's prepared transactions (to free their locks, or by a "
        "cleanup script), or dropped the control schema's staging tables, while the batch was in doubt. Only "
        "eosink should end transactions whose gid starts with 'eo1.'."
    )

    def __init__(self, config: PostgresConfig | str, /, table: str | tuple[str, str] | None = None, **options: Any):
        require("PostgreSQL", "postgres", "psycopg", "sqlalchemy")
        if isinstance(config, str):
            if table is None:
                raise ConfigurationError("PostgresSink needs a table.", "Pass table='schema.table'.")
            config = PostgresConfig(config, table, **options)
        elif table is not None or options:
            raise ConfigurationError("Pass either a PostgresConfig or conninfo and options.", "Use one form.")
        self.config = config
        self.capabilities = Capabilities(
            supports_prepare=True,
            supports_txid_status=True,
            supports_keys=True,
            atomic_batch_visibility=config.commit_mode == "atomic",
            supports_recover=True,
        )
        self._reset()

    def _reset(self) -> None:
        # A function of the configuration only: no reference cycle back to the sink, so a dropped
        # sink (executors unpickle one per task and never close it) closes its connections at once.
        self._conns = Connections(functools.partial(open_connection, self.config))
        self._seen: Lineage | None = None  # the server the last new control connection reached
        self._several = len(server_addresses(self.config.conninfo)) > 1
        self._ready = False
        self._staged = set()  # these two: the participant side's (see _WriteSide)
        self._prepare_checked = False
        self._in_flight = {}  # these two: the coordinator side's (see _CommitSide)
        self._committed_on = {}
        self._next_cleanup = 0.0
        self.metrics = PostgresMetrics()

    def __repr__(self) -> str:
        return f"PostgresSink({self.config!r})"

    __str__ = __repr__

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config}  # connections never travel

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]

    @property
    def gid_prefix(self) -> str:
        """Every gid (and committable id) this sink's control schema prepares starts with this."""
        return gid_prefix(self.config.control_schema)

    # -- connections and errors ---------------------------------------------------------------

    def _ctl(self) -> Conn:
        """This thread's autocommit connection for driver-side work (the control schema ensured)."""
        conn = self._control()
        if not self._ready:
            ensure_control_schema(conn, self.config.control_schema)
            self._ready = True
        return conn

    def _control(self) -> Conn:
        """This thread's autocommit connection; a new one says which server it reached (``_note_server``)."""
        conn, new = self._conns.control()
        if new:
            self._note_server(self._conns.lineage(conn))
        return conn

    def _ctl_newest(self) -> Conn:
        """The control connection, moved first to a primary promoted since it was opened, if any (several servers).

        A connection opened before a failover still reaches the old primary, which may take writes
        again once it resumes (split brain): before a commit or a status read, the conninfo's other
        servers are asked whether one is a primary on a newer timeline.
        """
        conn = self._ctl()
        if self._several:
            current = self._conns.lineage(conn)
            newer = newer_primary(self.config, current)
            if newer is not None:
                log.info(
                    "eosink: %s was promoted after %s, which this connection reached: reconnecting", newer, current
                )
                self._conns.forget_control(healthy_too=True)
                conn = self._ctl()
        return conn

    def _lineage(self, conn: Conn) -> Lineage:
        """The lineage of ``conn``'s server (read once per connection)."""
        return self._conns.lineage(conn)

    def _note_server(self, lineage: Lineage) -> None:
        """A new control connection reached ``lineage``: say so when the server changed since the last one."""
        seen, self._seen = self._seen, lineage
        if seen is None:
            log.debug("eosink: PostgreSQL control connection to %s", lineage)
        elif not lineage.same(seen):
            log.warning(
                "eosink: the PostgreSQL server changed: now %s, before %s (a failover or a restore). Handles the old "
                "server issued (transaction ids, writer epochs) no longer count; commits in doubt are settled from the "
                "sink's own tables.",
                lineage,
                seen,
            )
        elif lineage.address != seen.address:
            log.info("eosink: reconnected to PostgreSQL %s", lineage)

    def server_identity(self) -> str | None:
        """``PostgreSQL primary at host:port (system N, timeline T)``: the server the sink talks to now."""
        with self._errors("server identity"):
            return f"PostgreSQL {self._lineage(self._ctl())}"

    def replication(self) -> Replication:
        """What the primary's replication promises a committed batch (synchronous standbys, or not)."""
        with self._errors("replication"):
            return read_replication(self._ctl())

    def _errors(self, what: str) -> AbstractContextManager[None]:
        """Turn psycopg errors into eosink errors (the connector's one translator); forget a broken control
        connection."""
        return translated(self.config, what, self._conns.forget_control)

    def setup(self, app_id: str) -> None:
        """Check the server and create (or upgrade) the control schema; clean up if it is due."""
        with self._errors("setup"):
            self._check_grants()
            conn = self._ctl()
            version = conn.info.server_version
            if version < 130000:
                raise ConfigurationError(
                    f"PostgreSQL {version // 10000} is too old for eosink: pg_current_xact_id() and pg_xact_status() "
                    "need PostgreSQL 13 or newer.",
                    "Upgrade the server to PostgreSQL 13+.",
                )
            off = self._prepared_off(conn)
            if off is not None:
                log.warning("eosink: %s", off.problem)
            replication = read_replication(conn)
        log.info("eosink %s: PostgreSQL %s: %s", app_id, self._lineage(conn), replication.promise())
        self._maybe_cleanup(force=True)

    def _check_grants(self) -> None:
        """Stop before anything is written when the writer lacks a grant it needs, naming each one."""
        conn = self._control()
        grants = writer_grants(self.config, conn.info.user, conn.info.dbname)
        missing = missing_grants(conn, grants)
        if missing:
            raise PermissionDeniedError(
                f"The PostgreSQL user {conn.info.user!r} lacks what the sink needs on {self.config.target[1]!r}: "
                + "; ".join(f"{g.permission} ({g.why})" for g in missing)
                + ".",
                grants_fix(self.config, missing),
                permission=" and ".join(g.permission for g in missing),
            )

    def _prepared_off(self, conn: Conn) -> ConfigurationError | None:
        """The error for a server with max_prepared_transactions = 0, else None: setup warns of it,
        begin raises it before an attempt that would prepare."""
        return prepared_disabled(self.config.target[1]) if _max_prepared(conn) == 0 else None

    def close(self) -> None:
        """Close this process's connections; the next call opens new ones."""
        self._conns.close_all()

    # -- metrics and housekeeping -----------------------------------------------------------------

    def metrics_for(self, app_id: str) -> MetricsSnapshot:
        """This process's figures for ``app_id`` plus the server's count and oldest age of its in-doubt work."""
        prefix = gid_prefix(self.config.control_schema, app_id)
        with self._errors("metrics"):
            row = (
                self._ctl()
                .execute(
                    sql.SQL(
                        "WITH w AS ("
                        " SELECT prepared AS since FROM pg_prepared_xacts"
                        " WHERE database = current_database() AND left(gid, %(n)s) = %(p)s"
                        " UNION ALL SELECT created_at FROM {t} WHERE app_id = %(app)s AND state = 'prepared')"
                        " SELECT count(*), extract(epoch FROM now() - min(since))::float8 FROM w"
                    ).format(t=self._t("txns")),
                    {"n": len(prefix), "p": prefix, "app": app_id},
                )
                .fetchone()
            )
        count, oldest = (int(row[0]), row[1]) if row else (0, None)
        return self.metrics.snapshot(app_id, count, None if oldest is None else round(float(oldest), 3))

    def cleanup(self, retention_s: float | None = None) -> CleanupReport:
        """Delete bookkeeping older than ``retention_s`` (default: the configured retention) now.

        Finished txns rows and all but the newest bundle of each app_id go; staged rows that no
        live committable owns go too. In-doubt work is never touched.
        """
        with self._errors("cleanup"):
            report = run_cleanup(
                self._ctl(), self.config.control_schema, self.config.retention_s if retention_s is None else retention_s
            )
        log.info("eosink: cleanup of %r: %s", self.config.control_schema, report)
        return report

    def _maybe_cleanup(self, force: bool = False) -> None:
        """Run the cleanup when its interval has passed, here and (claimed in the database) everywhere."""
        interval = self.config.cleanup_interval_s
        now = time.monotonic()
        if interval is None or (now < self._next_cleanup and not force):
            return
        self._next_cleanup = now + interval
        try:
            with self._errors("cleanup"):
                if claim_cleanup(self._ctl(), self.config.control_schema, interval):
                    self.cleanup()
        except EosinkError as exc:  # housekeeping never fails a batch
            log.warning("eosink: cleanup skipped: %s", exc.problem)

    def _t(self, name: str) -> sql.Identifier:
        return sql.Identifier(self.config.control_schema, name)

    # -- fencing --------------------------------------------------------------------------------

    def fence(self, app_id: str) -> int:
        """Hand out the next epoch of ``app_id``."""
        with self._errors(f"fence({app_id!r})"):
            ctl = self._ctl_newest()
            floor = epoch_floor(self._lineage(ctl))  # higher than any epoch an older timeline handed out
            row = ctl.execute(
                sql.SQL(
                    "INSERT INTO {} AS e (app_id, epoch) VALUES (%(app)s, %(floor)s) ON CONFLICT (app_id) "
                    "DO UPDATE SET epoch = greatest(e.epoch + 1, %(floor)s), fenced_at = now() RETURNING epoch"
                ).format(self._t("epochs")),
                {"app": app_id, "floor": floor},
            ).fetchone()
        assert row is not None
        return int(row[0])

    @staticmethod
    def _fenced(app_id: str, epoch: int, current: int, what: str) -> None:
        if current > epoch:
            raise FencedError(
                f"{what} of {app_id!r} at epoch {epoch} was fenced: a newer writer holds epoch {current}.",
                "Stop this older writer; only the newest may commit.",
            )


def _open_connection(config: PostgresConfig, autocommit: bool) -> Conn:
    """A connection to the sink's server (of several, the newest primary: see ``_connect``)."""
    return open_connection(config, autocommit)[0]


def _max_prepared(conn: Conn) -> int:
    row = conn.execute("SELECT current_setting('max_prepared_transactions')::int").fetchone()
    return int(row[0]) if row else 0
