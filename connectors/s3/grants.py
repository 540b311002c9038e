"""What an S3 writer must be allowed, as data: the docs' table, the error's fix and the tests read it.

:func:`writer_actions` lists the least privilege for one sink configuration as IAM actions on the
bucket and on the objects under the prefix; :func:`writer_policy` is the policy document that
allows exactly them (:mod:`eosink.stores.s3_policy`); a refused request is named by the action it
needed (:func:`eosink.stores.s3_errors.action_of`). ``docs/connectors/s3.md`` shows
:func:`actions_table`; a unit test keeps the two equal, and the secured tests give a user exactly this
policy, then one without each action in turn.
"""

from __future__ import annotations

from typing import Any

from eosink.stores import s3_policy
from eosink.stores.s3_policy import Action

__all__ = ["Action", "actions_table", "writer_actions", "writer_policy"]

_ACTIONS = (
    Action("s3:ListBucket", True, "finding a batch's objects and commit markers (and HeadBucket at setup)"),
    Action("s3:ListBucketMultipartUploads", True, "finding uploads a crashed writer left open, to abort them"),
    Action("s3:GetObject", False, "reading commit markers, segments and the epoch object back"),
    Action(
        "s3:PutObject", False, "uploading objects (multipart), their upload intents, and commit markers (create-only)"
    ),
    Action(
        "s3:DeleteObject",
        False,
        "removing aborted attempts' objects, finished uploads' intents, and markers folded into segments",
    ),
    Action("s3:AbortMultipartUpload", False, "aborting the uploads of a batch that is aborted"),
    Action("s3:ListMultipartUploadParts", False, "completing an upload whose reply was lost (its parts)"),
)


def writer_actions() -> list[Action]:
    """Every action the sink needs (the same for every strategy and format)."""
    return list(_ACTIONS)


def writer_policy(bucket: str, prefix: str, *, without: str | None = None) -> dict[str, Any]:
    """The IAM policy allowing exactly :func:`writer_actions` on ``bucket`` and ``prefix`` (all but ``without``)."""
    return s3_policy.policy(_ACTIONS, bucket, prefix, without=without)


def actions_table() -> str:
    """The actions as the Markdown table the connector's page shows."""
    return s3_policy.actions_table(_ACTIONS)
