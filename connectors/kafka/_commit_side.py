"""The coordinator side of KafkaSink (driver): ``commit``, ``abort``, ``commit_status``, ``recover``.

What each does::

    commit(batch, cs, b)   1. the progress topic: the batch's bundle present -> done (the same
                              committables) or CommitAbortedError (others)
                           2. the writer epoch: FencedError if a newer writer than b's holds the app_id
                           3. EndTxn(commit) for each participant transaction, with the producer id
                              and epoch that wrote it (one already committed the same way is fine;
                              one aborted, expired or re-initialised is CommitAbortedError)
                           4. the app_id's other unprepared open data transactions of this
                              batch or an earlier one, of this writer or an older one (a failed
                              task attempt's, a killed speculative copy's), aborted: until the
                              broker's timeout they would hold back the partitions' last stable
                              offset, and with it this batch's rows
                           5. each participant transaction's commit markers written (its rows
                              readable: CompleteCommit of that producer id and epoch), and each
                              aborted leftover's abort markers: TransientError, and the commit
                              retried, while a coordinator that is moving or loading has not
                              written them
                           6. the bundle, in the app_id's bundle transaction (its EndTxn is the
                              batch's commit request: a lost reply is AmbiguousCommitError)
    abort(cs)              EndTxn(abort) for each transaction still open; committed work (its
                              transaction committed, or a kept bundle lists it) is CommitAbortedError
    commit_status(b, cs)   bundle present -> COMMITTED; the bundle transaction committing ->
                              IN_PROGRESS; every transaction open or committed by the producer
                              that wrote it -> PREPARED; otherwise ABORTED
    recover(app_id)        open data transactions of the app_id (ListTransactions) whose marker
                              says "prepared", batch and participant read from the marker (the
                              markers partition read from shortly before the oldest one began)
    fetch_last_bundle      the highest batch's bundle of the app_id in the progress topic (read
                              back from the partition's end, see ``ProgressView``)

A batch is visible participant by participant (each transaction commits on its own); its
bundle is written last, once every participant's rows are readable: a reader that sees the
bundle sees the whole batch. Kafka answers EndTxn once the commit is decided and writes the
markers after; a coordinator failing over in between may finish them seconds later, in any
order, so step 5 waits for them rather than trust the order of the requests. A read_committed
reader stops at a partition's oldest open transaction, so rows are readable only once every
older transaction in their partitions has ended too: step 4 ends the app_id's own (another
producer's open transaction still holds them back, until its timeout).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

from eosink import faults
from eosink._waiting import wait_until
from eosink.connectors.kafka import _wire
from eosink.connectors.kafka._base import _SinkBase
from eosink.connectors.kafka._names import app_txid_prefix, bundle_txid, parse_txid
from eosink.connectors.kafka._progress import WINDOW, Marker, read_markers
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable
from eosink.errors import CommitAbortedError, EosinkError, TransientError

__all__ = ["_CommitSide"]

log = logging.getLogger("eosink.kafka")

_COMMITTED = ("PrepareCommit", "CompleteCommit")
_ABORTED = ("PrepareAbort", "CompleteAbort")
_OPEN = ("Ongoing", "PrepareCommit", "PrepareAbort")
_SETTLE_S = 10.0
"""How long a commit or a read of the bundles waits for a decided commit's markers to be written."""


