"""The concurrent reader: polls the sink while the job runs and records every partial view of a batch.

Each poll is one consistent snapshot (:meth:`~eosink.chaos.target.ChaosTarget.snapshotter`): the
visible rows per batch_id and the batch_ids with a bundle. A view is partial when a batch shows
some but not all of its rows (the oracle knows how many keys each batch touches), or rows
without its bundle, or a bundle without its rows (data and bundle are one commit).

Where the sink, strategy and mode declare atomic batch visibility, a partial view is a failure
(``partial_reads``); elsewhere it is information (``partial_views``). Polls that find the server
down (it is restarted on purpose) or the tables not created yet are counted and skipped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from types import TracebackType

from eosink.chaos.target import Snapshot

__all__ = ["Reader"]

MAX_EXAMPLES = 10
POLL_S = 0.05


class Reader:
    """A thread polling ``poll`` every 50 ms until stopped; ``expected(batch_id)`` is the batch's row
    count (None: not planned yet, as far as the caller knows)."""

    def __init__(
        self, poll: Callable[[], Snapshot | None], expected: Callable[[int], int | None], *, atomic: bool
    ) -> None:
        self.poll = poll
        self.expected = expected
        self.atomic = atomic
        self.polls = 0
        self.by_reader: dict[str, int] = {}
        self.unavailable = 0
        self.partial = 0
        self.order_breaks = 0
        """Polls in which a fan-out's later sink showed a batch an earlier one had not committed."""
        self.examples: list[str] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="eosink-chaos-reader", daemon=True)

    @property
    def partial_reads(self) -> int:
        """Partial views where atomicity is declared (a failure)."""
        return self.partial if self.atomic else 0

    @property
    def partial_views(self) -> int:
        """Partial views where it is not (information)."""
        return 0 if self.atomic else self.partial

    def check(self, snap: Snapshot) -> list[str]:
        """The partial views in one snapshot (and in a fan-out's other sinks' snapshots, ``others``)."""
        seen = [view for other in snap.others for view in self.check(other)]
        for batch_id, n in sorted(snap.rows_per_batch.items()):
            want = self.expected(batch_id)
            if n != want:
                seen.append(f"batch {batch_id}: {n} of {want} rows visible")
            elif batch_id not in snap.bundles:
                seen.append(f"batch {batch_id}: all rows visible, no bundle")
        for batch_id in sorted(snap.bundles - snap.rows_per_batch.keys()):
            seen.append(f"batch {batch_id}: bundle without rows")
        return seen

    def _run(self) -> None:
        try:
            while not self._stop.wait(POLL_S):
                snap = self.poll()
                if snap is None:
                    self.unavailable += 1
                    continue
                self.polls += 1
                if snap.reader:
                    self.by_reader[snap.reader] = self.by_reader.get(snap.reader, 0) + 1
                if snap.order_breaks:
                    self.order_breaks += 1
                    if len(self.examples) < MAX_EXAMPLES:
                        self.examples.append("; ".join(snap.order_breaks[:3]))
                views = self.check(snap)
                if views:
                    self.partial += 1
                    if len(self.examples) < MAX_EXAMPLES:
                        self.examples.append("; ".join(views[:3]))
        except BaseException as exc:  # reported by stop(): a dead reader must not pass silently
            self.error = exc

    def start(self) -> Reader:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop polling; raises if the reader died."""
        self._stop.set()
        self._thread.join(30)
        if self._thread.is_alive():
            raise RuntimeError("the chaos reader did not stop")
        if self.error is not None:
            raise RuntimeError(f"the chaos reader failed: {self.error!r}") from self.error

    def __enter__(self) -> Reader:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
