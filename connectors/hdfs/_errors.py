"""The HDFS connector's one error translator: hdfs-native's errors into eosink's error tree.

hdfs-native raises Python built-ins for the common cases (``FileNotFoundError``,
``FileExistsError``, ``PermissionError``, ``OSError`` for a refused or dropped connection) and a
``RuntimeError`` for the rest: its text names the NameNode's Java exception
(``RPCError("org.apache.hadoop.hdfs.protocol.DSQuotaExceededException", ...)``) or a failure talking to
DataNodes (``DataTransferError("All nodes failed for write")``). Every part of the connector that
talks to HDFS goes through :func:`translated`, so the same failure is the same class everywhere: a
refused permission, an exceeded quota or a file where a directory belongs is a ConfigurationError
(fix, then restart), an unreachable or restarting NameNode or a lost DataNode a TransientError
(retry: a new attempt writes new files), anything else an EosinkError naming HDFS's own message.
Secret-looking settings never reach the text (:meth:`HdfsConfig.scrub`).
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Iterator
from contextlib import contextmanager

from eosink.connectors.hdfs.config import HdfsConfig
from eosink.connectors.hdfs.grants import refused
from eosink.errors import ConfigurationError, EosinkError, PermissionDeniedError, TransientError
from eosink.stores.hdfs_errors import is_connection_error, is_quota_exceeded, quota_error

__all__ = ["is_connection_error", "translate", "translated"]


def _detail(config: HdfsConfig, exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.split("\n\tat ", 1)[0].split("\\n\\tat ", 1)[0]  # the Java stack trace is noise here
    return config.scrub(f"{type(exc).__name__}: {first[:600]}")


def translate(config: HdfsConfig, exc: BaseException, what: str) -> EosinkError:
    """The eosink error for ``exc``, raised while doing ``what`` (for the message)."""
    detail = _detail(config, exc)
    where = f"{what} on HDFS ({config.target_url})"
    text = str(exc)
    if isinstance(exc, PermissionError) or "AccessControlException" in text or "Permission denied" in text:
        user = config.user or os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        what, needed = refused(config, user, text)
        give = (
            f"as HDFS's superuser: {needed.command}"
            if needed is not None
            else f"make {user} the owner of {config.path} and let it reach it (hdfs dfs -chown / -chmod / -setfacl)"
        )
        return PermissionDeniedError(
            f"{where} was refused: HDFS user {user!r} may not {what} ({detail}).",
            f"Give {user} {needed.permission if needed else 'the target directory'}, {give}, or write elsewhere; "
            "then restart the query.",
            permission=needed.permission if needed is not None else what,
        )
    if is_quota_exceeded(exc):
        return quota_error(where, detail, "the target")
    if "ParentNotDirectoryException" in text or "is not a directory" in text:
        return ConfigurationError(
            f"{where}: a file stands where a directory belongs: {detail}.",
            f"Point the sink at a directory: {config.path} and its parents must be directories (or missing).",
        )
    if "PathComponentTooLongException" in text or "MaxDirectoryItemsExceededException" in text:
        return ConfigurationError(f"{where}: HDFS refused the path: {detail}.", "Use shorter names.")
    if "InvalidPathException" in text:
        return ConfigurationError(f"{where}: HDFS refused the path: {detail}.", "Give a valid HDFS path.")
    if is_connection_error(exc):
        return TransientError(
            f"{where} failed: {detail}.", "Retry; check that the NameNode (and the DataNodes) are up and reachable."
        )
    if isinstance(exc, OSError):
        return TransientError(f"{where} failed: {detail}.", "Retry; if it persists, check the cluster's health.")
    return EosinkError(f"{where} failed: {detail}.", "See HDFS's message above.")


@contextmanager
def translated(config: HdfsConfig, what: str) -> Iterator[None]:
    """Raise hdfs-native's errors of the block as eosink errors (:func:`translate`)."""
    try:
        yield
    except EosinkError:
        raise
    except (OSError, RuntimeError) as exc:
        config.scrub_chain(exc)
        raise translate(config, exc, what) from None
