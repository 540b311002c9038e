"""A small, guarded file-system layer over one ``hdfs_native.Client`` per process.

hdfs-native's ``rename`` is HDFS's ``rename2``: it raises when the destination exists and never
moves a directory *into* an existing one, unlike the two-argument ``rename`` that answers
``false``. The layer still checks what a rename left behind (:meth:`Fs.rename`), so that a client or
server with the other behaviour cannot make a batch land in the wrong place unnoticed.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from eosink.connectors.hdfs.config import HdfsConfig
from eosink.errors import ConfigurationError, EosinkError, TransientError

if TYPE_CHECKING:
    from hdfs_native import Client, FileStatus, FileWriter

__all__ = ["Fs", "RenameNotDone", "bounded", "client_for"]

_T = TypeVar("_T")

_SHORT_READ_WAIT_S = 10.0
_SHORT_READ_POLL_S = 0.02
_CLIENTS: dict[tuple[int, str], Client] = {}
_LOCK = threading.Lock()
_USER: dict[int, str] = {}
"""The ``user`` this process's clients were made for (per pid): hdfs-native has one user per process."""


def client_for(config: HdfsConfig) -> Client:
    """This process's client for ``config``'s file system (one per process and settings; never pickled).

    ``config.user`` becomes ``HADOOP_USER_NAME`` for the whole process: hdfs-native takes the user
    from that variable whenever it connects, so one process cannot write as two users.
    """
    key = (os.getpid(), repr(sorted(config.client_kwargs().items(), key=lambda kv: kv[0])))
    with _LOCK:
        if config.user:
            chosen = _USER.setdefault(os.getpid(), config.user)
            if chosen != config.user:
                raise ConfigurationError(
                    f"This process already writes to HDFS as {chosen!r}; a sink for user {config.user!r} cannot "
                    "join it (hdfs-native takes one user per process, from HADOOP_USER_NAME).",
                    "Write as one user per Spark application (or per process), or leave user unset.",
                )
            os.environ["HADOOP_USER_NAME"] = config.user
        client = _CLIENTS.get(key)
        if client is None:
            from hdfs_native import Client

            client = Client(**config.client_kwargs())
            _CLIENTS[key] = client
        return client


def forget_clients() -> None:
    """Drop this process's clients (the next call connects again)."""
    with _LOCK:
        for key in [k for k in _CLIENTS if k[0] == os.getpid()]:
            del _CLIENTS[key]


