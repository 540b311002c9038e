"""Deliberately broken sinks: each breaks one rule of the contract, and the suite must catch it.

Each mutant names (in :data:`MUST_FAIL`) the suite cases built to catch its fault; the
mutant tests require those very cases to fail — being caught by an unrelated case does not
count.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from eosink.connectors.reference import ReferenceSink
from eosink.connectors.reference.sink import _Txn
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, TaskRef
from eosink.errors import FencedError


class NonIdempotentCommit(ReferenceSink):
    """A repeated commit publishes the batch's rows a second time."""

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        again = self.commit_status(batch, committables) is CommitStatus.COMMITTED
        super().commit(batch, committables, bundle)
        if again:
            with self._transaction() as conn:
                conn.execute(
                    "INSERT INTO data (row_key, app_id, batch_id, row) "
                    "SELECT NULL, app_id, batch_id, row FROM data WHERE app_id = ? AND batch_id = ?",
                    (batch.app_id, batch.batch_id),
                )


class BundleOutsideTheDataTransaction(ReferenceSink):
    """Declares atomic batch visibility, but writes the bundle in a transaction of its own, after the data."""

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        with self._transaction() as conn:
            if self._already_committed(conn, batch, bundle):
                return
            for c in committables:
                self._publish(conn, batch, c)
        with self._transaction() as conn:
            conn.execute(
                "INSERT OR IGNORE INTO bundles (app_id, batch_id, bundle) VALUES (?, ?, ?)",
                (batch.app_id, batch.batch_id, json.dumps(bundle.to_json())),
            )


class VisiblePreCommit(ReferenceSink):
    """``pre_commit`` copies the staged rows into the visible table at once."""

    def pre_commit(self, txn: _Txn) -> Committable:
        committable = super().pre_commit(txn)
        with self._transaction() as conn:
            conn.execute(
                "INSERT INTO data (row_key, app_id, batch_id, row) "
                "SELECT NULL, ?, ?, row FROM staged WHERE txn_id = ? ORDER BY seq",
                (txn.task.batch.app_id, txn.task.batch.batch_id, txn.id),
            )
        return committable


class LeakyRecover(ReferenceSink):
    """``recover`` lists the in-doubt work of every app_id, not only the one asked for."""

    def recover(self, app_id: str) -> list[Committable]:
        apps = [r[0] for r in self._conn().execute("SELECT DISTINCT app_id FROM txns").fetchall()]
        listed: list[Committable] = []
        for app in apps:
            listed += super().recover(app)
        return listed


class GuessingStatus(ReferenceSink):
    """``commit_status`` guesses PREPARED whenever there is no bundle, without looking at the work."""

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        if self.fetch_last_bundle(batch.app_id) is not None and any(
            b.batch == batch for b in self.bundles(batch.app_id)
        ):
            return CommitStatus.COMMITTED
        return CommitStatus.PREPARED


class SilentAbortAfterCommit(ReferenceSink):
    """Aborting committed work is silently ignored instead of raising CommitAbortedError."""

    def abort(self, committables: Sequence[Committable]) -> None:
        with self._transaction() as conn:
            states = {
                c.id: conn.execute("SELECT state FROM txns WHERE id = ?", (c.id,)).fetchone() for c in committables
            }
        super().abort([c for c in committables if states[c.id] != ("committed",)])


class NoFencing(ReferenceSink):
    """Hands out epochs but never refuses an older writer."""

    @staticmethod
    def _check_epoch(conn: object, app_id: str, epoch: int, what: str) -> None:
        return None


class StatusFromAnyApp(ReferenceSink):
    """``commit_status`` finds the batch's bundle by batch number alone, whichever app_id wrote it."""

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        row = self._conn().execute("SELECT 1 FROM bundles WHERE batch_id = ?", (batch.batch_id,)).fetchone()
        return CommitStatus.COMMITTED if row is not None else super().commit_status(batch, committables)


class StatusFromNewestBundle(ReferenceSink):
    """``commit_status`` says COMMITTED for any batch at or below the app_id's newest bundle."""

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        last = self.fetch_last_bundle(batch.app_id)
        if last is not None and last.batch.batch_id >= batch.batch_id:
            return CommitStatus.COMMITTED
        return super().commit_status(batch, committables)


