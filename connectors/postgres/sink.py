"""PostgresSink: exactly-once writes into one PostgreSQL table (psycopg 3), batch-atomic.

The contract maps onto PostgreSQL like this (``ctl`` is ``PostgresConfig.control_schema``; the
tables are described in :mod:`eosink.connectors.postgres._control`)::

    setup(app_id)          the control schema (idempotent DDL under an advisory lock, versioned)
    fence(app_id)          ctl.epochs: INSERT .. ON CONFLICT DO UPDATE SET epoch = epoch + 1
                           RETURNING epoch, in its own transaction
    begin(task)            one connection and one transaction T per participant attempt; the
                           epoch is read (a plain read: a lock would be kept by the prepared T and
                           block the next fence); a fenced attempt, or an attempt id already
                           prepared, stops here
    write(txn, batch)      first write: reflect the target (create it with create_table=True),
                           check the batch against it (SchemaError / BadRecordError before any
                           row is sent), make sure the staging table ctl.s_<hash> exists; then
                           COPY the rows, tagged with the committable's gid, into staging, in T.
                           Where T itself makes the rows visible (idempotent; per-participant
                           mode) they go straight into the target instead; keyed rows only
                           until a key conflicts (then staged, see _insert_or_stage)
    pre_commit(txn)        epoch read again in T (FencedError); INSERT the ctl.txns row (state
                           'prepared') in T; then, by strategy:
                           2pc: PREPARE TRANSACTION gid: durable, invisible, owned by no session
                           (the commit may come much later, from another process)
                           txid-check: COMMIT: the rows are durable and invisible in staging, and
                           no prepared-transaction slot is needed (max_prepared_transactions = 0
                           works); the inline commit moves them
                           idempotent (non-transactional): upsert the staged rows, if any, into
                           the target and COMMIT: visible now
    commit(batch, cs, b)   1. one read: epoch (FencedError), the batch's bundle (present: the
                              same committables -> done; others -> CommitAbortedError), which
                              gids are still prepared
                           2. COMMIT PREPARED of each such gid (staged rows become committed,
                              still in staging: invisible; a gid already gone is fine)
                           3. ONE transaction: lock the app's epochs row (FencedError), look for
                              the bundle again, lock the committables' txns rows (each must be
                              'prepared' or, non-transactional, 'committed'), move the staged rows
                              into the target (append, or upsert by keys: DISTINCT ON the keys,
                              the later row wins), mark them 'committed', INSERT the bundle, COMMIT
                           Step 3 captures pg_current_xact_id() first. A connection lost during
                           its COMMIT is AmbiguousCommitError (the xid is remembered); any other
                           connection error TransientError (nothing of step 3 applied; steps 1-2
                           are idempotent)
    abort(cs)              refuses committed work (CommitAbortedError); ROLLBACK PREPARED each gid
                           still prepared; staged rows of already COMMIT PREPARED ones deleted
                           and their txns rows set 'aborted'; unknown ids ignored
    commit_status(b, cs)   after a lost COMMIT reply: pg_xact_status(xid) on a new connection:
                           'in progress' -> IN_PROGRESS (ask again), 'committed' -> COMMITTED;
                           else, and always without a lost reply, from the tables:
                           bundle present -> COMMITTED; every committable still prepared (gid in
                           pg_prepared_xacts, read first) or 'prepared'/'committed' in txns (read
                           after, in a fresh snapshot) -> PREPARED; otherwise ABORTED
    recover(app_id)        gids in pg_prepared_xacts with this control schema's and app_id's
                           prefix (batch/epoch/participant parsed from the gid), plus txns rows
                           of app_id in state 'prepared' (COMMIT PREPARED done, move pending)
    fetch_last_bundle      ctl.bundles: the highest batch_id of app_id

Why this is exactly-once and batch-atomic: a batch's rows reach the target only in step 3's
transaction, which also writes the bundle, so readers see all of a batch or none of it, and
the bundle exists exactly when the rows do. A crash anywhere leaves each committable either
prepared (a gid) or staged and committed (a txns row 'prepared'), both of which ``commit``
completes and ``abort`` discards; step 3 finds the bundle if a previous attempt finished.
The epochs row lock in step 3 serialises commits and aborts of an app_id with ``fence``.

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
import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from psycopg.types.json import Jsonb

from eosink import faults
from eosink.connectors.postgres._cleanup import CleanupReport, claim_cleanup, run_cleanup
from eosink.connectors.postgres._control import (
    OWN_STAGING,
    SEQ_COLUMN,
    TXN_COLUMN,
    advisory_key,
    ensure_control_schema,
    gid_for,
    gid_prefix,
    parse_gid,
    short_hash,
)
from eosink.connectors.postgres._copy import copy_rows
from eosink.connectors.postgres._pool import Conn, Connections
from eosink.connectors.postgres._schema import Column, Target, check_batch, create_table_sql, reflect
from eosink.connectors.postgres.config import PostgresConfig
from eosink.connectors.postgres.metrics import MetricsSnapshot, PostgresMetrics
from eosink.contract import BatchRef, Bundle, Capabilities, CommitStatus, Committable, Sink, TaskRef
from eosink.errors import (
    AmbiguousCommitError,
    BadRecordError,
    CommitAbortedError,
    ConfigurationError,
    EosinkError,
    FencedError,
    SchemaError,
    TransientError,
)

__all__ = ["PostgresSink"]

log = logging.getLogger("eosink.postgres")

_SEGMENT_BYTES = 32 << 20
"""Keyed direct writes per savepoint: few subtransactions (PostgreSQL caches 64 per transaction),
little held in memory to stage again after a conflict."""


@dataclass
class _Txn:
    """One participant attempt's open transaction; lives only in the writing process."""

    id: str
    task: TaskRef
    keys: tuple[str, ...]
    conn: Conn | None
    pid: int
    target: Target | None = None
    staging: str | None = None
    columns: tuple[str, ...] = ()
    rows: int = 0
    bytes: int = 0
    direct: bool = False
    """Rows go straight into the target inside this transaction: nothing to stage or move (the
    participant's transaction is what makes them visible: per-participant mode, idempotent).
    Keyed rows go direct only until a key conflicts (see :meth:`PostgresSink._insert_or_stage`)."""
    segment: list[pa.RecordBatch] = field(default_factory=list)
    """Keyed direct writes since the open savepoint: staged again if a later write conflicts."""
    segment_bytes: int = 0
    prepares: bool = True
    """Kept by PREPARE TRANSACTION (2pc: the commit may come from another process, much later;
    and every strategy in per-participant mode); else staged and committed at once (txid-check
    in atomic mode: the inline commit moves it; idempotent: upserted now)."""


