"""What an HDFS writer must be allowed, as data: the docs' table, the error's fix and the tests read it.

The writer needs its target directory for itself and a way to it (:mod:`eosink.stores.hdfs_permissions`).
:func:`writer_permissions` lists that least privilege for one sink configuration, each as the
``hdfs dfs`` command an administrator runs; :func:`refused` tells which one an
``AccessControlException`` is about. ``docs/connectors/hdfs.md`` shows :func:`permissions_table`; a
unit test keeps the two equal, and the secured tests give an ordinary user exactly these, then take
each away in turn.
"""

from __future__ import annotations

from eosink.connectors.hdfs.config import HdfsConfig
from eosink.stores import hdfs_permissions
from eosink.stores.hdfs_permissions import Permission, permissions_table

__all__ = ["Permission", "permissions_table", "refused", "writer_permissions"]

_USES = "every batch's files, the pending and range directories, the app's records"


def writer_permissions(config: HdfsConfig, user: str) -> list[Permission]:
    """The least privilege for ``user`` writing ``config``'s target."""
    return hdfs_permissions.writer_permissions(config.path, user, _USES)


def refused(config: HdfsConfig, user: str, message: str) -> tuple[str, Permission | None]:
    """What an ``AccessControlException`` refused (``"WRITE on /data/events"``), and the permission that gives it."""
    return hdfs_permissions.refused(writer_permissions(config, user), message)