class _CommitSide(_SinkBase):
    """``commit``, ``abort``, ``commit_status``, ``recover`` and ``fetch_last_bundle`` of :class:`KafkaSink`."""

    def _write_bundle(self, bundle: Bundle) -> None:
        """Write ``bundle`` in the app_id's bundle transaction (``sink.py``)."""
        raise NotImplementedError

    def _bundle_committing(self, app_id: str) -> bool:
        """Whether the app_id's bundle transaction is deciding a commit now (``sink.py``)."""
        raise NotImplementedError

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """End each participant's transaction with a commit, then write the bundle."""
        with self._errors(f"commit of batch {batch}"):
            admin = self._admin()
            self._view.refresh(admin, batch.app_id, batch.batch_id)
            if self._already(batch, bundle):
                return
            self._check_epoch(batch.app_id, bundle.epoch, "commit")
            for c in committables:
                if "txid" in c.payload:
                    self._end(admin, c, commit=True)
            faults.hit(faults.FaultPoint.F6, batch.batch_id)  # every participant committed, the bundle not yet
            ours = [_ids(c) for c in committables if "txid" in c.payload]
            self._readable(batch, ours, self._abort_leftovers(batch, bundle.epoch, ours) if ours else [])
            self._write_bundle(bundle)
            self._settle(batch.app_id)

    def _abort_leftovers(
        self, batch: BatchRef, epoch: int, ours: Sequence[tuple[str, int, int]]
    ) -> list[tuple[str, int, int]]:
        """Abort the app_id's unprepared open data transactions that are not ``ours`` and that an attempt of this
        batch or an earlier one began, under this writer epoch or an older one; every such transaction still ending
        (its transactional id, producer id and epoch). Prepared ones stay: the coordinator aborts those it does not
        commit, through ``recover``.

        Recovery has settled what older writers prepared before this writer's first batch, and no later batch
        writes before this one is settled, so these can never commit: a task attempt that failed or was killed
        after it began (Spark retried it under another pool slot), a speculative copy that lost. One
        ListTransactions per broker when there are none (the usual case)."""
        prefix = self.config.transactional_id_prefix
        mine = {txid for txid, _, _ in ours}
        listed = _list_open(self._admin(), app_txid_prefix(prefix, batch.app_id))
        if not any(txid not in mine and parse_txid(prefix, batch.app_id, txid) for txid in listed):
            return []
        return self._end_unprepared(
            batch.app_id,
            lambda marker, state: (
                (marker.txid, state.producer_id, state.producer_epoch) not in ours
                and marker.epoch <= epoch  # a newer writer's is not this one's to end
                and marker.batch_id <= batch.batch_id
            ),
        )

    def _end_unprepared(
        self, app_id: str, wanted: Callable[[Marker, _wire.TxnState], bool]
    ) -> list[tuple[str, int, int]]:
        """Abort the app_id's open data transactions that no attempt prepared and that ``wanted`` picks (by their
        newest marker and state); each picked one (transactional id, producer id, epoch). Prepared ones stay: the
        coordinator aborts those it does not commit, through ``recover`` (the contract). One with no marker read is
        left too: nothing is known of it (an attempt with rows always wrote one first)."""
        admin = self._admin()
        picked: list[tuple[str, int, int]] = []
        for marker, state in self._open_work(app_id):
            if marker is None or marker.state == "prepared" or not wanted(marker, state):
                continue
            if state.state == "Ongoing":
                log.info(
                    "eosink: aborting %s, left open by attempt %s of batch %s",
                    marker.txid,
                    marker.attempt,
                    marker.batch_id,
                )
                _wire.end_txn(admin, marker.txid, state.producer_id, state.producer_epoch, False, timeout_s=30)
            picked.append((marker.txid, state.producer_id, state.producer_epoch))
        return picked

    def _readable(
        self,
        batch: BatchRef,
        transactions: Sequence[tuple[str, int, int]],
        leftovers: Sequence[tuple[str, int, int]] = (),
    ) -> None:
        """Wait until every one of ``transactions`` (transactional id, producer id, epoch) has written its commit
        markers, and every one of ``leftovers`` its markers, so that the bundle written next is never read before
        a row of its batch (TransientError after ``_SETTLE_S``: the commit is retried, and its EndTxns, already
        committed, are done again harmlessly)."""
        admin = self._admin()
        waits = [(t, functools.partial(_completed, admin, *t)) for t in transactions]
        waits += [(t, functools.partial(_ended, admin, *t)) for t in leftovers]
        pending = [t[0] for t, done in waits if not wait_until(done, _SETTLE_S)]
        if pending:
            raise TransientError(
                f"The markers of batch {batch}'s transactions, or of older ones open in its partitions, {pending} "
                f"are not written after {_SETTLE_S:g} s: their coordinator is moving or loading.",
                "Nothing to do: the commit is retried until the coordinator writes them.",
            )

    def _settle(self, app_id: str) -> None:
        """Wait until the app_id's bundle transaction has written its commit markers.

        Kafka answers EndTxn once a commit is decided (PrepareCommit) and writes the transaction's
        markers after; until then a read_committed reader (this sink's view of the bundles too)
        does not see its records. So a commit returns, and a read of the bundles answers, only
        once what was committed can be read back. Best effort: a transaction coordinator that is
        not answering (a broker restarting) is asked again until ``_SETTLE_S``, then left be (the
        markers follow a decided commit whatever happens; ``commit_status`` tells IN_PROGRESS).
        """
        bundle = bundle_txid(self.config.transactional_id_prefix, app_id)
        wait_until(functools.partial(_markers_written, self._admin(), bundle), _SETTLE_S)

    def _already(self, batch: BatchRef, bundle: Bundle) -> bool:
        found = self._view.bundle(batch.app_id, batch.batch_id)
        if found is None:
            return False
        if set(found.committables) != set(bundle.committables):
            raise CommitAbortedError(
                f"Batch {batch} is committed already, with other committables than these.",
                "Another attempt of the batch was committed; this one is left over: abort it.",
            )
        return True

    def abort(self, committables: Sequence[Committable]) -> None:
        """End each still-open transaction with an abort; refuse committed work."""
        if not committables:
            return
        with self._errors(f"abort of {len(committables)} committable(s)"):
            admin = self._admin()
            for c in committables:
                self._view.refresh(admin, c.batch.app_id, c.batch.batch_id)
                found = self._view.bundle(c.batch.app_id, c.batch.batch_id)
                if found is not None and c.id in found.committables:
                    raise _committed_already(c)
                if "txid" in c.payload:
                    self._end(admin, c, commit=False)

    def _end(self, admin: Any, c: Committable, *, commit: bool) -> None:
        """EndTxn for ``c``'s transaction; CommitAbortedError when it cannot end that way."""
        txid, pid, epoch = _ids(c)
        code = _wire.end_txn(admin, txid, pid, epoch, commit, timeout_s=self.config.transaction_timeout_ms / 1000)
        if code == _wire.NONE:
            return
        state = _wire.describe(admin, txid)
        committed = state is not None and state.wrote(pid, epoch) and state.state in _COMMITTED
        if commit and not committed:
            raise _gone(c, state)
        if not commit and committed:
            raise _committed_already(c)
        # committed already (a retry, a roll-forward), or, aborting, over without a commit (aborted,
        # expired, or its transactional id initialised again): nothing left to do

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        """The batch's fate from the progress topic and the transaction coordinator."""
        with self._errors(f"commit_status of batch {batch}"):
            admin = self._admin()
            self._view.refresh(admin, batch.app_id, batch.batch_id)
            if self._view.bundle(batch.app_id, batch.batch_id) is not None:
                return CommitStatus.COMMITTED
            if self._bundle_committing(batch.app_id):
                return CommitStatus.IN_PROGRESS
            last = self._view.last(batch.app_id)
            if last is not None and last.batch.batch_id >= batch.batch_id + WINDOW:
                return CommitStatus.COMMITTED  # older than the bundles kept: batches commit in order
            for c in committables:
                if "txid" not in c.payload:
                    continue
                txid, pid, epoch = _ids(c)
                state = _wire.describe(admin, txid)
                if state is None or not state.wrote(pid, epoch) or state.state in _ABORTED or state.state == "Empty":
                    return CommitStatus.ABORTED
            return CommitStatus.PREPARED

    def recover(self, app_id: str) -> list[Committable]:
        """The prepared, uncommitted participant transactions of ``app_id``."""
        with self._errors(f"recover({app_id!r})"):
            return [_committable(m, st) for m, st in self._open_work(app_id) if m is not None and m.state == "prepared"]

    def _open_work(self, app_id: str) -> list[tuple[Marker | None, _wire.TxnState]]:
        """Every open data transaction of ``app_id``, with its newest marker (None if it wrote none)."""
        admin = self._admin()
        prefix = self.config.transactional_id_prefix
        ids = _list_open(admin, app_txid_prefix(prefix, app_id))
        found: list[tuple[str, _wire.TxnState]] = []
        for txid in ids:
            if parse_txid(prefix, app_id, txid) is None:
                continue
            state = _wire.describe(admin, txid)
            if state is not None and state.state in _OPEN:
                found.append((txid, state))
        if not found:
            return []
        since = min((state.start_ms for _, state in found if state.start_ms > 0), default=None)
        markers = _markers_of(found, *read_markers(admin, self.config.progress_topic, since))
        if since is not None and any(m is None for m in markers):  # clocks far apart: read the whole partition
            markers = _markers_of(found, *read_markers(admin, self.config.progress_topic))
        return [(m, state) for m, (_, state) in zip(markers, found, strict=True) if m is None or m.app_id == app_id]

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        """The bundle of ``app_id``'s highest committed batch."""
        with self._errors(f"fetch_last_bundle({app_id!r})"):
            self._settle(app_id)
            self._view.refresh(self._admin(), app_id)
            return self._view.last(app_id)


