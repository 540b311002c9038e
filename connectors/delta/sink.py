"""DeltaSink: exactly-once Delta Lake tables, a whole batch made visible by one Delta commit.

The contract maps onto a Delta table like this (``T`` is the table's directory; the log's use is
described in :mod:`eosink.connectors.delta._log`)::

    fence(app_id)          one commit carrying txn("eosink-epoch:<app>", epoch + 1), made at the
                           snapshot's version plus one: of two writers racing for an epoch, one wins
                           (the table is created here, from the stream's schema,
                           if it does not exist yet)
    begin, write,          participants (executors) write Parquet files of their own names straight
    pre_commit             into T, from Arrow, with Delta statistics; nothing names them in the log,
                           so no reader sees them. pre_commit closes the files, checks the epoch and
                           writes the attempt's manifest (T/_eosink/apps/<app>/pending/<batch>/), for
                           recovery; the committable carries the add actions
    commit                 one Delta commit holding every participant's add actions,
                           txn("eosink:<app>", batch) and the bundle in its commit info, made at the
                           snapshot's version plus one after checking, on that snapshot, the epoch
                           and that the batch is not there yet; another writer's commit in between
                           makes it check again on the newer snapshot. A lost reply raises
                           AmbiguousCommitError; the log answers it
    commit_status          the log holds the batch with these committables: COMMITTED; every file
                           still there: PREPARED; else ABORTED
    recover                the manifests of batches the log does not hold
    fetch_last_bundle      the app's txn version and, from the newest commit infos, that commit's bundle

Why a zombie cannot commit: its epoch is checked on the very snapshot its commit is made on, and
a fence is itself a commit, so a fence after that snapshot takes the commit's version first and the
zombie's commit fails, checks again, and is refused (FencedError). A batch is never committed twice
for the same reason: the app's txn version is checked on the snapshot the commit is made on.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, TypeVar

from eosink._extras import require
from eosink.connectors.delta import _log
from eosink.connectors.delta._commit_side import _CommitSide
from eosink.connectors.delta._errors import translated
from eosink.connectors.delta._files import app_key
from eosink.connectors.delta._rules import TableRules, table_rules
from eosink.connectors.delta._schema import table_columns
from eosink.connectors.delta._store import Store, _S3Store, open_store
from eosink.connectors.delta._write_side import _Txn, _WriteSide
from eosink.connectors.delta.config import DeltaConfig
from eosink.contract import Capabilities, Committable, Sink
from eosink.errors import ConfigurationError, EosinkError, FencedError, TransientError
from eosink.keys import KEY_COLUMN
from eosink.stores.hdfs import bounded

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

__all__ = ["DeltaSink"]

log = logging.getLogger("eosink.delta")
_T = TypeVar("_T")

OWN_DIR = "_eosink"
_PROBED: set[tuple[str, str]] = set()
"""(store, bucket) pairs whose conditional writes this process has checked."""


class DeltaSink(_WriteSide, _CommitSide, Sink[_Txn]):
    """A batch-atomic, exactly-once sink into one Delta table (see the module docstring).

    ``DeltaSink(DeltaConfig(...))`` or ``DeltaSink("s3://bucket/events", **options)``.
    Picklable with no open connection.
    """

    capabilities = Capabilities(
        supports_prepare=True,
        supports_txid_status=True,
        supports_keys=True,
        atomic_batch_visibility=True,
        supports_recover=True,
    )
    lost_work_hint = (
        "a VACUUM with a short retention (or full=True) deleted the batch's data files before eosink committed "
        "them (keep the retention longer than a batch can wait for its commit), or someone deleted "
        "<table>/_eosink/."
    )

    def __init__(self, config: DeltaConfig | str, /, **options: Any) -> None:
        require("Delta", "delta", "deltalake")
        if isinstance(config, str):
            config = DeltaConfig(config, **options)
        elif options:
            raise ConfigurationError("Pass either a DeltaConfig or a table URI and options.", "Use one form.")
        self.config = config
        self._stream_schema: pa.Schema | None = None
        self._store: Store | None = None

    def __repr__(self) -> str:
        return f"DeltaSink({self.config!r})"

    __str__ = __repr__

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "stream_schema": self._stream_schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]
        self._stream_schema = state.get("stream_schema")

    # -- the table -----------------------------------------------------------------------------

    def _errors(self, what: str) -> AbstractContextManager[None]:
        return translated(self.config, what)

    def _table(self) -> DeltaTable | None:
        """The table's newest snapshot (None: no table yet)."""
        return self._bounded(lambda: _log.load(self.config.table, self.config.delta_options()), "a read of the log")

    def _bounded(self, call: Callable[[], _T], what: str) -> _T:
        """``call()``; on HDFS, a TimeoutError after ``read_timeout_s``: delta-rs's HDFS client (hdfs-native) waits
        without limit for a NameNode whose answer never comes, and would hang the query. Only for reads: an
        abandoned commit could still land after its batch was decided."""
        if self.config.scheme != "hdfs":
            return call()
        seconds = self.config.read_timeout_s
        try:
            return bounded(call, seconds, what)
        except TimeoutError:
            raise TimeoutError(
                f"HDFS did not answer {what} within {seconds:g} s (read_timeout_s): the NameNode or the way to it "
                "stalled"
            ) from None

    def _storage(self) -> Store:
        if self._store is None:
            self._store = open_store(self.config)
        return self._store

    def _columns(self, table: DeltaTable) -> dict[str, Any]:
        return table_columns(table)

    def _rules(self, table: DeltaTable) -> TableRules:
        return table_rules(table, self.config.table)

    def _partition_by(self, table: DeltaTable | None) -> tuple[str, ...]:
        if table is None:
            return self.config.partition_by
        return tuple(table.metadata().partition_columns)

    def bind_schema(self, schema: pa.Schema) -> None:
        """The stream's schema, handed over before the first batch: a missing table is created with it."""
        self._stream_schema = schema

    def _create(self, app_id: str) -> DeltaTable | None:
        """Create the missing table with epoch 1 of ``app_id`` in its first commit; None when another made it first."""
        from deltalake import Schema
        from deltalake.transaction import CommitProperties, Transaction, create_table_with_add_actions

        schema = self._stream_schema
        if not self.config.create_table:
            raise ConfigurationError(
                f"There is no Delta table at {self.config.table}, and create_table=False.",
                "Create the table first, or configure the sink with create_table=True.",
            )
        if schema is None:
            raise ConfigurationError(
                f"There is no Delta table at {self.config.table}, and its schema is not known yet.",
                "Create the table first, or hand the sink the stream's schema with DeltaSink.bind_schema(...) before "
                "its first fence (foreach_batch and format('eosink') do it by themselves).",
            )
        missing = [c for c in self.config.partition_by if c not in schema.names]
        if missing:
            raise ConfigurationError(
                f"The partition columns {missing} are not columns of the table's schema {schema.names}.",
                "Partition by columns the query writes.",
            )
        properties = CommitProperties(
            custom_metadata={_log.META_KEY: {"app_id": app_id, "fence": 1}},
            app_transactions=[Transaction(_log.epoch_txn(app_id), 1)],
            max_commit_retries=0,
        )
        try:
            create_table_with_add_actions(
                self.config.table,
                Schema.from_arrow(schema),
                [],
                mode="error",
                partition_by=list(self.config.partition_by) or None,
                storage_options=self.config.delta_options(),
                commit_properties=properties,
            )
        except Exception as exc:
            if self._table() is not None:  # another writer created it first
                return None
            raise exc
        return self._table()

    # -- setup, fencing ------------------------------------------------------------------------

    def setup(self, app_id: str) -> None:
        """Check that the table can be reached (and, if it exists, that it declares no rule eosink would not
        enforce and that its columns fit the stream's); on S3, that the store refuses a second create-only PUT
        (once per process and store)."""
        with self._errors("opening the table"):
            table = self._table()
        rules = self._rules(table) if table is not None else None
        if self.config.scheme == "s3" and self.config.check_conditional_writes:
            self._probe_create_only()
        if table is not None and self._stream_schema is not None:
            from eosink.connectors.delta._schema import check_batch, delta_columns

            check_batch(
                table_columns(table),
                delta_columns(self._stream_schema),
                self._partition_by(table),
                self.config.schema_evolution == "add_columns",
                "the query's output",
                (KEY_COLUMN,),
                rules.required_columns if rules is not None else (),
            )

    def _probe_create_only(self) -> None:
        assert self.config.s3 is not None
        where = (self.config.s3.describe(), self.config.table.split("/")[2])
        if where in _PROBED:
            return
        store = self._storage()
        assert isinstance(store, _S3Store)
        with self._errors("probing conditional writes"):
            honoured = store.honours_create_only(f"{OWN_DIR}/probe-{uuid.uuid4().hex}")
        if not honoured:
            raise ConfigurationError(
                f"The S3 store at {where[0]} accepted a second PUT with If-None-Match: * that must be refused with "
                "412 Precondition Failed. Delta's log entries would not be create-only there, and two commits "
                "could take one version: writes would not be exactly-once.",
                "Use a store with conditional writes (AWS S3 since 2024, MinIO since RELEASE.2024-05). "
                "check_conditional_writes=False skips this check; only for a store you know to have them.",
            )
        _PROBED.add(where)

    def fence(self, app_id: str) -> int:
        """A new writer epoch, one higher than the log's, committed into the log (see the module docstring)."""
        with self._errors(f"fencing app_id {app_id!r}"):
            for _ in range(self.config.commit_attempts):
                table = self._table()
                if table is None:
                    if self._create(app_id) is not None:
                        self._name_app(app_id)
                        return 1
                    continue
                epoch = _log.writer_epoch(table, app_id) + 1
                meta = {_log.META_KEY: {"app_id": app_id, "fence": epoch}}
                try:
                    _log.commit_at(
                        table, [], table.schema(), {_log.epoch_txn(app_id): epoch}, meta, self._partition_by(table)
                    )
                except _log.Conflict as exc:
                    self._raced(table, exc, f"the fence of app_id {app_id!r}")
                    continue
                log.info("eosink: fenced app_id %r on %s: epoch %d", app_id, self.config.table, epoch)
                self._name_app(app_id)
                self._sweep(app_id, epoch)
                return epoch
        raise TransientError(
            f"Fencing app_id {app_id!r} lost {self.config.commit_attempts} races with other writers of "
            f"{self.config.table}.",
            "Retry; if it persists, fewer writers should share the table (or raise commit_attempts).",
        )

    def current_epoch(self, app_id: str) -> int:
        """The newest writer epoch of ``app_id`` in the table's log (0: none)."""
        with self._errors("reading the writer epoch"):
            table = self._table()
            return 0 if table is None else _log.writer_epoch(table, app_id)

    def _raced(self, table: DeltaTable, exc: Exception, what: str) -> None:
        """Return when a commit delta-rs refused lost a race (the log entry after ``table``'s snapshot exists:
        read the log again and retry); else raise: it was refused for good, and nothing was written."""
        with self._errors("reading the log after a refused commit"):
            if not self._storage().missing([f"_delta_log/{table.version() + 1:020d}.json"]):
                return
        raise EosinkError(
            f"delta-rs refused {what} into {self.config.table}, and nothing was written: "
            f"{self.config.scrub(str(exc))[:400]}.",
            "See delta-rs's message (a table feature this writer lacks, say); nothing of it is visible. Fix it, "
            "then restart the query.",
        )

    def _check_epoch(self, table: DeltaTable | None, app_id: str, epoch: int, what: str) -> None:
        current = 0 if table is None else _log.writer_epoch(table, app_id)
        if current > epoch:
            raise FencedError(
                f"{what} of {app_id!r} at epoch {epoch} was fenced: a newer writer holds epoch {current}.",
                "Stop this older writer; only the newest may commit.",
            )

    # -- app_ids and manifests of prepared work ------------------------------------------------

    def _app_dir(self, app_id: str) -> str:
        return f"{OWN_DIR}/apps/{app_key(app_id)}"

    def _name_app(self, app_id: str) -> None:
        """``_eosink/apps/<key>/app_id``: how ``eosink status`` finds the table's app_ids."""
        self._storage().put(f"{self._app_dir(app_id)}/app_id", app_id.encode())

    def app_ids(self) -> list[str]:
        """Every app_id that has fenced on this table."""
        with self._errors("listing app_ids"):
            store = self._storage()
            found = []
            for path in store.files(f"{OWN_DIR}/apps"):
                if not path.endswith("/app_id") or path.count("/") != 3:
                    continue
                data = store.read(path)
                if data is not None and f"{self._app_dir(data.decode())}/app_id" == path:
                    found.append(data.decode())
            return sorted(found)

    def forget_app(self, app_id: str) -> None:
        """Delete ``app_id``'s bookkeeping under ``_eosink/`` (the log's txns and committed batches stay)."""
        with self._errors(f"dropping app_id {app_id!r}"):
            store = self._storage()
            for path in store.files(self._app_dir(app_id)):
                store.delete(path)

    def _manifests(self, app_id: str, batch_id: int | None = None) -> str:
        base = f"{self._app_dir(app_id)}/pending"
        return base if batch_id is None else f"{base}/{batch_id:020d}"

    def _writing(self, app_id: str, batch_id: int | None = None, attempt: str | None = None) -> str:
        """Where an attempt that has not prepared yet lists the files it opened (for the sweep at the next fence)."""
        base = f"{self._app_dir(app_id)}/writing"
        if batch_id is None:
            return base
        return f"{base}/{batch_id:020d}" if attempt is None else f"{base}/{batch_id:020d}/{attempt}.json"

    def _write_json(self, path: str, doc: Any) -> None:
        self._storage().put(path, json.dumps(doc, separators=(",", ":")).encode())

    def _read_json(self, path: str) -> Any:
        data = self._storage().read(path)
        return None if data is None else json.loads(data)

    def _delete(self, path: str) -> None:
        self._storage().delete(path)

    def _write_manifest(self, committable: Committable) -> None:
        path = f"{self._manifests(committable.batch.app_id, committable.batch.batch_id)}/{committable.id}.json"
        self._write_json(path, committable.to_json())

    def _sweep(self, app_id: str, epoch: int) -> int:
        """Remove the files of ``app_id``'s attempts of older epochs that never prepared; the number removed.

        Such an attempt failed or was fenced while writing (its task retried elsewhere); its files were
        never named by a manifest or a commit, so no recovery needs them. An attempt that prepared keeps
        its files until its batch commits or recovery aborts it."""
        store = self._storage()
        base = self._writing(app_id)
        removed = 0
        active: set[str] | None = None
        for path in store.files(base):
            try:
                doc = self._read_json(path) if path.endswith(".json") else None
            except ValueError:  # torn by a crash mid-write (local disk): its files are left for a vacuum
                log.warning("eosink: ignoring the unreadable list of files %s in %s", path, self.config.table)
                continue
            if doc is None or int(doc.get("epoch", 0)) >= epoch:
                continue
            rel = path[len(base) + 1 :]  # <batch>/<attempt>.json
            if not store.missing([f"{self._manifests(app_id)}/{rel}"]):
                store.delete(path)  # it prepared and died before removing this list: recovery decides its files
                continue
            if active is None:
                table = self._table()
                active = _log.active_files(table) if table is not None else set()
            for file in doc.get("files", ()):
                if str(file) not in active:  # a file the log names is never deleted, whoever named it
                    store.delete(str(file))
                    removed += 1
            store.delete(path)
        if removed:
            log.info(
                "eosink: removed %d file(s) of failed attempts of app_id %r in %s", removed, app_id, self.config.table
            )
        return removed

    def close(self) -> None:
        """Nothing to release: delta-rs opens its connections per call."""
