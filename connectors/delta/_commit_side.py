"""The coordinator side of DeltaSink (driver): commit, abort, commit_status, recover, fetch_last_bundle.

A batch's commit, step by step (each can be repeated after a crash)::

    1. the newest snapshot read; the epoch checked on it (FencedError); the app's txn version
       compared with the batch: there already -> the same committables: done (a lost reply, a
       roll-forward); another's: CommitAbortedError
    2. every committable's files looked up: one missing -> CommitAbortedError (lost work)
    3. the batch's columns checked against the table's (SchemaError); with
       ``schema_evolution="add_columns"``, new columns join the table's schema (nullable) in a commit
       of their own, then back to 1
    4. one Delta commit at the snapshot's version + 1: the add actions, txn("eosink:<app>", batch),
       the bundle in the commit info. Another writer's commit at that version: back to 1 on the
       newer snapshot. No answer from the store: AmbiguousCommitError (commit_status reads the log)
    5. the batch's manifests removed (best effort)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from eosink import faults
from eosink.connectors.delta import _log
from eosink.connectors.delta._base import _SinkBase
from eosink.connectors.delta._files import AddFile
from eosink.connectors.delta._schema import check_batch, delta_columns, table_columns
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable
from eosink.errors import (
    AmbiguousCommitError,
    CommitAbortedError,
    CommittedWorkLostError,
    ConfigurationError,
    EosinkError,
    TransientError,
)
from eosink.keys import KEY_COLUMN

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

__all__ = ["_CommitSide"]

log = logging.getLogger("eosink.delta")

_BEYOND_HISTORY = object()
"""A batch the app's txn holds as committed whose commit (and bundle) the log's retained history has dropped."""


def _adds(committables: Sequence[Committable]) -> list[AddFile]:
    return [AddFile.from_json(a) for c in committables for a in c.payload.get("adds", ())]


def _schemas(committables: Sequence[Committable]) -> list[pa.Schema]:
    import pyarrow as pa

    found = []
    for c in committables:
        text = c.payload.get("schema")
        if text:
            found.append(pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(str(text)))))
    return found


def _keys(committables: Sequence[Committable]) -> tuple[str, ...]:
    """The upsert keys of the batch (the idempotent strategy), or ()."""
    for c in committables:
        if c.payload.get("keys"):
            return tuple(str(k) for k in c.payload["keys"])
    return ()


class _CommitSide(_SinkBase):
    """The coordinator side of :class:`DeltaSink`."""

    # -- commit -----------------------------------------------------------------------------------

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """Make the batch visible with its bundle, in one Delta commit (see the module docstring). Idempotent."""
        app, batch_id = batch.app_id, batch.batch_id
        for _ in range(self.config.commit_attempts):
            with self._errors(f"commit of batch {batch}"):
                table = self._table()
                if table is None:
                    raise ConfigurationError(
                        f"The Delta table {self.config.table} is gone: batch {batch} cannot be committed into it.",
                        "Restore the table (or point the sink at it), then restart the query.",
                    )
                self._check_epoch(table, app, bundle.epoch, "commit")
                found = self._committed(table, app, batch_id)
                if found is _BEYOND_HISTORY:
                    break  # committed long ago: never again (whose attempt it was, the log no longer says)
                if isinstance(found, Bundle):
                    self._same_bundle(batch, found, bundle)
                    break
                last = _log.last_batch(table, app)
                self._check_follows(batch, bundle, last)
                if last is not None and last < batch_id:
                    self._compact_if_due(app, last)  # a compaction a crash kept from running after the last batch
                adds = _adds(committables)
                self._check_files(batch, committables, adds)
                if self._widen(table, batch, committables):
                    continue
                schema = table.schema()
                meta = {_log.META_KEY: {"app_id": app, "batch": batch_id, "bundle": bundle.to_json()}}
                keys = _keys(committables)
                source = self._source(table, adds, keys) if keys and adds else None
                faults.hit(faults.FaultPoint.F6, batch_id)  # the files checked, the log entry not written yet
            txns = {_log.batch_txn(app): max(batch_id, -1 if last is None else last)}
            try:
                if source is not None:
                    _log.merge_at(table, source, keys, txns, meta)
                else:
                    _log.commit_at(table, [a.action() for a in adds], schema, txns, meta, self._partition_by(table))
            except _log.Conflict as exc:
                self._raced(table, exc, f"the commit of batch {batch}")
                continue  # another writer's commit (or our own, whose reply was lost): look again
            except EosinkError:
                raise
            except Exception as exc:
                raise AmbiguousCommitError(
                    f"The commit of batch {batch} into {self.config.table} got no answer: "
                    f"{self.config.scrub(str(exc))[:400]}.",
                    "commit_status reads the table's log to tell whether it landed.",
                ) from None
            break
        else:
            raise TransientError(
                f"The commit of batch {batch} lost {self.config.commit_attempts} races with other writers of "
                f"{self.config.table}.",
                "Retry; if it persists, fewer writers should share the table (or raise commit_attempts).",
            )
        self._remember(app, bundle)
        self._tidy(app, batch_id, bundle.committables)
        if _keys(committables):  # merged: the log names the rewritten files, never the prepared ones
            self._quietly("removing a merged batch's prepared files", [a.path for a in _adds(committables)])
        self._compact_if_due(app, batch_id)

    def _check_follows(self, batch: BatchRef, bundle: Bundle, last: int | None) -> None:
        """CommittedWorkLostError when the table no longer holds the batch ``bundle`` follows (its store lost log
        entries: a restore, an asynchronously replicated bucket). The check is on the snapshot the conditional
        commit builds on, so no other commit slips in between."""
        lost = bundle.missing_predecessors(last)
        if not lost:
            return
        follows = bundle.follows
        holds = f"up to batch {last} only" if last is not None else "no batch of it at all"
        raise CommittedWorkLostError(
            f"The Delta table {self.config.table} holds app_id {batch.app_id!r} {holds}, but batch {follows} was "
            f"committed before batch {batch.batch_id}: the log lost entries its store had acknowledged (a restore, "
            "an asynchronously replicated store).",
            f"Stop the query and rewind its checkpoint to batch {lost[0]} (eosink recover --rewind).",
            app_id=batch.app_id,
            batch_id=lost[0],
            batches=lost,
        )

    def _quietly(self, what: str, paths: Sequence[str]) -> None:
        """Delete ``paths``, best effort (the batch is committed whatever happens here; leftovers are unnamed by
        the log, so invisible, and a vacuum removes them)."""
        for path in paths:
            try:
                self._delete(path)
            except Exception as exc:
                log.warning("eosink: %s: could not delete %s: %s", what, path, self.config.scrub(str(exc)))

    # -- what the log's history no longer holds ---------------------------------------------------

    def _committed(self, table: DeltaTable, app_id: str, batch_id: int) -> Bundle | object | None:
        """The bundle of ``app_id``'s batch ``batch_id`` if committed; :data:`_BEYOND_HISTORY` when the app's txn
        says it is committed but its commit has left the log's retained history (and the app's last bundle,
        kept under ``_eosink/``, is another batch's); None when it is not committed."""
        found = self._bounded(lambda: _log.bundle_of(table, app_id, batch_id), "a read of the log's history")
        if found is not None:
            return found
        last = _log.last_batch(table, app_id)
        if last is None or batch_id > last:
            return None
        kept = self._kept_bundle(app_id)
        if kept is not None and kept.batch.batch_id == batch_id:
            return kept
        if not self._storage().missing([f"_delta_log/{0:020d}.json"]):
            return None  # the whole log was read: not committed (the txn's version is a later batch's)
        # The log was cleaned up to its retention. The coordinator commits an app's batches in order, so a
        # batch at or below the txn's version whose commit is not in the retained history was committed.
        return _BEYOND_HISTORY

    def _remember(self, app_id: str, bundle: Bundle) -> None:
        """Keep the app's newest bundle under ``_eosink/`` too (best effort), for when the log's history has
        dropped its commit (an app idle longer than ``delta.logRetentionDuration``)."""
        try:
            self._write_json(f"{self._app_dir(app_id)}/last-bundle.json", bundle.to_json())
        except Exception as exc:
            log.warning("eosink: could not keep the last bundle of %r: %s", app_id, self.config.scrub(str(exc)))

    def _kept_bundle(self, app_id: str) -> Bundle | None:
        try:
            doc = self._read_json(f"{self._app_dir(app_id)}/last-bundle.json")
        except ValueError:  # a torn write: as if absent
            return None
        return None if doc is None else Bundle.from_json(doc)

    def _source(self, table: DeltaTable, adds: list[AddFile], keys: Sequence[str]) -> pa.RecordBatchReader:
        """The batch's rows for the MERGE: its prepared files read back (into this process's memory), each with
        its partition columns restored from its add action, and one row per key (the later participant's, then
        the later row: a MERGE refuses two source rows for one target row)."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        from eosink._newest import newest_per_key, with_order

        types = {f.name: f.type for f in pa.schema(table.schema().to_arrow())}
        store = self._storage()
        tables = []
        for add in adds:
            data = store.read(add.path)
            if data is None:
                raise CommitAbortedError(f"A prepared file of the batch is gone: {add.path}.", "Recovery aborts it.")
            part = pq.ParquetFile(pa.BufferReader(data)).read(use_threads=False)
            for column, value in add.partition_values.items():
                kind = types.get(column, pa.string())
                part = part.append_column(column, pa.array([value] * part.num_rows, pa.string()).cast(kind))
            tables.append(part)
        whole = pa.concat_tables(tables, promote_options="default")
        whole = newest_per_key(with_order(whole, 0), keys)
        return pa.RecordBatchReader.from_batches(whole.schema, whole.to_batches())

    @staticmethod
    def _same_bundle(batch: BatchRef, found: Bundle, bundle: Bundle) -> None:
        """The log holds ``batch`` already: done if with these committables, else CommitAbortedError."""
        if set(found.committables) != set(bundle.committables):
            raise CommitAbortedError(
                f"Batch {batch} was already committed by another attempt "
                f"(committables {list(found.committables)}, not {list(bundle.committables)}).",
                "Abort this attempt's committables; the batch is done.",
            )

    def _check_files(self, batch: BatchRef, committables: Sequence[Committable], adds: list[AddFile]) -> None:
        """Every file the committables name is still in the store (else the prepared work is lost)."""
        missing = self._storage().missing([a.path for a in adds]) if adds else []
        if missing:
            raise CommitAbortedError(
                f"Prepared files of batch {batch} are gone: {missing[:5]}"
                f"{' ...' if len(missing) > 5 else ''} ({len(missing)} of {len(adds)}).",
                "The batch cannot be committed; recovery aborts it and the query replays it.",
            )

    def _widen(self, table: DeltaTable, batch: BatchRef, committables: Sequence[Committable]) -> bool:
        """Check the batch's columns against the table's (SchemaError); with ``schema_evolution="add_columns"``,
        add the batch's new columns to the table (nullable, in a commit of their own, just before the batch's:
        a reader may see them, empty, a moment early). True when the table changed: read it again."""
        from deltalake import Field, Schema

        current = table_columns(table)
        required = self._rules(table).required_columns  # also refuses a rule added since the batch was written
        evolve = self.config.schema_evolution == "add_columns"
        schemas = _schemas(committables)
        for schema in schemas:
            check_batch(
                current,
                delta_columns(schema),
                self._partition_by(table),
                evolve,
                f"batch {batch}",
                (KEY_COLUMN,),
                required,
            )
        new: dict[str, Any] = {}
        for schema in schemas:
            for f in Schema.from_arrow(schema).fields:
                if f.name not in current and f.name not in new:
                    new[f.name] = Field(f.name, f.type, nullable=True)  # older rows hold no value
        if not new:
            return False
        table.alter.add_columns(list(new.values()))
        log.info("eosink: added columns %s to %s for batch %s", sorted(new), self.config.table, batch)
        return True

    def _tidy(self, app_id: str, batch_id: int, committed: Sequence[str]) -> None:
        """The manifests of the batch's committed attempts go; a straggler's stays for recovery to abort it
        (best effort: the batch is committed whatever happens here)."""
        for cid in committed:
            try:
                self._delete(f"{self._manifests(app_id, batch_id)}/{cid}.json")
            except Exception as exc:
                log.debug("eosink: could not remove the manifest of %s in %s#%d: %s", cid, app_id, batch_id, exc)

    # -- compaction -----------------------------------------------------------------------------

    def _compact_if_due(self, app_id: str, batch_id: int) -> None:
        """Compact the table's small files after every ``compact_every``-th batch of the app, once.

        A compaction (delta-rs ``optimize.compact``) rewrites files into fewer, without changing a row:
        its commit has ``dataChange=false``, so snapshot and streaming readers see the same data. Its commit
        info names the app and the batch it follows; before compacting, the commits after that batch's are
        read, so a compaction that landed before a crash (or whose reply was lost) is never run again, and
        one that did not land runs at the app's next commit. Best effort: a failed compaction leaves the
        batch committed and is tried again at the next commit."""
        every = self.config.compact_every
        if every is None or (batch_id + 1) % every:
            return
        try:
            with self._errors(f"compaction after batch {app_id}#{batch_id}"):
                table = self._table()
                if table is None or self._compacted(table, app_id, batch_id):
                    return
                from deltalake.transaction import CommitProperties

                meta = {_log.META_KEY: {"app_id": app_id, "compaction": batch_id}}
                metrics = table.optimize.compact(commit_properties=CommitProperties(custom_metadata=meta))
                log.info(
                    "eosink: compacted %s after batch %s#%d: %s files into %s",
                    self.config.table,
                    app_id,
                    batch_id,
                    metrics.get("numFilesRemoved"),
                    metrics.get("numFilesAdded"),
                )
        except EosinkError as exc:
            log.warning("eosink: compaction of %s failed (tried again at the next commit): %s", self.config.table, exc)

    @staticmethod
    def _compacted(table: DeltaTable, app_id: str, batch_id: int) -> bool:
        """Whether a compaction following ``app_id``'s batch ``batch_id`` is in the log (read back to that batch)."""
        for _, meta in _log.eosink_commits(table, app_id, include_compactions=True):
            if meta.get("compaction") == batch_id:
                return True
            if meta.get("batch") is not None and int(meta["batch"]) <= batch_id:
                return False
        return False

    # -- abort, status, recovery --------------------------------------------------------------

    def abort(self, committables: Sequence[Committable]) -> None:
        """Delete prepared files and their manifests; aborting committed work raises CommitAbortedError.
        Idempotent."""
        if not committables:
            return
        with self._errors("abort"):
            table = self._table()
            for c in committables:
                if table is not None and self._committed_with(table, c.batch, c):
                    raise CommitAbortedError(
                        f"Cannot abort committed work {c.id}: its rows are visible.",
                        "Do not abort a batch whose commit succeeded; check commit_status first.",
                    )
            active = _log.active_files(table) if table is not None else set()
            for c in committables:
                for add in _adds([c]):
                    if add.path not in active:  # a file the log names is never deleted, whoever named it
                        self._delete(add.path)
                self._delete(f"{self._manifests(c.batch.app_id, c.batch.batch_id)}/{c.id}.json")
                self._delete(self._writing(c.batch.app_id, c.batch.batch_id, c.id))

    def _committed_with(self, table: DeltaTable, batch: BatchRef, committable: Committable) -> bool:
        found = self._committed(table, batch.app_id, batch.batch_id)
        return isinstance(found, Bundle) and committable.id in found.committables

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        """COMMITTED when the log holds the batch with these committables (another attempt's: ABORTED, as
        ``commit`` answers); PREPARED while every committable's file is there; else ABORTED."""
        with self._errors(f"status of batch {batch}"):
            table = self._table()
            found = None if table is None else self._committed(table, batch.app_id, batch.batch_id)
            if found is _BEYOND_HISTORY:  # committed: never to be committed (nor its files deleted) again
                return CommitStatus.COMMITTED
            if isinstance(found, Bundle):  # another attempt's commit of the batch: ABORTED, as commit answers
                mine = {c.id for c in committables}
                return CommitStatus.COMMITTED if mine <= set(found.committables) else CommitStatus.ABORTED
            adds = _adds(committables)
            if adds and self._storage().missing([a.path for a in adds]):
                return CommitStatus.ABORTED
            return CommitStatus.PREPARED

    def recover(self, app_id: str) -> list[Committable]:
        """The manifests of ``app_id``'s batches the log does not hold; those of committed batches are removed."""
        with self._errors(f"recovery of app_id {app_id!r}"):
            table = self._table()
            last = None if table is None else _log.last_batch(table, app_id)
            found: list[Committable] = []
            for path in self._storage().files(self._manifests(app_id)):
                doc = self._read_json(path) if path.endswith(".json") else None
                if doc is None:
                    continue
                committable = Committable.from_json(doc)
                if committable.batch.app_id != app_id:
                    continue
                if last is not None and committable.batch.batch_id <= last and table is not None:
                    done = self._committed(table, app_id, committable.batch.batch_id)
                    if done is _BEYOND_HISTORY or (isinstance(done, Bundle) and committable.id in done.committables):
                        self._tidy(app_id, committable.batch.batch_id, [committable.id])
                        continue
                found.append(committable)
            return sorted(found, key=lambda c: (c.batch.batch_id, c.participant, c.id))

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        """The bundle of ``app_id``'s newest batch in the log, or None."""
        with self._errors(f"reading the last bundle of {app_id!r}"):
            table = self._table()
            if table is None:
                return None
            last = _log.last_batch(table, app_id)
            if last is None:
                return None
            found = self._committed(table, app_id, last)
            if not isinstance(found, Bundle):
                raise EosinkError(
                    f"The log of {self.config.table} holds batch {last} of {app_id!r}, but its commit (and bundle) "
                    f"is older than the log's retained history, and {self._app_dir(app_id)}/last-bundle.json "
                    "is missing or another batch's.",
                    "Restore that file from a backup, or go on under a new app_id (and a new checkpoint); raise "
                    "the table's delta.logRetentionDuration above the longest time the query may stop.",
                )
            return found
