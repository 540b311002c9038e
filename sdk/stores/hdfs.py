"""HDFS as every file sink reaches it: target URLs, ``hdfs_native`` clients, and a small, guarded file-system
layer over one ``hdfs_native.Client`` per process (:class:`Fs`).

A target is an ``hdfs://`` URL (``hdfs://namenode:8020/data/events``, ``hdfs://nameservice/data/events``
for an HA name service) or an absolute path resolved against ``fs.defaultFS`` of a Hadoop configuration
directory (:func:`split_url`). :class:`Fs` works on anything that says how to reach the file system and
how to write files there (:class:`HdfsTarget`: the HDFS sink's HdfsConfig, or :class:`HdfsConnection`).

hdfs-native's ``rename`` is HDFS's ``rename2``: it raises when the destination exists and never
moves a directory *into* an existing one, unlike the two-argument ``rename`` that answers
``false``. The layer still checks what a rename left behind (:meth:`Fs.rename`), so that a client or
server with the other behaviour cannot make a batch land in the wrong place unnoticed.

A request whose reply is lost (a dropped connection, a NameNode failing over) may have been done.
hdfs-native does not send such a write again (its 0.14.7 gives every connection a new client id, so
the NameNode's retry cache could not recognise the repeat), it raises. :class:`Fs` settles a rename
and a delete from what the NameNode holds then, never from a repeat's answer: a rename is done when
its source is gone and its destination there (sources are names only one writer uses), a delete when
the path is gone. A create is never repeated: a retry writes a file of a new name.
"""

from __future__ import annotations

import io
import os
import posixpath
import re
import threading
import time
import urllib.parse
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from eosink._secrets import looks_secret, scrub
from eosink.errors import ConfigurationError, EosinkError, TransientError
from eosink.stores.hdfs_errors import is_connection_error

if TYPE_CHECKING:
    from hdfs_native import Client, FileStatus, FileWriter
    from hdfs_native._internal import RawFileWriter

__all__ = [
    "FAIL_FAST",
    "MAX_COMPONENT_BYTES",
    "MAX_PATH_CHARS",
    "Fs",
    "HdfsConnection",
    "HdfsFile",
    "HdfsTarget",
    "RenameNotDone",
    "base",
    "bounded",
    "check_path",
    "client_for",
    "create_file",
    "default_fs",
    "forget_clients",
    "ha_settings",
    "named_namenodes",
    "split_url",
]

_T = TypeVar("_T")


class HdfsTarget(Protocol):
    """What :class:`Fs` needs: how to make the client, as whom, and how files are written."""

    @property
    def user(self) -> str | None: ...
    @property
    def replication(self) -> int | None: ...
    @property
    def block_size(self) -> int | None: ...
    @property
    def write_timeout_s(self) -> float: ...
    def client_kwargs(self) -> dict[str, Any]: ...


@dataclass(frozen=True, repr=False)
class HdfsConnection:
    """How to reach one directory of an HDFS file system (an :class:`HdfsTarget`), for sinks that need no
    more of HDFS than its files: ``url`` as :func:`split_url` takes it, ``hadoop_conf_dir`` (default:
    ``$HADOOP_CONF_DIR``), extra ``client_config`` (never shown where a key looks secret), ``user``,
    and the files' ``replication``, ``block_size`` and ``write_timeout_s``."""

    url: str
    hadoop_conf_dir: str | None = None
    namenodes: Mapping[str, str] = field(default_factory=dict)
    client_config: Mapping[str, str] = field(default_factory=dict)
    user: str | None = None
    replication: int | None = None
    block_size: int | None = None
    write_timeout_s: float = 120.0
    namenode: str = field(init=False, compare=False)
    path: str = field(init=False, compare=False)

    def __post_init__(self) -> None:
        conf_dir = self.hadoop_conf_dir or os.environ.get("HADOOP_CONF_DIR") or None
        object.__setattr__(self, "hadoop_conf_dir", conf_dir)
        namenode, path = split_url(self.url.strip(), conf_dir)
        check_path(path)
        object.__setattr__(self, "namenode", namenode)
        object.__setattr__(self, "path", path.rstrip("/") or "/")
        object.__setattr__(self, "client_config", {str(k): str(v) for k, v in dict(self.client_config).items()})
        object.__setattr__(self, "namenodes", named_namenodes(self.namenodes))
        if self.namenodes:
            ha_settings(self.namenode, self.namenodes)  # refuses a bad address or a URL with a port now

    def client_kwargs(self) -> dict[str, Any]:
        """Arguments for ``hdfs_native.Client``: fail-fast retries, the name service's NameNodes (``namenodes``, as
        :func:`ha_settings` spells them), then the given settings."""
        ha = ha_settings(self.namenode, self.namenodes) if self.namenodes else {}
        return {
            "url": self.namenode,
            "config": {**FAIL_FAST, **ha, **self.client_config},
            "config_dir": self.hadoop_conf_dir,
        }

    def scrub(self, text: str) -> str:
        """``text`` with the values of secret-looking settings replaced by ``***``."""
        return scrub(text, (v for k, v in self.client_config.items() if looks_secret(k)))

    def __repr__(self) -> str:
        return f"HdfsConnection(url={self.namenode + self.path!r})"

    __str__ = __repr__


