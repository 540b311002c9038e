"""The operator's view of a sink: what each app_id committed last and what is in doubt.

Every connector offers a :class:`SinkAdmin` (through its :class:`~eosink.profiles.SinkProfile`):
a small, read-mostly API that tooling uses instead of the connector's private modules. Its
answers are plain values, the same for every sink, so ``eosink status`` and ``eosink recover``
print and judge them without knowing which sink they look at::

    admin = get_profile("postgres").admin_from(conninfo="postgresql://...", table="payments")
    for app in admin.status().apps:
        print(app.app_id, app.last_batch_id, len(app.in_doubt))
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from eosink.contract import Bundle, Committable, Sink

__all__ = ["AppStatus", "InDoubtWork", "ServerState", "SinkAdmin", "SinkStatus", "prepared_work"]


@dataclass(frozen=True)
class ServerState:
    """One server behind a sink, as the sink sees it (a primary and its standbys, a broker, a NameNode).

    ``role`` is the server's own word (``primary``, ``standby``, ``unreachable``); ``identity`` says
    which server history it belongs to (PostgreSQL: system identifier and timeline), so a failover
    shows; ``state`` what else matters (replication: which standbys are synchronous; an error).
    """

    address: str
    role: str
    identity: str = ""
    state: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"address": self.address, "role": self.role, "identity": self.identity, "state": self.state}


@dataclass(frozen=True)
class InDoubtWork:
    """One piece of prepared (or possibly committed) work whose fate is not decided yet.

    ``kind`` says what it is in the sink's terms (``prepared`` transaction, ``staged`` rows, an
    open ``transaction``, an incomplete ``upload``, a ``pending`` directory); ``expires_in_s`` is
    the time before the sink itself discards it (a transaction timeout, a lifecycle rule), None
    when it never does; ``details`` holds what else the sink knows (owner, database, ...).
    """

    kind: str
    id: str
    batch_id: int | None
    participant: int | None
    epoch: int | None
    age_s: float
    rows: int | None = None
    expires_in_s: float | None = None
    details: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "batch_id": self.batch_id,
            "participant": self.participant,
            "epoch": self.epoch,
            "age_s": round(self.age_s, 3),
            "rows": self.rows,
            "expires_in_s": None if self.expires_in_s is None else round(self.expires_in_s, 3),
            "details": dict(self.details),
        }


@dataclass(frozen=True)
class AppStatus:
    """One app_id: its writer epoch, its newest committed batch, and its in-doubt work."""

    app_id: str
    epoch: int | None
    last_batch_id: int | None = None
    last_rows: int | None = None
    last_committed_age_s: float | None = None
    last_strategy: str | None = None
    last_checkpoint_id: str | None = None
    in_doubt: tuple[InDoubtWork, ...] = ()

    @classmethod
    def of(
        cls, app_id: str, epoch: int | None, last: Bundle | None, in_doubt: tuple[InDoubtWork, ...] = ()
    ) -> AppStatus:
        """An app_id's status from its writer epoch (0 or None: never fenced), the bundle of its newest
        committed batch (None: none) and its in-doubt work."""
        return cls(
            app_id,
            epoch or None,
            None if last is None else last.batch.batch_id,
            None if last is None else last.fingerprint.rows,
            None,
            None if last is None else last.strategy,
            None if last is None else last.checkpoint_id,
            in_doubt,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "app_id": self.app_id,
            "epoch": self.epoch,
            "last_bundle": None
            if self.last_batch_id is None
            else {
                "batch_id": self.last_batch_id,
                "rows": self.last_rows,
                "committed_age_s": None if self.last_committed_age_s is None else round(self.last_committed_age_s, 3),
                "strategy": self.last_strategy,
                "checkpoint_id": self.last_checkpoint_id,
            },
            "in_doubt": [w.to_json() for w in self.in_doubt],
        }


def prepared_work(
    committables: list[Committable], started: Callable[[Committable], float | None], now: float
) -> tuple[InDoubtWork, ...]:
    """Prepared committables (a sink's ``recover``) as in-doubt work, aged from ``started(c)`` (the attempt's
    start, epoch seconds, or None when unknown) to ``now``."""
    work = []
    for c in committables:
        began = started(c)
        age = max(0.0, now - began) if began else 0.0
        work.append(InDoubtWork("prepared", c.id, c.batch.batch_id, c.participant, c.epoch, round(age, 3), c.rows))
    return tuple(work)


@dataclass(frozen=True)
class SinkStatus:
    """What one configured sink holds: ``where`` says which (with no secret in it)."""

    sink: str
    where: str
    exists: bool
    apps: tuple[AppStatus, ...] = ()
    orphans: tuple[InDoubtWork, ...] = ()
    """In-doubt work of this sink that belongs to no app_id it knows."""
    notes: tuple[str, ...] = ()
    """What the sink's servers allow that changes what a writer can count on (e.g. how long prepared work lasts)."""
    servers: tuple[ServerState, ...] = ()
    """The servers behind the sink, where the sink can tell (a replicated PostgreSQL: each server's role and
    timeline)."""

    @property
    def in_doubt(self) -> int:
        """In-doubt work of every listed app_id, plus orphans."""
        return sum(len(a.in_doubt) for a in self.apps) + len(self.orphans)

    def app(self, app_id: str) -> AppStatus | None:
        return next((a for a in self.apps if a.app_id == app_id), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "sink": self.sink,
            "where": self.where,
            "exists": self.exists,
            "apps": [a.to_json() for a in self.apps],
            "orphans": [w.to_json() for w in self.orphans],
            "in_doubt": self.in_doubt,
            "notes": list(self.notes),
            "servers": [server.to_json() for server in self.servers],
        }


class SinkAdmin(ABC):
    """One configured sink, as tooling sees it (``eosink status``, ``eosink recover``, the harnesses).

    Never holds a secret in its ``repr``; :meth:`scrub` removes the sink's secrets from any
    text (an error message) before it is printed.
    """

    @abstractmethod
    def describe(self) -> str:
        """Where this sink is, for people (no secret)."""

    @abstractmethod
    def status(self, app_id: str | None = None) -> SinkStatus:
        """The status of every app_id the sink knows (or of ``app_id`` alone). Read-only.

        ConfigurationError when ``app_id`` is given and the sink does not know it.
        """

    @abstractmethod
    def make_sink(self) -> Sink[Any]:
        """A sink object on this configuration (what recovery drives)."""

    def drop_app(self, app_id: str) -> None:
        """Remove ``app_id``'s bookkeeping (epochs, bundles, in-doubt work aborted); its data stays."""
        raise NotImplementedError(f"{type(self).__name__} cannot drop an app_id's bookkeeping")

    def scrub(self, text: str) -> str:
        """``text`` without this sink's secrets."""
        return text

    def jdbc_url(self) -> str | None:
        """A JDBC URL of the same server, for Spark's built-in writers (None where JDBC does not apply)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections held by this object."""
