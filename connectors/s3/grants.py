"""What an S3 writer must be allowed, as data: the docs' table, the error's fix and the tests read it.

:func:`writer_actions` lists the least privilege for one sink configuration as IAM actions on the
bucket and on the objects under the prefix; :func:`writer_policy` is the policy document that
allows exactly them (AWS IAM, MinIO and other S3-compatible stores read the same form); a refused
request is named by the action it needed (:func:`eosink.stores.s3_errors.action_of`). ``docs/connectors/s3.md`` shows
:func:`actions_table`; a unit test keeps the two equal, and the secured tests give a user exactly this
policy, then one without each action in turn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Action", "actions_table", "writer_actions", "writer_policy"]


@dataclass(frozen=True)
class Action:
    """One IAM action the writer needs, on the bucket or on the objects under its prefix."""

    action: str
    on_bucket: bool
    why: str

    @property
    def name(self) -> str:
        return self.action.removeprefix("s3:")


_ACTIONS = (
    Action("s3:ListBucket", True, "finding a batch's objects and commit markers (and HeadBucket at setup)"),
    Action("s3:ListBucketMultipartUploads", True, "finding uploads a crashed writer left open, to abort them"),
    Action("s3:GetObject", False, "reading commit markers, segments and the epoch object back"),
    Action("s3:PutObject", False, "uploading objects (multipart) and writing commit markers (create-only)"),
    Action("s3:DeleteObject", False, "removing aborted attempts' objects and markers folded into segments"),
    Action("s3:AbortMultipartUpload", False, "aborting the uploads of a batch that is aborted"),
    Action("s3:ListMultipartUploadParts", False, "completing an upload whose reply was lost (its parts)"),
)


def writer_actions() -> list[Action]:
    """Every action the sink needs (the same for every strategy and format)."""
    return list(_ACTIONS)


def writer_policy(bucket: str, prefix: str, *, without: str | None = None) -> dict[str, Any]:
    """The IAM policy allowing exactly :func:`writer_actions` on ``bucket`` and ``prefix`` (all but ``without``)."""
    objects = f"arn:aws:s3:::{bucket}/{prefix.strip('/')}/*" if prefix.strip("/") else f"arn:aws:s3:::{bucket}/*"
    bucket_actions = [a.action for a in _ACTIONS if a.on_bucket and a.action != without]
    object_actions = [a.action for a in _ACTIONS if not a.on_bucket and a.action != without]
    statements: list[dict[str, Any]] = []
    if bucket_actions:
        statements.append({"Effect": "Allow", "Action": bucket_actions, "Resource": [f"arn:aws:s3:::{bucket}"]})
    if object_actions:
        statements.append({"Effect": "Allow", "Action": object_actions, "Resource": [objects]})
    return {"Version": "2012-10-17", "Statement": statements}


def actions_table() -> str:
    """The actions as the Markdown table the connector's page shows."""
    lines = ["| action | on | what the sink does with it |", "|---|---|---|"]
    for a in _ACTIONS:
        on = "the bucket (`arn:aws:s3:::BUCKET`)" if a.on_bucket else "objects under the prefix (`…/PREFIX/*`)"
        lines.append(f"| `{a.action}` | {on} | {a.why} |")
    return "\n".join(lines)
