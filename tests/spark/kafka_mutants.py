"""KafkaSink mutants: negative controls that the Kafka cluster tests' reader must flag.

Imported by ``sink_driver.py`` (``EOSINK_TEST_SINK_CLASS=kafka_mutants:<name>``) from its own folder, and by the
connector tests; each changes the driver's commit alone and pickles as a plain :class:`KafkaSink`, so executors
never import this module.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

from eosink.connectors.kafka import KafkaSink
from eosink.contract import BatchRef, Bundle, Committable
from eosink.errors import CommitAbortedError, EosinkError, FencedError


class _DriverOnly(KafkaSink):
    def __reduce__(self) -> tuple[Any, ...]:
        return (KafkaSink, (self.config,))


class LeftoverKeepingKafkaSink(_DriverOnly):
    """Writes a batch's bundle without ending the open transactions that failed attempts of the batch left behind:
    until the broker's transaction timeout they hold back the last stable offset of the partitions they wrote."""

    def _abort_leftovers(
        self, batch: BatchRef, epoch: int, ours: Sequence[tuple[str, int, int]]
    ) -> list[tuple[str, int, int]]:
        return []


class AbortingOnTimeoutKafkaSink(_DriverOnly):
    """Takes a commit that got no answer (an EndTxn's reply lost, its coordinator killed or paused as it
    answered) for a failed one: it aborts every transaction of the batch (its ``abort`` skips committed work
    instead of refusing it), and gives the batch up for a replay (CommitAbortedError),
    instead of asking the coordinator again. When a participant's commit had been decided, the replay writes its
    rows a second time."""

    aborted: list[int] = []
    """The batches it gave up (in the driver's process), for a test to assert on."""

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        try:
            super().commit(batch, committables, bundle)
        except (CommitAbortedError, FencedError):
            raise
        except EosinkError:
            self.abort(committables)
            self.aborted.append(batch.batch_id)
            raise CommitAbortedError(
                f"The commit of batch {batch} got no answer; its transactions were aborted.", "Spark replays it."
            ) from None

    def abort(self, committables: Sequence[Committable]) -> None:
        """The sink's abort of each committable alone, committed work skipped instead of refused."""
        for c in committables:
            with contextlib.suppress(CommitAbortedError):
                super().abort([c])
