"""The Delta connector's one error translator: delta-rs's and the store's errors into eosink's error tree.

delta-rs raises ``TableNotFoundError``, ``CommitFailedError`` (handled where commits are made),
``SchemaMismatchError``, ``DeltaProtocolError`` (a table needing reader or writer features this
delta-rs lacks), ``DeltaError`` for the rest, and ``OSError`` for the object store's failures
(refused connections, timeouts, denied requests); eosink's own requests to S3 raise botocore's
errors, translated by the store kit (:mod:`eosink.stores.s3_errors`). Every part of the connector
that reads or writes the table goes through :func:`translated`, so the same failure is the same
class everywhere: refused credentials an AuthenticationError, a failed TLS handshake a TlsError,
a refused request a PermissionDeniedError naming the S3 action or HDFS permission it needed
(:mod:`eosink.connectors.delta.grants`), a protocol the writer cannot honour a
ConfigurationError, an unreachable store a TransientError. Secrets never reach the text
(:meth:`DeltaConfig.scrub`).
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from eosink._tls_probe import speaks_tls
from eosink.connectors.delta.config import DeltaConfig
from eosink.connectors.delta.grants import refused
from eosink.errors import (
    AuthenticationError,
    ConfigurationError,
    EosinkError,
    PermissionDeniedError,
    SchemaError,
    TlsError,
    TransientError,
)
from eosink.stores.hdfs_errors import is_connection_error as is_hdfs_connection_error
from eosink.stores.hdfs_errors import is_quota_exceeded, quota_error

__all__ = ["translate", "translated"]

_DENIED = (
    "AccessDenied",
    "Forbidden",
    "PermissionDenied",
    "Permission denied",
    "AccessControlException",
    "Unauthorized",
    "lacked the necessary privileges",
)
_CREDENTIALS = ("InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "InvalidClientTokenId")
_TLS = (
    "invalid peer certificate",
    "UnknownIssuer",
    "NotValidForName",
    "certificate verify failed",
    "InvalidCertificate",
)

#: The request delta-rs's object store made: ``Error performing GET https://host/bucket/key?query``.
_REQUEST = re.compile(r"Error performing (GET|HEAD|PUT|POST|DELETE) (\S+)")
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

#: A status line as delta-rs's object store prints it: ``403 Forbidden``.
_STATUS_LINE = re.compile(r"\b(4\d\d) [A-Z][a-z]")

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
    if _is_botocore(exc) and config.s3 is not None:
        from eosink.stores.s3_errors import translate as s3_translate

        return s3_translate(config.s3, exc, f"{what} on the Delta table {config.table}")
    if any(m in text for m in _TLS):
        from eosink.stores.s3_errors import tls_error

        return tls_error(where, detail)
    if any(m in text for m in _CREDENTIALS):
        return AuthenticationError(
            f"{where}: the store refused the credentials ({detail}).",
            "Check access_key_id and secret_access_key (or the AWS_* / EOSINK_S3_* variables), that a session "
            "token has not expired, and that region matches the store; then restart the query.",
        )
    status = {int(code) for code in (*_STATUS.findall(text), *_STATUS_LINE.findall(text))}
    if any(m in text for m in _DENIED) or status & {401, 403} or isinstance(exc, PermissionError):
        return _denied(config, where, detail, text)
    if 400 in status and _plain_http_to_tls(config):
        return TlsError(
            f"{where}: the store speaks TLS only, and the request was plain HTTP ({detail}).",
            "Use an https:// endpoint_url (with ca_bundle if its certificate is signed by a CA of your own).",
        )
    if config.scheme == "hdfs" and is_quota_exceeded(exc):
        return quota_error(where, detail, "the table")
    lowered = text.lower()
    if (
        (config.scheme == "hdfs" and is_hdfs_connection_error(exc))
        or isinstance(exc, ConnectionError | TimeoutError)
        or any(m.lower() in lowered for m in _TRANSIENT)
        or any(code >= 500 for code in status)
    ):
        return TransientError(f"{where} failed: {detail}.", "Retry; check that the store is up and reachable.")
    if isinstance(exc, OSError):
        return TransientError(f"{where} failed: {detail}.", "Retry; if it persists, check the store's health.")
    return EosinkError(f"{where} failed: {detail}.", "See delta-rs's message above.")


def _is_botocore(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("botocore")


def _plain_http_to_tls(config: DeltaConfig) -> bool:
    """Whether an ``http://`` endpoint is in fact a TLS listener (its bare 400 is the answer to plain HTTP)."""
    url = config.s3.endpoint_url if config.s3 is not None else None
    if not url or not url.startswith("http://"):
        return False
    parts = urlsplit(url)
    return speaks_tls(parts.hostname or "localhost", parts.port or 80)


def _s3_action(text: str) -> str | None:
    """The IAM action the refused request of delta-rs's object store needed, from the request it names."""
    found = _REQUEST.search(text)
    if found is None:
        return "s3:ListBucket" if "list request" in text else None
    method, url = found.groups()
    query = urlsplit(url).query
    if method == "GET" and ("list-type=" in query or "prefix=" in query):
        return "s3:ListBucket"
    if method in ("GET", "HEAD"):
        return "s3:GetObject"
    if method == "DELETE" or (method == "POST" and "delete" in query):
        return "s3:DeleteObject"
    return "s3:PutObject"


def _denied(config: DeltaConfig, where: str, detail: str, text: str) -> PermissionDeniedError:
    """A refused request, named by the S3 action or HDFS permission it needed."""
    if config.scheme == "hdfs":
        user = os.environ.get("HADOOP_USER_NAME") or getpass.getuser()
        path = urlsplit(config.table).path or "/"
        what, needed = refused(path, user, text)
        give = f"as HDFS's superuser: {needed.command}" if needed is not None else "hdfs dfs -chown / -chmod"
        return PermissionDeniedError(
            f"{where} was refused: HDFS user {user!r} may not {what} ({detail}).",
            f"Give {user} {needed.permission if needed else 'the table directory'}, {give}; then restart the query.",
            permission=needed.permission if needed is not None else what,
        )
    action = _s3_action(text) if config.scheme == "s3" else None
    if action is None:
        return PermissionDeniedError(
            f"{where} was refused: {detail}.",
            "Give the writer the rights the connector's docs list on the table's location, then restart the query.",
            permission="write access to the table's location",
        )
    return PermissionDeniedError(
        f"{where} was refused: access denied to a request that needs {action} ({detail}).",
        f"Allow {action} to the writer's credentials on the table's bucket and prefix (docs/connectors/delta.md "
        "lists every action the sink needs), then restart the query.",
        permission=action,
    )


@contextmanager
def translated(config: DeltaConfig, what: str) -> Iterator[None]:
    """Raise delta-rs's and the store's errors of the block as eosink errors (:func:`translate`)."""
    try:
        yield
    except EosinkError:
        raise
    except Exception as exc:  # delta-rs's error classes are not exported as a tree we could catch narrowly
        raise translate(config, exc, what) from None
