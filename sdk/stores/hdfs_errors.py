"""hdfs-native's failures as every HDFS user of the kit reads them (the HDFS sink, Delta tables on HDFS).

hdfs-native raises ``OSError`` for a refused or dropped connection and ``RuntimeError`` for the
rest, whose text names the NameNode's Java exception or a failure talking to DataNodes
(``DataTransferError("All nodes failed for write")``). Which of them a retry can cure, and which
mean a full quota, is decided here once.
"""

from __future__ import annotations

from eosink.errors import ConfigurationError

__all__ = ["is_connection_error", "is_quota_exceeded", "quota_error"]

_TRANSIENT_MARKERS = (
    "SafeModeException",
    "StandbyException",
    "RetriableException",
    "ConnectException",
    "connection",
    "broken pipe",
    "timed out",
    "timeout",
    "unexpected eof",
    "early eof",
    "reset by peer",
    "no route to host",
    "Failed to connect",
    "failed to read",
    "channel closed",
    "disconnected",
    "failed to complete file in time",  # close() could not confirm the file with the NameNode
    "DataTransferError",  # hdfs-native lost its DataNodes mid-block ("All nodes failed for write", ...)
)
_QUOTA = ("DSQuotaExceededException", "NSQuotaExceededException", "QuotaExceededException")


def is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` is a dropped or refused connection, a NameNode not serving yet or a lost DataNode
    (the request may or may not have reached HDFS; a retry can cure it)."""
    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if isinstance(exc, FileNotFoundError | FileExistsError | PermissionError):
        return False
    text = str(exc).lower()
    return isinstance(exc, OSError | RuntimeError) and any(m.lower() in text for m in _TRANSIENT_MARKERS)


def is_quota_exceeded(exc: BaseException) -> bool:
    """Whether HDFS refused a write because a directory's space or name quota is used up."""
    return any(q in str(exc) for q in _QUOTA)


def quota_error(where: str, detail: str, under: str) -> ConfigurationError:
    """The error for a write refused by a quota (:func:`is_quota_exceeded`) ``under`` a directory."""
    return ConfigurationError(
        f"{where}: the directory's quota is exceeded: {detail}.",
        f"Raise the quota (hdfs dfsadmin -setSpaceQuota / -setQuota) or free space under {under}, then restart the "
        "query; nothing of the failed batch is visible.",
    )
