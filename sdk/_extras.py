"""The optional packages each connector needs, and the error that names the pip extra to install.

A connector's client libraries come with its extra (``pip install 'eosink[delta]'``). Without them,
a sink would fail deep inside its first write with a bare ``ModuleNotFoundError``; instead a sink
checks when it is made, and a module missing on an executor is named the same way.
"""

from __future__ import annotations

import importlib.util
import re
import sys

from eosink.errors import ConfigurationError

__all__ = ["from_missing_module", "missing_on_executors", "require"]

#: The extra that brings each top-level module a connector imports.
_EXTRA_OF = {
    "psycopg": "postgres",
    "kafka": "kafka",
    "crc32c": "kafka",
    "boto3": "s3",
    "botocore": "s3",
    "hdfs_native": "hdfs",
    "deltalake": "delta",
}


def _absent(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except (ImportError, ValueError):
        return True


_NOT_FOUND = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z_][\w.]*)'")


def _error(modules: list[str], extra: str, who: str, where: str | None = None) -> ConfigurationError:
    return ConfigurationError(
        f"{who} needs the Python package{'s' if len(modules) > 1 else ''} {', '.join(modules)}, "
        f"not installed in {where or f'the Python at {sys.executable}'}.",
        f"pip install 'eosink[{extra}]' in that Python, on the driver and on every executor (Spark runs the "
        "sink's writes in the executors' Python workers).",
    )


def require(connector: str, extra: str, *modules: str) -> None:
    """Raise ConfigurationError naming ``extra`` unless every one of ``modules`` can be imported here."""
    missing = [m for m in modules if _absent(m)]
    if missing:
        raise _error(missing, extra, f"The {connector} connector")


def from_missing_module(exc: ModuleNotFoundError) -> ConfigurationError | None:
    """The ConfigurationError for a connector's module missing where the sink ran (an executor), or None when
    the module is none of the connectors'."""
    top = (exc.name or "").split(".")[0]
    extra = _EXTRA_OF.get(top)
    return None if extra is None else _error([top], extra, "The sink")


def missing_on_executors(text: str) -> ConfigurationError | None:
    """The ConfigurationError for a connector's module that the executors' Python could not import, read from the
    text of the failure Spark reported; None when the text names none.

    The import can fail before any eosink code runs on the executor (while its Python worker unpickles the
    sink), so only the text of Spark's exception on the driver tells.
    """
    for name in _NOT_FOUND.findall(text):
        top = name.split(".")[0]
        extra = _EXTRA_OF.get(top)
        if extra is not None:
            return _error([top], extra, "The sink", "the executors' Python")
    return None
