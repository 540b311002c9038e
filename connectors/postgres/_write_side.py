"""The participant side of PostgresSink (executors): ``begin``, ``write``, ``pre_commit``.

Each participant attempt is one connection and one transaction T in the writing process; what
T does (``ctl`` is ``PostgresConfig.control_schema``)::

    begin(task)            one connection and one transaction T per participant attempt; the
                           epoch is read (a plain read: a lock would be kept by the prepared T and
                           block the next fence); a fenced attempt, or an attempt id already
                           prepared, stops here; so does one whose rows would be visible at once
                           (idempotent) when the batch it follows is gone (a failover lost it)
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

Kept apart from the coordinator side (``_commit_side``: the driver's commit, abort and
recovery), which only sees what T leaves behind (a prepared gid, a txns row, staged rows);
what both sides use is the sink's core (``sink.py``). Where T makes the rows visible itself,
``pre_commit`` moves them with the coordinator side's ``_move``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psycopg
import pyarrow as pa
from psycopg import sql

from eosink._attempts import attempt_closed, columns_changed
from eosink.connectors.postgres._base import _SinkBase
from eosink.connectors.postgres._control import (
    OWN_STAGING,
    SEQ_COLUMN,
    TXN_COLUMN,
    advisory_key,
    gid_for,
    gid_prefix,
    short_hash,
)
from eosink.connectors.postgres._copy import copy_rows
from eosink.connectors.postgres._pool import Conn
from eosink.connectors.postgres._schema import Column, TargetTable, check_batch, create_table_sql, reflect
from eosink.contract import Committable, TaskRef
from eosink.errors import ConfigurationError, SchemaError

__all__ = ["_Txn", "_WriteSide"]

log = logging.getLogger("eosink.postgres")


@dataclass
class _Txn:
    """One participant attempt's open transaction; lives only in the writing process."""

    id: str
    task: TaskRef
    keys: tuple[str, ...]
    conn: Conn | None
    pid: int
    target: TargetTable | None = None
    staging: str | None = None
    columns: tuple[str, ...] = ()
    rows: int = 0
    bytes: int = 0
    direct: bool = False
    """Rows go straight into the target inside this transaction: nothing to stage or move (the
    participant's transaction is what makes them visible: per-participant mode, idempotent).
    Keyed rows go direct only until a key conflicts (see :meth:`_WriteSide._insert_or_stage`)."""
    segment: list[pa.RecordBatch] = field(default_factory=list)
    """Keyed direct writes since the open savepoint: staged again if a later write conflicts."""
    segment_bytes: int = 0
    prepares: bool = True
    """Kept by PREPARE TRANSACTION (2pc: the commit may come from another process, much later;
    and every strategy in per-participant mode); else staged and committed at once (txid-check
    in atomic mode: the inline commit moves it; idempotent: upserted now)."""


