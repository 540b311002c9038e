"""Which server the sink talks to: a PostgreSQL cluster's system identifier and timeline (its *lineage*).

A handle a server hands out means something only on the lineage that issued it:

* a transaction id: a standby promoted before it received a transaction's WAL hands the same
  xid out again, to another transaction, and ``pg_xact_status()`` then answers for that one;
* a writer epoch (``ctl.epochs``): an epoch bumped on the old primary may be missing on the new
  one, which would hand the same number to the next writer.

The system identifier names the cluster (``initdb`` made it; every standby copied it); the
timeline is +1 at every promotion (and point-in-time recovery), so a promoted standby is on a
newer timeline than the primary it left, and a resumed old primary (split brain) stays on the
older one. ``pg_control_checkpoint()``'s timeline lags a promotion until its first checkpoint, so
a primary's timeline is read from the WAL file it writes (``pg_walfile_name``) instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["LINEAGE_SQL", "Lineage", "epoch_floor", "read_lineage"]

LINEAGE_SQL = (
    "SELECT s.system_identifier, pg_is_in_recovery(), "
    "CASE WHEN pg_is_in_recovery() THEN c.timeline_id "
    "ELSE greatest(c.timeline_id, ('x' || left(pg_walfile_name(pg_current_wal_lsn()), 8))::bit(32)::int) END "
    "FROM pg_control_system() s, pg_control_checkpoint() c"
)
"""system identifier, in recovery (a standby), timeline: readable by any role (no privilege needed)."""

EPOCHS_PER_TIMELINE = 1_000_000_000
"""Writer epochs handed out on timeline t are at least ``(t - 1) * EPOCHS_PER_TIMELINE + 1`` (:func:`epoch_floor`)."""


@dataclass(frozen=True)
class Lineage:
    """A server's place in its cluster's history: ``system_identifier`` and ``timeline``.

    ``standby`` tells whether the server is in recovery; ``address`` is where it was reached
    (``host:port``, for messages only). Two lineages are *the same* when both the cluster and
    the timeline are.
    """

    system_identifier: int
    timeline: int
    standby: bool = False
    address: str = ""

    def same(self, other: Lineage | None) -> bool:
        """Whether handles issued under ``other`` mean the same thing here (same cluster, same timeline)."""
        return other is not None and (self.system_identifier, self.timeline) == (
            other.system_identifier,
            other.timeline,
        )

    def newer_than(self, other: Lineage) -> bool:
        """Whether this server is on a later timeline of the same cluster than ``other``."""
        return self.system_identifier == other.system_identifier and self.timeline > other.timeline

    def __str__(self) -> str:
        where = f" at {self.address}" if self.address else ""
        role = "standby" if self.standby else "primary"
        return f"{role}{where} (system {self.system_identifier}, timeline {self.timeline})"

    def to_json(self) -> dict[str, Any]:
        return {
            "system_identifier": str(self.system_identifier),
            "timeline": self.timeline,
            "standby": self.standby,
            "address": self.address,
        }


def read_lineage(conn: Any) -> Lineage:
    """The lineage of the server behind ``conn`` (one round trip; autocommit or inside a transaction)."""
    row = conn.execute(LINEAGE_SQL).fetchone()
    assert row is not None
    info = conn.info
    return Lineage(int(row[0]), int(row[2]), bool(row[1]), f"{info.host}:{info.port}")


def epoch_floor(lineage: Lineage | None) -> int:
    """The least epoch ``fence`` may hand out on ``lineage``: 1 on timeline 1, ``1_000_000_001`` on timeline 2, ...

    An epoch bumped on an old primary may be lost in an asynchronous failover; without a floor
    the new primary would hand the same number to the next writer, and the old writer would not
    be fenced. Every promotion raises the timeline, so an epoch handed out after it is higher
    than any epoch the old timeline handed out (fewer than a billion writers per timeline).
    """
    timeline = 1 if lineage is None else max(1, lineage.timeline)
    return (timeline - 1) * EPOCHS_PER_TIMELINE + 1
