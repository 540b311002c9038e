"""Spark checkpoints on S3 (``s3a://`` and ``s3://`` checkpoint locations): a :class:`~eosink.checkpoint.CheckpointFS`.

Registered in the entry-point group ``eosink.checkpoint_fs`` for both schemes;
:class:`~eosink.checkpoint.SparkCheckpoint` calls :func:`open_location`. Paths are ``bucket/key``.
The connection comes from :func:`register` (an :class:`~eosink.connectors.s3.S3Connection` for a
bucket, in code), else from the environment (:meth:`S3Connection.from_env`: the ``EOSINK_S3_*``
variables, else boto3's chain with ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``); Spark's own
``fs.s3a.*`` settings live in the JVM, which eosink never asks.

What each operation costs (one request each unless said): ``read_text`` GET; ``exists`` HEAD,
plus a LIST of at most one key when the path is a folder; ``list_names`` LIST (one per 1000
names); ``write_atomic`` PUT (S3 replaces an object atomically); ``delete`` DELETE; ``move`` COPY
and DELETE (not atomic: a crash between leaves both, which the rewind tolerates).

Polling the commit log: while a 2PC batch waits for ``commits/N`` (from foreachBatch's return
until Spark writes it, typically tens of milliseconds), the coordinator's watcher asks
``has_commit_file``, one HEAD, every :data:`POLL_INTERVAL_S` (the file system's
``poll_interval_s``; 10 ms on local disk): at most 40 HEADs a second, only while a batch waits,
typically 1-5 per batch. At AWS's $0.0004 per 1000 GET/HEAD requests that is well under $0.01 a
day for a query with a batch a minute; the manifest's PUT and DELETE per 2PC batch cost more.
"""

from __future__ import annotations

import threading
from typing import Any

from eosink.errors import ConfigurationError
from eosink.stores.s3 import S3Connection
from eosink.stores.s3 import client as s3_client
from eosink.stores.s3_errors import is_not_found, translate

__all__ = ["POLL_INTERVAL_S", "S3CheckpointFS", "open_location", "register"]

POLL_INTERVAL_S = 0.025
"""How often the 2PC watcher should look for ``commits/N`` on S3 (a HEAD request each time)."""

_REGISTERED: dict[str, S3Connection] = {}
_LOCK = threading.Lock()


def register(bucket: str, connection: S3Connection) -> None:
    """Use ``connection`` for checkpoint locations in ``bucket`` (in this process) instead of the environment."""
    with _LOCK:
        _REGISTERED[bucket] = connection


def open_location(location: str) -> tuple[S3CheckpointFS, str]:
    """The file system and root path (``bucket/key``) of an ``s3a://bucket/key`` or ``s3://bucket/key`` location."""
    scheme, sep, rest = location.partition("://")
    bucket = rest.split("/", 1)[0]
    if not sep or scheme.lower() not in ("s3", "s3a") or not bucket:
        raise ConfigurationError(
            f"{location!r} is not an s3a:// or s3:// location.", "Write the checkpoint location as s3a://bucket/path."
        )
    path = rest.strip("/")
    if "//" in path or any(part in (".", "..") for part in path.split("/")):
        raise ConfigurationError(f"The checkpoint location {location!r} has an empty or relative segment.", "Fix it.")
    with _LOCK:
        conn = _REGISTERED.get(bucket)
    return S3CheckpointFS(conn or S3Connection.from_env()), path


class S3CheckpointFS:
    """The checkpoint operations on S3 (see the module docstring for their cost). Errors are OSError."""

    poll_interval_s = POLL_INTERVAL_S

    def __init__(self, connection: S3Connection) -> None:
        self.connection = connection

    def __repr__(self) -> str:
        return f"S3CheckpointFS({self.connection!r})"

    @property
    def _s3(self) -> Any:
        return s3_client(self.connection)

    def _split(self, path: str) -> tuple[str, str]:
        bucket, _, key = path.strip("/").partition("/")
        return bucket, key

    def _call(self, what: str, fn: Any, **kwargs: Any) -> Any:
        """``fn(**kwargs)``; a store error as OSError (what SparkCheckpoint expects), its text scrubbed."""
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            return fn(**kwargs)
        except (BotoCoreError, ClientError) as exc:
            if is_not_found(exc):
                raise FileNotFoundError(kwargs.get("Key", what)) from None
            error = translate(self.connection, exc, what)
            if isinstance(error, ConfigurationError):
                raise error from None
            raise OSError(error.problem) from None

    def read_text(self, path: str) -> str | None:
        bucket, key = self._split(path)
        try:
            reply = self._call(f"reading {path}", self._s3.get_object, Bucket=bucket, Key=key)
        except FileNotFoundError:
            return None
        return bytes(reply["Body"].read()).decode("utf-8")

    def exists(self, path: str) -> bool:
        bucket, key = self._split(path)
        try:
            self._call(f"looking up {path}", self._s3.head_object, Bucket=bucket, Key=key)
            return True
        except FileNotFoundError:
            pass
        reply = self._call(f"listing {path}/", self._s3.list_objects_v2, Bucket=bucket, Prefix=f"{key}/", MaxKeys=1)
        return bool(reply.get("KeyCount", 0))

    def list_names(self, path: str) -> list[str]:
        bucket, key = self._split(path)
        prefix = f"{key}/" if key else ""
        names: set[str] = set()
        args: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
        while True:
            reply = self._call(f"listing {path}", self._s3.list_objects_v2, **args)
            for entry in reply.get("Contents", []):
                name = entry["Key"][len(prefix) :]
                if name:  # a folder marker object (``key/``) is the folder itself
                    names.add(name)
            for entry in reply.get("CommonPrefixes", []):
                names.add(entry["Prefix"][len(prefix) :].rstrip("/"))
            if not reply.get("IsTruncated"):
                return sorted(names)
            args["ContinuationToken"] = reply["NextContinuationToken"]

    def write_atomic(self, path: str, text: str) -> None:
        bucket, key = self._split(path)
        self._call(f"writing {path}", self._s3.put_object, Bucket=bucket, Key=key, Body=text.encode("utf-8"))

    def delete(self, path: str) -> None:
        bucket, key = self._split(path)
        self._call(f"deleting {path}", self._s3.delete_object, Bucket=bucket, Key=key)

    def move(self, src: str, dst: str) -> None:
        bucket, key = self._split(src)
        to_bucket, to_key = self._split(dst)
        source = {"Bucket": bucket, "Key": key}
        self._call(f"copying {src} to {dst}", self._s3.copy_object, Bucket=to_bucket, Key=to_key, CopySource=source)
        self._call(f"deleting {src}", self._s3.delete_object, Bucket=bucket, Key=key)
