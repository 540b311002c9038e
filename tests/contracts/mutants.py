"""Deliberately broken sinks: each breaks one rule of the contract, and the suite must catch it.

Each mutant names (in :data:`MUST_FAIL`) the suite cases built to catch its fault; the
mutant tests require those very cases to fail — being caught by an unrelated case does not
count.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from eosink.connectors.reference import ReferenceSink
from eosink.connectors.reference.sink import _Txn
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable


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
        return [c for app in apps for c in super().recover(app)]


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


#: mutant -> the suite cases (method names) that must fail against it.
MUST_FAIL: dict[type[ReferenceSink], tuple[str, ...]] = {
    NonIdempotentCommit: ("test_commit_is_idempotent",),
    BundleOutsideTheDataTransaction: ("test_crash_at_every_step_of_commit_keeps_the_bundle_with_its_data",),
    VisiblePreCommit: ("test_pre_commit_is_durable_and_invisible",),
    LeakyRecover: ("test_recover_returns_exactly_this_app_ids_in_doubt_work",),
    GuessingStatus: ("test_commit_status_tells_the_truth",),
    SilentAbortAfterCommit: ("test_abort_after_commit_is_an_error",),
    NoFencing: ("test_fence_hands_out_increasing_epochs_and_fences_older_writers",),
}
