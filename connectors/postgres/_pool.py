"""The sink's process-local connections: one control connection per thread, idle participant connections.

Bookkeeping only, no durable state: a crash loses it with the process (and the server rolls
back whatever those connections had open). Kept apart from ``sink.py`` so that no lock is
ever held by the protocol code itself.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Any

from psycopg import Connection
from psycopg.pq import TransactionStatus

if TYPE_CHECKING:
    from eosink.connectors.postgres._lineage import Lineage

__all__ = ["Conn", "Connections"]

Conn = Connection[tuple[Any, ...]]

# Connections a forked child inherited: closing one would end the parent's session, so the
# child keeps them referenced (never garbage-collected, never closed) and opens its own.
_INHERITED: list[Conn] = []


class _Local(threading.local):
    conn: Conn | None = None


class Connections:
    """Every connection one sink object opened in this process."""

    def __init__(self, connect: Callable[[bool], tuple[Conn, Lineage | None]]) -> None:
        self._connect = connect
        self._lock = threading.RLock()
        self._pid = os.getpid()
        self._local = _Local()
        self._all: list[Conn] = []
        self._idle: list[Conn] = []
        self._lineages: weakref.WeakKeyDictionary[Conn, Lineage] = weakref.WeakKeyDictionary()

    def _check_pid(self) -> bool:
        """False (and everything forgotten) in a forked child."""
        if self._pid == os.getpid():
            return True
        with self._lock:
            _INHERITED.extend(self._all)
            self._all, self._idle = [], []
            self._local = _Local()
            self._pid = os.getpid()
        return False

    def _open(self, autocommit: bool) -> Conn:
        conn, lineage = self._connect(autocommit)
        with self._lock:
            self._all.append(conn)
            if lineage is not None:
                self._lineages[conn] = lineage
        return conn

    def lineage(self, conn: Conn) -> Lineage:
        """The lineage of ``conn``'s server, read once per connection (an autocommit one: no transaction left open)."""
        from eosink.connectors.postgres._lineage import read_lineage

        known = self._lineages.get(conn)
        if known is None:
            known = self._lineages[conn] = read_lineage(conn)
        return known

    def control(self) -> tuple[Conn, bool]:
        """This thread's autocommit connection, and whether it is new."""
        self._check_pid()
        conn = self._local.conn
        if conn is not None and not conn.closed:
            return conn, False
        conn = self._local.conn = self._open(True)
        return conn, True

    def forget_control(self, *, healthy_too: bool = False) -> None:
        """Drop this thread's control connection if it broke, or even if not (``healthy_too``: its server is no
        longer the one to talk to); the next call reconnects."""
        conn = self._local.conn
        if conn is not None and (healthy_too or conn.closed or conn.broken):
            self._local.conn = None
            self.discard(conn)

    def take(self) -> Conn:
        """An idle connection for one participant transaction (not autocommit), or a new one."""
        self._check_pid()
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and conn.info.transaction_status == TransactionStatus.IDLE:
                    return conn
        return self._open(False)

    def give_back(self, conn: Conn | None) -> None:
        """Return a participant connection: rolled back, kept if healthy, else closed."""
        if conn is None:
            return
        with suppress(Exception):
            if not conn.closed and conn.info.transaction_status != TransactionStatus.IDLE:
                conn.rollback()
        if not self._check_pid() or conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
            self.discard(conn)
            return
        with self._lock:
            self._idle.append(conn)

    def discard(self, conn: Conn) -> None:
        """Close and forget one connection (never one inherited from a parent process)."""
        with self._lock:
            if conn not in self._all:
                return
            self._all.remove(conn)
        with suppress(Exception):
            conn.close()

    def close_all(self) -> None:
        """Close every connection of this process (the server rolls back what they had open)."""
        if not self._check_pid():
            return
        with self._lock:
            conns, self._all, self._idle = self._all, [], []
            self._local = _Local()
        for conn in conns:
            with suppress(Exception):
                conn.close()
