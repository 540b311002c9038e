"""What an HDFS writer must be allowed, as data: the docs' table, the error's fix and the tests read it.

HDFS has no grants, only owners and modes (and ACLs, which work the same way): the writer needs
its target directory for itself and a way to it. :func:`writer_permissions` lists that least
privilege for one sink configuration, each as the ``hdfs dfs`` command an administrator runs;
:func:`refused` tells which one an ``AccessControlException`` is about. ``docs/connectors/hdfs.md``
shows :func:`permissions_table`; a unit test keeps the two equal, and the secured tests give an
ordinary user exactly these, then take each away in turn. Kerberos is not covered here (see the
Security page).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass

from eosink.connectors.hdfs.config import HdfsConfig

__all__ = ["Permission", "permissions_table", "refused", "writer_permissions"]


@dataclass(frozen=True)
class Permission:
    """One thing the writer's user must be allowed on a path."""

    name: str
    """A short, stable name (``target-owner``): what tests and errors call it."""
    permission: str
    """As an administrator says it: ``rwx on /data/events (its owner)``."""
    path: str
    command: str
    """The ``hdfs dfs`` command that gives it."""
    why: str
    when: str


def writer_permissions(config: HdfsConfig, user: str) -> list[Permission]:
    """The least privilege for ``user`` writing ``config``'s target."""
    target = config.path
    parent = posixpath.dirname(target.rstrip("/")) or "/"
    return [
        Permission(
            "target-owner",
            f"rwx on {target} (its owner)",
            target,
            f"hdfs dfs -mkdir -p {target} && hdfs dfs -chown {user} {target}",
            "every batch's files, the pending and range directories, the app's records",
            "always",
        ),
        Permission(
            "parents-traverse",
            f"x on {parent} and each directory above it",
            parent,
            f"hdfs dfs -chmod o+x {parent} (and each directory above it)",
            "reaching the target (HDFS's default mode 755 allows it)",
            "always",
        ),
    ]


_DENIED = re.compile(r"user=([^,\s]+), access=([A-Z_]+), inode=[\\\"']*([^\\\"':]+)")


def refused(config: HdfsConfig, user: str, message: str) -> tuple[str, Permission | None]:
    """What an ``AccessControlException`` refused (``"WRITE on /data/events"``), and the permission that gives it."""
    found = _DENIED.search(message)
    if found is None:
        return "a permission on the target", None
    access, inode = found.group(2), found.group(3)
    what = f"{access} on {inode}"
    permissions = {p.name: p for p in writer_permissions(config, user)}
    target = config.path.rstrip("/")
    if inode.rstrip("/") == target or inode.startswith(target + "/"):
        return what, permissions["target-owner"]
    if access == "EXECUTE" or target.startswith(inode.rstrip("/") + "/"):
        return what, permissions["parents-traverse"]
    return what, None


def permissions_table(permissions: list[Permission]) -> str:
    """The permissions as the Markdown table the connector's page shows."""
    lines = ["| command (as HDFS's superuser) | needed | what the sink does with it |", "|---|---|---|"]
    lines += [f"| `{p.command}` | {p.when} | {p.why} |" for p in permissions]
    return "\n".join(lines)