class PostgresSink(Sink[_Txn]):
    """A batch-atomic, exactly-once sink for one PostgreSQL table (see the module docstring).

    ``PostgresSink(PostgresConfig(...))`` or ``PostgresSink(conninfo, table=..., **options)``.
    Picklable with no open connection; safe to share between threads and processes.
    """

    def __init__(self, config: PostgresConfig | str, /, table: str | tuple[str, str] | None = None, **options: Any):
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
        self._conns = Connections(functools.partial(_open_connection, self.config))
        self._ready = False
        self._staged: set[str] = set()
        self._prepare_checked = False
        # batch -> (xid, monotonic start) of a COMMIT whose reply was lost
        self._in_flight: dict[BatchRef, tuple[str, float]] = {}
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
        conn, _ = self._conns.control()
        if not self._ready:
            ensure_control_schema(conn, self.config.control_schema)
            self._ready = True
        return conn

    @contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turn psycopg errors into eosink errors; forget a control connection that broke."""
        try:
            yield
        except psycopg.Error as exc:
            self._conns.forget_control()
            self.config.scrub_chain(exc)  # it stays as the translated error's __context__
            raise self._translate(exc, what) from None

    def _translate(self, exc: psycopg.Error, what: str) -> EosinkError:
        detail = self.config.scrub(f"{type(exc).__name__}: {str(exc).strip()}")
        where = f"{what} on PostgreSQL ({self.config.target[1]!r})"
        if isinstance(exc, psycopg.errors.InsufficientPrivilege):
            return ConfigurationError(f"{where} was refused: {detail}.", self._grants_fix())
        if isinstance(exc, psycopg.errors.ObjectNotInPrerequisiteState) and "prepared" in str(exc):
            return _prepared_disabled(where)
        if exc.sqlstate == "53200" and "prepared transactions" in str(exc):
            return TransientError(
                f"{where}: every prepared-transaction slot is taken: {detail}.",
                "Retry later; if it persists, raise max_prepared_transactions, and let recovery resolve in-doubt "
                f"work (prepared gids starting with {self.gid_prefix!r} in pg_prepared_xacts).",
            )
        pooled = _pgbouncer_problem(str(exc))
        if pooled is not None:
            return ConfigurationError(f"{where}: {detail}. {pooled[0]}", pooled[1])
        if isinstance(exc, psycopg.DataError | psycopg.IntegrityError):
            return BadRecordError(f"{where}: a row was refused: {detail}.", "Fix or filter the offending rows.")
        if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
            return SchemaError(f"{where}: {detail}.", "Check the target table; it changed while the query ran.")
        refused = _login_problem(exc)
        if refused is not None:
            return ConfigurationError(f"{where}: {refused} ({detail}).", _LOGIN_FIX)
        if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
            return TransientError(f"{where} failed: {detail}.", "Retry; check that the server is up and reachable.")
        return EosinkError(f"{where} failed: {detail}.", "See the PostgreSQL error above.")

    def _grants_fix(self) -> str:
        """The least-privilege grants, as SQL for an administrator (names quoted by psycopg)."""
        from psycopg.conninfo import conninfo_to_dict

        user = sql.Identifier(str(conninfo_to_dict(self.config.conninfo).get("user") or "the_writer"))
        schema, table = self.config.target
        target = sql.Identifier(table) if schema is None else sql.Identifier(schema, table)
        rights = sql.SQL("SELECT, INSERT, UPDATE" if self.config.mode == "upsert" else "SELECT, INSERT")
        grants = sql.SQL(
            "CREATE SCHEMA {ctl} AUTHORIZATION {user}; GRANT {rights} ON {target} TO {user}; "
            "GRANT USAGE{create} ON SCHEMA {tschema} TO {user}"
        ).format(
            ctl=sql.Identifier(self.config.control_schema),
            user=user,
            rights=rights,
            target=target,
            create=sql.SQL(", CREATE" if self.config.create_table else ""),
            tschema=sql.Identifier(schema or "public"),
        )
        return (
            f"As an administrator, grant the writer what it needs: {grants.as_string(None)} "
            "(UPDATE only for upserts, CREATE only with create_table=True; see the connector's docs on grants)."
        )

    def setup(self, app_id: str) -> None:
        """Check the server and create (or upgrade) the control schema; clean up if it is due."""
        with self._errors("setup"):
            conn = self._ctl()
            version = conn.info.server_version
            if version < 130000:
                raise ConfigurationError(
                    f"PostgreSQL {version // 10000} is too old for eosink: pg_current_xact_id() and pg_xact_status() "
                    "need PostgreSQL 13 or newer.",
                    "Upgrade the server to PostgreSQL 13+.",
                )
            if _max_prepared(conn) == 0:
                log.warning("eosink: %s", _prepared_disabled(self.config.target[1]).problem)
        self._maybe_cleanup(force=True)

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
            row = (
                self._ctl()
                .execute(
                    sql.SQL(
                        "INSERT INTO {} AS e (app_id, epoch) VALUES (%s, 1) "
                        "ON CONFLICT (app_id) DO UPDATE SET epoch = e.epoch + 1, fenced_at = now() RETURNING epoch"
                    ).format(self._t("epochs")),
                    (app_id,),
                )
                .fetchone()
            )
        assert row is not None
        return int(row[0])

    def _epoch(self, conn: Conn, app_id: str) -> int:
        row = conn.execute(sql.SQL("SELECT epoch FROM {} WHERE app_id = %s").format(self._t("epochs")), (app_id,))
        found = row.fetchone()
        return int(found[0]) if found else 0

    @staticmethod
    def _fenced(app_id: str, epoch: int, current: int, what: str) -> None:
        if current > epoch:
            raise FencedError(
                f"{what} of {app_id!r} at epoch {epoch} was fenced: a newer writer holds epoch {current}.",
                "Stop this older writer; only the newest may commit.",
            )

    # -- participant side -----------------------------------------------------------------------

    def _keys(self, task: TaskRef) -> tuple[str, ...]:
        if task.upsert_keys:
            return tuple(task.upsert_keys)
        return self.config.key_columns if self.config.mode == "upsert" else ()

    def begin(self, task: TaskRef) -> _Txn:
        """Open the participant's transaction after checking its epoch."""
        app = task.batch.app_id
        gid = gid_for(self.config.control_schema, app, task.batch.batch_id, task.epoch, task.participant, task.attempt)
        conn = None
        try:
            with self._errors("begin"):
                ctl = self._ctl()
                if self._prepares(task) and not self._prepare_checked:
                    if _max_prepared(ctl) == 0:
                        raise _prepared_disabled(self.config.target[1])
                    self._prepare_checked = True
                conn = self._conns.take()
                row = conn.execute(
                    sql.SQL(
                        "SELECT (SELECT epoch FROM {e} WHERE app_id = %(app)s), "
                        "EXISTS (SELECT 1 FROM {t} WHERE id = %(gid)s) "
                        "OR EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE gid = %(gid)s)"
                    ).format(e=self._t("epochs"), t=self._t("txns")),
                    {"app": app, "gid": gid},
                ).fetchone()
                assert row is not None
                self._fenced(app, task.epoch, int(row[0] or 0), "begin")
                if row[1]:
                    raise ConfigurationError(
                        f"Participant {task.participant} of batch {task.batch} attempt {task.attempt!r} was already "
                        f"prepared ({gid}).",
                        "Give every task attempt its own TaskRef.attempt.",
                    )
        except BaseException:
            self._conns.give_back(conn)
            raise
        return _Txn(gid, task, self._keys(task), conn, os.getpid(), prepares=self._prepares(task))

    def _prepares(self, task: TaskRef) -> bool:
        per_participant = self.config.commit_mode == "per-participant"
        return task.transactional and (task.strategy != "txid-check" or per_participant)

    def _open(self, txn: _Txn, what: str) -> Conn:
        if txn.conn is None or txn.pid != os.getpid():
            raise CommitAbortedError(
                f"Transaction {txn.id} is closed (failed or already prepared); it cannot {what}.",
                "Restart the task with a new attempt.",
            )
        return txn.conn

    def _fail(self, txn: _Txn) -> None:
        """Roll back and forget the participant's transaction (after any error in it)."""
        conn, txn.conn = txn.conn, None
        self._conns.give_back(conn)

    def write(self, txn: _Txn, data: pa.RecordBatch) -> None:
        """COPY the batch into staging, in the participant's transaction (checked first)."""
        conn = self._open(txn, "be written")
        if data.num_rows == 0:
            return
        txn.bytes += data.nbytes
        where = f"participant {txn.task.participant} of batch {txn.task.batch}"
        try:
            with self._errors(f"write ({where})"):
                if txn.target is None:
                    self._prepare_target(txn, data, where)
                elif tuple(data.schema.names) != txn.columns:
                    raise SchemaError(
                        f"The columns changed within one task ({list(txn.columns)} -> {data.schema.names}).",
                        "Give every record batch of a task the same schema.",
                    )
                target = txn.target
                assert target is not None
                check_batch(target, data, txn.keys, where)
                columns = [c for name in txn.columns if (c := target.column(name)) is not None]
                if txn.direct and txn.keys:
                    self._insert_or_stage(conn, txn, data, columns)
                elif txn.staging is None:
                    txn.rows += copy_rows(conn, target.ident, None, txn.rows, data, columns)
                else:
                    txn.rows += copy_rows(conn, self._t(txn.staging), txn.id, txn.rows, data, columns)
        except BaseException:
            self._fail(txn)
            raise

    def _prepare_target(self, txn: _Txn, data: pa.RecordBatch, where: str) -> None:
        """Reflect (or create) the target, its unique index for upserts, and the staging table."""
        ctl = self._ctl()
        schema, table = self.config.target
        target = reflect(ctl, schema, table)
        if target is None and self.config.create_table:
            with ctl.transaction():
                ctl.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("table", str(schema), table),))
                ctl.execute(create_table_sql(schema, table, data.schema))
            target = reflect(ctl, schema, table)
        if target is None:
            name = table if schema is None else f"{schema}.{table}"
            raise SchemaError(
                f"The target table {name!r} does not exist ({where}).",
                "Create it, or configure the sink with create_table=True.",
            )
        if target.kind not in ("r", "p"):
            raise SchemaError(f"{target.display} is not a table (relkind {target.kind!r}).", "Write into a table.")
        if txn.keys and not target.has_unique(txn.keys):
            if not self.config.create_table:
                raise SchemaError(
                    f"Upserting into {target.display} by {list(txn.keys)} needs a unique index on exactly those "
                    "columns.",
                    f"CREATE UNIQUE INDEX ON {target.display} "
                    f"({sql.SQL(', ').join(sql.Identifier(k) for k in txn.keys).as_string(None)}), "
                    "or set create_table=True.",
                )
            check_batch(target, data, txn.keys, where)  # the key columns exist before indexing them
            index = sql.Identifier(f"eosink_{short_hash(target.display + chr(0) + chr(0).join(txn.keys))}_key")
            with ctl.transaction():
                ctl.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("table", target.schema, target.name),))
                ctl.execute(
                    sql.SQL("CREATE UNIQUE INDEX IF NOT EXISTS {} ON {} ({})").format(
                        index, target.ident, sql.SQL(", ").join(sql.Identifier(k) for k in txn.keys)
                    )
                )
            target = reflect(ctl, target.schema, target.name)
            assert target is not None
        if target.column(TXN_COLUMN) or target.column(SEQ_COLUMN):
            raise SchemaError(f"{target.display} has a column named {TXN_COLUMN!r} or {SEQ_COLUMN!r}.", "Rename it.")
        txn.target, txn.columns = target, tuple(data.schema.names)
        if not txn.task.transactional or (txn.prepares and self.config.commit_mode == "per-participant"):
            txn.direct = True  # this transaction makes the rows visible: no staging, no move
        else:
            self._stage_own(txn, target, unlogged=False)

    def _stage_own(self, txn: _Txn, target: Target, *, unlogged: bool) -> None:
        """Create the attempt's own staging table, in its transaction (UNLOGGED when the rows leave it
        before the transaction ends: nothing in it has to survive a crash)."""
        ctl = self._ctl()
        staging = f"s_{short_hash(target.signature())}"
        if staging not in self._staged:
            self._ensure_staging(ctl, target, staging)
            self._staged.add(staging)
        own = f"{OWN_STAGING}{short_hash(txn.id, 12)}"
        assert txn.conn is not None
        create = "CREATE UNLOGGED TABLE {} (LIKE {})" if unlogged else "CREATE TABLE {} (LIKE {})"
        txn.conn.execute(sql.SQL(create).format(self._t(own), self._t(staging)))
        txn.staging, txn.direct = own, False

    def _insert_or_stage(self, conn: Conn, txn: _Txn, data: pa.RecordBatch, columns: list[Column]) -> None:
        """Keyed rows straight into the target while none of their keys is there yet; from the first
        conflict on, staged for the upsert in ``pre_commit``.

        Plain COPY into the target is about twice as fast as staging and upserting, and a key is
        new in the common case (a replay or a key written again is the exception). Writes run in
        segments of about ``_SEGMENT_BYTES`` under one savepoint (few subtransactions); a unique
        violation (or a deadlock with another writer of the same keys) rolls the segment back, and
        its rows, the failed write's and every later write's are staged instead, in order, so the
        upsert still lets the later row win.
        """
        assert txn.target is not None
        if not txn.segment:
            conn.execute("SAVEPOINT eosink_segment")
        try:
            copy_rows(conn, txn.target.ident, None, 0, data, columns)
        except (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected) as exc:
            conn.execute("ROLLBACK TO SAVEPOINT eosink_segment")
            redo, txn.segment, txn.segment_bytes = [*txn.segment, data], [], 0
            txn.rows -= sum(b.num_rows for b in redo[:-1])
            log.debug("eosink: %s: key conflict (%s); staging from here on", txn.id, type(exc).__name__)
            self._stage_own(txn, txn.target, unlogged=True)
            assert txn.staging is not None
            for batch in redo:
                txn.rows += copy_rows(conn, self._t(txn.staging), txn.id, txn.rows, batch, columns)
            return
        txn.rows += data.num_rows
        txn.segment.append(data)
        txn.segment_bytes += data.nbytes
        if txn.segment_bytes >= _SEGMENT_BYTES:
            conn.execute("RELEASE SAVEPOINT eosink_segment")
            txn.segment, txn.segment_bytes = [], 0

    def _ensure_staging(self, ctl: Conn, target: Target, staging: str) -> None:
        """Create the (empty) staging template of the target's shape, once, whoever races for it.

        The re-check under the advisory lock can miss a table another session just created (the
        advisory lock does not refresh this backend's catalog cache), so losing the race to
        CREATE is success too.
        """
        exists = "SELECT to_regclass(format('%%I.%%I', %s::text, %s::text)) IS NOT NULL"
        row = ctl.execute(exists, (self.config.control_schema, staging)).fetchone()
        if row and row[0]:
            return
        try:
            with ctl.transaction():
                ctl.execute("SELECT pg_advisory_xact_lock(%s)", (advisory_key("staging", staging),))
                row = ctl.execute(exists, (self.config.control_schema, staging)).fetchone()
                if row and row[0]:
                    return
                ctl.execute(
                    sql.SQL(
                        "CREATE TABLE {} AS SELECT NULL::text AS {}, NULL::bigint AS {}, t.* FROM {} AS t WITH NO DATA"
                    ).format(self._t(staging), sql.Identifier(TXN_COLUMN), sql.Identifier(SEQ_COLUMN), target.ident)
                )
        except (psycopg.errors.DuplicateTable, psycopg.errors.UniqueViolation):
            log.debug("eosink: staging template %s was created by another participant", staging)

    def _txn_row(self, txn: _Txn, state: str) -> tuple[sql.Composed, tuple[Any, ...]]:
        task = txn.task
        target = [txn.target.schema, txn.target.name] if txn.target else None
        statement = sql.SQL(
            "INSERT INTO {} (id, app_id, batch_id, epoch, participant, attempt, state, transactional, staging, "
            "target, columns, upsert_keys, rows) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
        ).format(self._t("txns"))
        values = (
            txn.id,
            task.batch.app_id,
            task.batch.batch_id,
            task.epoch,
            task.participant,
            task.attempt,
            state,
            task.transactional,
            txn.staging,
            target,
            list(txn.columns),
            list(txn.keys),
            txn.rows,
        )
        return statement, values

    def pre_commit(self, txn: _Txn) -> Committable:
        """PREPARE TRANSACTION (or, non-transactional: upsert into the target and COMMIT)."""
        conn = self._open(txn, "be prepared")
        task = txn.task
        try:
            with self._errors(f"pre_commit of {txn.id}"):
                self._fenced(task.batch.app_id, task.epoch, self._epoch(conn, task.batch.app_id), "pre_commit")
                if txn.prepares and self.config.commit_mode == "per-participant":
                    # rows go into the target now, inside the prepared transaction: COMMIT PREPARED
                    # makes this participant's share visible; its txns row says so ('committed')
                    if txn.staging is not None and txn.target is not None:
                        self._move(conn, txn.id, txn.staging, txn.target.ident, txn.columns, txn.keys)
                        txn.staging = None
                    conn.execute(*self._txn_row(txn, "committed"))
                    self._prepare_transaction(conn, txn)
                elif txn.prepares:
                    conn.execute(*self._txn_row(txn, "prepared"))
                    self._prepare_transaction(conn, txn)
                elif task.transactional:  # staged, durable, invisible: the inline commit moves it
                    conn.execute(*self._txn_row(txn, "prepared"))
                    conn.commit()
                else:
                    if txn.staging is not None and txn.target is not None:
                        self._move(conn, txn.id, txn.staging, txn.target.ident, txn.columns, txn.keys)
                    conn.execute(*self._txn_row(txn, "committed"))
                    conn.commit()
        except BaseException:
            self._fail(txn)
            raise
        txn.conn, txn.segment = None, []
        self._conns.give_back(conn)
        return Committable(
            task.batch, task.epoch, task.participant, id=txn.id, rows=txn.rows, payload={"bytes": txn.bytes}
        )

    def _prepare_transaction(self, conn: Conn, txn: _Txn) -> None:
        """PREPARE TRANSACTION; a full slot table becomes an error naming the setting and the number needed."""
        try:
            conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(txn.id)))
        except psycopg.errors.OutOfMemory as exc:  # 53200: "maximum number of prepared transactions reached"
            if "prepared transactions" not in str(exc):
                raise
            conn.rollback()
            raise self._too_few_slots(txn) from None

    def _too_few_slots(self, txn: _Txn) -> ConfigurationError:
        app = txn.task.batch.app_id
        prefix = gid_prefix(self.config.control_schema, app)
        row = (
            self._ctl()
            .execute(
                "SELECT current_setting('max_prepared_transactions')::int, count(*), "
                "count(*) FILTER (WHERE left(gid, %s) = %s) FROM pg_prepared_xacts",
                (len(prefix), prefix),
            )
            .fetchone()
        )
        limit, total, mine = (int(v) for v in row) if row else (0, 0, 0)
        needed = max(total + 1, 2 * (txn.task.participant + 1), mine + txn.task.participant + 1)
        return ConfigurationError(
            f"PostgreSQL's max_prepared_transactions = {limit} is too few: {total} prepared transactions exist "
            f"({mine} of app_id {app!r}), and participant {txn.task.participant} of batch {txn.task.batch} needs one "
            "more.",
            f"Raise max_prepared_transactions to at least {needed} (2 x the partitions of a batch, plus other "
            "prepared work) and restart the server; or resolve in-doubt work (eosink status / eosink recover); or "
            "use the txid-check strategy, which needs no prepared transactions.",
        )

    def _move(
        self, conn: Conn, txn_id: str, staging: str, target: sql.Identifier, columns: Sequence[str], keys: Sequence[str]
    ) -> None:
        """Move one committable's staged rows into the target (append, or upsert by ``keys``).

        A committable's own staging table is read whole and dropped (far cheaper than deleting
        its rows); the shared ``s_`` tables of control-schema version 1 are read by the
        committable column and the rows deleted, so work left in doubt by older writers commits.
        """
        cols = sql.SQL(", ").join(sql.Identifier(c) for c in columns)
        own = staging.startswith(OWN_STAGING)
        if own:
            moved = sql.SQL("WITH moved AS (SELECT * FROM {}) INSERT INTO {} ({}) ").format(
                self._t(staging), target, cols
            )
        else:
            moved = sql.SQL("WITH moved AS (DELETE FROM {} WHERE {} = %s RETURNING *) INSERT INTO {} ({}) ").format(
                self._t(staging), sql.Identifier(TXN_COLUMN), target, cols
            )
        if not keys:
            rest = sql.SQL("SELECT {} FROM moved").format(cols)
        else:
            key_list = sql.SQL(", ").join(sql.Identifier(k) for k in keys)
            others = [c for c in columns if c not in keys]
            action = (
                sql.SQL("DO UPDATE SET ({}) = ROW({})").format(
                    sql.SQL(", ").join(sql.Identifier(c) for c in others),
                    sql.SQL(", ").join(sql.SQL("EXCLUDED.{}").format(sql.Identifier(c)) for c in others),
                )
                if others
                else sql.SQL("DO NOTHING")
            )
            rest = sql.SQL(
                "SELECT DISTINCT ON ({k}) {c} FROM moved ORDER BY {k}, {s} DESC ON CONFLICT ({k}) {a}"
            ).format(k=key_list, c=cols, s=sql.Identifier(SEQ_COLUMN), a=action)
        conn.execute(moved + rest, () if own else (txn_id,))
        if own:
            conn.execute(sql.SQL("DROP TABLE {}").format(self._t(staging)))

    # -- coordinator side -----------------------------------------------------------------------

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """COMMIT PREPARED each gid, then one transaction moves the batch and writes its bundle."""
        app, ids = batch.app_id, [c.id for c in committables]
        started = time.monotonic()
        with self._errors(f"commit of batch {batch}"):
            ctl = self._ctl()
            row = ctl.execute(
                sql.SQL(
                    "SELECT (SELECT epoch FROM {e} WHERE app_id = %(app)s), "
                    "(SELECT bundle FROM {b} WHERE app_id = %(app)s AND batch_id = %(batch)s), "
                    "ARRAY(SELECT gid::text FROM pg_prepared_xacts "
                    "      WHERE database = current_database() AND gid = ANY(%(ids)s::text[]) ORDER BY gid)"
                ).format(e=self._t("epochs"), b=self._t("bundles")),
                {"app": app, "batch": batch.batch_id, "ids": ids},
            ).fetchone()
            assert row is not None
            self._fenced(app, bundle.epoch, int(row[0] or 0), "commit")
            if row[1] is not None:  # committed already (a lost reply, a roll-forward): counted once
                self._same_bundle(batch, row[1], bundle)
                self._in_flight.pop(batch, None)
                self.metrics.committed(batch, committables, time.monotonic() - started)
                return None
            for gid in row[2]:
                with suppress(psycopg.errors.UndefinedObject):  # resolved meanwhile: step 3 tells how
                    ctl.execute(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid)))
            faults.hit(faults.FaultPoint.F6, batch.batch_id)  # prepared work committed, the batch not yet
            self._commit_batch(ctl, batch, committables, bundle)
        self._in_flight.pop(batch, None)
        self.metrics.committed(batch, committables, time.monotonic() - started)
        self._maybe_cleanup()
        return None

    def _commit_batch(self, ctl: Conn, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        app, ids = batch.app_id, [c.id for c in committables]
        sent, xid, started = False, "", time.monotonic()
        try:
            with ctl.transaction():
                row = ctl.execute(
                    sql.SQL(
                        "INSERT INTO {} AS e (app_id, epoch) VALUES (%s, 0) "
                        "ON CONFLICT (app_id) DO UPDATE SET epoch = e.epoch RETURNING epoch, pg_current_xact_id()::text"
                    ).format(self._t("epochs")),
                    (app,),
                ).fetchone()
                assert row is not None
                self._fenced(app, bundle.epoch, int(row[0]), "commit")
                xid = str(row[1])  # asked with pg_xact_status() if the COMMIT's reply is lost
                found = ctl.execute(
                    sql.SQL("SELECT bundle FROM {} WHERE app_id = %s AND batch_id = %s").format(self._t("bundles")),
                    (app, batch.batch_id),
                ).fetchone()
                if found is not None:
                    self._same_bundle(batch, found[0], bundle)
                    return
                rows = ctl.execute(
                    sql.SQL(
                        "SELECT id, app_id, batch_id, state, transactional, staging, target, columns, upsert_keys "
                        "FROM {} WHERE id = ANY(%s) ORDER BY id FOR UPDATE"
                    ).format(self._t("txns")),
                    (ids,),
                ).fetchall()
                txns = {r[0]: r for r in rows}
                for c in committables:
                    t = txns.get(c.id)
                    if t is None or t[3] == "aborted" or (t[1], t[2]) != (app, batch.batch_id):
                        raise CommitAbortedError(
                            f"Committable {c.id} of batch {batch} is {t[3] if t else 'gone'}; "
                            "the batch cannot be committed.",
                            "Abort the batch's other committables and replay the batch.",
                        )
                    if t[3] == "prepared" and t[5] is not None:
                        self._move(ctl, c.id, t[5], sql.Identifier(*t[6]), t[7], t[8] or ())
                ctl.execute(
                    sql.SQL("UPDATE {} SET state = 'committed', updated_at = now() WHERE id = ANY(%s)").format(
                        self._t("txns")
                    ),
                    (ids,),
                )
                ctl.execute(
                    sql.SQL("INSERT INTO {} (app_id, batch_id, bundle) VALUES (%s, %s, %s)").format(self._t("bundles")),
                    (app, batch.batch_id, Jsonb(bundle.to_json())),
                )
                sent = True  # leaving the block sends COMMIT
        except psycopg.Error as exc:
            if sent and exc.sqlstate is None:  # no answer to COMMIT: it may or may not have happened
                self._conns.forget_control()
                self._in_flight[batch] = (xid, started)
                self.metrics.ambiguous(app)
                raise AmbiguousCommitError(
                    f"The COMMIT of batch {batch} (transaction {xid}) got no reply "
                    f"({self.config.scrub(str(exc).strip())}).",
                    "Ask commit_status (the coordinator does): it asks the server with pg_xact_status(); never "
                    "assume either outcome.",
                ) from None
            raise

    @staticmethod
    def _same_bundle(batch: BatchRef, stored: Any, bundle: Bundle) -> None:
        existing = Bundle.from_json(stored)
        if set(existing.committables) != set(bundle.committables):
            raise CommitAbortedError(
                f"Batch {batch} was already committed by another attempt "
                f"(committables {list(existing.committables)}, not {list(bundle.committables)}).",
                "Abort this attempt's committables; the batch is done.",
            )

    def abort(self, committables: Sequence[Committable]) -> None:
        """ROLLBACK PREPARED what is still prepared, drop what was staged; committed work is refused."""
        ids = [c.id for c in committables]
        if not ids:
            return
        with self._errors("abort"):
            ctl = self._ctl()
            row = ctl.execute(
                sql.SQL(
                    "SELECT ARRAY(SELECT id FROM {} WHERE id = ANY(%(ids)s::text[]) AND state = 'committed'), "
                    "ARRAY(SELECT gid::text FROM pg_prepared_xacts "
                    "      WHERE database = current_database() AND gid = ANY(%(ids)s::text[]) ORDER BY gid)"
                ).format(self._t("txns")),
                {"ids": ids},
            ).fetchone()
            assert row is not None
            self._refuse_committed(row[0])
            for gid in row[1]:
                with suppress(psycopg.errors.UndefinedObject):
                    ctl.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            with ctl.transaction():
                staged = ctl.execute(
                    sql.SQL(
                        "UPDATE {t} SET state = 'aborted', updated_at = now() WHERE id IN "
                        "(SELECT id FROM {t} WHERE id = ANY(%s) AND state = 'prepared' ORDER BY id FOR UPDATE) "
                        "RETURNING id, staging"
                    ).format(t=self._t("txns")),
                    (ids,),
                ).fetchall()
                for txn_id, staging in staged:
                    if staging is not None and staging.startswith(OWN_STAGING):
                        ctl.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(self._t(staging)))
                    elif staging is not None:
                        ctl.execute(
                            sql.SQL("DELETE FROM {} WHERE {} = %s").format(
                                self._t(staging), sql.Identifier(TXN_COLUMN)
                            ),
                            (txn_id,),
                        )
                done = ctl.execute(
                    sql.SQL("SELECT ARRAY(SELECT id FROM {} WHERE id = ANY(%s) AND state = 'committed')").format(
                        self._t("txns")
                    ),
                    (ids,),
                ).fetchone()
                self._refuse_committed(done[0] if done else [])

    @staticmethod
    def _refuse_committed(committed: Sequence[str]) -> None:
        if committed:
            raise CommitAbortedError(
                f"Cannot abort committed work {list(committed)}: its rows are visible.",
                "Do not abort a batch whose commit succeeded; check commit_status first.",
            )

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        """The bundle with the highest batch_id of ``app_id``."""
        with self._errors("fetch_last_bundle"):
            row = (
                self._ctl()
                .execute(
                    sql.SQL("SELECT bundle FROM {} WHERE app_id = %s ORDER BY batch_id DESC LIMIT 1").format(
                        self._t("bundles")
                    ),
                    (app_id,),
                )
                .fetchone()
            )
        return Bundle.from_json(row[0]) if row else None

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        """COMMITTED if the bundle exists; PREPARED if every committable is still committable; else ABORTED.

        The prepared gids are read first, the tables after, in a newer snapshot: a gid that
        COMMIT PREPARED resolves in between is then seen in txns, never missed by both reads.
        """
        ids = [c.id for c in committables]
        with self._errors("commit_status"):
            ctl = self._ctl()
            in_flight = self._in_flight.get(batch)
            if in_flight is not None:
                known = self._xact_status(ctl, batch, in_flight[0])
                if known is CommitStatus.COMMITTED:
                    self.metrics.committed(batch, committables, time.monotonic() - in_flight[1])
                if known is not None:
                    return known
            prepared = {
                r[0]
                for r in ctl.execute(
                    "SELECT gid::text FROM pg_prepared_xacts WHERE database = current_database() AND gid = ANY(%s)",
                    (ids,),
                )
            }
            row = ctl.execute(
                sql.SQL(
                    "SELECT EXISTS (SELECT 1 FROM {b} WHERE app_id = %s AND batch_id = %s), "
                    "ARRAY(SELECT id FROM {t} WHERE id = ANY(%s) AND state IN ('prepared', 'committed'))"
                ).format(b=self._t("bundles"), t=self._t("txns")),
                (batch.app_id, batch.batch_id, ids),
            ).fetchone()
        assert row is not None
        if row[0]:
            if in_flight is not None:  # pg_xact_status no longer knew the xid; the bundle tells
                self.metrics.resolved(batch.app_id, "committed")
                self.metrics.committed(batch, committables, time.monotonic() - in_flight[1])
            return CommitStatus.COMMITTED
        alive = prepared | set(row[1])
        status = CommitStatus.PREPARED if all(i in alive for i in ids) else CommitStatus.ABORTED
        if in_flight is not None:
            self.metrics.resolved(batch.app_id, "recommit" if status is CommitStatus.PREPARED else "aborted")
        return status

    def _xact_status(self, ctl: Conn, batch: BatchRef, xid: str) -> CommitStatus | None:
        """The fate of the batch's last COMMIT whose reply was lost, from ``pg_xact_status()``.

        ``in progress``: the server has not finished it (IN_PROGRESS, ask again); ``committed``:
        the batch and its bundle are visible (one transaction); ``aborted`` or unknown (xid too
        old): None, and the caller decides from the tables.
        """
        row = ctl.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
        state = row[0] if row else None
        log.info("eosink %s: transaction %s of batch %d is %s", batch.app_id, xid, batch.batch_id, state)
        if state == "in progress":
            return CommitStatus.IN_PROGRESS
        del self._in_flight[batch]
        if state == "committed":
            self.metrics.resolved(batch.app_id, "committed")
            return CommitStatus.COMMITTED
        return None

    def recover(self, app_id: str) -> list[Committable]:
        """Every prepared, uncommitted committable of ``app_id``: prepared gids and staged-but-unmoved work."""
        prefix = gid_prefix(self.config.control_schema, app_id)
        with self._errors("recover"):
            ctl = self._ctl()
            gids = [
                r[0]
                for r in ctl.execute(
                    "SELECT gid::text FROM pg_prepared_xacts WHERE database = current_database() "
                    "AND left(gid, %s) = %s",
                    (len(prefix), prefix),
                )
            ]
            rows = ctl.execute(
                sql.SQL(
                    "SELECT id, batch_id, epoch, participant, rows, state FROM {} "
                    "WHERE app_id = %s AND (state = 'prepared' OR id = ANY(%s))"
                ).format(self._t("txns")),
                (app_id, gids),
            ).fetchall()
        found: dict[str, Committable] = {}
        for txn_id, batch_id, epoch, participant, n, state in rows:
            if state == "prepared":
                found[txn_id] = Committable(BatchRef(app_id, batch_id), epoch, participant, id=txn_id, rows=n)
        known = {r[0] for r in rows}
        for gid in gids:
            parsed = parse_gid(gid)
            if gid not in known and parsed is not None:
                batch_id, epoch, participant = parsed
                found[gid] = Committable(BatchRef(app_id, batch_id), epoch, participant, id=gid)
        return sorted(found.values(), key=lambda c: (c.batch.batch_id, c.id))


