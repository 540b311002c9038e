"""What both sides of :class:`~eosink.connectors.postgres.sink.PostgresSink` use from its core.

The sink is its core (``sink.py``: configuration, connections, error translation, fencing)
plus a participant side (``_write_side``) and a coordinator side (``_commit_side``). The core's
members that both sides use are declared here, once, so that each side type-checks on its own;
mypy checks ``PostgresSink``'s definitions against these declarations.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from psycopg import sql

from eosink.connectors.postgres._lineage import Lineage
from eosink.connectors.postgres._pool import Conn, Connections
from eosink.connectors.postgres.config import PostgresConfig
from eosink.contract import BatchRef

__all__ = ["_SinkBase"]


class _SinkBase:
    """Declarations only: ``PostgresSink`` defines every member (nothing here exists at run time)."""

    config: PostgresConfig
    _conns: Connections
    _several: bool
    """The conninfo names several servers (a primary and its standbys)."""

    if TYPE_CHECKING:

        def _ctl(self) -> Conn:
            """This thread's autocommit control connection."""

        def _ctl_newest(self) -> Conn:
            """The control connection, moved to a newer primary first if one was promoted (several servers)."""

        def _lineage(self, conn: Conn) -> Lineage:
            """The lineage of ``conn``'s server."""

        def _check_follows(self, ctl: Conn, batch: BatchRef, follows: int | None, newest: int | None) -> None:
            """CommittedWorkLostError when the server no longer holds batch ``follows`` (``_commit_side``)."""

        def _errors(self, what: str) -> AbstractContextManager[None]:
            """psycopg errors inside become eosink errors."""

        def _t(self, name: str) -> sql.Identifier:
            """A table of the control schema."""

        @staticmethod
        def _fenced(app_id: str, epoch: int, current: int, what: str) -> None:
            """FencedError when a newer writer holds ``current`` > ``epoch``."""
