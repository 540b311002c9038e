"""{{ cookiecutter.class_name }}: an example eosink sink that writes JSON-lines files into a directory.

It implements the whole sink contract (:class:`eosink.contract.Sink`), prepare included, with
plain files, so that every rule of the contract shows in a few lines. Replace the file
operations with your store's and keep the structure. Under ``config.root``::

    _fence/<app>.lock             flock'ed: shared by pre_commit, exclusive by fence, commit, abort
    _fence/<app>.epoch            the app_id's current writer epoch
    _staging/<app>/<id>.jsonl     one participant attempt's rows, invisible to readers
    _staging/<app>/<id>.json      its committable: written by pre_commit, it marks the rows prepared
    data/<id>.jsonl               published rows: what readers see (read_rows)
    _bundles/<app>/<batch>.json   a committed batch's bundle, written once all its rows are published

``<app>`` is a file-name-safe form of the app_id and ``<id>`` a committable id. The contract maps
onto it like this::

    fence(app_id)        epoch file + 1, under the exclusive lock; open (unprepared) work deleted
    begin, write         rows appended to the staged .jsonl
    pre_commit           fsync the rows, then write the committable next to them (prepared)
    commit               os.replace each staged .jsonl into data/, pass fault point F6, then write
                         the bundle (last)
    abort                delete the staged files; refuse if the rows are already published
    commit_status        bundle -> COMMITTED; every committable staged or published -> PREPARED;
                         else ABORTED
    recover(app_id)      the prepared committables in _staging/<app>/
    fetch_last_bundle    the bundle with the highest batch id

A batch is published file by file, not at once, so the sink declares
``atomic_batch_visibility=False`` and writes the bundle last: a bundle always means "the whole
batch is visible". A crash half-way leaves a partial batch that ``commit_status`` reports PREPARED
and a repeated ``commit`` completes.

Every change of state is one atomic step (a create-by-rename, a rename or an unlink), so readers
take no lock. The lock keeps ``fence`` from slipping between another process's epoch check and its
write, and ``commit`` and ``abort`` of one app_id from interleaving.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
from eosink import faults
from eosink.contract import BatchRef, Bundle, Capabilities, CommitStatus, Committable, Sink, TaskRef
from eosink.errors import CommitAbortedError, ConfigurationError, FencedError

from {{ cookiecutter.package_name }}.config import {{ cookiecutter.class_name }}Config

__all__ = ["{{ cookiecutter.class_name }}", "read_rows"]


def _file_name(text: str) -> str:
    """``text`` as a safe, unique file name part: its harmless characters plus a hash of all of it."""
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", text)[:40]
    return f"{safe}-{hashlib.sha256(text.encode()).hexdigest()[:16]}"


@dataclass
class _Txn:
    """One participant attempt's open transaction. It lives only in the writing process."""

    task: TaskRef
    id: str
    rows: int = 0