class PrefixRecover(ReferenceSink):
    """``recover`` matches app_ids with LIKE 'app_id%': ``orders`` also lists ``orders_eu``'s work."""

    def recover(self, app_id: str) -> list[Committable]:
        apps = [
            r[0] for r in self._conn().execute("SELECT DISTINCT app_id FROM txns WHERE app_id LIKE ?", (app_id + "%",))
        ]
        listed: list[Committable] = []
        for app in apps:
            listed += super().recover(app)
        return listed


class CaseBlindLastBundle(ReferenceSink):
    """``fetch_last_bundle`` compares app_ids without case: ``Orders`` gets ``orders``' bundle."""

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        return _one_bundle(self, "lower(app_id) = lower(?) ORDER BY batch_id DESC", app_id)


class NewestEpochRecover(ReferenceSink):
    """``recover`` lists only the newest writer's in-doubt work, forgetting a crashed older writer's."""

    def recover(self, app_id: str) -> list[Committable]:
        found = super().recover(app_id)
        newest = max((c.epoch for c in found), default=0)
        return [c for c in found if c.epoch == newest]


class CommitsEveryAttempt(ReferenceSink):
    """``commit`` publishes every prepared attempt of the batch, not only the committables it was given."""

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        given = {c.id for c in committables}
        extra = [c for c in self.recover(batch.app_id) if c.batch == batch and c.id not in given]
        super().commit(batch, [*committables, *extra], bundle)


class TextOrderedBatches(ReferenceSink):
    """``fetch_last_bundle`` orders batch ids as text: after batch 10, batch 9 looks newest."""

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        return _one_bundle(self, "app_id = ? ORDER BY CAST(batch_id AS TEXT) DESC", app_id)


class LastWrittenBundle(ReferenceSink):
    """``fetch_last_bundle`` returns the bundle written last, not the highest batch's (wrong after a late commit)."""

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        return _one_bundle(self, "app_id = ? ORDER BY rowid DESC", app_id)


class TextComparedEpochs(ReferenceSink):
    """Epochs compared as text: epoch 9 looks newer than epoch 11, so the older writer is not fenced."""

    @staticmethod
    def _check_epoch(conn: sqlite3.Connection, app_id: str, epoch: int, what: str) -> None:
        row = conn.execute("SELECT epoch FROM epochs WHERE app_id = ?", (app_id,)).fetchone()
        if row is not None and str(row[0]) > str(epoch):
            raise FencedError(f"{what} of {app_id!r} at epoch {epoch} was fenced.", "Stop this older writer.")


class FencedOnlyBeforeCommit(ReferenceSink):
    """Refuses an older writer's ``begin``, ``write`` and ``pre_commit``, but lets its ``commit`` through."""

    @staticmethod
    def _check_epoch(conn: sqlite3.Connection, app_id: str, epoch: int, what: str) -> None:
        if what != "commit":
            ReferenceSink._check_epoch(conn, app_id, epoch, what)


class ZeroFingerprint(ReferenceSink):
    """Stores every bundle with an empty fingerprint."""

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        super().commit(batch, committables, replace(bundle, fingerprint=Fingerprint()))


class ConstantFingerprint(ReferenceSink):
    """Stores the bundle of every batch with rows with the same made-up fingerprint."""

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        made_up = Fingerprint(1, 2, 3) if bundle.fingerprint.rows else bundle.fingerprint
        super().commit(batch, committables, replace(bundle, fingerprint=made_up))


class NoMidCommitPoint(ReferenceSink):
    """Never passes fault point F6, so no test ever crashes it between its data and its bundle."""

    @staticmethod
    def _mid_commit(batch: BatchRef) -> None:
        return None


