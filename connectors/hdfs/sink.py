"""HdfsSink: exactly-once files on HDFS, a whole batch made visible by one directory rename.

The contract maps onto HDFS like this (``T`` is the target directory; the layout is described
in :mod:`eosink.connectors.hdfs._layout`)::

    fence(app_id)          a new empty file _eosink/apps/<app>/epochs/<n>, created without overwrite
                           (atomic: of two writers racing for epoch n, one wins); leftovers of
                           crashed attempts of older epochs are removed
    begin, write,          participants (executors) write Parquet or JSON-lines files under a hidden
    pre_commit             directory of their own attempt, pending/<batch>/.w-.../; pre_commit
                           hsyncs and closes every file, checks the epoch, and renames the directory
                           to its prepared name (which records batch, participant, epoch, rows and
                           files). Idempotent (non-transactional) tasks instead move each file,
                           named after its rows' keys, straight into the batch's directory
    commit                 the coordinator (driver) gathers the batch's files into
                           staging/<batch>/, writes the bundle beside them, checks the fingerprint,
                           creates the batch's range directory, and renames staging/<batch> to
                           T/eosink_range=<app>-<first>/eosink_batch=<batch>: one rename, atomic on
                           the NameNode, refused if the destination exists; then removes the batch's
                           emptied pending/<batch>/ directory
    commit_status          the destination exists with its bundle: COMMITTED; every committable's
                           files still there (pending or staged): PREPARED; else ABORTED
    recover                the prepared attempt directories (and staged files) of the app_id
    fetch_last_bundle      the bundle file of the app_id's newest batch directory, found by listing
                           T's few range directories and the newest range, never the whole history

Why this is exactly-once and batch-atomic: readers list ``T`` and skip names starting with ``_``
or ``.`` (Hadoop, Spark, Hive and pyarrow all do), so nothing of a batch is visible until its
directory appears, whole, with its bundle inside (an empty range directory, made just before,
shows readers nothing). A lost reply to the rename is resolved by
looking: the destination with its bundle exists and the source is gone. Fencing is checked at
``pre_commit`` and right before the rename; HDFS has no lock to hold across both, so a fence that
lands between that check and the rename lets that one commit through (a window of one NameNode
call, documented in docs/connectors/hdfs.md).
"""

from __future__ import annotations

import json
import logging
import threading
import urllib.request
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any

from eosink._extras import require
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs._batches import detect_layout, newest_of_each_app, store_layout
from eosink.connectors.hdfs._commit_side import _CommitSide
from eosink.connectors.hdfs._errors import translated
from eosink.connectors.hdfs._record import BatchRecord
from eosink.connectors.hdfs._write_side import _Txn, _WriteSide
from eosink.connectors.hdfs.config import HdfsConfig
from eosink.contract import Capabilities, Sink
from eosink.errors import ConfigurationError, EosinkError, FencedError
from eosink.stores.hdfs import Fs

__all__ = ["HdfsSink"]

log = logging.getLogger("eosink.hdfs")

SCHEMA_LOOKBACK = 4
"""Batch records of each app read, newest first, when ``_eosink/schema.json`` is missing (a commit crashed
before writing it: the next commit or write repairs it from the newest batches, so a few suffice)."""