def _markers_written(admin: Any, txid: str) -> bool:
    """Whether ``txid``'s transaction is past a decided commit whose markers are not all written yet."""
    try:
        state = _wire.describe(admin, txid)
    except Exception:  # the coordinator is moving or loading: ask again
        return False
    return state is None or state.state != "PrepareCommit"


def _completed(admin: Any, txid: str, producer_id: int, epoch: int) -> bool:
    """Whether the committed transaction of ``txid`` that ``producer_id`` and ``epoch`` wrote has its markers written:
    the coordinator says ``CompleteCommit`` for it, or the id has moved on (a newer epoch, another producer id, or
    no such id). Any other answer about it (``Ongoing``, ``PrepareCommit``), or one about an older transaction of
    the id, is from before its markers, or from a coordinator that no longer coordinates (a zombie resumed):
    ask again."""
    try:
        state = _wire.describe(admin, txid)
    except Exception:  # the coordinator is moving or loading: ask again
        return False
    if state is None:
        return True
    if state.wrote(producer_id, epoch):
        return state.state == "CompleteCommit"
    return state.producer_id != producer_id or state.producer_epoch > epoch


def _ended(admin: Any, txid: str, producer_id: int, epoch: int) -> bool:
    """Whether the transaction of ``txid`` that ``producer_id`` and ``epoch`` wrote is over, its markers written
    (``CompleteAbort`` or ``CompleteCommit``), or the id has moved on."""
    try:
        state = _wire.describe(admin, txid)
    except Exception:  # the coordinator is moving or loading: ask again
        return False
    if state is None or not state.wrote(producer_id, epoch):
        return True
    return state.state in ("CompleteAbort", "CompleteCommit", "Empty")


