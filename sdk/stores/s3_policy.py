"""IAM actions a writer needs on S3, as data, and the policy that allows exactly them.

Each S3-backed connector lists its own actions (``eosink.connectors.<sink>.grants``); this module
turns such a list into the policy document (AWS IAM, MinIO and other S3-compatible stores read the
same form) and into the Markdown table its docs page shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Action", "actions_table", "policy"]


@dataclass(frozen=True)
class Action:
    """One IAM action the writer needs, on the bucket or on the objects under its prefix."""

    action: str
    on_bucket: bool
    why: str

    @property
    def name(self) -> str:
        return self.action.removeprefix("s3:")


def policy(actions: Sequence[Action], bucket: str, prefix: str, *, without: str | None = None) -> dict[str, Any]:
    """The IAM policy allowing exactly ``actions`` (all but ``without``) on ``bucket`` and ``prefix``."""
    objects = f"arn:aws:s3:::{bucket}/{prefix.strip('/')}/*" if prefix.strip("/") else f"arn:aws:s3:::{bucket}/*"
    bucket_actions = [a.action for a in actions if a.on_bucket and a.action != without]
    object_actions = [a.action for a in actions if not a.on_bucket and a.action != without]
    statements: list[dict[str, Any]] = []
    if bucket_actions:
        statements.append({"Effect": "Allow", "Action": bucket_actions, "Resource": [f"arn:aws:s3:::{bucket}"]})
    if object_actions:
        statements.append({"Effect": "Allow", "Action": object_actions, "Resource": [objects]})
    return {"Version": "2012-10-17", "Statement": statements}


def actions_table(actions: Sequence[Action]) -> str:
    """The actions as the Markdown table a connector's page shows."""
    lines = ["| action | on | what the sink does with it |", "|---|---|---|"]
    for a in actions:
        on = "the bucket (`arn:aws:s3:::BUCKET`)" if a.on_bucket else "objects under the prefix (`…/PREFIX/*`)"
        lines.append(f"| `{a.action}` | {on} | {a.why} |")
    return "\n".join(lines)