class HdfsSink(_WriteSide, _CommitSide, Sink[_Txn]):
    """A batch-atomic, exactly-once sink writing files into one HDFS directory (see the module docstring).

    ``HdfsSink(HdfsConfig(...))`` or ``HdfsSink("hdfs://namenode:8020/data/events", **options)``.
    Picklable with no open connection (one hdfs-native client per process is made on first use).
    """

    lost_work_hint = (
        "a cleanup job or a person deleted the sink's pending or staging directories under "
        "<target>/_eosink/apps/ while the batch was in doubt (exclude '_'- and '.'-prefixed directories from "
        "cleanup jobs), or the target directory was replaced."
    )

    def __init__(self, config: HdfsConfig | str, /, **options: Any) -> None:
        require("HDFS", "hdfs", "hdfs_native")
        if isinstance(config, str):
            config = HdfsConfig(config, **options)
        elif options:
            raise ConfigurationError("Pass either an HdfsConfig or a URL and options.", "Use one form.")
        self.config = config
        self.capabilities = Capabilities(
            supports_prepare=True,
            supports_txid_status=True,
            supports_keys=True,
            atomic_batch_visibility=True,
            supports_recover=True,
        )
        self._reset()

    def _reset(self) -> None:
        self.fs = Fs(self.config)
        self._ready = False
        self._layout: L.Layout | None = None
        self._schema: list[list[str]] | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"HdfsSink({self.config!r})"

    __str__ = __repr__

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "layout": self._layout}  # participants write where the driver decided

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]
        self._layout = state.get("layout")

    # -- paths ----------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        return self.config.path

    def _own(self) -> str:
        return f"{self.root}/{L.OWN_DIR}"

    def _app(self, app_id: str) -> str:
        return f"{self._own()}/apps/{L.app_key(app_id)}"

    def _epochs(self, app_id: str) -> str:
        return f"{self._app(app_id)}/epochs"

    def _pending(self, app_id: str, batch_id: int | None = None) -> str:
        base = f"{self._app(app_id)}/pending"
        return base if batch_id is None else f"{base}/{L.batch_name(batch_id)}"

    def _staging(self, app_id: str, batch_id: int | None = None) -> str:
        base = f"{self._app(app_id)}/staging"
        return base if batch_id is None else f"{base}/{L.batch_name(batch_id)}"

    def _final(self, app_id: str, batch_id: int) -> str:
        return f"{self.root}/{self._target_layout().batch_dir(app_id, batch_id)}"

    def _target_layout(self) -> L.Layout:
        """The target's layout (see :mod:`eosink.connectors.hdfs._batches`), decided once per sink object.

        A new target becomes grouped when a writer (a sink that opened the target) first needs a batch's
        place; ``layout.json`` is written then, create-only. Until then readers see a new target as
        grouped without writing anything."""
        if self._layout is None:
            with self._errors("reading the target's layout"):
                layout, known = detect_layout(self.fs, self.root, self.config.target_url)
                if not known:
                    if not self._ready:
                        return layout
                    layout = store_layout(self.fs, self.root, layout)
            self._layout = layout
        return self._layout

    # -- errors, setup --------------------------------------------------------------------------

    def _errors(self, what: str) -> AbstractContextManager[None]:
        """Turn hdfs-native's errors into eosink errors (the connector's one translator)."""
        return translated(self.config, what)

    def _ensure_target(self) -> None:
        """Check (or create) the target directory and eosink's own directory in it; once per process."""
        if self._ready:
            return
        with self._errors("opening the target"):
            info = self.fs.info(self.root)
            if info is None:
                parent = self.root.rsplit("/", 1)[0] or "/"
                if not self.config.create_dirs:
                    missing = parent if self.fs.info(parent) is None else self.root
                    raise ConfigurationError(
                        f"The target directory {self.config.target_url} does not exist ({missing} is missing), and "
                        "create_dirs=False.",
                        "Create it (hdfs dfs -mkdir -p), or configure the sink with create_dirs=True.",
                    )
                self.fs.mkdirs(self.root)
            elif not info.isdir:
                raise ConfigurationError(
                    f"The target {self.config.target_url} is a file, not a directory.",
                    "Point the sink at a directory (or a path that does not exist yet).",
                )
            if self.fs.info(self._own()) is None:
                self.fs.mkdirs(self._own())
        self._ready = True

    def setup(self, app_id: str) -> None:
        """Check the target and, when ``namenode_http`` is given, the replication against the live DataNodes."""
        self._ensure_target()
        if self.config.replication is not None and self.config.namenode_http:
            live = _live_datanodes(self.config.namenode_http)
            if live is not None and self.config.replication > live:
                raise ConfigurationError(
                    f"replication={self.config.replication} is more than the {live} live DataNode(s) of "
                    f"{self.config.namenode}: every block would stay under-replicated.",
                    f"Use replication <= {live} (or None for the cluster's default), or add DataNodes.",
                )

    def close(self) -> None:
        """Nothing to release: the process's hdfs-native client is shared and reused."""

    # -- fencing --------------------------------------------------------------------------------

    def current_epoch(self, app_id: str) -> int:
        """The highest epoch handed out for ``app_id`` (0 before the first fence)."""
        names = self.fs.names(self._epochs(app_id))
        return max((int(n) for n in names if n.isdigit()), default=0)

    def fence(self, app_id: str) -> int:
        """Create the next epoch file of ``app_id`` (create-only); remove leftovers of older epochs.

        Epoch files older than the previous one are deleted (and temporary files of fences that crashed
        before renaming theirs into place), so the directory stays two files long over a query's
        lifetime. A writer that raced and lost creates its file after the newer ones, and is fenced at
        its first check, as the newest file is never deleted."""
        self._ensure_target()
        with self._errors(f"fence({app_id!r})"):
            epoch = self.current_epoch(app_id)
            while True:
                epoch += 1
                if self.fs.create_only(f"{self._epochs(app_id)}/{epoch:020d}"):
                    break
            named = f"{self._app(app_id)}/app_id"  # the app_id itself, for eosink status (its directory is a hash)
            if not self.fs.exists(named):  # also when a kill came between the first epoch and this file
                self.fs.create_only(named, app_id.encode("utf-8"))
            for name in self.fs.names(self._epochs(app_id)):
                old = L.epoch_of_file(name)  # an epoch file, or the temporary file of a crashed fence
                if old is not None and old < epoch - 1:
                    self.fs.delete(f"{self._epochs(app_id)}/{name}", False)
            self._remove_leftovers(app_id, epoch)
        return epoch

    def _remove_leftovers(self, app_id: str, epoch: int) -> None:
        """Delete unprepared attempt directories of older epochs (crashed or fenced writers) and stray temp files."""
        for batch in self.fs.names(self._pending(app_id)):
            base = f"{self._pending(app_id)}/{batch}"
            names = self.fs.names(base)
            for name in names:
                old = L.writing_epoch(name)
                if old is not None and old < epoch:
                    self.fs.delete(f"{base}/{name}")
                    log.info("eosink %s: removed the leftover attempt %s/%s", app_id, batch, name)
            if not names:
                self.fs.delete_empty(base)  # a writer that began meanwhile made it non-empty: it stays

    def _check_epoch(self, app_id: str, epoch: int, what: str) -> None:
        current = self.current_epoch(app_id)
        if current > epoch:
            raise FencedError(
                f"{what} of {app_id!r} at epoch {epoch} was fenced: a newer writer holds epoch {current}.",
                "Stop this older writer; only the newest may commit.",
            )

    # -- the target's schema ----------------------------------------------------------------------

    def _schema_file(self) -> str:
        return f"{self._own()}/schema.json"

    def _target_schema(self) -> list[list[str]] | None:
        """The columns of the target's committed batches (None before the first commit).

        ``_eosink/schema.json`` keeps them; a commit that crashed before writing it is covered by
        reading the newest batch records of each app (newest range only, :data:`SCHEMA_LOOKBACK` of
        them), and the file is written from the first that has columns."""
        if self._schema is not None:
            return self._schema
        text = self.fs.read_text(self._schema_file())
        if text is not None:
            try:
                self._schema = [list(c) for c in json.loads(text)["columns"]]
            except (ValueError, KeyError, TypeError):
                raise EosinkError(
                    f"The sink's schema file {self.config.target_url}/{L.OWN_DIR}/schema.json is damaged.",
                    "Remove it: eosink writes it again from the committed batches' records.",
                ) from None
            return self._schema
        for directory in newest_of_each_app(self.fs, self.root, self._target_layout(), SCHEMA_LOOKBACK):
            data = self.fs.read_bytes(f"{directory}/{L.BUNDLE_FILE}")
            record = BatchRecord.decode(data, directory) if data is not None else None
            if record is not None and record.schema is not None:
                self._store_schema(record.schema)
                return self._schema
        return None

    def _store_schema(self, schema: Sequence[Sequence[str]]) -> None:
        """Keep the target's columns (create-only: the first commit's win)."""
        self.fs.create_only(self._schema_file(), json.dumps({"columns": [list(c) for c in schema]}).encode())
        self._schema = None
        text = self.fs.read_text(self._schema_file())
        self._schema = [list(c) for c in json.loads(text or '{"columns": []}')["columns"]]


def _live_datanodes(http: str) -> int | None:
    """NumLiveDataNodes from the NameNode's JMX (None when it cannot be read)."""
    url = http.rstrip("/") + "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState"
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            beans = json.load(reply).get("beans") or []
    except (OSError, ValueError):
        log.warning("eosink: could not read the live DataNodes from %s; replication not checked", http)
        return None
    for bean in beans:
        if "NumLiveDataNodes" in bean:
            return int(bean["NumLiveDataNodes"])
    return None