class _WriteSide(_SinkBase):
    """``begin``, ``write`` and ``pre_commit`` of :class:`PostgresSink`, and the helpers only they use.

    A mixin: the state it uses is created by ``PostgresSink._reset`` (per process, never pickled).
    """

    _staged: set[str]
    """Staging templates this process has made sure of."""
    _prepare_checked: bool
    """max_prepared_transactions was found > 0 (checked once, before the first attempt that prepares)."""

    if TYPE_CHECKING:

        def _prepared_off(self, conn: Conn) -> ConfigurationError | None:
            """The error for a server whose PREPARE TRANSACTION is disabled, else None (``sink.py``)."""

        def _move(
            self,
            conn: Conn,
            txn_id: str,
            staging: str,
            target: sql.Identifier,
            columns: Sequence[str],
            keys: Sequence[str],
        ) -> None:
            """Move one committable's staged rows into the target (``_commit_side``)."""

    def _keys(self, task: TaskRef) -> tuple[str, ...]:
        return tuple(task.upsert_keys) if task.upsert_keys else self._keys_of_config()

    def _keys_of_config(self) -> tuple[str, ...]:
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
                    off = self._prepared_off(ctl)
                    if off is not None:
                        raise off
                    self._prepare_checked = True
                conn = self._conns.take()
                row = conn.execute(
                    sql.SQL(
                        "SELECT (SELECT epoch FROM {e} WHERE app_id = %(app)s), "
                        "EXISTS (SELECT 1 FROM {t} WHERE id = %(gid)s) "
                        "OR EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE gid = %(gid)s), "
                        "(SELECT max(batch_id) FROM {b} WHERE app_id = %(app)s)"
                    ).format(e=self._t("epochs"), t=self._t("txns"), b=self._t("bundles")),
                    {"app": app, "gid": gid},
                ).fetchone()
                assert row is not None
                self._fenced(app, task.epoch, int(row[0] or 0), "begin")
                if not task.transactional:  # its rows are visible once written: not on top of a lost batch
                    self._check_follows(conn, task.batch, task.follows, row[2])
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
            raise attempt_closed(f"Transaction {txn.id}", what)
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
                    raise columns_changed(txn.columns, data.schema.names)
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
            raise self._missing(where)
        self._check_target(target, txn.keys)
        if txn.keys and not target.has_unique(txn.keys):
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
        txn.target, txn.columns = target, tuple(data.schema.names)
        if not txn.task.transactional or (txn.prepares and self.config.commit_mode == "per-participant"):
            txn.direct = True  # this transaction makes the rows visible: no staging, no move
        else:
            self._stage_own(txn, target, unlogged=False)

    def _missing(self, where: str) -> SchemaError:
        schema, table = self.config.target
        name = table if schema is None else f"{schema}.{table}"
        return SchemaError(
            f"The target table {name!r} does not exist ({where}).",
            "Create it, or configure the sink with create_table=True.",
        )

    def _check_target(self, target: TargetTable, keys: Sequence[str]) -> None:
        """What makes ``target`` unfit whatever the rows: not a table, no unique index for the upsert's ``keys``
        (create_table adds it), a column named like eosink's own staging columns."""
        if target.kind not in ("r", "p"):
            raise SchemaError(f"{target.display} is not a table (relkind {target.kind!r}).", "Write into a table.")
        if keys and not target.has_unique(keys) and not self.config.create_table:
            raise SchemaError(
                f"Upserting into {target.display} by {list(keys)} needs a unique index on exactly those columns.",
                f"CREATE UNIQUE INDEX ON {target.display} "
                f"({sql.SQL(', ').join(sql.Identifier(k) for k in keys).as_string(None)}), or set create_table=True.",
            )
        if target.column(TXN_COLUMN) or target.column(SEQ_COLUMN):
            raise SchemaError(f"{target.display} has a column named {TXN_COLUMN!r} or {SEQ_COLUMN!r}.", "Rename it.")

    def preflight(
        self, schema: pa.Schema | None, *, strategy: str, upsert_keys: tuple[str, ...] | None, transactional: bool
    ) -> None:
        """The first write's checks, before the stream starts and without a write: prepared transactions when
        participants will prepare; the target exists (or create_table can make it from ``schema``), and its
        columns take ``schema``'s (types, NOT NULL columns, the upsert's unique index)."""
        where = "before the stream starts"
        with self._errors(f"the check {where}"):
            ctl = self._ctl()
            per_participant = self.config.commit_mode == "per-participant"
            if transactional and (strategy != "txid-check" or per_participant):
                off = self._prepared_off(ctl)
                if off is not None:
                    raise off
            if schema is None:
                return
            target = reflect(ctl, *self.config.target)
            if target is None:
                if not self.config.create_table:
                    raise self._missing(where)
                create_table_sql(*self.config.target, schema)  # a column no PostgreSQL type fits raises here
                return
            keys = tuple(upsert_keys) if upsert_keys else self._keys_of_config()
            self._check_target(target, keys)
            check_batch(target, pa.RecordBatch.from_pylist([], schema=schema), keys, where)

    def _stage_own(self, txn: _Txn, target: TargetTable, *, unlogged: bool) -> None:
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
        segments of about ``sink._SEGMENT_BYTES`` under one savepoint (few subtransactions); a unique
        violation (or a deadlock with another writer of the same keys) rolls the segment back, and
        its rows, the failed write's and every later write's are staged instead, in order, so the
        upsert still lets the later row win.
        """
        from eosink.connectors.postgres import sink  # _SEGMENT_BYTES, read per call (sink imports this module)

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
        if txn.segment_bytes >= sink._SEGMENT_BYTES:
            conn.execute("RELEASE SAVEPOINT eosink_segment")
            txn.segment, txn.segment_bytes = [], 0

    def _ensure_staging(self, ctl: Conn, target: TargetTable, staging: str) -> None:
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

    def _epoch(self, conn: Conn, app_id: str) -> int:
        row = conn.execute(sql.SQL("SELECT epoch FROM {} WHERE app_id = %s").format(self._t("epochs")), (app_id,))
        found = row.fetchone()
        return int(found[0]) if found else 0

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
