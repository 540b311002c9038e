"""The configuration of {{ cookiecutter.class_name }}: plain values, checked when it is made."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from eosink.errors import ConfigurationError

__all__ = ["{{ cookiecutter.class_name }}Config"]


@dataclass(frozen=True)
class {{ cookiecutter.class_name }}Config:
    """Everything the sink needs.

    Frozen and picklable: the sink is pickled to Spark's executors with it, and rebuilt from it
    after a crash, so it holds values only (no open files, no clients) and never a secret that
    ``repr`` would print.

    Each check raises :class:`~eosink.errors.ConfigurationError` naming the problem and the fix, so
    that a wrong setting fails when the query is built, not in an executor half-way through a batch.
    """

    root: Path
    """The sink's directory: rows, staged work, bundles and epochs. Created on first use."""
    fsync: bool = True
    """fsync files and directories, so that prepared and committed work survives a power cut."""

    def __post_init__(self) -> None:
        root = Path(self.root)  # also accept a str
        object.__setattr__(self, "root", root)
        if not root.is_absolute():
            raise ConfigurationError(
                f"{{ cookiecutter.class_name }}Config.root must be an absolute path, not {str(root)!r}: "
                "Spark's executors and a restarted driver may run in another working directory.",
                f"Pass an absolute path, e.g. Path({str(root)!r}).resolve().",
            )
        if root.exists() and not root.is_dir():
            raise ConfigurationError(
                f"{{ cookiecutter.class_name }}Config.root {str(root)!r} exists and is not a directory.",
                "Point root at a directory (it is created if missing).",
            )
