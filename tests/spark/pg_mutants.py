"""PostgresSink as it was before issue 58: a negative control that the failover tests' checker must flag.

Imported by ``sink_driver.py`` (``EOSINK_TEST_SINK_CLASS=pg_mutants:XidTrustingPostgresSink``) from its own
folder; it pickles as a plain :class:`PostgresSink` (its changes are the driver's alone), so executors
never import this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eosink.connectors.postgres import PostgresSink
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable


class XidTrustingPostgresSink(PostgresSink):
    """Settles a lost COMMIT reply by ``pg_xact_status`` of the remembered transaction id, on whatever server
    answers now, and commits a batch whatever became of the batch it follows."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (PostgresSink, (self.config,))

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        in_flight = self._in_flight.get(batch)
        if in_flight is not None:
            with self._errors("commit_status"):
                row = self._ctl().execute("SELECT pg_xact_status(%s::xid8)", (in_flight[0],)).fetchone()
            state = row[0] if row else None
            if state == "in progress":
                return CommitStatus.IN_PROGRESS
            if state == "committed":
                del self._in_flight[batch]
                return CommitStatus.COMMITTED
        return super().commit_status(batch, committables)

    def _check_follows(self, ctl: Any, batch: BatchRef, bundle: Bundle, newest: int | None) -> None:
        return None
