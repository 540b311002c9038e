"""The three exactly-once strategies, as small policy objects.

Each strategy says *when* a batch is committed and what it needs from the sink; the
protocol itself (recovery, fencing, fingerprints, resolution of lost commit replies) is
shared and lives in :mod:`eosink.coordinator`.

=====================  ==========================================  ===========================
strategy               commits a batch                             exactly-once when
=====================  ==========================================  ===========================
``TwoPhaseCommit``     after Spark's commit log holds it           always, also for
                                                                   non-deterministic queries
``TxidCheck``          inside foreachBatch, before Spark's log     replays are deterministic
                                                                   (divergence is detected)
``Idempotent``         rows visible as written (upserts by key)    replays are deterministic
=====================  ==========================================  ===========================
"""

from __future__ import annotations

from abc import ABC
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, final

from eosink.contract import Capabilities
from eosink.errors import ConfigurationError
from eosink.fingerprint import COUNT_ONLY, FINGERPRINT_VERSION
from eosink.keys import KEY_COLUMN

__all__ = ["STRATEGY_NAMES", "Idempotent", "Strategy", "TwoPhaseCommit", "TxidCheck", "resolve_strategy"]


class Strategy(ABC):
    """What distinguishes one exactly-once strategy from another, as data."""

    name: ClassVar[str]
    commits_after_spark: ClassVar[bool] = False
    """Commit only once Spark's commit log holds the batch (else: inline, in foreachBatch)."""
    transactional: ClassVar[bool] = True
    """Participants' writes stay invisible until ``commit`` (else: visible at ``pre_commit``)."""
    required: ClassVar[tuple[str, ...]] = ()
    """Capabilities the sink must declare."""

    @final
    def check(self, capabilities: Capabilities, sink_name: str) -> None:
        """Raise ConfigurationError when the sink lacks what this strategy needs."""
        missing = [c for c in self.required if not getattr(capabilities, c)]
        if missing:
            raise ConfigurationError(
                f"The {self.name!r} strategy needs {', '.join(missing)}, which {sink_name} does not declare.",
                f"Choose a strategy the sink supports: {', '.join(supported_strategies(capabilities)) or 'none'}.",
            )

    def upsert_keys(self) -> tuple[str, ...] | None:
        """Key columns the sink must upsert by, or None to append."""
        return None

    def generates_keys(self) -> bool:
        """Whether eosink adds a generated key column to every row."""
        return False

    def fingerprint_version(self) -> int:
        """The fingerprint version a batch is written with: row hashes where a replay of a committed batch can
        happen and is compared; the row count only where the sink commits after Spark (no such replay)."""
        return COUNT_ONLY if self.commits_after_spark else FINGERPRINT_VERSION

    def rolls_forward(self, spark_committed: bool) -> bool:
        """At recovery: commit a batch whose manifest exists (True) or abort it (False)."""
        return spark_committed if self.commits_after_spark else True

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


@dataclass(frozen=True, repr=False)
class TwoPhaseCommit(Strategy):
    """Prepare in foreachBatch, commit after Spark's commit log: safe for non-deterministic queries."""

    name: ClassVar[str] = "2pc"
    commits_after_spark: ClassVar[bool] = True
    required: ClassVar[tuple[str, ...]] = ("supports_prepare",)


@dataclass(frozen=True, repr=False)
class TxidCheck(Strategy):
    """Commit inside foreachBatch; resolve lost replies by asking the sink; detect divergent replays."""

    name: ClassVar[str] = "txid-check"
    required: ClassVar[tuple[str, ...]] = ("supports_txid_status",)


@dataclass(frozen=True, repr=False)
class Idempotent(Strategy):
    """Upsert rows by deterministic keys: no transactions, converges to exactly-once.

    ``key_columns`` are the user's key columns; without them eosink generates a
    UUIDv7-shaped key per row in the column :data:`eosink.keys.KEY_COLUMN`.
    """

    key_columns: tuple[str, ...] = ()
    name: ClassVar[str] = "idempotent"
    transactional: ClassVar[bool] = False
    required: ClassVar[tuple[str, ...]] = ("supports_keys",)

    def __init__(self, key_columns: Sequence[str] = ()) -> None:
        if isinstance(key_columns, str):
            key_columns = (key_columns,)
        object.__setattr__(self, "key_columns", tuple(key_columns))

    def upsert_keys(self) -> tuple[str, ...]:
        return self.key_columns or (KEY_COLUMN,)

    def generates_keys(self) -> bool:
        return not self.key_columns

    def __repr__(self) -> str:
        return f"Idempotent(key_columns={self.key_columns!r})"


_BY_NAME: dict[str, type[Strategy]] = {s.name: s for s in (TwoPhaseCommit, TxidCheck, Idempotent)}

STRATEGY_NAMES: tuple[str, ...] = tuple(_BY_NAME)
"""The strategies' names, in the order the docs and tools list them: ``2pc``, ``txid-check``, ``idempotent``."""


def supported_strategies(capabilities: Capabilities) -> list[str]:
    """Names of the strategies a sink with these capabilities supports."""
    return [n for n, s in _BY_NAME.items() if all(getattr(capabilities, c) for c in s.required)]


def resolve_strategy(strategy: Strategy | str) -> Strategy:
    """A strategy object from an object or one of the names ``2pc``, ``txid-check``, ``idempotent``."""
    if isinstance(strategy, Strategy):
        return strategy
    cls = _BY_NAME.get(str(strategy).strip().lower())
    if cls is None:
        raise ConfigurationError(
            f"Unknown strategy {strategy!r}.",
            f"Use one of {', '.join(repr(n) for n in _BY_NAME)} or a Strategy object.",
        )
    return cls()