MAX_COMPONENT_BYTES = 255
"""HDFS's default ``dfs.namenode.fs-limits.max-component-length``."""
MAX_PATH_CHARS = 8000
"""HDFS's longest path (``HdfsServerConstants.MAX_PATH_LENGTH``)."""
_OWN_DEPTH_CHARS = 400
"""The longest path eosink adds below the target (bookkeeping dirs, batch and attempt names, partitions not
counted): a target longer than ``MAX_PATH_CHARS`` minus this is refused at construction."""

#: Fail fast: hdfs-native's defaults retry an unreachable NameNode for minutes.
FAIL_FAST = {
    "dfs.client.failover.max.attempts": "2",
    "dfs.client.failover.sleep.base.millis": "100",
    "dfs.client.failover.sleep.max.millis": "1000",
}

_PROXY_PROVIDER = "org.apache.hadoop.hdfs.server.namenode.ha.ConfiguredFailoverProxyProvider"
_ATTEMPTS_PER_NAMENODE = 8
"""Failover attempts per NameNode of an HA name service: hdfs-native backs off 0.1 s, doubling up to 1 s,
after each round over the NameNodes, so two NameNodes are tried for some 6 s (a manual or ZKFC failover's
order) before the call fails; the sink's own retries go on from there."""


def named_namenodes(namenodes: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    """``namenodes`` as ``{name: "host:port"}``: a list's are named nn0, nn1, ... in order."""
    if isinstance(namenodes, str):
        namenodes = [namenodes]
    if isinstance(namenodes, Mapping):
        return {str(k): str(v) for k, v in namenodes.items()}
    return {f"nn{i}": str(a) for i, a in enumerate(namenodes)}


def ha_settings(authority: str, namenodes: Mapping[str, str] | Sequence[str]) -> dict[str, str]:
    """Hadoop's (and hdfs-native's) settings for the HA name service ``authority`` (``hdfs://ns1``) served by
    ``namenodes``: ``{"nn0": "host:8020", ...}``, or a list of ``host:port`` named nn0, nn1, ... in order."""
    parts = urllib.parse.urlsplit(authority)
    service = parts.netloc
    if parts.port is not None or not service:
        raise ConfigurationError(
            f"namenodes are given, but the target's authority {service!r} is not a name service.",
            "Address an HA name service without a port (hdfs://ns1/path), or drop namenodes.",
        )
    named = named_namenodes(namenodes)
    if not named:
        raise ConfigurationError("namenodes is empty.", "Give the name service's NameNodes as host:port.")
    for name, address in named.items():
        host, _, port = str(address).rpartition(":")
        if not re.fullmatch(r"[A-Za-z0-9_-]+", str(name)) or not host or not port.isdigit():
            raise ConfigurationError(
                f"NameNode {name!r} at {address!r} is not a name and a host:port.",
                "Give namenodes as {'nn0': 'host:8020', ...} or ['host:8020', ...].",
            )
    settings = {
        "dfs.nameservices": service,
        f"dfs.ha.namenodes.{service}": ",".join(named),
        f"dfs.client.failover.proxy.provider.{service}": _PROXY_PROVIDER,
        "dfs.client.failover.max.attempts": str(_ATTEMPTS_PER_NAMENODE * len(named)),
    }
    settings.update({f"dfs.namenode.rpc-address.{service}.{n}": str(a) for n, a in named.items()})
    return settings


def default_fs(conf_dir: str) -> str | None:
    """``fs.defaultFS`` from ``core-site.xml`` in a Hadoop configuration directory, or None."""
    path = os.path.join(conf_dir, "core-site.xml")
    try:
        root = ET.parse(path).getroot()
    except FileNotFoundError:
        return None
    except (ET.ParseError, OSError) as exc:
        raise ConfigurationError(
            f"Cannot read {path}: {exc}.", "Point hadoop_conf_dir at a valid Hadoop configuration directory."
        ) from None
    for prop in root.iter("property"):
        if (prop.findtext("name") or "").strip() == "fs.defaultFS":
            return (prop.findtext("value") or "").strip() or None
    return None


def split_url(url: str, hadoop_conf_dir: str | None) -> tuple[str, str]:
    """``(hdfs://authority, absolute path)`` of a target URL, or of an absolute path resolved against
    ``fs.defaultFS`` of ``hadoop_conf_dir``."""
    if url.lower().startswith("hdfs:///"):  # Hadoop's "the default file system"
        url = url[len("hdfs://") :]
    if url.startswith("/"):
        fs = default_fs(hadoop_conf_dir) if hadoop_conf_dir else None
        if not fs:
            raise ConfigurationError(
                f"The target {url!r} names no NameNode, and no fs.defaultFS is known to resolve it.",
                "Give a full hdfs:// URL, or hadoop_conf_dir (or $HADOOP_CONF_DIR) with a core-site.xml that "
                "sets fs.defaultFS.",
            )
        url = fs.rstrip("/") + url
    parts = urllib.parse.urlsplit(url)
    if parts.scheme.lower() != "hdfs" or not parts.netloc:
        raise ConfigurationError(
            f"The target {_shown(url)!r} is not an hdfs:// URL.",
            "Use hdfs://<namenode>:<port>/<path> or hdfs://<name service>/<path>.",
        )
    if parts.username or parts.password:
        raise ConfigurationError(
            "The hdfs:// URL holds user information; HDFS takes no password in URLs.",
            "Remove it; give user=... or Kerberos options instead.",
        )
    if parts.query or parts.fragment:
        raise ConfigurationError("The hdfs:// URL has a query or fragment.", "Give a plain hdfs:// URL.")
    path = urllib.parse.unquote(parts.path) or "/"
    return f"hdfs://{parts.netloc}", path


def _shown(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    if parts.password:
        return url.replace(parts.password, "***")
    return url


def check_path(path: str) -> None:
    """Refuse a target path HDFS would refuse (or that escapes with ``..``) before anything is written."""
    if not path.startswith("/"):
        raise ConfigurationError(f"The target path {path!r} is not absolute.", "Give an absolute path.")
    parts = path.split("/")
    if any(p in (".", "..") for p in parts):
        raise ConfigurationError(
            f"The target path {path!r} contains '.' or '..'.",
            "Give the directory's normalised absolute path (HDFS does not resolve '..').",
        )
    if "\x00" in path or re.search(r"[\x00-\x1f]", path):
        raise ConfigurationError("The target path contains control characters.", "Give a printable path.")
    for part in parts:
        if len(part.encode()) > MAX_COMPONENT_BYTES:
            raise ConfigurationError(
                f"The target path has a component of {len(part.encode())} bytes ({part[:24]!r}...); HDFS allows "
                f"{MAX_COMPONENT_BYTES}.",
                "Use shorter directory names.",
            )
    if len(path) > MAX_PATH_CHARS - _OWN_DEPTH_CHARS:
        raise ConfigurationError(
            f"The target path is {len(path)} characters long; with eosink's own directories below it, it would pass "
            f"HDFS's limit of {MAX_PATH_CHARS}.",
            f"Use a target path of at most {MAX_PATH_CHARS - _OWN_DEPTH_CHARS} characters.",
        )
    if path == "/":
        raise ConfigurationError("The target is the file system's root.", "Give a directory below the root.")
    if posixpath.normpath(path) != path.rstrip("/") and path != "/":
        raise ConfigurationError(f"The target path {path!r} is not normalised.", "Remove doubled slashes.")


_SHORT_READ_WAIT_S = 10.0
_SHORT_READ_POLL_S = 0.02
_CLIENTS: dict[tuple[int, str], Client] = {}
_LOCK = threading.Lock()
_USER: dict[int, str] = {}
"""The ``user`` this process's clients were made for (per pid): hdfs-native has one user per process."""


def client_for(config: HdfsTarget) -> Client:
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


class HdfsFile:
    """A file being written on HDFS: hdfs-native's writer without its ``io`` finalizer.

    hdfs-native's ``FileWriter`` is an ``io.RawIOBase``, so collecting one that is still open
    closes the file: a NameNode call that waits without limit, run by whichever thread the
    garbage collector happens to run in. That thread may be the one the call waits on (an event
    loop in front of the NameNode), or one that must not block (a query's commit watcher); and a
    writer abandoned on purpose (:func:`bounded`) must stay unfinished. A dropped :class:`HdfsFile`
    only lets go of its lease, which is what hdfs-native's own writer does when it is dropped.
    """

    __slots__ = ("_raw",)

    def __init__(self, writer: FileWriter) -> None:
        self._raw: RawFileWriter = writer.inner
        io.RawIOBase.close(writer)  # marks the wrapper closed, without closing the file: its finalizer does nothing

    def write(self, data: bytes) -> int:
        """Send ``data`` (all of it) down the file's DataNode pipeline."""
        return self._raw.write(data)

    def hsync(self) -> None:
        """Persist what was written on the DataNodes, and update the file's visible length."""
        self._raw.hsync()

    def close(self) -> None:
        """Finish the file: the NameNode completes its last block."""
        self._raw.close()

    def __repr__(self) -> str:
        return "HdfsFile()"


def create_file(client: Client, path: str, options: Any) -> HdfsFile:
    """``client.create(path, options)`` as an :class:`HdfsFile`."""
    return HdfsFile(client.create(path, options))


class RenameNotDone(EosinkError):
    """A rename answered success but did not leave the source gone and the destination in place."""


def rename_not_done(src: str, dst: str) -> RenameNotDone:
    return RenameNotDone(
        f"HDFS answered that {src} was renamed to {dst}, but {dst} is not in place (or {src} is still there).",
        "Check the NameNode's audit log for other writers in the target directory; retry the operation.",
    )


class Fs:
    """The operations the sink needs, on paths of one file system."""

    def __init__(self, config: HdfsTarget) -> None:
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
        except (OSError, RuntimeError) as exc:
            if is_connection_error(exc) and self._settled(lambda: self.info(path) is None):
                return True  # the lost reply's delete was done
            raise

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

    def rename(self, src: str, dst: str, *, overwrite: bool = False, checked: bool = True, settle: bool = True) -> None:
        """Move ``src`` to exactly ``dst``: FileExistsError if ``dst`` exists (without ``overwrite``).

        ``checked``: look afterwards, and raise RenameNotDone if the rename claimed success but
        ``src`` is still there or ``dst`` is not (two more NameNode calls). ``settle``: a lost reply is
        settled by looking (see the module docstring); False where ``src`` is shared by several writers, so
        that ``dst`` in place does not say whose rename it was: the lost reply is raised.
        """
        try:
            self.client.rename(src, dst, overwrite)
        except (OSError, RuntimeError) as exc:
            if settle and is_connection_error(exc) and self._renamed(src, dst):
                return
            raise
        if checked and (self.info(dst) is None or self.info(src) is not None):
            raise rename_not_done(src, dst)

    def _renamed(self, src: str, dst: str) -> bool:
        """Whether a rename whose reply was lost was done: ``src`` gone and ``dst`` there, as the NameNode
        answers now (False also when it cannot be asked: the caller raises the lost reply)."""
        return self._settled(lambda: self.info(src) is None and self.info(dst) is not None)

    @staticmethod
    def _settled(look: Callable[[], bool]) -> bool:
        try:
            return look()
        except (OSError, RuntimeError):
            return False

    def create(self, path: str, *, overwrite: bool = False, parents: bool = True) -> HdfsFile:
        from hdfs_native import WriteOptions

        options = WriteOptions(
            overwrite=overwrite,
            create_parent=parents,
            replication=self.config.replication,
            block_size=self.config.block_size,
        )
        return create_file(self.client, path, options)

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
            self.rename(tmp, path, checked=False)
        except FileExistsError:
            self.delete(tmp, False)
            return False
        return True

    def replace(self, path: str, data: bytes) -> None:
        """Write ``path`` atomically: a hidden temporary file, renamed over the old one."""
        tmp = self._tmp_for(path)
        self._write(tmp, data)
        self.rename(tmp, path, overwrite=True, checked=False)

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
