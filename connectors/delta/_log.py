"""The Delta log as eosink uses it: snapshots, eosink's txn actions, bundles in commit infos, commits at one version.

eosink keeps its state in the table's own log, so that what a reader sees and what eosink knows
can never disagree::

    txn(appId="eosink:<app_id>", version=<batch id>)         the app_id's newest committed batch
    txn(appId="eosink-epoch:<app_id>", version=<epoch>)      the app_id's newest writer epoch (fence)
    commitInfo.eosink = {"app_id", "batch", "bundle"}         the batch's bundle, in the same commit

Every eosink commit is made at exactly one version: the snapshot it read plus one
(``max_commit_retries=0``). The store makes ``_delta_log/<version>.json`` create-only (S3 and
MinIO: ``If-None-Match: *``; HDFS: a rename that refuses to overwrite; local disk: a hard link),
so a check made on the snapshot (the epoch, the app's last batch) holds at the commit, or the
commit fails with a conflict and is checked again on a newer snapshot.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from eosink.contract import Bundle

if TYPE_CHECKING:
    import pyarrow as pa
    from deltalake import DeltaTable

__all__ = [
    "BATCH_TXN_PREFIX",
    "EPOCH_TXN_PREFIX",
    "META_KEY",
    "Conflict",
    "active_files",
    "batch_txn",
    "commit_at",
    "count_rows",
    "eosink_commits",
    "eosink_meta",
    "epoch_txn",
    "last_batch",
    "load",
    "merge_at",
    "read_rows",
    "writer_epoch",
]

log = logging.getLogger("eosink.delta")

BATCH_TXN_PREFIX = "eosink:"
EPOCH_TXN_PREFIX = "eosink-epoch:"
META_KEY = "eosink"
FIRST_PAGE = 4
HISTORY_PAGE = 32
"""Commit infos read per step when looking for a batch's commit, newest first (after a first page of
``FIRST_PAGE``: each is one read of a log entry)."""


class Conflict(Exception):
    """Another writer committed the version this commit was made for: read the log again and retry."""


def batch_txn(app_id: str) -> str:
    return f"{BATCH_TXN_PREFIX}{app_id}"


def epoch_txn(app_id: str) -> str:
    return f"{EPOCH_TXN_PREFIX}{app_id}"


def load(uri: str, options: Mapping[str, str]) -> DeltaTable | None:
    """The table's newest snapshot, or None when there is no table at ``uri``."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(uri, storage_options=dict(options))
    except TableNotFoundError:
        return None


def last_batch(table: DeltaTable, app_id: str) -> int | None:
    """The newest batch of ``app_id`` the snapshot holds, or None."""
    return table.transaction_version(batch_txn(app_id))


def writer_epoch(table: DeltaTable, app_id: str) -> int:
    """The newest writer epoch of ``app_id`` the snapshot holds (0: never fenced in this table)."""
    return table.transaction_version(epoch_txn(app_id)) or 0


def eosink_commits(
    table: DeltaTable, app_id: str, *, include_compactions: bool = False
) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """(version, eosink's commit metadata) of ``app_id``'s batch commits (and compactions, if asked), newest
    first, as far as the caller reads.

    Commit infos are read a page at a time from the newest (a first small page: the commit looked for is
    almost always among the newest); commits of other writers and of other app_ids are skipped, and the
    walk stops where the log's retained history ends."""
    limit = FIRST_PAGE
    seen = 0
    while True:
        page = table.history(limit)
        for info in page[seen:]:
            meta = eosink_meta(info)
            if meta is None or meta.get("app_id") != app_id:
                continue
            if "bundle" in meta or (include_compactions and "compaction" in meta):
                yield int(info["version"]), meta
        if len(page) < limit:
            return
        seen, limit = len(page), max(limit * 2, HISTORY_PAGE)