def bounded(call: Callable[[], _T], seconds: float, what: str) -> _T:
    """``call()`` in a thread of its own, or :class:`TimeoutError` when it has not returned after ``seconds``.

    hdfs-native waits without limit for a DataNode pipeline that a dying node stalls (in a file's
    ``write``, ``hsync`` or ``close``). It lets go of the GIL while it waits, so the wait can be
    bounded here. A call past its deadline is left to its thread, which holds the file writer: the
    caller must abandon that writer (never close it), and its attempt fails retryably.
    """
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the caller below
            outcome.append((False, exc))

    worker = threading.Thread(target=run, name=f"eosink-hdfs-{what}"[:60], daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        raise TimeoutError(
            f"HDFS did not finish {what} within {seconds:g} s (write_timeout_s): a DataNode pipeline stalled"
        )
    done, value = outcome[0]
    if not done:
        raise value
    result: _T = value
    return result


class RenameNotDone(EosinkError):
    """A rename answered success but did not leave the source gone and the destination in place."""


def rename_not_done(src: str, dst: str) -> RenameNotDone:
    return RenameNotDone(
        f"HDFS answered that {src} was renamed to {dst}, but {dst} is not in place (or {src} is still there).",
        "Check the NameNode's audit log for other writers in the target directory; retry the operation.",
    )


class Fs:
    """The operations the sink needs, on paths of one file system."""

    def __init__(self, config: HdfsConfig) -> None:
        self.config = config

    @property
    def client(self) -> Client:
        return client_for(self.config)

    def info(self, path: str) -> FileStatus | None:
        try:
            return self.client.get_file_info(path)
        except FileNotFoundError:
            return None

    def exists(self, path: str) -> bool:
        return self.info(path) is not None

    def entries(self, path: str) -> list[FileStatus]:
        """The entries of a directory (none if it is missing)."""
        try:
            return list(self.client.list_status(path, False))
        except FileNotFoundError:
            return []

    def names(self, path: str) -> list[str]:
        return [s.path.rstrip("/").rsplit("/", 1)[-1] for s in self.entries(path)]

    def walk_files(self, path: str) -> list[FileStatus]:
        """Every file below ``path`` (recursively); none if it is missing."""
        try:
            return [s for s in self.client.list_status(path, True) if not s.isdir]
        except FileNotFoundError:
            return []

    def mkdirs(self, path: str) -> None:
        self.client.mkdirs(path, 0o755, True)

    def delete(self, path: str, recursive: bool = True) -> bool:
        try:
            return bool(self.client.delete(path, recursive))
        except FileNotFoundError:
            return False

    def delete_empty(self, path: str) -> bool:
        """Delete the directory ``path`` if it is empty: True if it is gone (deleted now, or missing); False if it
        is not empty (a writer may have filled it after the caller listed it: it stays)."""
        try:
            self.client.delete(path, False)
        except FileNotFoundError:
            pass
        except RuntimeError as exc:
            if "PathIsNotEmptyDirectory" in str(exc):
                return False
            raise
        return True

    def rename(self, src: str, dst: str, *, overwrite: bool = False, checked: bool = True) -> None:
        """Move ``src`` to exactly ``dst``: FileExistsError if ``dst`` exists (without ``overwrite``).

        ``checked``: look afterwards, and raise RenameNotDone if the rename claimed success but
        ``src`` is still there or ``dst`` is not (two more NameNode calls).
        """
        self.client.rename(src, dst, overwrite)
        if checked and (self.info(dst) is None or self.info(src) is not None):
            raise rename_not_done(src, dst)

    def create(self, path: str, *, overwrite: bool = False, parents: bool = True) -> FileWriter:
        from hdfs_native import WriteOptions

        options = WriteOptions(
            overwrite=overwrite,
            create_parent=parents,
            replication=self.config.replication,
            block_size=self.config.block_size,
        )
        return self.client.create(path, options)

    def read_bytes(self, path: str) -> bytes | None:
        """The whole file, or None if it is missing.

        A file may be closed while its last block is still to be reported by the DataNodes (on a
        NameNode with ``dfs.namenode.file.close.num-committed-allowed`` above 0). Until the report,
        the block locations the NameNode hands out count that block as 0 bytes, and hdfs-native
        reads the file short, where Hadoop's Java client asks a DataNode for the length. The file's
        status has the right length: a short read is read again until it has every byte (bounded).
        """
        status = self.info(path)
        if status is None:
            return None
        deadline = time.monotonic() + _SHORT_READ_WAIT_S
        while True:
            try:
                reader = self.client.read(path)
            except FileNotFoundError:
                return None
            try:
                data = bytes(reader.read())
            finally:
                reader.close()
            if len(data) >= status.length:
                return data
            if time.monotonic() > deadline:
                raise TransientError(
                    f"{path} read {len(data)} of its {status.length} bytes for {_SHORT_READ_WAIT_S:.0f} s: its "
                    "last block is still unreported by the DataNodes.",
                    "Retry; check the DataNodes' health (hdfs dfsadmin -report) if it persists.",
                )
            time.sleep(_SHORT_READ_POLL_S)

    def read_text(self, path: str) -> str | None:
        data = self.read_bytes(path)
        return None if data is None else data.decode("utf-8")

    def create_only(self, path: str, data: bytes = b"") -> bool:
        """Create ``path`` holding ``data`` unless it exists: True if this call created it.

        Atomic: the bytes go to a hidden temporary file first, renamed into place without overwrite,
        so no reader ever sees a part of the file.
        """
        return self.place_new(self.write_hidden(path, data), path)

    def write_hidden(self, path: str, data: bytes) -> str:
        """Write ``data`` whole and durably to a hidden temporary file beside ``path``; its path."""
        tmp = self._tmp_for(path)
        self._write(tmp, data)
        return tmp

    def place_new(self, tmp: str, path: str) -> bool:
        """Rename ``tmp`` (from :meth:`write_hidden`) to ``path`` unless it exists: True if this call placed it."""
        try:
            self.client.rename(tmp, path, False)
        except FileExistsError:
            self.delete(tmp, False)
            return False
        return True

    def replace(self, path: str, data: bytes) -> None:
        """Write ``path`` atomically: a hidden temporary file, renamed over the old one."""
        tmp = self._tmp_for(path)
        self._write(tmp, data)
        self.client.rename(tmp, path, True)

    def _write(self, path: str, data: bytes) -> None:
        """Write a small file whole and durably: hsync before close, as for data files (a batch record is
        the commit point, and must outlive a power loss of the DataNodes as the batch's data does)."""
        writer = self.create(path, overwrite=False, parents=True)

        def put() -> None:
            try:
                if data:
                    writer.write(data)
                    writer.hsync()
            finally:
                writer.close()

        bounded(put, self.config.write_timeout_s, f"writing {path}")

    @staticmethod
    def _tmp_for(path: str) -> str:
        parent, _, name = path.rpartition("/")
        return f"{parent}/.{name}.{uuid.uuid4().hex}.tmp"


def base(status: Any) -> str:
    """The last component of a listed entry's path."""
    return str(status.path).rstrip("/").rsplit("/", 1)[-1]
