"""Where the Delta sink's own files go (data files, manifests, lists of opened files): one small interface over
the store a table lives in, made of the file sinks' shared store kit (:mod:`eosink.stores`).

delta-rs writes the log; everything else is written here, with eosink's clients: boto3 through the kit's
multipart uploader, hdfs-native through the kit's guarded file system, ``os`` on local disk. (delta-rs's
own file handles hold the GIL while they wait on the network, which stalls every other Python thread of the
process, fault proxies included.) Paths are relative to the table's root, ``/``-separated.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from eosink.stores.encoding import WriteOnlyFile
from eosink.stores.hdfs import bounded
from eosink.stores.s3 import S3Connection, asked_again

if TYPE_CHECKING:
    from eosink.connectors.delta.config import DeltaConfig
    from eosink.stores.hdfs import HdfsFile

__all__ = ["Store", "Writer", "open_store"]


class Writer(Protocol):
    """A write-only file that becomes a complete file of the store at :meth:`finish`."""

    def write(self, data: Any) -> int: ...

    def tell(self) -> int: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...

    def finish(self) -> None: ...


class Store(Protocol):
    """The few operations the sink needs on its table's store."""

    def writer(self, path: str) -> Writer: ...

    def put(self, path: str, data: bytes) -> None: ...

    def read(self, path: str) -> bytes | None: ...

    def delete(self, path: str) -> None: ...

    def missing(self, paths: list[str]) -> list[str]: ...

    def files(self, folder: str) -> list[str]: ...


def open_store(config: DeltaConfig) -> Store:
    """The store of ``config``'s table."""
    if config.scheme == "s3":
        return _S3Store(config)
    if config.scheme == "hdfs":
        return _HdfsStore(config)
    return _LocalStore(Path(config.table))


# -- local disk ----------------------------------------------------------------------------------------


class _LocalWriter(WriteOnlyFile):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "wb")  # noqa: SIM115 - closed by finish
        self.written = 0

    def write(self, data: Any) -> int:
        n = self.file.write(data)
        self.written += n
        return n

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        """Closing the file ends writing; :meth:`finish` makes it durable."""

    def finish(self) -> None:
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        self.closed = True


class _LocalStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def writer(self, path: str) -> Writer:
        return _LocalWriter(self.root / path)

    def put(self, path: str, data: bytes) -> None:
        """Write the whole file or nothing: a crash mid-write leaves the old one (or none), never a torn one."""
        final = self.root / path
        temporary = final.with_name(f".{final.name}.{uuid.uuid4().hex}.tmp")
        out = _LocalWriter(temporary)
        out.write(data)
        out.finish()
        os.replace(temporary, final)

    def read(self, path: str) -> bytes | None:
        try:
            return (self.root / path).read_bytes()
        except FileNotFoundError:
            return None

    def delete(self, path: str) -> None:
        (self.root / path).unlink(missing_ok=True)

    def missing(self, paths: list[str]) -> list[str]:
        return [p for p in paths if not (self.root / p).is_file()]

    def files(self, folder: str) -> list[str]:
        base = self.root / folder
        if not base.is_dir():
            return []
        return sorted(str(p.relative_to(self.root)).replace(os.sep, "/") for p in base.rglob("*") if p.is_file())


# -- S3 -------------------------------------------------------------------------------------------------


class _S3Writer(WriteOnlyFile):
    def __init__(self, upload: Any) -> None:
        self.upload = upload

    def write(self, data: Any) -> int:
        n: int = self.upload.write(data)
        return n

    def tell(self) -> int:
        n: int = self.upload.tell()
        return n

    def flush(self) -> None:
        """Parts go out when full."""

    def close(self) -> None:
        """Closing the file ends writing; :meth:`finish` completes the object."""

    def finish(self) -> None:
        self.upload.finish(transactional=False)
        self.closed = True


@dataclass(frozen=True)
class _Bucket:
    """Where a table's objects are uploaded (an :class:`~eosink.stores.s3_upload.UploadTarget`)."""

    bucket: str
    conn: S3Connection
    part_size_bytes: int = 8 << 20

    def connection(self) -> S3Connection:
        return self.conn

    def sse_args(self) -> dict[str, Any]:
        return {}


