"""What a writer must be allowed on HDFS, as data: owners and modes, each as the command that gives it.

HDFS has no grants, only owners and modes (and ACLs, which work the same way): a writer needs its
target directory for itself and a way to it. Each HDFS-backed connector lists these through
:func:`writer_permissions` (``eosink.connectors.<sink>.grants``); :func:`refused` tells which one an
``AccessControlException`` is about; :func:`permissions_table` is what the docs page shows.
Kerberos is not covered here (see the Security page).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

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


def writer_permissions(target: str, user: str, uses: str) -> list[Permission]:
    """The least privilege for ``user`` writing under the directory ``target``; ``uses`` says what the
    connector keeps there (for the docs)."""
    parent = posixpath.dirname(target.rstrip("/")) or "/"
    return [
        Permission(
            "target-owner",
            f"rwx on {target} (its owner)",
            target,
            f"hdfs dfs -mkdir -p {target} && hdfs dfs -chown {user} {target}",
            uses,
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


def refused(permissions: Sequence[Permission], message: str) -> tuple[str, Permission | None]:
    """What an ``AccessControlException`` refused (``"WRITE on /data/events"``), and which of
    ``permissions`` (from :func:`writer_permissions`) gives it."""
    found = _DENIED.search(message)
    if found is None:
        return "a permission on the target", None
    access, inode = found.group(2), found.group(3)
    what = f"{access} on {inode}"
    by_name = {p.name: p for p in permissions}
    target = by_name["target-owner"].path.rstrip("/")
    if inode.rstrip("/") == target or inode.startswith(target + "/"):
        return what, by_name["target-owner"]
    if access == "EXECUTE" or target.startswith(inode.rstrip("/") + "/"):
        return what, by_name["parents-traverse"]
    return what, None


def permissions_table(permissions: Sequence[Permission]) -> str:
    """The permissions as the Markdown table a connector's page shows."""
    lines = ["| command (as HDFS's superuser) | needed | what the sink does with it |", "|---|---|---|"]
    lines += [f"| `{p.command}` | {p.when} | {p.why} |" for p in permissions]
    return "\n".join(lines)