class {{ cookiecutter.class_name }}(Sink[_Txn]):
    """Exactly-once JSON-lines files in a directory (see the module docstring for the layout).

    The instance holds only its configuration, so it pickles to Spark's executors as is, and a new
    instance made from the same configuration (in another process, after a crash) finds everything
    an old one made durable.
    """

    capabilities = Capabilities(
        supports_prepare=True,  # staged files survive the writing process
        supports_txid_status=True,  # commit_status can tell from the files
        supports_keys=False,  # append only: no upserts, so no `idempotent` strategy
        atomic_batch_visibility=False,  # one rename per committable
        supports_recover=True,  # prepared work is listed in _staging/<app>/
    )

    def __init__(self, config: {{ cookiecutter.class_name }}Config) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.config!r})"

    # -- where things are -------------------------------------------------------------------

    def _app_dir(self, kind: str, app_id: str) -> Path:
        return self.config.root / kind / _file_name(app_id)

    def _staged(self, app_id: str, cid: str, suffix: str) -> Path:
        """The staged rows (``.jsonl``) or committable (``.json``) of ``cid``."""
        return self._app_dir("_staging", app_id) / f"{cid}{suffix}"

    def _data_path(self, cid: str) -> Path:
        return self.config.root / "data" / f"{cid}.jsonl"

    def _bundle_path(self, batch: BatchRef) -> Path:
        return self._app_dir("_bundles", batch.app_id) / f"{batch.batch_id}.json"

    def _epoch_path(self, app_id: str) -> Path:
        return self.config.root / "_fence" / f"{_file_name(app_id)}.epoch"

    @staticmethod
    def _ours(c: Committable) -> bool:
        """Whether this sink made ``c.id`` (other ids name nothing, and never a path outside root)."""
        return bool(re.fullmatch(r"[A-Za-z0-9_.-]+", c.id)) and c.id.startswith(_file_name(c.batch.app_id) + ".")

    def _state(self, c: Committable) -> str:
        """'prepared', 'published' or 'gone' (aborted, lost, or never prepared).

        Staged is looked at before published: a concurrent commit only ever moves rows from staged
        to published, so a reader without the lock cannot miss them in between.
        """
        app_id = c.batch.app_id
        if not self._ours(c):
            return "gone"
        if self._staged(app_id, c.id, ".json").exists() and self._staged(app_id, c.id, ".jsonl").exists():
            return "prepared"
        return "published" if self._data_path(c.id).exists() else "gone"

    # -- durable file steps -----------------------------------------------------------------

    def _sync_dir(self, path: Path) -> None:
        """fsync a directory, so that a rename or create in it survives a power cut."""
        if self.config.fsync:
            fd = os.open(path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def _write_atomic(self, path: Path, text: str) -> None:
        """Write ``path`` all or nothing: a temporary file, fsync, rename over ``path``, fsync the directory."""
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            if self.config.fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        self._sync_dir(path.parent)

    def _move(self, src: Path, dst: Path) -> None:
        """Rename ``src`` to ``dst`` (atomic within one file system) and make both directories durable."""
        dst.parent.mkdir(parents=True, exist_ok=True)
        os.replace(src, dst)
        self._sync_dir(dst.parent)
        self._sync_dir(src.parent)

    # -- fencing ----------------------------------------------------------------------------

    @contextmanager
    def _locked(self, app_id: str, *, exclusive: bool) -> Iterator[None]:
        """Hold the app_id's lock file (flock: across processes and threads; released on close)."""
        path = self.config.root / "_fence" / f"{_file_name(app_id)}.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            yield

    def _epoch(self, app_id: str) -> int:
        try:
            return int(self._epoch_path(app_id).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return 0

    def _check_epoch(self, app_id: str, epoch: int, what: str) -> None:
        current = self._epoch(app_id)
        if epoch < current:
            raise FencedError(
                f"{what} of {app_id!r} at epoch {epoch} was fenced: a newer writer holds epoch {current}.",
                "Stop this older writer; only the newest may commit.",
            )

    def setup(self, app_id: str) -> None:
        """Create the directories readers and writers expect."""
        for kind in ("data", "_fence"):
            (self.config.root / kind).mkdir(parents=True, exist_ok=True)

    def fence(self, app_id: str) -> int:
        """Store and return the next epoch of ``app_id``, and delete open work of older writers.

        Holding the lock exclusively waits for running ``pre_commit``/``commit`` calls, so none of an
        older epoch completes after this returns. Staged rows without a committable were never
        prepared: they belong to crashed or now fenced writers, and nothing can commit them.
        """
        with self._locked(app_id, exclusive=True):
            epoch = self._epoch(app_id) + 1
            self._write_atomic(self._epoch_path(app_id), str(epoch))
            for rows in self._app_dir("_staging", app_id).glob("*.jsonl"):
                if not rows.with_suffix(".json").exists():
                    rows.unlink(missing_ok=True)
        return epoch

    # -- participant side (executors) -------------------------------------------------------

    def begin(self, task: TaskRef) -> _Txn:
        """Create the attempt's empty staged file (re-beginning an open attempt starts it over)."""
        if task.upsert_keys:
            raise ConfigurationError(
                f"{type(self).__name__} appends only; it cannot upsert by {list(task.upsert_keys)}.",
                "Use the '2pc' or 'txid-check' strategy, without key columns.",
            )
        app_id = task.batch.app_id
        self._check_epoch(app_id, task.epoch, "begin")  # early; pre_commit checks again, under the lock
        cid = f"{_file_name(app_id)}.{task.batch.batch_id:012d}.{task.participant}.{_file_name(task.attempt)}"
        txn = _Txn(task, cid)
        if self._state(self._committable(txn)) != "gone":
            raise ConfigurationError(
                f"Attempt {txn.id} was prepared already.", "Give every task attempt its own TaskRef.attempt."
            )
        rows = self._staged(app_id, txn.id, ".jsonl")
        rows.parent.mkdir(parents=True, exist_ok=True)
        rows.write_bytes(b"")
        return txn

    def write(self, txn: _Txn, data: pa.RecordBatch) -> None:
        """Append the rows as JSON lines to the staged file (values that JSON lacks become strings)."""
        app_id = txn.task.batch.app_id
        if self._staged(app_id, txn.id, ".json").exists():
            raise CommitAbortedError(f"Attempt {txn.id} is prepared; it can no longer be written.", "Begin anew.")
        lines = "".join(json.dumps(row, sort_keys=True, default=str) + "\n" for row in data.to_pylist())
        try:  # no O_CREAT: if abort deleted the file, do not bring it back
            fd = os.open(self._staged(app_id, txn.id, ".jsonl"), os.O_WRONLY | os.O_APPEND)
        except FileNotFoundError:
            raise CommitAbortedError(f"Attempt {txn.id} was aborted.", "Begin anew.") from None
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.write(lines)
        txn.rows += data.num_rows

    def _committable(self, txn: _Txn) -> Committable:
        task = txn.task
        staged = self._staged(task.batch.app_id, txn.id, ".jsonl").relative_to(self.config.root)
        return Committable(task.batch, task.epoch, task.participant, txn.id, txn.rows, payload={"staged": str(staged)})

    def pre_commit(self, txn: _Txn) -> Committable:
        """Make the rows durable, then mark them prepared by writing the committable beside them.

        A non-transactional task (``TaskRef.transactional=False``) publishes its rows at once instead.
        """
        app_id, committable = txn.task.batch.app_id, self._committable(txn)
        rows = self._staged(app_id, txn.id, ".jsonl")
        with self._locked(app_id, exclusive=False):
            self._check_epoch(app_id, txn.task.epoch, "pre_commit")
            state = self._state(committable)
            if state == "gone" and rows.exists():  # open: prepare it now
                if self.config.fsync:
                    with rows.open("rb") as f:
                        os.fsync(f.fileno())
                if txn.task.transactional:
                    self._write_atomic(self._staged(app_id, txn.id, ".json"), json.dumps(committable.to_json()))
                else:
                    self._move(rows, self._data_path(txn.id))
            elif state == "gone":
                raise CommitAbortedError(f"Attempt {txn.id} was aborted; it cannot be prepared.", "Begin anew.")
        return committable

    # -- coordinator side (driver) ----------------------------------------------------------

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """Publish every committable's rows, then write the bundle. Idempotent: a repeated commit
        publishes what is left (after a crash half-way) or finds the bundle and returns."""
        with self._locked(batch.app_id, exclusive=True):
            self._check_epoch(batch.app_id, bundle.epoch, "commit")
            if self._already_committed(batch, bundle):
                return
            # Check every committable before publishing any, so an aborted one publishes nothing.
            for c in committables:
                if self._state(c) == "gone":
                    raise CommitAbortedError(
                        f"Committable {c.id} of batch {batch} was aborted or lost; the batch cannot be committed.",
                        "Abort the batch's other committables and replay the batch.",
                    )
            for c in committables:
                if self._state(c) == "prepared":
                    self._move(self._staged(c.batch.app_id, c.id, ".jsonl"), self._data_path(c.id))
                self._staged(c.batch.app_id, c.id, ".json").unlink(missing_ok=True)
            # Fault point F6 (mid-commit): the rows published, the bundle not yet. Tests crash the commit
            # here (EOSINK_FAULTS="F6@1:kill"); the contract suite checks that every strategy passes it.
            faults.hit(faults.FaultPoint.F6, batch.batch_id)
            self._write_atomic(self._bundle_path(batch), json.dumps(bundle.to_json()))

    def _already_committed(self, batch: BatchRef, bundle: Bundle) -> bool:
        """True if this very commit happened before; CommitAbortedError if another attempt's did."""
        try:
            existing = Bundle.from_json(json.loads(self._bundle_path(batch).read_text(encoding="utf-8")))
        except FileNotFoundError:
            return False
        if set(existing.committables) != set(bundle.committables):
            raise CommitAbortedError(
                f"Batch {batch} was already committed with other committables ({list(existing.committables)}).",
                "Abort this attempt's committables; the batch is done.",
            )
        return True

    def abort(self, committables: Sequence[Committable]) -> None:
        """Delete prepared (or still open) work; unknown or already aborted ids are ignored. All or nothing
        per app_id: if any rows are published already, nothing is deleted and CommitAbortedError is raised."""
        for app_id in sorted({c.batch.app_id for c in committables}):
            mine = [c for c in committables if c.batch.app_id == app_id]
            with self._locked(app_id, exclusive=True):
                for c in mine:
                    if self._state(c) == "published":
                        raise CommitAbortedError(
                            f"Cannot abort committed work {c.id}: its rows are visible.",
                            "Do not abort a batch whose commit succeeded; check commit_status first.",
                        )
                for c in filter(self._ours, mine):  # prepared or still open
                    self._staged(app_id, c.id, ".jsonl").unlink(missing_ok=True)  # now it is gone
                    self._staged(app_id, c.id, ".json").unlink(missing_ok=True)

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        """The bundle with the highest batch id of ``app_id``, or None."""
        paths = list(self._app_dir("_bundles", app_id).glob("*.json"))
        if not paths:
            return None
        newest = max(paths, key=lambda p: int(p.stem))
        return Bundle.from_json(json.loads(newest.read_text(encoding="utf-8")))

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        """The truth, from the files: the bundle is written last, so its presence means COMMITTED."""
        if self._bundle_path(batch).exists():
            return CommitStatus.COMMITTED
        if any(self._state(c) == "gone" for c in committables):
            return CommitStatus.ABORTED
        return CommitStatus.PREPARED  # all staged or published: commit will complete it

    def recover(self, app_id: str) -> list[Committable]:
        """The prepared (staged, unpublished) committables of ``app_id``, by batch id and id."""
        found: list[Committable] = []
        for path in self._app_dir("_staging", app_id).glob("*.json"):
            try:
                c = Committable.from_json(json.loads(path.read_text(encoding="utf-8")))
            except FileNotFoundError:  # aborted or committed meanwhile
                continue
            if c.batch.app_id == app_id and self._state(c) == "prepared":
                found.append(c)
        return sorted(found, key=lambda c: (c.batch.batch_id, c.id))


def read_rows(root: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every row a reader of the sink at ``root`` sees now (only published files), by file name."""
    rows: list[dict[str, Any]] = []
    for path in sorted(Path(root, "data").glob("*.jsonl")):
        with path.open(encoding="utf-8") as f:
            rows.extend(json.loads(line) for line in f)
    return rows