class _S3Store:
    def __init__(self, config: DeltaConfig) -> None:
        from urllib.parse import urlsplit

        assert config.s3 is not None
        parts = urlsplit(config.table)
        self.prefix = parts.path.strip("/")
        self.config = _Bucket(parts.netloc, config.s3)
        self._client: Any = None

    def client(self) -> Any:
        if self._client is None:
            from eosink.stores.s3 import client

            self._client = client(self.config.connection())
        return self._client

    def key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def writer(self, path: str) -> Writer:
        from eosink.stores.s3 import client
        from eosink.stores.s3_upload import PartWriter

        create = client(self.config.connection(), retrying=False)
        return _S3Writer(PartWriter(self.config, self.client(), self.key(path), create_client=create))

    def put(self, path: str, data: bytes) -> None:
        self.client().put_object(Bucket=self.config.bucket, Key=self.key(path), Body=data)

    def honours_create_only(self, path: str) -> bool:
        """PUT a probe with ``If-None-Match: *`` twice: whether the store refused the second (412), as the log's
        create-only entries need. The probe is deleted either way."""
        from eosink.stores.s3_errors import is_precondition_failed

        s3, key = self.client(), self.key(path)
        s3.put_object(Bucket=self.config.bucket, Key=key, Body=b"1", IfNoneMatch="*")
        try:
            s3.put_object(Bucket=self.config.bucket, Key=key, Body=b"2", IfNoneMatch="*")
        except Exception as exc:
            if is_precondition_failed(exc):
                return True
            raise
        finally:
            s3.delete_object(Bucket=self.config.bucket, Key=key)
        return False

    def read(self, path: str) -> bytes | None:
        try:
            reply = self.client().get_object(Bucket=self.config.bucket, Key=self.key(path))
        except self.client().exceptions.NoSuchKey:
            return None
        data: bytes = reply["Body"].read()
        return data

    def delete(self, path: str) -> None:
        self.client().delete_object(Bucket=self.config.bucket, Key=self.key(path))

    def missing(self, paths: list[str]) -> list[str]:
        """The paths a HEAD does not find, each 404 asked again for 2.5 s first (``asked_again``: a MinIO node
        restarted a moment ago answers 404 for objects written while it was down, and missing files make the
        batch's work lost)."""
        gone = list(paths)

        def look() -> list[str]:  # each round asks only about the paths the round before did not find
            gone[:] = [p for p in gone if not self._exists(p)]
            return gone

        return list(asked_again(look, lambda still: not still))

    def _exists(self, path: str) -> bool:
        from botocore.exceptions import ClientError

        try:
            self.client().head_object(Bucket=self.config.bucket, Key=self.key(path))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey", "NotFound"):
                raise
            return False
        return True

    def files(self, folder: str) -> list[str]:
        found = []
        start = len(self.key(""))
        pages = self.client().get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=self.config.bucket, Prefix=self.key(folder).rstrip("/") + "/"):
            found += [str(o["Key"])[start:] for o in page.get("Contents", [])]
        return sorted(found)


# -- HDFS -----------------------------------------------------------------------------------------------


class _HdfsWriter(WriteOnlyFile):
    """A data file on HDFS; each call into the cluster bounded by the connection's ``write_timeout_s``."""

    def __init__(self, inner: HdfsFile, timeout_s: float) -> None:
        self.inner = inner
        self.timeout_s = timeout_s
        self.written = 0

    def write(self, data: Any) -> int:
        chunk = bytes(data)
        bounded(lambda: self.inner.write(chunk), self.timeout_s, "a write")
        self.written += len(chunk)
        return len(chunk)

    def tell(self) -> int:
        return self.written

    def flush(self) -> None:
        """hdfs-native streams the blocks."""

    def close(self) -> None:
        """Closing the file ends writing; :meth:`finish` closes it on the cluster."""

    def finish(self) -> None:
        bounded(self.inner.close, self.timeout_s, "close")
        self.closed = True


class _HdfsStore:
    def __init__(self, config: DeltaConfig) -> None:
        from eosink.stores.hdfs import Fs, HdfsConnection

        self.hdfs = HdfsConnection(config.table, namenodes=config.namenodes)
        self.fs = Fs(self.hdfs)
        self.root = self.hdfs.path

    def writer(self, path: str) -> Writer:
        return _HdfsWriter(self.fs.create(f"{self.root}/{path}", overwrite=True), self.hdfs.write_timeout_s)

    def put(self, path: str, data: bytes) -> None:
        self.fs.replace(f"{self.root}/{path}", data)

    def read(self, path: str) -> bytes | None:
        return self.fs.read_bytes(f"{self.root}/{path}")

    def delete(self, path: str) -> None:
        self.fs.delete(f"{self.root}/{path}", recursive=False)

    def missing(self, paths: list[str]) -> list[str]:
        return [p for p in paths if not self.fs.exists(f"{self.root}/{p}")]

    def files(self, folder: str) -> list[str]:
        start = len(self.root) + 1
        return sorted(s.path[start:] for s in self.fs.walk_files(f"{self.root}/{folder}"))
