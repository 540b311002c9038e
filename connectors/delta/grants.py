"""What a Delta writer must be allowed, as data: the docs' tables, the error's fix and the tests read them.

On S3, :func:`writer_actions` lists the IAM actions on the bucket and on the objects under the
table's prefix, and :func:`writer_policy` is the policy allowing exactly them. On HDFS,
:func:`writer_permissions` lists owners and modes, each as the ``hdfs dfs`` command that gives it.
A local table needs the directory to be the writer's. ``docs/connectors/delta.md`` shows both
tables; a unit test keeps them equal to these lists, and the secured tests give a writer exactly
these, then take each away in turn.
"""

from __future__ import annotations

from typing import Any

from eosink.stores import hdfs_permissions, s3_policy
from eosink.stores.hdfs_permissions import Permission
from eosink.stores.s3_policy import Action

__all__ = [
    "Action",
    "Permission",
    "actions_table",
    "permissions_table",
    "refused",
    "writer_actions",
    "writer_permissions",
    "writer_policy",
]

_ACTIONS = (
    Action("s3:ListBucket", True, "listing the log's entries and a batch's files (and HeadBucket at setup)"),
    Action("s3:GetObject", False, "reading the log, its checkpoints and eosink's manifests"),
    Action("s3:PutObject", False, "data files, log entries (create-only) and manifests"),
    Action("s3:DeleteObject", False, "removing failed or fenced attempts' files, and setup's create-only probe"),
)

_USES = "data files, the log (`_delta_log`) and eosink's manifests (`_eosink`)"


def writer_actions() -> list[Action]:
    """Every action a Delta writer needs on an ``s3://`` table (the same for every strategy)."""
    return list(_ACTIONS)


def writer_policy(bucket: str, prefix: str, *, without: str | None = None) -> dict[str, Any]:
    """The IAM policy allowing exactly :func:`writer_actions` on ``bucket`` and ``prefix`` (all but ``without``)."""
    return s3_policy.policy(_ACTIONS, bucket, prefix, without=without)


def actions_table() -> str:
    """The S3 actions as the Markdown table the connector's page shows."""
    return s3_policy.actions_table(_ACTIONS)


def writer_permissions(path: str, user: str) -> list[Permission]:
    """The least privilege for ``user`` writing the ``hdfs://`` table at ``path`` (its path on the NameNode)."""
    return hdfs_permissions.writer_permissions(path, user, _USES)


def refused(path: str, user: str, message: str) -> tuple[str, Permission | None]:
    """What an ``AccessControlException`` refused, and the permission that gives it."""
    return hdfs_permissions.refused(writer_permissions(path, user), message)


def permissions_table(path: str = "/data/events", user: str = "writer") -> str:
    """The HDFS permissions as the Markdown table the connector's page shows."""
    return hdfs_permissions.permissions_table(writer_permissions(path, user))
