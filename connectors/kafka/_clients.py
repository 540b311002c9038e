"""Admin clients shared by every KafkaSink object of this process.

Spark unpickles the sink anew for every task, in Python workers it reuses across batches. Each
kafka-python admin client runs an I/O thread and keeps its connections; one per task would leak
a thread and sockets per participant per batch, and pay a bootstrap each time. So clients are
kept here, one per connection settings and client id, for the life of the process (their
threads are daemons); a client that lost a reply is dropped, so the next call opens a new one.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

__all__ = ["drop_admin", "shared_admin"]

_LOCK = threading.Lock()
_ADMINS: dict[str, Any] = {}


def _key(kwargs: dict[str, Any]) -> str:
    return repr(sorted((k, repr(v)) for k, v in kwargs.items()))


def shared_admin(kwargs: dict[str, Any]) -> Any:
    """This process's admin client for ``kwargs`` (KafkaAdminClient keyword arguments), opened at first use."""
    key = _key(kwargs)
    with _LOCK:
        admin = _ADMINS.get(key)
        if admin is None:
            from kafka import KafkaAdminClient

            admin = KafkaAdminClient(**kwargs)
            _ADMINS[key] = admin
        return admin


def drop_admin(kwargs: dict[str, Any]) -> None:
    """Close and forget the client of ``kwargs`` (after a lost reply: its connection state is unknown)."""
    with _LOCK:
        admin = _ADMINS.pop(_key(kwargs), None)
    if admin is not None:
        with contextlib.suppress(Exception):  # closing a broken client must not hide why it was dropped
            admin.close()