def _open_connection(config: PostgresConfig, autocommit: bool) -> Conn:
    conn: Conn = psycopg.connect(config.conninfo, autocommit=autocommit, **config.connect_kwargs())
    # No server-side prepared statements: they break behind PgBouncer's transaction pooling, and the
    # sink's statements are few and cheap to plan.
    conn.prepare_threshold = None
    return conn


_PGBOUNCER = (
    (
        "unsupported startup parameter",
        "PgBouncer refused a startup parameter the sink sends (options: TimeZone and timeouts).",
    ),
    ("statement pooling mode", "PgBouncer in statement pooling mode forbids multi-statement transactions."),
    ('prepared statement "_pg3_', "A connection pooler (PgBouncer in transaction pooling) lost a prepared statement."),
)


def _pgbouncer_problem(message: str) -> tuple[str, str] | None:
    """(problem, fix) when ``message`` is a connection pooler's refusal, else None."""
    for marker, problem in _PGBOUNCER:
        if marker in message:
            return (
                problem,
                "Connect the sink to PostgreSQL directly or through a session-pooling port; with PgBouncer's "
                "transaction pooling, add 'ignore_startup_parameters = options' to pgbouncer.ini and use the "
                "txid-check strategy (it needs no prepared transactions, and pg_xact_status works from any "
                "backend); statement pooling supports none of eosink's transactional strategies.",
            )
    return None


