"""The coordinator side of HdfsSink (driver): commit, abort, commit_status, recover, fetch_last_bundle.

A transactional batch's commit, step by step (each step can be repeated after a crash)::

    1. epoch checked (FencedError); the destination T/eosink_range=<app>-<first>/eosink_batch=<batch>
       (in a flat target T/eosink_batch=<app>-<batch>) looked up: there with the same committables ->
       done (a lost reply, a roll-forward); another's -> refused
    2. every committable's files counted (pending and already staged) against the count its
       prepared name records: one missing -> CommitAbortedError (the coordinator's lost-work path)
    3. gather: each file renamed from pending/<batch>/<task>/ into staging/<batch>/ (its name now
       carries the task), the emptied task directory removed
    4. the batch record (bundle, files, schema, keys) written beside the files
    5. the range directory made (mkdirs: idempotent, and an empty one shows readers nothing); rename
       staging/<batch> -> the destination, without overwrite: the batch appears whole, record included;
       a lost reply raises AmbiguousCommitError, and commit_status looks
    6. pending/<batch>/, emptied by the gather, removed with the hidden directories of attempts that
       failed before they prepared (best effort: a prepared straggler keeps it until recovery aborts it)

The staging directory is shared by every attempt to commit the batch: two coordinators that
commit the same committables (a zombie and its successor) gather into one place, and the one
rename that wins publishes them all; the loser finds the same bundle in place.

Idempotent (non-transactional) committables are visible already: the commit deletes files of
the batch's directory that no committable names (an earlier attempt's) and writes the record; a
lost reply to the record's rename is ambiguous too, resolved by looking for the record.

Nothing here lists the target's history: a batch's place is computed from its id, and
``fetch_last_bundle`` lists the target's range directories and the newest range only
(:func:`~eosink.connectors.hdfs._batches.newest_batches`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from eosink import faults
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs._base import _SinkBase
from eosink.connectors.hdfs._batches import newest_batches
from eosink.connectors.hdfs._errors import is_connection_error
from eosink.connectors.hdfs._files import check_schema_doc
from eosink.connectors.hdfs._record import BatchRecord
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint
from eosink.errors import AmbiguousCommitError, CommitAbortedError, FencedError, SchemaError
from eosink.stores.hdfs import RenameNotDone, base

__all__ = ["_CommitSide"]

log = logging.getLogger("eosink.hdfs")


class _CommitSide(_SinkBase):
    """The coordinator side of :class:`HdfsSink`."""

    # -- reading state ------------------------------------------------------------------------

    def _read_record(self, final: str) -> BatchRecord | None:
        data = self.fs.read_bytes(f"{final}/{L.BUNDLE_FILE}")
        return None if data is None else BatchRecord.decode(data, f"{final}/{L.BUNDLE_FILE}")

    def _staged(self, app_id: str, batch_id: int) -> dict[str, list[str]]:
        """Task (committable id) -> its files in staging/<batch>/, as paths relative to it."""
        stage = self._staging(app_id, batch_id)
        found: dict[str, list[str]] = {}
        for status in self.fs.walk_files(stage):
            task = L.task_of_file(base(status))
            if task is not None:
                found.setdefault(task, []).append(status.path[len(stage) + 1 :])
        return found

    def _pending_tasks(self, app_id: str, batch_id: int) -> set[str]:
        return {n for n in self.fs.names(self._pending(app_id, batch_id)) if L.parse_task(n) is not None}

    def _look(self, app_id: str, batch_id: int, committables: Sequence[Committable]) -> _Look:
        """Where the batch's prepared files are: each transactional committable's, by pending name, wherever
        they are now.

        A commit moves files from pending to staging; pending is looked at first, staging after, so a
        file that a concurrent commit (a zombie's, a recovery's) moves meanwhile is found in its new place.
        """
        pending = self._pending(app_id, batch_id)
        tasks = self._pending_tasks(app_id, batch_id)
        found: dict[str, set[str]] = {c.id: set() for c in committables if "files" not in c.payload}
        for cid, names in found.items():
            if cid in tasks:
                src = f"{pending}/{cid}"
                names.update(status.path[len(src) + 1 :] for status in self.fs.walk_files(src))
        staged = self._staged(app_id, batch_id)
        for task, rels in staged.items():
            if task in found:
                found[task].update(_unstaged(rel, task) for rel in rels)
        return _Look(found, tasks, staged)

    # -- commit -----------------------------------------------------------------------------------

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """Make the batch visible with its record, in one rename (see the module docstring). Idempotent."""
        self._ensure_target()
        app, batch_id = batch.app_id, batch.batch_id
        final = self._final(app, batch_id)
        with self._errors(f"commit of batch {batch}"):
            self._check_epoch(app, bundle.epoch, "commit")
            found = self._read_record(final)
            if found is not None:
                self._same_bundle(batch, found.bundle, bundle)
            else:
                self._commit_new(batch, committables, bundle, final)
        self._tidy_pending(app, batch_id)

    def _commit_new(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle, final: str) -> None:
        """Steps 2 to 5 (or the idempotent commit) of a batch not committed yet; the target's schema kept."""
        app, batch_id = batch.app_id, batch.batch_id
        self._check_fingerprint(batch, committables, bundle)
        schema = self._batch_schema(batch, committables)
        known = self._target_schema()
        keys = _user_keys(committables)
        if any("files" in c.payload for c in committables):
            self._commit_visible(batch, committables, bundle, schema, keys)
        else:
            stage = self._staging(app, batch_id)
            files = self._gather(batch, committables, bundle, stage)
            if files is None:  # another coordinator committed the same batch meanwhile
                return
            record = BatchRecord(bundle, tuple(files), schema, keys)
            self.fs.replace(f"{stage}/{L.BUNDLE_FILE}", record.encode())
            self._check_epoch(app, bundle.epoch, "commit")
            self._rename_into_place(batch, stage, final, bundle)
        if known is None and schema is not None:
            self._store_schema(schema)

    def _tidy_pending(self, app_id: str, batch_id: int) -> None:
        """Step 6, after the batch is committed: its pending directory goes, so that a long run keeps none per batch.

        The gather emptied it; what else is there belongs to attempts that can no longer join the batch:
        hidden directories of attempts that failed before they prepared (removed here, as the next fence
        would), and prepared stragglers, which keep the directory until recovery aborts them. Best effort:
        the batch is committed whatever happens here."""
        base = self._pending(app_id, batch_id)
        try:
            if self.fs.delete_empty(base):
                return
            for name in self.fs.names(base):
                if L.writing_epoch(name) is not None:
                    self.fs.delete(f"{base}/{name}")
            self.fs.delete_empty(base)
        except (OSError, RuntimeError) as exc:
            log.warning("eosink %s: could not remove %s after its commit (the next fence will): %s", app_id, base, exc)

    def _batch_schema(self, batch: BatchRef, committables: Sequence[Committable]) -> tuple[tuple[str, str], ...] | None:
        """The batch's columns (its participants must agree), checked against the target's."""
        docs = {json.dumps(c.payload["schema"]) for c in committables if c.payload.get("schema")}
        if len(docs) > 1:
            raise SchemaError(
                f"The participants of batch {batch} wrote different columns: {sorted(docs)}.",
                "Give every partition of a batch the same schema (select and cast the columns in the query).",
            )
        schema = BatchRecord.schema_of([json.loads(d) for d in docs])
        known = self._target_schema()
        if schema is not None and known is not None:
            check_schema_doc(known, [list(c) for c in schema], f"batch {batch}")
        return schema

    def _rename_into_place(self, batch: BatchRef, stage: str, final: str, bundle: Bundle) -> None:
        """Step 5: the one rename that makes the batch visible; a lost reply is ambiguous."""
        parent = final.rsplit("/", 1)[0]
        if parent != self.root:  # the batch's range directory (flat targets have none)
            self.fs.mkdirs(parent)
        try:
            self.fs.rename(stage, final, checked=True, settle=False)  # staging is shared: commit_status settles
        except FileExistsError:
            found = self._read_record(final)
            if found is None:
                raise CommitAbortedError(
                    f"{final} exists but holds no batch record: something other than eosink wrote it.",
                    "Move that directory away, then restart the query.",
                ) from None
            self._same_bundle(batch, found.bundle, bundle)  # another coordinator's rename of the same batch
        except RenameNotDone as exc:
            raise AmbiguousCommitError(
                f"The rename making batch {batch} visible answered success, but the batch is not in place: "
                f"{exc.problem}",
                "Ask commit_status (the coordinator does): it looks whether the batch's directory exists with its "
                "record.",
            ) from None
        except (OSError, RuntimeError) as exc:
            self._raise_if_lost_reply(f"rename making batch {batch} visible", exc)
            raise

    def _raise_if_lost_reply(self, what: str, exc: BaseException) -> None:
        """A connection lost during the commit's last step: the NameNode may have done it; only looking tells."""
        if is_connection_error(exc):
            raise AmbiguousCommitError(
                f"The {what} got no reply ({self.config.scrub(str(exc)[:300])}).",
                "Ask commit_status (the coordinator does): it looks whether the batch's directory holds its "
                "record; never assume either outcome.",
            ) from None

    def _gather(
        self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle, stage: str
    ) -> list[str] | None:
        """Steps 2 and 3: every committable's files, counted, then moved into ``stage``; their paths in it.

        None when the files are gone because another coordinator committed these committables meanwhile.
        """
        app, batch_id = batch.app_id, batch.batch_id
        look = self._look(app, batch_id, committables)
        if look.lost(committables):  # moved on by a concurrent commit (its record tells), or back to pending
            record = self._read_record(self._final(app, batch_id))
            if record is not None:
                self._same_bundle(batch, record.bundle, bundle)
                return None
            look = self._look(app, batch_id, committables)
        lost = look.lost(committables)
        if lost:
            cid, missing = next(iter(lost.items()))
            raise CommitAbortedError(
                f"Committable {cid} of batch {batch} lost {missing} of its prepared files (neither pending nor "
                "staged); the batch cannot be committed.",
                "Abort the batch's other committables and replay the batch.",
            )
        staged, pending = look.staged, look.pending
        wanted = {c.id for c in committables}
        for task in set(staged) - wanted:  # another attempt's files from an earlier commit: back to pending
            for rel in staged.pop(task):
                self._move(f"{stage}/{rel}", f"{self._pending(app, batch_id)}/{task}/{_unstaged(rel, task)}")
        made: set[str] = set()
        for n, c in enumerate(committables):
            if c.id in pending:
                src = f"{self._pending(app, batch_id)}/{c.id}"
                for status in self.fs.walk_files(src):
                    rel = _staged_name(status.path[len(src) + 1 :], c.id)
                    parent = f"{stage}/{rel}".rsplit("/", 1)[0]
                    if parent not in made:
                        self.fs.mkdirs(parent)
                        made.add(parent)
                    self.fs.rename(status.path, f"{stage}/{rel}", overwrite=True, checked=False)
                    staged.setdefault(c.id, []).append(rel)
                self.fs.delete(src)
            if n == 0:
                faults.hit(faults.FaultPoint.F6, batch_id)  # one participant gathered, the others not yet
        if stage not in made:
            self.fs.mkdirs(stage)
        return sorted(rel for c in committables for rel in staged.get(c.id, []))

    def _move(self, src: str, dst: str) -> None:
        try:
            self.fs.rename(src, dst, overwrite=True, checked=False)
        except FileNotFoundError:
            self.fs.mkdirs(dst.rsplit("/", 1)[0])
            self.fs.rename(src, dst, overwrite=True, checked=False)

    def _check_fingerprint(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        total = sum((c.fingerprint for c in committables), Fingerprint())
        if total.rows and total != bundle.fingerprint:
            raise CommitAbortedError(
                f"The committables of batch {batch} add up to fingerprint {total}, not the bundle's "
                f"{bundle.fingerprint}.",
                "Commit a batch with the bundle made from its own committables.",
            )
        for c in committables:
            parsed = L.parse_task(c.id)
            if parsed is not None and c.rows and parsed.rows != c.rows:
                raise CommitAbortedError(
                    f"Committable {c.id} of batch {batch} says {c.rows} rows, but its attempt wrote {parsed.rows}.",
                    "Abort the batch's committables and replay the batch.",
                )

    def _commit_visible(
        self,
        batch: BatchRef,
        committables: Sequence[Committable],
        bundle: Bundle,
        schema: tuple[tuple[str, str], ...] | None,
        keys: tuple[str, ...],
    ) -> None:
        """Idempotent: drop files no committable names (an earlier attempt's), then write the record."""
        final = self._final(batch.app_id, batch.batch_id)
        keep = {f for c in committables for f in c.payload.get("files", ())}
        present = {status.path[len(final) + 1 :] for status in self.fs.walk_files(final)}
        missing = keep - present
        if missing:
            raise CommitAbortedError(
                f"Files of batch {batch} are gone: {sorted(missing)[:3]}.", "Replay the batch (restart the query)."
            )
        for rel in present - keep:
            if not any(part.startswith(("_", ".")) for part in rel.split("/")):
                self.fs.delete(f"{final}/{rel}", False)
        faults.hit(faults.FaultPoint.F6, batch.batch_id)  # the files are the batch's, its record not yet
        record = BatchRecord(bundle, tuple(sorted(keep)), schema, keys)
        tmp = self.fs.write_hidden(f"{final}/{L.BUNDLE_FILE}", record.encode())
        try:  # the record written first: the epoch check and the rename are one NameNode call apart
            self._check_epoch(batch.app_id, bundle.epoch, "commit")
        except FencedError:
            self.fs.delete(tmp, False)
            raise
        try:
            created = self.fs.place_new(tmp, f"{final}/{L.BUNDLE_FILE}")
        except (OSError, RuntimeError) as exc:
            self._raise_if_lost_reply(f"rename of batch {batch}'s record into place", exc)
            raise
        if not created:
            found = self._read_record(final)
            assert found is not None
            self._same_bundle(batch, found.bundle, bundle)

    @staticmethod
    def _same_bundle(batch: BatchRef, existing: Bundle, bundle: Bundle) -> None:
        if set(existing.committables) != set(bundle.committables):
            raise CommitAbortedError(
                f"Batch {batch} was already committed by another attempt "
                f"(committables {list(existing.committables)}, not {list(bundle.committables)}).",
                "Abort this attempt's committables; the batch is done.",
            )

    # -- abort, status, recovery --------------------------------------------------------------

    def abort(self, committables: Sequence[Committable]) -> None:
        """Delete prepared (and staged) files, and the batch's pending directory once empty; aborting committed
        work raises CommitAbortedError. Idempotent.

        An idempotent committable's files are left alone: they are visible already, under names a
        replay of the same participant overwrites, and the batch's commit removes what it does not name.
        """
        if not committables:
            return
        with self._errors("abort"):
            by_batch: dict[BatchRef, list[Committable]] = {}
            for c in committables:
                by_batch.setdefault(c.batch, []).append(c)
            for batch, group in by_batch.items():
                found = self._read_record(self._final(batch.app_id, batch.batch_id))
                done = [c.id for c in group if found is not None and c.id in found.bundle.committables]
                if done:
                    raise CommitAbortedError(
                        f"Cannot abort committed work {done}: its rows are visible.",
                        "Do not abort a batch whose commit succeeded; check commit_status first.",
                    )
                staged = self._staged(batch.app_id, batch.batch_id)
                stage = self._staging(batch.app_id, batch.batch_id)
                pending = self._pending(batch.app_id, batch.batch_id)
                for c in group:
                    self.fs.delete(f"{pending}/{c.id}")
                    for rel in staged.pop(c.id, []):
                        self.fs.delete(f"{stage}/{rel}", False)
                if not staged and self.fs.info(stage) is not None:
                    self.fs.delete(stage)
                self.fs.delete_empty(pending)  # kept while other attempts are there (or a writer began meanwhile)

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        """The bundle of ``app_id``'s newest batch directory that has a record (an idempotent batch's directory
        has none until its commit): the target's range directories and the newest range are listed, an older
        range only when the newer ones hold no record."""
        with self._errors("fetch_last_bundle"):
            for _, directory in newest_batches(self.fs, self.root, self._target_layout(), app_id):
                found = self._read_record(directory)
                if found is not None:
                    return found.bundle
        return None

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        """COMMITTED if the batch's directory holds its record, naming these committables (another attempt's
        record: ABORTED, as ``commit`` answers); PREPARED if every committable's files are there (pending,
        staged, or, idempotent, in the batch's directory); else ABORTED.

        Files move pending -> staging -> the batch's directory, the last by the rename of the whole staging
        directory with the record in it. The places are looked at in that order and the record last, so a
        file that a concurrent commit moves while this looks is found in its next place, and a record in
        place also means the source is gone: one look settles a lost reply. Work that looks incomplete is
        looked at once more (another coordinator may have moved files back to pending) before ABORTED.
        """
        with self._errors("commit_status"):
            status = self._status(batch, committables)
            if status is CommitStatus.ABORTED:
                status = self._status(batch, committables)
        return status

    def _status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        app, batch_id = batch.app_id, batch.batch_id
        final = self._final(app, batch_id)
        look = self._look(app, batch_id, committables)
        visible: set[str] = set()
        if any("files" in c.payload for c in committables):
            visible = {s.path[len(final) + 1 :] for s in self.fs.walk_files(final)}
        record = self._read_record(final)
        if record is not None:
            ours = {c.id for c in committables} <= set(record.bundle.committables)
            return CommitStatus.COMMITTED if ours else CommitStatus.ABORTED
        if look.lost(committables) or any(
            not set(c.payload["files"]) <= visible for c in committables if "files" in c.payload
        ):
            return CommitStatus.ABORTED
        return CommitStatus.PREPARED

    def recover(self, app_id: str) -> list[Committable]:
        """Every prepared, uncommitted attempt of ``app_id``: pending task directories and staged tasks."""
        found: dict[str, Committable] = {}
        with self._errors("recover"):
            batches = set(self.fs.names(self._pending(app_id))) | set(self.fs.names(self._staging(app_id)))
            for name in sorted(batches):
                if not name.isdigit():
                    continue
                batch_id = int(name)
                tasks = self._pending_tasks(app_id, batch_id) | set(self._staged(app_id, batch_id))
                for task in tasks:
                    parsed = L.parse_task(task)
                    if parsed is None or parsed.batch_id != batch_id:
                        continue
                    found[task] = Committable(
                        BatchRef(app_id, batch_id), parsed.epoch, parsed.participant, id=task, rows=parsed.rows
                    )
        return sorted(found.values(), key=lambda c: (c.batch.batch_id, c.id))


@dataclass(frozen=True)
class _Look:
    """One look at a batch's prepared files (see :meth:`_CommitSide._look`)."""

    found: dict[str, set[str]]
    """Transactional committable id -> the pending names of its files found, pending or staged."""
    pending: set[str]
    """The task directories in pending/<batch>/."""
    staged: dict[str, list[str]]
    """Task -> its files in staging/<batch>/, as paths relative to it."""

    def lost(self, committables: Sequence[Committable]) -> dict[str, int]:
        """Committable id -> how many of its files were found neither pending nor staged (its prepared name
        has the count); transactional committables only."""
        lost: dict[str, int] = {}
        for c in committables:
            if c.id in self.found:
                parsed = L.parse_task(c.id)
                missing = 1 if parsed is None else max(0, parsed.files - len(self.found[c.id]))
                if missing:
                    lost[c.id] = missing
        return lost


def _user_keys(committables: Sequence[Committable]) -> tuple[str, ...]:
    for c in committables:
        keys = c.payload.get("keys")
        if keys:
            return tuple(str(k) for k in keys)
    return ()


def _staged_name(rel: str, task: str) -> str:
    """``[pdir/]part-p<n>.<ext>`` -> ``[pdir/]part-p<n>-<task>.<ext>``."""
    head, _, name = rel.rpartition("/")
    stem, _, ext = name.rpartition(".")
    staged = f"{stem}-{task}.{ext}"
    return f"{head}/{staged}" if head else staged


def _unstaged(rel: str, task: str) -> str:
    head, _, name = rel.rpartition("/")
    plain = name.replace(f"-{task}.", ".", 1)
    return f"{head}/{plain}" if head else plain