class HandleTrustingStatus(ReferenceSink):
    """Settles a commit by a handle the store issued, as pg_xact_status(xid) alone did, not by the store's records.

    Every commit takes the store's next transaction number (a counter in the file, like PostgreSQL's
    next xid) and remembers it; ``commit_status`` of a remembered batch says COMMITTED once the
    store's counter has passed it. A promoted standby's counter is behind the old primary's, and
    its next commits hand the same numbers out again.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._handles: dict[BatchRef, int] = {}

    def _next_number(self, conn: sqlite3.Connection) -> int:
        conn.execute("CREATE TABLE IF NOT EXISTS mutant_xids (n INTEGER NOT NULL)")
        if conn.execute("SELECT count(*) FROM mutant_xids").fetchone()[0] == 0:
            conn.execute("INSERT INTO mutant_xids VALUES (0)")
        conn.execute("UPDATE mutant_xids SET n = n + 1")
        return int(conn.execute("SELECT n FROM mutant_xids").fetchone()[0])

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        with self._transaction() as conn:
            self._handles[batch] = self._next_number(conn)
        super().commit(batch, committables, bundle)

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        handle = self._handles.get(batch)
        if handle is not None:
            row = self._conn().execute("SELECT n FROM mutant_xids").fetchone()
            if row is not None and row[0] >= handle:
                return CommitStatus.COMMITTED
        return super().commit_status(batch, committables)


class NoPredecessorCheck(ReferenceSink):
    """Commits a batch whatever became of the batch it follows (``Bundle.follows``): a lost batch goes unnoticed."""

    def _check_follows(self, conn: sqlite3.Connection, batch: BatchRef, bundle: Bundle) -> None:
        return None


class NoPredecessorCheckAtBegin(ReferenceSink):
    """Checks the batch a batch follows at commit only: a participant whose rows are visible as it writes them
    (the idempotent strategy's) shows them on top of a lost batch."""

    def begin(self, task: TaskRef) -> _Txn:
        return super().begin(replace(task, follows=None))


def _one_bundle(sink: ReferenceSink, where_order: str, app_id: str) -> Bundle | None:
    """The first bundle ``SELECT bundle FROM bundles WHERE <where_order> LIMIT 1`` finds (a mutant's own query)."""
    query = f"SELECT bundle FROM bundles WHERE {where_order} LIMIT 1"  # the mutants' fixed text, no input
    row = sink._conn().execute(query, (app_id,)).fetchone()
    return Bundle.from_json(json.loads(row[0])) if row else None


RANDOM = "test_random_schedules_keep_committed_content_exact"

#: mutant -> the suite cases (method names) that must fail against it.
MUST_FAIL: dict[type[ReferenceSink], tuple[str, ...]] = {
    NonIdempotentCommit: ("test_commit_is_idempotent",),
    BundleOutsideTheDataTransaction: ("test_crash_at_every_step_of_commit_keeps_the_bundle_with_its_data",),
    VisiblePreCommit: ("test_pre_commit_is_durable_and_invisible", RANDOM),
    LeakyRecover: ("test_recover_returns_exactly_this_app_ids_in_doubt_work", RANDOM),
    GuessingStatus: ("test_commit_status_tells_the_truth",),
    SilentAbortAfterCommit: ("test_abort_after_commit_is_an_error",),
    NoFencing: ("test_fence_hands_out_increasing_epochs_and_fences_older_writers", RANDOM),
    StatusFromAnyApp: ("test_commit_status_answers_for_the_exact_app_id_and_batch", RANDOM),
    StatusFromNewestBundle: ("test_commit_status_answers_for_the_exact_app_id_and_batch", RANDOM),
    PrefixRecover: ("test_fetch_last_bundle_and_recover_are_per_app_id_exactly",),
    CaseBlindLastBundle: ("test_fetch_last_bundle_and_recover_are_per_app_id_exactly",),
    NewestEpochRecover: ("test_recover_lists_in_doubt_work_whatever_epoch_prepared_it", RANDOM),
    CommitsEveryAttempt: ("test_commit_publishes_exactly_the_committables_it_is_given", RANDOM),
    TextOrderedBatches: ("test_batch_ids_and_epochs_are_compared_as_numbers", RANDOM),
    TextComparedEpochs: ("test_batch_ids_and_epochs_are_compared_as_numbers", RANDOM),
    FencedOnlyBeforeCommit: (
        "test_a_fenced_writer_cannot_commit_its_prepared_batch",
        "test_f10_zombie_writer_is_fenced",
        RANDOM,
    ),
    ZeroFingerprint: ("test_f13_divergent_replay_of_a_committed_batch",),
    ConstantFingerprint: ("test_f13_divergent_replay_of_a_committed_batch",),
    LastWrittenBundle: (RANDOM,),
    NoMidCommitPoint: ("test_crash_at_a_fault_point_then_restart_is_exact",),
    HandleTrustingStatus: ("test_a_lost_commit_reply_across_a_failover_is_settled_from_the_new_servers_records",),
    NoPredecessorCheck: ("test_committed_batches_lost_in_a_failover_stop_the_next_commit",),
    NoPredecessorCheckAtBegin: ("test_committed_batches_lost_in_a_failover_stop_the_next_commit",),
}
