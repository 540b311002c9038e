"""Reading Spark's checkpoint, and keeping eosink's batch manifests beside it.

Spark writes, per micro-batch ``N``: ``offsets/N`` before running the batch, and
``commits/N`` after ``foreachBatch`` returned. ``commits/N`` is Spark's promise never to
replay batch ``N``; it is what the two-phase-commit strategy waits for before committing.

eosink records each batch's commit decision (its committables and bundle) in
``<checkpoint>/eosink/<app>/N.json`` before the batch is released to Spark. The manifest
shares the checkpoint's lifecycle: a fresh checkpoint has none, and recovery reads the
manifests together with Spark's commit log. A read or write that fails (the store restarting)
is retried for up to :attr:`SparkCheckpoint.retry_s` (60 s) before it raises TransientError.

Local paths and ``file:`` URIs are handled directly (with fsync). Another scheme goes to the
:class:`CheckpointFS` a connector registers for it in the entry-point group
``eosink.checkpoint_fs`` (name: the scheme; value: a function of the location returning the file
system and the location's root path in it), since a connector knows its store best (conditional
writes, atomic renames, request costs); a scheme nobody registers goes through ``pyarrow.fs``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import uuid
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from eosink._retry import retry_transient
from eosink._rowhash import stable_u64
from eosink.contract import Bundle, Committable
from eosink.errors import ConfigurationError, TransientError

__all__ = ["CHECKPOINT_FS_GROUP", "CheckpointFS", "Manifest", "SparkCheckpoint"]


@runtime_checkable
class CheckpointFS(Protocol):
    """The file operations eosink needs on a checkpoint location; paths are absolute within the store.

    ``read_text`` of a missing file is None; ``list_names`` of a missing folder is empty;
    ``write_atomic`` replaces the file so that a reader sees the old or the new text, never a
    part; ``delete`` of a missing file is no error; ``move`` renames a file (creating the
    parent). Errors are ``OSError`` (turned into TransientError by :class:`SparkCheckpoint`).
    An optional ``poll_interval_s`` attribute (seconds) bounds how often a waiting 2PC batch looks
    for its commit file: on an object store each look is a paid request.
    """

    def read_text(self, path: str) -> str | None: ...

    def exists(self, path: str) -> bool: ...

    def list_names(self, path: str) -> list[str]: ...

    def write_atomic(self, path: str, text: str) -> None: ...

    def delete(self, path: str) -> None: ...

    def move(self, src: str, dst: str) -> None: ...


@dataclass(frozen=True)
class Manifest:
    """One batch's commit decision, kept beside Spark's checkpoint: its committables and its bundle."""

    committables: tuple[Committable, ...]
    bundle: Bundle

    def to_json(self) -> dict[str, Any]:
        return {"committables": [c.to_json() for c in self.committables], "bundle": self.bundle.to_json()}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Manifest:
        return cls(tuple(Committable.from_json(c) for c in data["committables"]), Bundle.from_json(data["bundle"]))


def _app_dir_name(app_id: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", app_id)[:64]
    return f"{safe}-{stable_u64(app_id):016x}"


class _LocalFS:
    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except FileNotFoundError:
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def list_names(self, path: str) -> list[str]:
        try:
            return os.listdir(path)
        except FileNotFoundError:
            return []

    def write_atomic(self, path: str, text: str) -> None:
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)

    def move(self, src: str, dst: str) -> None:
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.rename(src, dst)


class _ArrowFS:
    """Remote checkpoints through pyarrow.fs (S3, HDFS via libhdfs, GCS)."""

    def __init__(self, uri: str) -> None:
        from pyarrow import fs

        uri = re.sub(r"^s3a://", "s3://", uri)
        try:
            self._fs, self.root = fs.FileSystem.from_uri(uri)
        except Exception as exc:
            raise ConfigurationError(
                f"Cannot open the checkpoint location {uri!r} with pyarrow.fs: {exc}.",
                "Use a local path, or a URI pyarrow.fs supports (s3://, hdfs://, gs://) with its client set up.",
            ) from exc

    def read_text(self, path: str) -> str | None:
        try:
            with self._fs.open_input_stream(path) as fh:
                return bytes(fh.read()).decode("utf-8")
        except FileNotFoundError:
            return None

    def exists(self, path: str) -> bool:
        from pyarrow import fs

        return bool(self._fs.get_file_info(path).type != fs.FileType.NotFound)

    def list_names(self, path: str) -> list[str]:
        from pyarrow import fs

        try:
            infos = self._fs.get_file_info(fs.FileSelector(path, allow_not_found=True))
        except FileNotFoundError:
            return []
        return [info.base_name for info in infos]

    def write_atomic(self, path: str, text: str) -> None:
        self._fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with self._fs.open_output_stream(path) as fh:  # a single PUT on object stores
            fh.write(text.encode("utf-8"))

    def delete(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._fs.delete_file(path)

    def move(self, src: str, dst: str) -> None:
        self._fs.create_dir(dst.rsplit("/", 1)[0], recursive=True)
        self._fs.move(src, dst)


CHECKPOINT_FS_GROUP = "eosink.checkpoint_fs"
"""The entry-point group where connectors register a :class:`CheckpointFS` opener per URL scheme."""


def _registered_fs(location: str) -> tuple[CheckpointFS, str] | None:
    import importlib.metadata

    scheme = location.split("://", 1)[0].lower()
    for entry in importlib.metadata.entry_points(group=CHECKPOINT_FS_GROUP, name=scheme):
        try:
            opener = entry.load()
        except ImportError as exc:
            raise ConfigurationError(
                f"The checkpoint location {location!r} needs {entry.value.split(':')[0]}, which cannot be imported: "
                f"{exc}.",
                "Install the connector's extra (pip install 'eosink[s3]' for s3a://, 'eosink[hdfs]' for hdfs://).",
            ) from exc
        fs, root = opener(location)
        return fs, str(root)
    return None


class SparkCheckpoint:
    """One Spark streaming checkpoint location, as eosink needs it."""

    def __init__(self, location: str | os.PathLike[str]) -> None:
        text = os.fspath(location)
        if not text:
            raise ConfigurationError(
                "The checkpoint location is empty.",
                "Pass the same path you give to writeStream.option('checkpointLocation', ...).",
            )
        self.location = text
        self.retry_s = 60.0
        """How long a failing read or write of the checkpoint is retried before TransientError (the coordinator
        sets it from ``CommitPolicy.transient_timeout_s``)."""
        self._fs: CheckpointFS
        if "://" not in text or text.startswith("file:"):
            self.root = os.path.abspath(re.sub(r"^file:(//)?", "", text))
            self._fs = _LocalFS()
            return
        found = _registered_fs(text)
        if found is not None:
            self._fs, self.root = found
        else:
            arrow = _ArrowFS(text)
            self._fs, self.root = arrow, arrow.root

    @property
    def poll_interval_s(self) -> float:
        """How often a 2PC batch should look for its ``commits/N`` here: the file system's ``poll_interval_s``
        (each look is a request on an object store), 0 when it has none (local disk: as often as the
        coordinator's policy says)."""
        return float(getattr(self._fs, "poll_interval_s", 0.0))

    def __repr__(self) -> str:
        return f"SparkCheckpoint({self.location!r})"

    def _path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def _io(self, what: str, fn: Any, *args: Any, retry: bool = True) -> Any:
        """``fn(*args)``; an OSError is retried for up to :attr:`retry_s` (a store restarting), then TransientError."""

        def failed(exc: BaseException) -> TransientError:
            return TransientError(
                f"Cannot {what} in the checkpoint {self.location!r}: {exc}.",
                "Check that the checkpoint location is reachable and writable.",
            )

        return retry_transient(
            f"{what} in the checkpoint",
            lambda: fn(*args),
            timeout_s=self.retry_s if retry else 0.0,
            retry_on=(OSError, TransientError),
            wrap=failed,
            permanent=(FileNotFoundError,),
        )

    # -- Spark's own files ------------------------------------------------------------------

    def exists(self) -> bool:
        """Whether Spark has created this checkpoint (its ``metadata`` or commit log exists)."""
        return bool(
            self._io("read metadata", self._fs.exists, self._path("metadata"))
            or self._io("read the commit log", self._fs.exists, self._path("commits"))
        )

    def query_id(self) -> str | None:
        """The query id Spark stored in ``metadata`` when the checkpoint was created."""
        text = self._io("read metadata", self._fs.read_text, self._path("metadata"))
        if not text:
            return None
        try:
            return str(json.loads(text.splitlines()[0])["id"])
        except (ValueError, KeyError, IndexError):
            return None

    def has_commit_file(self, batch_id: int) -> bool:
        """Whether ``commits/<batch_id>`` exists: one cheap check, for polling."""
        return bool(self._io("read the commit log", self._fs.exists, self._path("commits", str(batch_id))))

    def is_committed(self, batch_id: int) -> bool:
        """Whether Spark's commit log holds ``batch_id`` (so Spark will never replay it)."""
        if self.has_commit_file(batch_id):
            return True
        last = self.last_committed()
        return last is not None and batch_id <= last  # older entries may have been purged

    def last_committed(self) -> int | None:
        """The newest batch id in Spark's commit log, or None."""
        ids = self.committed_batches()
        return ids[-1] if ids else None

    def has_offsets(self, batch_id: int) -> bool:
        """Whether ``offsets/<batch_id>`` exists: Spark writes it before it runs the batch."""
        return bool(self._io("read the offsets log", self._fs.exists, self._path("offsets", str(batch_id))))

    def latest_offsets(self) -> int | None:
        """The newest batch id in Spark's offsets log (the batch Spark runs or is about to run), or None."""
        names = self._io("list the offsets log", self._fs.list_names, self._path("offsets"))
        ids = [int(n) for n in names if n.isdigit()]
        return max(ids) if ids else None

    def require_offsets(self, batch_id: int) -> None:
        """Raise ConfigurationError unless this is the checkpoint of the query that runs ``batch_id``.

        Spark writes ``offsets/N`` before it calls ``foreachBatch(N)``, so a location without it
        is not the query's ``checkpointLocation``: eosink would wait for (2PC) or recover against
        a commit log that Spark never writes.
        """
        if not self.has_offsets(batch_id):
            raise ConfigurationError(
                f"Spark runs batch {batch_id}, but the checkpoint location {self.location!r} given to eosink has "
                f"no offsets/{batch_id}: it is not this query's checkpointLocation.",
                "Give eosink the query's own checkpoint: start the query with writer.start(df.writeStream...), which "
                "sets Spark's checkpointLocation from the writer, or pass the same path to "
                "foreach_batch(checkpoint_location=...) and .option('checkpointLocation', ...).",
            )

    def committed_batches(self) -> list[int]:
        """Every batch id in Spark's commit log, ascending: the batches Spark will never replay."""
        names = self._io("list the commit log", self._fs.list_names, self._path("commits"))
        return sorted(int(n) for n in names if n.isdigit())

    def source_log_offsets(self, source: int = 0) -> dict[int, int]:
        """Batch id -> the ``logOffset`` that source ``source`` (a file source) had reached in ``offsets/N``.

        A file source's batch ``N`` covers its log entries after batch ``N-1``'s offset up to its
        own. That is not always one entry: a crash between the source's log and ``offsets/N``
        makes the next run plan one batch over two entries. A torn offsets file (a killed run)
        ends the answer: nothing after it was planned.
        """
        names = self._io("list the offsets log", self._fs.list_names, self._path("offsets"))
        ends: dict[int, int] = {}
        for batch_id in sorted(int(n) for n in names if n.isdigit()):
            text = self._io("read the offsets log", self._fs.read_text, self._path("offsets", str(batch_id)))
            try:
                ends[batch_id] = int(json.loads((text or "").splitlines()[2 + source])["logOffset"])
            except (IndexError, KeyError, ValueError, TypeError):
                break
        return ends

    def batch_timestamp_ms(self, batch_id: int) -> int | None:
        """The batch's timestamp from the offsets log: identical when the batch is replayed."""
        text = self._io("read the offsets log", self._fs.read_text, self._path("offsets", str(batch_id)))
        if not text:
            return None
        for line in text.splitlines()[1:2]:
            try:
                return int(json.loads(line)["batchTimestampMs"])
            except (ValueError, KeyError, TypeError):
                return None
        return None

    # -- eosink's manifests ------------------------------------------------------------------

    def _manifest_dir(self, app_id: str) -> str:
        return self._path("eosink", _app_dir_name(app_id))

    def write_manifest(self, app_id: str, batch_id: int, manifest: Manifest) -> None:
        """Durably record a batch's commit decision (atomic replace)."""
        path = f"{self._manifest_dir(app_id)}/{batch_id}.json"
        self._io("write a manifest", self._fs.write_atomic, path, json.dumps(manifest.to_json(), sort_keys=True))

    def read_manifest(self, app_id: str, batch_id: int) -> Manifest | None:
        """The manifest of ``batch_id``, None if there is none; ConfigurationError if it is damaged."""
        path = f"{self._manifest_dir(app_id)}/{batch_id}.json"
        text = self._io("read a manifest", self._fs.read_text, path)
        if not text:
            return None
        try:
            return Manifest.from_json(json.loads(text))
        except (ValueError, KeyError, TypeError):
            pass
        raise ConfigurationError(
            f"The eosink manifest {path!r} is damaged.",
            "Restore the checkpoint from a backup; the manifest holds the batch's commit decision.",
        )

    def manifest_batches(self, app_id: str) -> list[int]:
        names = self._io("list manifests", self._fs.list_names, self._manifest_dir(app_id))
        return sorted(int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit())

    def delete_manifest(self, app_id: str, batch_id: int) -> None:
        self._io("delete a manifest", self._fs.delete, f"{self._manifest_dir(app_id)}/{batch_id}.json")

    # -- the lease: which driver runs this app_id on this checkpoint ---------------------------------

    def write_lease(self, app_id: str, lease: dict[str, Any]) -> None:
        """Record the driver that runs ``app_id`` now (:func:`eosink.rewind` refuses while it lives)."""
        path = f"{self._manifest_dir(app_id)}/lease.json"
        self._io("write the lease", self._fs.write_atomic, path, json.dumps(lease, sort_keys=True))

    def read_lease(self, app_id: str) -> dict[str, Any] | None:
        text = self._io("read the lease", self._fs.read_text, f"{self._manifest_dir(app_id)}/lease.json")
        try:
            found = json.loads(text) if text else None
        except ValueError:
            return None
        return found if isinstance(found, dict) else None

    def delete_lease(self, app_id: str) -> None:
        self._io("delete the lease", self._fs.delete, f"{self._manifest_dir(app_id)}/lease.json")

    # -- the first batch committed: tells a sink that lost every bundle from an app_id it never saw --------

    def write_first_commit(self, app_id: str, batch_id: int) -> None:
        """Record that ``app_id`` has committed batches from ``batch_id`` on (the earliest such batch is kept)."""
        known = self.read_first_commit(app_id)
        if known is not None and known <= batch_id:
            return
        path = f"{self._manifest_dir(app_id)}/first-commit.json"
        self._io("record the first commit", self._fs.write_atomic, path, json.dumps({"batch_id": batch_id}))

    def read_first_commit(self, app_id: str) -> int | None:
        """The first batch ``app_id`` committed from this checkpoint, None before its first commit (or when the
        checkpoint predates the record)."""
        path = f"{self._manifest_dir(app_id)}/first-commit.json"
        text = self._io("read the first commit", self._fs.read_text, path)
        try:
            return int(json.loads(text)["batch_id"]) if text else None
        except (ValueError, KeyError, TypeError):
            return None

    # -- a fan-out's sinks: their names in commit order --------------------------------------------

    def write_fanout(self, app_id: str, names: list[str]) -> None:
        """Record fan-out ``app_id``'s sinks in their commit order (:mod:`eosink.fanout` checks every start)."""
        path = f"{self._manifest_dir(app_id)}/fanout.json"
        self._io("write the fan-out's sinks", self._fs.write_atomic, path, json.dumps({"sinks": names}))

    def read_fanout(self, app_id: str) -> list[str] | None:
        """Fan-out ``app_id``'s sinks in commit order, as first recorded; None before its first start."""
        text = self._io("read the fan-out's sinks", self._fs.read_text, f"{self._manifest_dir(app_id)}/fanout.json")
        try:
            found = json.loads(text)["sinks"] if text else None
        except (ValueError, KeyError, TypeError):
            found = None
        return [str(n) for n in found] if isinstance(found, list) else None

    # -- files, for the rewind ---------------------------------------------------------------------

    def names(self, *parts: str) -> list[str]:
        """The names in a folder of the checkpoint (``names("commits")``), sorted."""
        return sorted(self._io("list the checkpoint", self._fs.list_names, self._path(*parts)))

    def read(self, *parts: str) -> str | None:
        """A file of the checkpoint as text, None if it does not exist."""
        text: str | None = self._io("read the checkpoint", self._fs.read_text, self._path(*parts))
        return text

    def move(self, src: tuple[str, ...], dst: tuple[str, ...]) -> None:
        """Move a file of the checkpoint to another place in it (a rename where the file system has one)."""
        self._io("move a file of the checkpoint", self._fs.move, self._path(*src), self._path(*dst), retry=False)

    def write(self, parts: tuple[str, ...], text: str) -> None:
        """Write a file of the checkpoint atomically."""
        self._io("write to the checkpoint", self._fs.write_atomic, self._path(*parts), text)

    def eosink_dir(self, app_id: str) -> tuple[str, ...]:
        """Where eosink keeps ``app_id``'s files in this checkpoint, as path parts."""
        return ("eosink", _app_dir_name(app_id))
