"""The coordinator side of PostgresSink (driver): ``commit``, ``abort``, ``commit_status``, ``recover``.

What each does (``ctl`` is ``PostgresConfig.control_schema``)::

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

Kept apart from the participant side (``_write_side``), which runs in the executors and hands
over only committables (gids) and the control tables; what both sides use is the sink's core
(``sink.py``). Everything here runs on the driver's control connection (``_ctl``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from eosink import faults
from eosink.connectors.postgres._base import _SinkBase
from eosink.connectors.postgres._connect import newer_primary, warn_zombie
from eosink.connectors.postgres._control import OWN_STAGING, SEQ_COLUMN, TXN_COLUMN, gid_prefix, parse_gid
from eosink.connectors.postgres._lineage import Lineage
from eosink.connectors.postgres._pool import Conn
from eosink.connectors.postgres.metrics import PostgresMetrics
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, missing_predecessors
from eosink.errors import AmbiguousCommitError, CommitAbortedError, CommittedWorkLostError, TransientError

__all__ = ["_CommitSide"]

log = logging.getLogger("eosink.postgres")


class _CommitSide(_SinkBase):
    """``commit``, ``abort``, ``commit_status``, ``recover`` and ``fetch_last_bundle`` of :class:`PostgresSink`.

    A mixin: the state it uses is created by ``PostgresSink._reset`` (per process, never pickled).
    """

    metrics: PostgresMetrics
    _in_flight: dict[BatchRef, tuple[str, Lineage, float]]
    """batch -> (xid, the lineage that assigned it, monotonic start) of a COMMIT whose reply was lost"""
    _committed_on: dict[str, Lineage]
    """app_id -> the server its newest batch was committed on, by this process (for messages)"""

    if TYPE_CHECKING:

        def _maybe_cleanup(self, force: bool = False) -> None:
            """Run the cleanup when its interval has passed (``sink.py``)."""

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """COMMIT PREPARED each gid, then one transaction moves the batch and writes its bundle."""
        app, ids = batch.app_id, [c.id for c in committables]
        started = time.monotonic()
        with self._errors(f"commit of batch {batch}"):
            ctl = self._ctl_newest()
            row = ctl.execute(
                sql.SQL(
                    "SELECT (SELECT epoch FROM {e} WHERE app_id = %(app)s), "
                    "(SELECT bundle FROM {b} WHERE app_id = %(app)s AND batch_id = %(batch)s), "
                    "ARRAY(SELECT gid::text FROM pg_prepared_xacts "
                    "      WHERE database = current_database() AND gid = ANY(%(ids)s::text[]) ORDER BY gid), "
                    "(SELECT max(batch_id) FROM {b} WHERE app_id = %(app)s)"
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
            self._check_follows(ctl, batch, bundle.follows, row[3])
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
        lineage = self._lineage(ctl)
        try:
            with ctl.transaction():
                # Locks the app's epochs row (commits and fences of the app_id queue here). An epoch the writer
                # was fenced in with but this server lacks (lost in a failover) is put back: an older writer is
                # fenced again; a newer one (higher epoch) fences this one.
                row = ctl.execute(
                    sql.SQL(
                        "INSERT INTO {} AS e (app_id, epoch) VALUES (%s, %s) ON CONFLICT (app_id) "
                        "DO UPDATE SET epoch = greatest(e.epoch, EXCLUDED.epoch) RETURNING epoch, "
                        "pg_current_xact_id()::text"
                    ).format(self._t("epochs")),
                    (app, bundle.epoch),
                ).fetchone()
                assert row is not None
                self._fenced(app, bundle.epoch, int(row[0]), "commit")
                xid = str(row[1])  # asked with pg_xact_status() if the COMMIT's reply is lost, on this lineage only
                found = ctl.execute(
                    sql.SQL(
                        "SELECT (SELECT bundle FROM {b} WHERE app_id = %(app)s AND batch_id = %(batch)s), "
                        "(SELECT max(batch_id) FROM {b} WHERE app_id = %(app)s)"
                    ).format(b=self._t("bundles")),
                    {"app": app, "batch": batch.batch_id},
                ).fetchone()
                assert found is not None
                if found[0] is not None:
                    self._same_bundle(batch, found[0], bundle)
                    return
                self._check_follows(ctl, batch, bundle.follows, found[1])
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
                self._in_flight[batch] = (xid, lineage, started)
                self.metrics.ambiguous(app)
                raise AmbiguousCommitError(
                    f"The COMMIT of batch {batch} (transaction {xid} on {lineage}) got no reply "
                    f"({self.config.scrub(str(exc).strip())}).",
                    "Ask commit_status (the coordinator does): it settles the batch from the sink's tables, after "
                    "waiting while the same server still runs the transaction; never assume either outcome.",
                ) from None
            raise
        self._committed_on[app] = lineage
        newer = newer_primary(self.config, lineage) if self._several else None
        if newer is not None:
            # Committed on a server that another was promoted over meanwhile (it was paused or cut off, then
            # answered): the batch may be missing on the new primary. Settled there, from its tables.
            warn_zombie(lineage, newer)
            self._conns.forget_control(healthy_too=True)
            self._in_flight[batch] = (xid, lineage, started)
            self.metrics.ambiguous(app)
            raise AmbiguousCommitError(
                f"Batch {batch} was committed on {lineage}, but a standby was promoted over that server meanwhile: "
                "the new primary may not have the batch.",
                "Ask commit_status (the coordinator does): it settles the batch from the new primary's tables.",
            )

    def _check_follows(self, ctl: Conn, batch: BatchRef, follows: int | None, newest: int | None) -> None:
        """CommittedWorkLostError when the server, whose newest bundle of the app_id is ``newest``, no longer holds
        batch ``follows``, which ``batch`` follows: it lost committed batches (a failover to a standby that lacked
        them); committing, or showing rows, on top of the gap would hide the loss."""
        lost = missing_predecessors(follows, newest)
        if not lost:
            return
        app = batch.app_id
        now = self._lineage(ctl)
        before = self._committed_on.get(app)
        change = (
            f"batch {follows} was committed on {before}; the server is now {now}"
            if before is not None and not before.same(now)
            else f"the server is {now}"
        )
        holds = f"up to batch {newest} only" if newest is not None else "no batch of it at all"
        shown = f"{lost[0]} to {lost[-1]}" if len(lost) > 1 else str(lost[0])
        raise CommittedWorkLostError(
            f"PostgreSQL ({self.config.target[1]!r}) holds app_id {app!r} {holds}, but batch {follows} was committed "
            f"before batch {batch.batch_id}: batch(es) {shown} are gone from the server ({change}). An asynchronous "
            "standby promoted before it received them, or a restore from a backup, drops acknowledged commits.",
            f"Stop the query and rewind its checkpoint to batch {lost[0]} (eosink recover --rewind), so that Spark "
            "runs the lost batches again from its source; see docs/operations.md, lost committed batches.",
            app_id=app,
            batch_id=lost[0],
            batches=lost,
            server=change,
        )

    @staticmethod
    def _same_bundle(batch: BatchRef, stored: Any, bundle: Bundle) -> None:
        existing = Bundle.from_json(stored)
        if set(existing.committables) != set(bundle.committables):
            raise CommitAbortedError(
                f"Batch {batch} was already committed by another attempt "
                f"(committables {list(existing.committables)}, not {list(bundle.committables)}).",
                "Abort this attempt's committables; the batch is done.",
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

    def abort(self, committables: Sequence[Committable]) -> None:
        """ROLLBACK PREPARED what is still prepared, drop what was staged; committed work is refused."""
        ids = [c.id for c in committables]
        if not ids:
            return
        with self._errors("abort"):
            ctl = self._ctl_newest()
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
            ctl = self._ctl_newest()
            now = self._lineage(ctl)
            if now.standby:
                raise TransientError(
                    f"commit_status of batch {batch} reached {now}: a standby, whose tables lag the primary's.",
                    "eosink asks again; give the conninfo every server of the cluster (host=a,b,c) with "
                    "target_session_attrs=read-write, so that the primary is found after a failover.",
                )
            in_flight = self._in_flight.get(batch)
            if in_flight is not None and self._still_running(ctl, batch, in_flight[0], in_flight[1], now):
                return CommitStatus.IN_PROGRESS
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
        self._in_flight.pop(batch, None)
        if row[0]:
            if in_flight is not None:
                self.metrics.resolved(batch.app_id, "committed")
                self.metrics.committed(batch, committables, time.monotonic() - in_flight[2])
            return CommitStatus.COMMITTED
        alive = prepared | set(row[1])
        status = CommitStatus.PREPARED if all(i in alive for i in ids) else CommitStatus.ABORTED
        if in_flight is not None:
            self.metrics.resolved(batch.app_id, "recommit" if status is CommitStatus.PREPARED else "aborted")
        return status

    def _still_running(self, ctl: Conn, batch: BatchRef, xid: str, issued: Lineage, now: Lineage) -> bool:
        """Whether the lost COMMIT's transaction still runs on this server (then ask again), from pg_xact_status().

        Only the tables say whether the batch committed: its bundle is written in the same transaction.
        The transaction id only tells whether to wait, and only on the lineage that assigned it. On
        another one (a promoted standby, a restored backup) the id means nothing: that server may have
        handed it to another transaction. A server that crashed before the transaction's WAL reached
        its disk calls the id "in the future", on the same lineage: it never committed there.
        """
        if not now.same(issued):
            log.warning(
                "eosink %s: the COMMIT of batch %d (transaction %s) went to %s; the server is now %s: the transaction "
                "id means nothing here, the sink's tables decide",
                batch.app_id,
                batch.batch_id,
                xid,
                issued,
                now,
            )
            return False
        try:
            row = ctl.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
        except psycopg.errors.InvalidParameterValue as exc:
            if "in the future" not in str(exc):
                raise
            log.warning(
                "eosink %s: transaction %s of batch %d is unknown to %s (it crashed before the transaction's WAL was "
                "on disk): the sink's tables decide",
                batch.app_id,
                xid,
                batch.batch_id,
                now,
            )
            return False
        state = row[0] if row else None
        log.info("eosink %s: transaction %s of batch %d is %s", batch.app_id, xid, batch.batch_id, state)
        return state == "in progress"

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
