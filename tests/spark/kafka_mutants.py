"""KafkaSink as it was before its commit aborted leftover transactions: a negative control that the cluster
pipeline's reader must flag.

Imported by ``sink_driver.py`` (``EOSINK_TEST_SINK_CLASS=kafka_mutants:LeftoverKeepingKafkaSink``) from its own
folder; it pickles as a plain :class:`KafkaSink` (its change is the driver's alone: the commit), so executors never
import this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eosink.connectors.kafka import KafkaSink
from eosink.contract import BatchRef


class LeftoverKeepingKafkaSink(KafkaSink):
    """Writes a batch's bundle without ending the open transactions that failed attempts of the batch left behind:
    until the broker's transaction timeout they hold back the last stable offset of the partitions they wrote."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (KafkaSink, (self.config,))

    def _abort_leftovers(
        self, batch: BatchRef, epoch: int, ours: Sequence[tuple[str, int, int]]
    ) -> list[tuple[str, int, int]]:
        return []
