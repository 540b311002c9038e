"""The errors every connector's write side raises alike for a participant attempt: one wording, one fix."""

from __future__ import annotations

from collections.abc import Sequence

from eosink.errors import CommitAbortedError, SchemaError

__all__ = ["attempt_closed", "columns_changed"]


def attempt_closed(what_attempt: str, action: str) -> CommitAbortedError:
    """The error for using an attempt that failed or was prepared already (or belongs to another process):
    ``what_attempt`` names it (``"The attempt <id>"``), ``action`` is what was asked (``"be written"``)."""
    return CommitAbortedError(
        f"{what_attempt} is closed (failed or already prepared); it cannot {action}.",
        "Restart the task with a new attempt.",
    )


def columns_changed(before: Sequence[str], after: Sequence[str]) -> SchemaError:
    """The error for a record batch whose columns differ from the task's first batch's."""
    return SchemaError(
        f"The columns changed within one task ({list(before)} -> {list(after)}).",
        "Give every record batch of a task the same schema.",
    )