def _markers_of(
    found: Sequence[tuple[str, _wire.TxnState]], open_markers: dict[int, list[Marker]], done_markers: list[Marker]
) -> list[Marker | None]:
    """The newest marker of each open transaction in ``found`` (None when none was read)."""
    out: list[Marker | None] = []
    for txid, state in found:
        mine = [m for m in open_markers.get(state.producer_id, []) if m.txid == txid]
        if not mine:  # committing now: its markers may be past their commit marker already
            mine = [m for m in done_markers if m.txid == txid and m.producer_id == state.producer_id]
        out.append(mine[-1] if mine else None)
    return out


def _ids(c: Committable) -> tuple[str, int, int]:
    return str(c.payload["txid"]), int(c.payload["producer_id"]), int(c.payload["producer_epoch"])


def _committable(marker: Marker, state: _wire.TxnState) -> Committable:
    from eosink.connectors.kafka._names import committable_id

    return Committable(
        BatchRef(marker.app_id, marker.batch_id),
        marker.epoch,
        marker.participant,
        committable_id(marker.txid, state.producer_id, state.producer_epoch),
        rows=marker.rows,
        payload={
            "txid": marker.txid,
            "producer_id": state.producer_id,
            "producer_epoch": state.producer_epoch,
            "attempt": marker.attempt,
        },
    )


def _list_open(admin: Any, prefix: str) -> list[str]:
    """Transactional ids starting with ``prefix`` that have a transaction open (any broker)."""
    import re

    from kafka.errors import UnsupportedVersionError

    states = list(_OPEN)
    try:
        listed = admin.list_transactions(state_filters=states, transactional_id_pattern=re.escape(prefix) + ".*")
    except UnsupportedVersionError:  # a broker before 4.1: filter here
        listed = admin.list_transactions(state_filters=states)
    return sorted({t.transactional_id for ts in listed.values() for t in ts if t.transactional_id.startswith(prefix)})


def _committed_already(c: Committable) -> EosinkError:
    return CommitAbortedError(
        f"Committable {c.id} of batch {c.batch} is committed; it cannot be aborted.",
        "Nothing to do: the batch's records are in the topic.",
    )


def _gone(c: Committable, state: _wire.TxnState | None) -> EosinkError:
    now = "unknown to the broker" if state is None else f"{state.state} ({state.producer_id}.{state.producer_epoch})"
    return CommitAbortedError(
        f"Cannot commit committable {c.id} of batch {c.batch}: its transaction is over without a commit "
        f"(the transactional id is now {now}). The broker aborts a transaction open longer than "
        "transaction_timeout_ms, and initialising a producer with the same transactional id aborts it too.",
        "Spark replays the batch unless its commit log holds it; then see 'Lost prepared work' in docs/operations.md.",
    )
