"""What the server's replication promises a committed batch: read once at setup, shown by ``eosink status``.

PostgreSQL acknowledges a COMMIT when its WAL is flushed locally, and also on a synchronous
standby when ``synchronous_standby_names`` names one that is connected and ``synchronous_commit``
is ``on``, ``remote_write`` or ``remote_apply``. Only then does a failover to that standby keep
every acknowledged commit. With asynchronous standbys (Patroni's and CloudNativePG's default) a
failover may drop the last acknowledged commits: eosink cannot prevent that, and detects it
instead (:class:`~eosink.errors.CommittedWorkLostError` at the next batch or start).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["REPLICATION_SQL", "Replication", "read_replication"]

REPLICATION_SQL = (
    "SELECT current_setting('synchronous_commit'), current_setting('synchronous_standby_names'), "
    "(SELECT count(*) FROM pg_stat_replication), "
    "(SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')), "
    "(SELECT count(*) FROM pg_stat_replication WHERE sync_state IS NULL)"
)
"""pg_stat_replication lists every walsender to any role; its sync_state only to pg_read_all_stats (else NULL)."""

_REMOTE = ("on", "remote_write", "remote_apply")


@dataclass(frozen=True)
class Replication:
    """The replication settings and standbys of a primary, and what they promise."""

    synchronous_commit: str
    synchronous_standby_names: str
    standbys: int
    synchronous_standbys: int
    hidden: int = 0
    """Standbys whose sync_state this role may not read (it lacks pg_read_all_stats)."""

    @property
    def synchronous(self) -> bool:
        """Every acknowledged commit is also on a standby: a failover to it loses none."""
        return (
            bool(self.synchronous_standby_names.strip())
            and self.synchronous_commit in _REMOTE
            and (self.synchronous_standbys > 0 or self.hidden > 0)
        )

    @property
    def mode(self) -> str:
        """``synchronous``, ``asynchronous`` (standbys, none synchronous) or ``none`` (no standby streams)."""
        if self.synchronous:
            return "synchronous"
        return "asynchronous" if self.standbys else "none"

    def promise(self) -> str:
        """One sentence: what a failover does to committed batches on this server."""
        if self.synchronous:
            waits = (
                "acknowledged" if self.synchronous_standbys else "acknowledged (sync_state not readable by this role)"
            )
            return (
                f"synchronous replication (synchronous_standby_names={self.synchronous_standby_names!r}, "
                f"synchronous_commit={self.synchronous_commit}, {self.standbys} standby(s), a synchronous one "
                f"{waits}): a failover to the synchronous standby keeps every committed batch"
            )
        if self.standbys:
            return (
                f"asynchronous replication ({self.standbys} standby(s), none synchronous): a failover may drop the "
                "last committed batches; eosink stops with CommittedWorkLostError at the next batch or start, and "
                "`eosink recover --rewind` runs them again"
            )
        named = self.synchronous_standby_names.strip()
        waiting = f" (synchronous_standby_names={named!r} names none that is connected: commits wait)" if named else ""
        return f"no standby streams from this server{waiting}: a committed batch is as safe as this server's disk"

    def to_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "synchronous_commit": self.synchronous_commit,
            "synchronous_standby_names": self.synchronous_standby_names,
            "standbys": self.standbys,
            "synchronous_standbys": self.synchronous_standbys,
            "promise": self.promise(),
        }


def read_replication(conn: Any) -> Replication:
    """The replication of the primary behind ``conn`` (one round trip, any role)."""
    row = conn.execute(REPLICATION_SQL).fetchone()
    assert row is not None
    return Replication(str(row[0]), str(row[1]), int(row[2]), int(row[3]), int(row[4]))
