"""ReferenceSink: the reference implementation of the sink contract, on one SQLite file.

It implements every operation of :class:`eosink.contract.Sink`, prepare included, in the
simplest durable way we know, so that tests can run exactly-once writes for real (also
from Spark executors in other processes) and connector authors can read how each rule
of the contract maps onto a store. One file holds one "table" of rows; several app_ids
may share it. The contract maps onto five tables::

    fence(app_id)         epochs:  app_id -> epoch, +1 per call; open work of older
                                   epochs is aborted (it belongs to crashed or zombie writers)
    begin(task)           txns:    one row per participant attempt, state 'open'
    write(txn, batch)     staged:  the rows, as JSON, invisible (non-transactional
                                   tasks write straight into data instead)
    pre_commit(txn)       txns:    state 'prepared' (durable: it is committed to SQLite)
    commit(...)           data:    staged rows moved into the visible table, txns set
                          bundles: 'committed' and the bundle inserted, in ONE SQLite
                                   transaction (atomic=False: one per committable, bundle last);
                                   refused when the batch it follows is gone (a lost batch)
    abort(...)            txns:    state 'aborted', staged rows deleted
    commit_status(...)    bundle present -> COMMITTED; work gone -> ABORTED; else PREPARED
    recover(app_id)       txns:    the 'prepared' rows of app_id

Every write transaction starts with ``BEGIN IMMEDIATE`` in WAL mode with a 30 s busy
timeout, so writers in many processes queue for SQLite's single write lock instead of
failing; ``synchronous=FULL`` makes every COMMIT survive a power cut.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from eosink import faults
from eosink.contract import (
    BatchRef,
    Bundle,
    Capabilities,
    CommitStatus,
    Committable,
    Sink,
    TaskRef,
    missing_predecessors,
)
from eosink.errors import (
    BadRecordError,
    CommitAbortedError,
    CommittedWorkLostError,
    ConfigurationError,
    FencedError,
    SchemaError,
    TransientError,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ReferenceSink"]

_BUSY_TIMEOUT_S = 30.0

# Connections a forked child inherited from its parent. SQLite forbids using them across
# fork(), and closing one counts: it could drop this process's POSIX locks on the file.
# So the child keeps them referenced (never garbage-collected, never closed) and opens its own.
_INHERITED: list[sqlite3.Connection] = []

# Idempotent: run on every new connection, so any process may be the first to touch the file.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS epochs (
    app_id TEXT PRIMARY KEY,
    epoch  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS txns (
    id            TEXT PRIMARY KEY,
    app_id        TEXT NOT NULL,
    batch_id      INTEGER NOT NULL,
    epoch         INTEGER NOT NULL,
    participant   INTEGER NOT NULL,
    state         TEXT NOT NULL CHECK (state IN ('open', 'prepared', 'committed', 'aborted')),
    transactional INTEGER NOT NULL,
    upsert_keys   TEXT,
    rows          INTEGER NOT NULL DEFAULT 0,
    fingerprint   TEXT
);
CREATE INDEX IF NOT EXISTS txns_by_app_state ON txns (app_id, state);
CREATE TABLE IF NOT EXISTS staged (
    txn_id  TEXT NOT NULL,
    seq     INTEGER NOT NULL,
    row_key TEXT,
    row     TEXT NOT NULL,
    PRIMARY KEY (txn_id, seq)
);
CREATE TABLE IF NOT EXISTS data (
    seq      INTEGER PRIMARY KEY AUTOINCREMENT,
    row_key  TEXT UNIQUE,
    app_id   TEXT NOT NULL,
    batch_id INTEGER NOT NULL,
    row      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bundles (
    app_id   TEXT NOT NULL,
    batch_id INTEGER NOT NULL,
    bundle   TEXT NOT NULL,
    PRIMARY KEY (app_id, batch_id)
);
"""