def _max_prepared(conn: Conn) -> int:
    row = conn.execute("SELECT current_setting('max_prepared_transactions')::int").fetchone()
    return int(row[0]) if row else 0


def _prepared_disabled(where: str) -> ConfigurationError:
    return ConfigurationError(
        f"PostgreSQL has max_prepared_transactions = 0 ({where}): PREPARE TRANSACTION is disabled, which the "
        "2pc strategy needs (common on managed services).",
        "Use the txid-check strategy (no prepared transactions; exactly-once for deterministic queries, "
        "non-deterministic replays are detected) or the idempotent strategy; or set max_prepared_transactions in "
        "postgresql.conf to at least 2 x the partitions of a batch and restart the server.",
    )


_LOGIN_FIX = (
    "Check the user, password and database of the conninfo (a password may also come from PGPASSWORD or "
    "~/.pgpass), and that pg_hba.conf admits this client; then restart the query."
)
_LOGIN_STATES = {"28P01", "28000", "3D000"}  # bad password, not authorised, no such database
_LOGIN_MARKERS = (
    "password authentication failed",
    "authentication failed",
    "no password supplied",
    "does not exist",
    "no pg_hba.conf entry",
)


def _login_problem(exc: psycopg.Error) -> str | None:
    """What was wrong with the login, when ``exc`` is a refused connection (not an outage), else None."""
    if exc.sqlstate in _LOGIN_STATES:
        return "the server refused the login"
    text = str(exc)
    if isinstance(exc, psycopg.OperationalError) and exc.sqlstate is None and "FATAL" in text:
        for marker in _LOGIN_MARKERS:
            if marker in text:
                return "the server refused the login"
    return None