def eosink_meta(info: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """eosink's metadata in one commit info (None: a commit of another writer)."""
    meta = info.get(META_KEY)
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return None
    return meta if isinstance(meta, Mapping) else None


def bundle_of(table: DeltaTable, app_id: str, batch_id: int) -> Bundle | None:
    """The bundle committed with ``app_id``'s batch ``batch_id``, from the log's retained history, or None.

    The app's txn version is its highest committed batch: a higher batch is not there, without a
    read. Spark commits an app's batches in order, so the batch asked for is almost always the
    newest of the app's commits, read first; an older one is looked for through the retained history."""
    last = last_batch(table, app_id)
    if last is None or batch_id > last:
        return None
    for _, meta in eosink_commits(table, app_id):
        if int(meta.get("batch", -1)) == batch_id:
            return Bundle.from_json(meta["bundle"])
    return None


def active_files(table: DeltaTable) -> set[str]:
    """The paths (relative to the table, as add actions give them) of the files the snapshot reads."""
    import urllib.parse

    import pyarrow as pa

    actions = pa.table(table.get_add_actions(flatten=True))  # the log's paths are URI-encoded
    return {urllib.parse.unquote(str(p)) for p in actions.column("path").to_pylist()}


def commit_at(
    table: DeltaTable,
    adds: Sequence[Any],
    schema: Any,
    txns: Mapping[str, int],
    metadata: Mapping[str, Any] | None,
    partition_by: Sequence[str],
) -> None:
    """Commit ``adds`` with ``txns`` (appId -> version) at the snapshot's version plus one, or raise Conflict."""
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties, Transaction

    properties = CommitProperties(
        custom_metadata=dict(metadata) if metadata else None,
        max_commit_retries=0,
        app_transactions=[Transaction(app, version) for app, version in txns.items()],
    )
    try:
        table.create_write_transaction(
            list(adds), "append", schema, partition_by=list(partition_by) or None, commit_properties=properties
        )
    except CommitFailedError as exc:
        raise Conflict(str(exc)) from None


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def read_rows(table: DeltaTable, columns: Sequence[str] | None = None) -> pa.Table:
    """The snapshot's rows (only ``columns``, when given), read by delta-rs's own query engine.

    Not ``to_pyarrow_table``: its pyarrow dataset over delta-rs's file system leaves a native thread that
    aborts the process at interpreter exit ("terminate called without an active exception") in most runs.
    """
    selected = ", ".join(_quoted(c) for c in columns) if columns else "*"
    return _query(table, f"SELECT {selected} FROM snapshot")  # noqa: S608 (identifiers quoted by _quoted)


def count_rows(table: DeltaTable) -> int:
    """How many rows the snapshot holds (see ``read_rows`` for why delta-rs's engine reads them)."""
    return int(_query(table, "SELECT count(*) AS n FROM snapshot").column("n")[0].as_py())


def _query(table: DeltaTable, sql: str) -> pa.Table:
    import pyarrow as pa
    from deltalake import QueryBuilder

    return pa.table(QueryBuilder().register("snapshot", table).execute(sql).read_all())


def merge_at(
    table: DeltaTable, source: Any, keys: Sequence[str], txns: Mapping[str, int], metadata: Mapping[str, Any]
) -> None:
    """Upsert ``source`` by ``keys`` (a row whose key exists replaces it) with ``txns``, at the snapshot's version
    plus one, or raise Conflict."""
    from deltalake.exceptions import CommitFailedError
    from deltalake.transaction import CommitProperties, Transaction

    properties = CommitProperties(
        custom_metadata=dict(metadata),
        max_commit_retries=0,
        app_transactions=[Transaction(app, version) for app, version in txns.items()],
    )
    predicate = " AND ".join(f"t.{_quoted(k)} = s.{_quoted(k)}" for k in keys)
    try:
        merger = table.merge(source, predicate, source_alias="s", target_alias="t", commit_properties=properties)
        merger.when_matched_update_all().when_not_matched_insert_all().execute()
    except CommitFailedError as exc:
        raise Conflict(str(exc)) from None