# NULL row keys never conflict, so one statement serves append and upsert alike;
# within a statement rows are applied in order, so the later row of a key wins.
_INSERT_DATA = """
INSERT INTO data (row_key, app_id, batch_id, row) VALUES (?, ?, ?, ?)
ON CONFLICT (row_key) DO UPDATE SET app_id = excluded.app_id, batch_id = excluded.batch_id, row = excluded.row
"""
_PUBLISH_STAGED = """
INSERT INTO data (row_key, app_id, batch_id, row)
SELECT row_key, ?, ?, row FROM staged WHERE txn_id = ? ORDER BY seq
ON CONFLICT (row_key) DO UPDATE SET app_id = excluded.app_id, batch_id = excluded.batch_id, row = excluded.row
"""


@dataclass
class _Txn:
    """One participant's open transaction: a handle that lives only in the writing process."""

    id: str
    task: TaskRef
    keys: tuple[str, ...]
    rows: int = 0


class _Local(threading.local):
    """This thread's SQLite connection and the process it was opened in."""

    conn: sqlite3.Connection | None = None
    pid: int = 0


class ReferenceSink(Sink[_Txn]):
    """A durable SQLite-backed sink implementing the whole contract (see the module docstring).

    ``atomic=False`` commits each committable in its own SQLite transaction, to model
    sinks that cannot make a batch visible at once. ``mode="upsert"`` upserts by
    ``key_columns``; a task's own ``upsert_keys`` always take precedence.

    The instance is picklable and safe to share between threads and processes: it holds
    only the path and options, and opens one connection per thread and process lazily.
    """

    lost_work_hint = "the SQLite file's txns or staged rows were changed or deleted by hand, or the file replaced."

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        atomic: bool = True,
        mode: Literal["append", "upsert"] = "append",
        key_columns: Sequence[str] = (),
    ) -> None:
        if mode not in ("append", "upsert"):
            raise ConfigurationError(f"Unknown mode {mode!r} for ReferenceSink.", "Use 'append' or 'upsert'.")
        if mode == "upsert" and not key_columns:
            raise ConfigurationError("ReferenceSink(mode='upsert') needs key columns.", "Pass key_columns=[...].")
        self.path = os.fspath(path)
        self.atomic = atomic
        self.mode = mode
        self.key_columns = tuple(key_columns)
        self.capabilities = Capabilities(
            supports_prepare=True,
            supports_txid_status=True,
            supports_keys=True,
            atomic_batch_visibility=atomic,
            supports_recover=True,
        )
        self._local = _Local()

    def __repr__(self) -> str:
        return (
            f"ReferenceSink({self.path!r}, atomic={self.atomic}, mode={self.mode!r}, key_columns={self.key_columns!r})"
        )

    # -- connections --------------------------------------------------------------------

    def __getstate__(self) -> dict[str, Any]:
        state = dict(vars(self))
        del state["_local"]  # connections never travel
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._local = _Local()

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, opened (and the schema created) on first use.

        A forked child inherits its parent's thread-local state; the pid check makes it
        open its own connection instead of using the parent's.
        """
        local = self._local
        if local.conn is not None:
            if local.pid == os.getpid():
                return local.conn
            _INHERITED.append(local.conn)
            local.conn = None
        # isolation_level=None: no implicit transactions; we issue BEGIN ourselves.
        conn = sqlite3.connect(self.path, timeout=_BUSY_TIMEOUT_S, isolation_level=None)
        try:
            # WAL is persistent in the file: switch only once, changing it takes a lock.
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(f"BEGIN IMMEDIATE; {_SCHEMA} COMMIT;")
        except sqlite3.OperationalError as e:
            conn.close()
            raise TransientError(f"Cannot open the ReferenceSink database {self.path}: {e}.", "Retry.") from e
        local.conn, local.pid = conn, os.getpid()
        return conn

    @contextmanager
    def _transaction(self, kind: Literal["IMMEDIATE", "DEFERRED"] = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """One SQLite transaction: committed on success, rolled back on any error.

        IMMEDIATE takes the write lock at once (waiting up to the busy timeout), so a
        read-then-write never fails half-way with SQLITE_BUSY; DEFERRED is for reads.
        """
        conn = self._conn()
        try:
            conn.execute(f"BEGIN {kind}")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        except sqlite3.OperationalError as e:  # locked past the timeout, disk full, I/O error
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise TransientError(f"SQLite failed on {self.path}: {e}; nothing was applied.", "Retry.") from e

    def setup(self, app_id: str) -> None:
        """Create the file and its tables (also done lazily by every process's first call)."""
        self._conn()

    def close(self) -> None:
        """Close this thread's connection; the next call opens a new one."""
        local = self._local
        if local.conn is not None:
            if local.pid == os.getpid():
                local.conn.close()
            else:
                _INHERITED.append(local.conn)
        local.conn = None

    # -- fencing ------------------------------------------------------------------------

    def fence(self, app_id: str) -> int:
        """Hand out the next epoch of ``app_id`` and abort open work of older epochs."""
        with self._transaction() as conn:
            row = conn.execute("SELECT epoch FROM epochs WHERE app_id = ?", (app_id,)).fetchone()
            epoch = (row[0] if row else 0) + 1
            conn.execute(
                "INSERT INTO epochs (app_id, epoch) VALUES (?, ?) "
                "ON CONFLICT (app_id) DO UPDATE SET epoch = excluded.epoch",
                (app_id, epoch),
            )
            conn.execute(
                "DELETE FROM staged WHERE txn_id IN "
                "(SELECT id FROM txns WHERE app_id = ? AND state = 'open' AND epoch < ?)",
                (app_id, epoch),
            )
            conn.execute(
                "UPDATE txns SET state = 'aborted' WHERE app_id = ? AND state = 'open' AND epoch < ?",
                (app_id, epoch),
            )
        return int(epoch)

    @staticmethod
    def _check_epoch(conn: sqlite3.Connection, app_id: str, epoch: int, what: str) -> None:
        row = conn.execute("SELECT epoch FROM epochs WHERE app_id = ?", (app_id,)).fetchone()
        if row is not None and row[0] > epoch:
            raise FencedError(
                f"{what} of {app_id!r} at epoch {epoch} was fenced: a newer writer holds epoch {row[0]}.",
                "Stop this older writer; only the newest may commit.",
            )

    # -- participant side ---------------------------------------------------------------

    def begin(self, task: TaskRef) -> _Txn:
        """Register an open transaction for one attempt of one participant."""
        txn_id = f"{task.batch.app_id}:{task.batch.batch_id}:{task.participant}:{task.attempt}"
        keys = task.upsert_keys or (self.key_columns if self.mode == "upsert" else ())
        with self._transaction() as conn:
            self._check_epoch(conn, task.batch.app_id, task.epoch, "begin")
            if not task.transactional:  # its rows are visible once written: never on top of a lost batch
                self._check_lost(conn, task.batch, task.follows)
            row = conn.execute("SELECT state FROM txns WHERE id = ?", (txn_id,)).fetchone()
            if row is not None and row[0] != "open":
                raise ConfigurationError(
                    f"Transaction {txn_id} already exists and is {row[0]}.",
                    "Give every task attempt its own TaskRef.attempt.",
                )
            # Re-beginning an open attempt restarts it from scratch.
            conn.execute("DELETE FROM staged WHERE txn_id = ?", (txn_id,))
            conn.execute(
                "INSERT OR REPLACE INTO txns (id, app_id, batch_id, epoch, participant, state, "
                "transactional, upsert_keys, rows) VALUES (?, ?, ?, ?, ?, 'open', ?, ?, 0)",
                (
                    txn_id,
                    task.batch.app_id,
                    task.batch.batch_id,
                    task.epoch,
                    task.participant,
                    int(task.transactional),
                    json.dumps(list(keys)) if keys else None,
                ),
            )
        return _Txn(txn_id, task, tuple(keys))

    def write(self, txn: _Txn, data: pa.RecordBatch) -> None:
        """Stage the batch's rows as JSON (or make them visible, for non-transactional tasks).

        Every row is checked before anything is written, so a bad record writes nothing.
        """
        missing = [k for k in txn.keys if k not in data.schema.names]
        if missing:
            raise SchemaError(
                f"Key column(s) {missing} are not in the batch (columns: {data.schema.names}).",
                "Select the key columns in the query, or change the sink's key columns.",
            )
        records: list[tuple[str | None, str]] = []
        for row in data.to_pylist():
            key = None
            if txn.keys:
                values = [row[k] for k in txn.keys]
                for k, v in zip(txn.keys, values, strict=True):
                    if v is None:
                        raise BadRecordError(
                            f"Row with a null in key column {k!r} cannot be upserted ({txn.id}).",
                            f"Filter out or fill rows where {k!r} is null before writing.",
                        )
                key = json.dumps(values, default=str)
            records.append((key, json.dumps(row, sort_keys=True, default=str)))

        batch = txn.task.batch
        with self._transaction() as conn:
            self._check_open(conn, txn)
            if txn.task.transactional:
                conn.executemany(
                    "INSERT INTO staged (txn_id, seq, row_key, row) VALUES (?, ?, ?, ?)",
                    [(txn.id, txn.rows + i, key, row) for i, (key, row) in enumerate(records)],
                )
            else:
                conn.executemany(_INSERT_DATA, [(key, batch.app_id, batch.batch_id, row) for key, row in records])
            conn.execute("UPDATE txns SET rows = rows + ? WHERE id = ?", (len(records), txn.id))
        txn.rows += len(records)

    def _check_open(self, conn: sqlite3.Connection, txn: _Txn) -> None:
        """Raise unless ``txn`` may still be written to (not fenced, not aborted, not prepared)."""
        self._check_epoch(conn, txn.task.batch.app_id, txn.task.epoch, "write")
        row = conn.execute("SELECT state FROM txns WHERE id = ?", (txn.id,)).fetchone()
        state = row[0] if row else "missing"
        if state != "open":
            raise CommitAbortedError(
                f"Transaction {txn.id} is {state}; it can no longer be written.",
                "Restart the task with a new attempt.",
            )

    def pre_commit(self, txn: _Txn) -> Committable:
        """Mark the staged rows prepared: durable, invisible, committable from any process."""
        task = txn.task
        with self._transaction() as conn:
            self._check_epoch(conn, task.batch.app_id, task.epoch, "pre_commit")
            row = conn.execute("SELECT state FROM txns WHERE id = ?", (txn.id,)).fetchone()
            state = row[0] if row else "missing"
            done = "prepared" if task.transactional else "committed"
            if state == "open":
                # Non-transactional rows are visible already: nothing is left to commit or recover.
                conn.execute("UPDATE txns SET state = ? WHERE id = ?", (done, txn.id))
            elif state != done:
                raise CommitAbortedError(
                    f"Transaction {txn.id} is {state}; it cannot be prepared.",
                    "Restart the task with a new attempt.",
                )
        return Committable(task.batch, task.epoch, task.participant, id=txn.id, rows=txn.rows, payload={})

    # -- coordinator side ---------------------------------------------------------------

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """Make the batch's rows visible together with its bundle; idempotent."""
        if self.atomic:
            with self._transaction() as conn:
                if self._already_committed(conn, batch, bundle):
                    return
                self._check_follows(conn, batch, bundle)
                for c in committables:
                    self._publish(conn, batch, c)
                self._mid_commit(batch)  # a crash here rolls the whole transaction back
                conn.execute(
                    "INSERT INTO bundles (app_id, batch_id, bundle) VALUES (?, ?, ?)",
                    (batch.app_id, batch.batch_id, json.dumps(bundle.to_json())),
                )
            return

        # Non-atomic: check everything first, so an aborted committable publishes nothing;
        # then one transaction per committable (a crash in between leaves a partial batch
        # that commit_status reports PREPARED and a repeated commit completes); bundle last.
        with self._transaction() as conn:
            if self._already_committed(conn, batch, bundle):
                return
            self._check_follows(conn, batch, bundle)
            for c in committables:
                self._state_for_commit(conn, batch, c)
        for i, c in enumerate(committables):
            with self._transaction() as conn:
                self._check_epoch(conn, batch.app_id, bundle.epoch, "commit")
                self._publish(conn, batch, c)
            if i == 0:
                self._mid_commit(batch)
        with self._transaction() as conn:
            if not self._already_committed(conn, batch, bundle):
                conn.execute(
                    "INSERT INTO bundles (app_id, batch_id, bundle) VALUES (?, ?, ?)",
                    (batch.app_id, batch.batch_id, json.dumps(bundle.to_json())),
                )

    @staticmethod
    def _mid_commit(batch: BatchRef) -> None:
        """Fault point F6: part of the batch published, its bundle not yet (the contract suite crashes here)."""
        faults.hit(faults.FaultPoint.F6, batch.batch_id)

    def _already_committed(self, conn: sqlite3.Connection, batch: BatchRef, bundle: Bundle) -> bool:
        """Check the fence; True if this very commit already happened, error if another did."""
        self._check_epoch(conn, batch.app_id, bundle.epoch, "commit")
        row = conn.execute(
            "SELECT bundle FROM bundles WHERE app_id = ? AND batch_id = ?", (batch.app_id, batch.batch_id)
        ).fetchone()
        if row is None:
            return False
        existing = Bundle.from_json(json.loads(row[0]))
        if set(existing.committables) == set(bundle.committables):
            return True
        raise CommitAbortedError(
            f"Batch {batch} was already committed by another attempt "
            f"(committables {list(existing.committables)}, not {list(bundle.committables)}).",
            "Abort this attempt's committables; the batch is done.",
        )

    def _check_follows(self, conn: sqlite3.Connection, batch: BatchRef, bundle: Bundle) -> None:
        """Refuse a batch whose predecessor (``bundle.follows``) is gone: the file lost committed batches (it was
        replaced by an older copy), and committing on top would hide the loss."""
        self._check_lost(conn, batch, bundle.follows)

    @staticmethod
    def _check_lost(conn: sqlite3.Connection, batch: BatchRef, follows: int | None) -> None:
        if follows is None:
            return
        row = conn.execute("SELECT max(batch_id) FROM bundles WHERE app_id = ?", (batch.app_id,)).fetchone()
        newest = row[0] if row else None
        lost = missing_predecessors(follows, newest)
        if not lost:
            return
        raise CommittedWorkLostError(
            f"The reference sink holds batches of {batch.app_id!r} up to {newest} only, but batch {follows} "
            f"was committed before batch {batch.batch_id}: batches {list(lost)} are gone (the file was replaced by "
            "an older copy).",
            f"Rewind the query's checkpoint to batch {lost[0]} (eosink recover --rewind).",
            app_id=batch.app_id,
            batch_id=lost[0],
            batches=lost,
        )

    @staticmethod
    def _state_for_commit(conn: sqlite3.Connection, batch: BatchRef, c: Committable) -> str:
        row = conn.execute(
            "SELECT state FROM txns WHERE id = ? AND app_id = ? AND batch_id = ?",
            (c.id, batch.app_id, batch.batch_id),
        ).fetchone()
        state = row[0] if row else "missing"
        if state not in ("prepared", "committed"):
            raise CommitAbortedError(
                f"Committable {c.id} of batch {batch} is {state}; the batch cannot be committed.",
                "Abort the batch's other committables and replay the batch.",
            )
        return str(state)

    def _publish(self, conn: sqlite3.Connection, batch: BatchRef, c: Committable) -> None:
        """Move one prepared committable's staged rows into ``data`` (no-op if committed)."""
        if self._state_for_commit(conn, batch, c) == "committed":
            return
        conn.execute(_PUBLISH_STAGED, (batch.app_id, batch.batch_id, c.id))
        conn.execute("DELETE FROM staged WHERE txn_id = ?", (c.id,))
        conn.execute(
            "UPDATE txns SET state = 'committed', fingerprint = ? WHERE id = ?",
            (json.dumps(c.fingerprint.to_json()), c.id),
        )

    def abort(self, committables: Sequence[Committable]) -> None:
        """Discard prepared work, all or nothing; unknown ids are ignored (idempotent)."""
        with self._transaction() as conn:
            for c in committables:
                row = conn.execute("SELECT state FROM txns WHERE id = ?", (c.id,)).fetchone()
                if row is None:
                    continue
                if row[0] == "committed":
                    raise CommitAbortedError(
                        f"Cannot abort committed work {c.id}: its rows are visible.",
                        "Do not abort a batch whose commit succeeded; check commit_status first.",
                    )
                conn.execute("UPDATE txns SET state = 'aborted' WHERE id = ?", (c.id,))
                conn.execute("DELETE FROM staged WHERE txn_id = ?", (c.id,))

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        """The bundle with the highest batch_id of ``app_id``."""
        row = (
            self._conn()
            .execute("SELECT bundle FROM bundles WHERE app_id = ? ORDER BY batch_id DESC LIMIT 1", (app_id,))
            .fetchone()
        )
        return Bundle.from_json(json.loads(row[0])) if row else None

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        """COMMITTED if the bundle exists; ABORTED if any work is gone; else PREPARED."""
        with self._transaction("DEFERRED") as conn:  # one snapshot for all the reads
            row = conn.execute(
                "SELECT 1 FROM bundles WHERE app_id = ? AND batch_id = ?", (batch.app_id, batch.batch_id)
            ).fetchone()
            if row is not None:
                return CommitStatus.COMMITTED
            for c in committables:
                state = conn.execute("SELECT state FROM txns WHERE id = ?", (c.id,)).fetchone()
                if state is None or state[0] not in ("prepared", "committed"):
                    return CommitStatus.ABORTED
        return CommitStatus.PREPARED

    def recover(self, app_id: str) -> list[Committable]:
        """Every prepared, uncommitted committable of ``app_id``, by batch_id then id.

        As from ``pre_commit``, the fingerprint is left empty: the caller computes it, and
        the sink only learns (and records) it when the committable is committed.
        """
        rows = (
            self._conn()
            .execute(
                "SELECT batch_id, epoch, participant, id, rows FROM txns "
                "WHERE app_id = ? AND state = 'prepared' ORDER BY batch_id, id",
                (app_id,),
            )
            .fetchall()
        )
        return [
            Committable(BatchRef(app_id, batch_id), epoch, participant, id=txn_id, rows=n, payload={})
            for batch_id, epoch, participant, txn_id, n in rows
        ]

    # -- reading helpers for tests and demos --------------------------------------------

    def rows(self, app_id: str | None = None) -> list[dict[str, Any]]:
        """The visible rows (of ``app_id``, or all), parsed from JSON, in insertion order.

        Values went through JSON: timestamps, decimals and bytes come back as strings.
        """
        cur = self._conn().execute("SELECT row FROM data WHERE ?1 IS NULL OR app_id = ?1 ORDER BY seq", (app_id,))
        return [json.loads(r) for (r,) in cur]

    def bundles(self, app_id: str) -> list[Bundle]:
        """Every committed bundle of ``app_id``, by batch_id."""
        cur = self._conn().execute("SELECT bundle FROM bundles WHERE app_id = ? ORDER BY batch_id", (app_id,))
        return [Bundle.from_json(json.loads(b)) for (b,) in cur]

    def in_doubt_count(self, app_id: str) -> int:
        """How many prepared, uncommitted committables ``app_id`` has (what recover would list)."""
        row = (
            self._conn()
            .execute("SELECT count(*) FROM txns WHERE app_id = ? AND state = 'prepared'", (app_id,))
            .fetchone()
        )
        return int(row[0])
