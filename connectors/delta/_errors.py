"""The Delta connector's one error translator: delta-rs's and the store's errors into eosink's error tree.

delta-rs raises ``TableNotFoundError``, ``CommitFailedError`` (handled where commits are made),
``SchemaMismatchError``, ``DeltaProtocolError`` (a table needing reader or writer features this
delta-rs lacks), ``DeltaError`` for the rest, and ``OSError`` for the object store's failures
(refused connections, timeouts, denied requests). Every part of the connector that reads or
writes the table goes through :func:`translated`, so the same failure is the same class
everywhere: denied access or a protocol the writer cannot honour is a ConfigurationError,
an unreachable store a TransientError. Secrets never reach the text (:meth:`DeltaConfig.scrub`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from eosink.connectors.delta.config import DeltaConfig
from eosink.errors import ConfigurationError, EosinkError, SchemaError, TransientError

__all__ = ["translate", "translated"]

_DENIED = (
    "AccessDenied",
    "Forbidden",
    "PermissionDenied",
    "Permission denied",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "AccessControlException",
    "Unauthorized",
)
_TRANSIENT = (
    "connection",
    "timed out",
    "timeout",
    "reset by peer",
    "broken pipe",
    "unexpected eof",
    "dns error",
    "error sending request",
    "refused",
    "SafeModeException",
    "StandbyException",
    "SlowDown",
    "Generic S3 error",
    "Generic HDFS error",
    "hdfs error",
)


#: An HTTP status in an error's text (a bare number could be a file name: ``_delta_log/...403.json``).
_STATUS = re.compile(r"\b(?:status(?:\s+code)?|HTTP(?:/\d(?:\.\d)?)?)\W{0,3}(\d{3})\b", re.IGNORECASE)

#: A panic in delta-rs's Rust engine (hdfs-native's on a short read, say) stops its executor for the whole process.
_ENGINE_DOWN = ("panicked", "has crashed")


def _detail(config: DeltaConfig, exc: BaseException) -> str:
    text = str(exc).strip().split("\n\tat ", 1)[0]
    return config.scrub(f"{type(exc).__name__}: {text[:600]}")


def translate(config: DeltaConfig, exc: BaseException, what: str) -> EosinkError:
    """The eosink error for ``exc``, raised while doing ``what`` (for the message)."""
    detail = _detail(config, exc)
    where = f"{what} on the Delta table {config.table}"
    name = type(exc).__name__
    text = str(exc)
    if name == "DeltaProtocolError":
        return ConfigurationError(
            f"{where}: the table uses Delta features this writer cannot honour: {detail}.",
            "Write to a table without those features, or upgrade eosink's deltalake package.",
        )
    if any(m in text for m in _ENGINE_DOWN):
        return EosinkError(
            f"{where} failed: delta-rs's engine stopped after an internal panic, and every later call in this "
            f"process fails the same way: {detail}.",
            "Restart the process: the query resumes from its checkpoint and recovers the batch. On HDFS, a NameNode "
            "with dfs.namenode.file.close.num-committed-allowed above 0 lets delta-rs read a just-written log file "
            "short and panic: set it to 0 (HDFS's default).",
        )
    if name == "SchemaMismatchError":
        return SchemaError(f"{where}: {detail}.", "Cast the query's columns to the table's types.")
    status = {int(code) for code in _STATUS.findall(text)}
    if any(m in text for m in _DENIED) or status & {401, 403} or isinstance(exc, PermissionError):
        return ConfigurationError(
            f"{where} was refused: {detail}.",
            "Give the writer read, write, list and delete rights on the table's location (see the connector's "
            "docs for the exact list), check its credentials, then restart the query.",
        )
    lowered = text.lower()
    if (
        isinstance(exc, ConnectionError | TimeoutError)
        or any(m.lower() in lowered for m in _TRANSIENT)
        or any(code >= 500 for code in status)
    ):
        return TransientError(f"{where} failed: {detail}.", "Retry; check that the store is up and reachable.")
    if isinstance(exc, OSError):
        return TransientError(f"{where} failed: {detail}.", "Retry; if it persists, check the store's health.")
    return EosinkError(f"{where} failed: {detail}.", "See delta-rs's message above.")


@contextmanager
def translated(config: DeltaConfig, what: str) -> Iterator[None]:
    """Raise delta-rs's and the store's errors of the block as eosink errors (:func:`translate`)."""
    try:
        yield
    except EosinkError:
        raise
    except Exception as exc:  # delta-rs's error classes are not exported as a tree we could catch narrowly
        raise translate(config, exc, what) from None
