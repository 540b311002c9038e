"""The participant side of S3Sink (executors): ``begin``, ``write``, ``pre_commit``.

What one participant attempt does::

    begin(task)            nothing on the store: a transaction handle in this process
    write(txn, batch)      first write: the batch's columns are checked (partition and key columns
                           present, partition types usable, Parquet: the app_id's committed schema,
                           learned by the driver and pickled with the sink); each write: rows larger
                           than max_record_bytes and null keys refused; rows split by partition
                           folder and encoded (Parquet row groups, JSON lines) into one object per
                           folder, each a multipart upload whose parts go out as they fill; an object
                           beyond max_object_bytes is finished and another begun
    pre_commit(txn)        the epoch is read (a fenced attempt aborts its uploads: FencedError); every
                           object's last part is uploaded; then by strategy:
                           2pc, txid-check: the uploads stay incomplete (durable, invisible); the
                           committable carries each upload id and its parts' ETags
                           idempotent: each object is completed (or, small, put whole) under a name
                           without the attempt, so a replay overwrites it: visible now

Any error aborts the attempt's uploads (best effort: recovery lists and aborts what is left).
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from eosink._attempts import attempt_closed, columns_changed
from eosink.connectors.s3._base import _S3Base
from eosink.connectors.s3._encode import (
    ObjectEncoder,
    check_schema,
    extension,
    schema_json,
)
from eosink.connectors.s3._intents import encode_intent
from eosink.connectors.s3._layout import (
    app_hash,
    attempt_token,
    committable_id,
)
from eosink.contract import Committable, TaskRef
from eosink.errors import BadRecordError, SchemaError
from eosink.stores.encoding import check_record_sizes
from eosink.stores.partitions import check_column_name, folder, groups, partition_text
from eosink.stores.s3_upload import ObjectRecord, PartWriter

__all__ = ["_Txn", "_WriteSide"]

_PARTITION_TYPES = (
    pa.types.is_integer,
    pa.types.is_string,
    pa.types.is_large_string,
    pa.types.is_boolean,
    pa.types.is_date,
)


@dataclass
class _Txn:
    """One participant attempt's objects in the making; lives only in the writing process."""

    id: str
    task: TaskRef
    keys: tuple[str, ...]
    pid: int
    columns: tuple[str, ...] | None = None
    schema: dict[str, Any] | None = None
    data_schema: pa.Schema | None = None
    open: dict[str, ObjectEncoder] = field(default_factory=dict)
    partitions: dict[str, dict[str, str | None]] = field(default_factory=dict)
    seq: int = 0
    done: list[ObjectRecord] = field(default_factory=list)
    rows: int = 0
    closed: bool = False


class _WriteSide(_S3Base):
    """``begin``, ``write`` and ``pre_commit`` of :class:`S3Sink` (a mixin; see ``sink.py``)."""

    def _keys(self, task: TaskRef) -> tuple[str, ...]:
        if task.upsert_keys:
            return tuple(task.upsert_keys)
        return self.config.key_columns if self.config.mode == "upsert" else ()

    def begin(self, task: TaskRef) -> _Txn:
        """A handle for one participant attempt (no request: the first full part creates the first upload)."""
        batch = task.batch
        txn_id = committable_id(app_hash(batch.app_id), batch.batch_id, task.participant, attempt_token(task.attempt))
        return _Txn(txn_id, task, self._keys(task), os.getpid())

    def _open_txn(self, txn: _Txn, what: str) -> None:
        if txn.closed or txn.pid != os.getpid():
            raise attempt_closed(f"Participant attempt {txn.id}", what)

    def write(self, txn: _Txn, data: pa.RecordBatch) -> None:
        """Check the rows, split them by partition folder, encode them into the attempt's objects."""
        self._open_txn(txn, "be written")
        if data.num_rows == 0:
            return
        where = f"participant {txn.task.participant} of batch {txn.task.batch}"
        try:
            with self._errors(f"write ({where})"):
                if txn.columns is None:
                    self._first_write(txn, data, where)
                elif tuple(data.schema.names) != txn.columns:
                    raise columns_changed(txn.columns, data.schema.names)
                self._check_rows(txn, data, where)
                for folder, part in self._split(txn, data, where):
                    self._encoder(txn, folder).write(part)
                    txn.rows += part.num_rows
                    self._roll(txn, folder)
                self._bound_memory(txn)
        except BaseException:
            self._fail(txn)
            raise

    def _first_write(self, txn: _Txn, data: pa.RecordBatch, where: str) -> None:
        names = data.schema.names
        missing = [c for c in (*self.config.partition_by, *txn.keys) if c not in names]
        if missing:
            raise SchemaError(
                f"Column(s) {missing} are not in the batch (columns: {names}; {where}).",
                "Select the partition and key columns in the query, or change partition_by / key_columns.",
            )
        if len(set(names)) != len(names):
            raise SchemaError(f"The batch has duplicate column names: {names}.", "Give every column its own name.")
        for column in self.config.partition_by:
            check_column_name(column)
            kind = data.schema.field(column).type
            if not any(ok(kind) for ok in _PARTITION_TYPES):
                raise SchemaError(
                    f"Partition column {column!r} is of type {kind}, which cannot name a folder exactly.",
                    "Partition by integer, string, boolean or date columns (cast others, e.g. to a date).",
                )
        if len(self.config.partition_by) == len(names):
            raise SchemaError(
                "Every column is a partition column: the objects would hold nothing.", "Keep a data column."
            )
        if self.config.format == "jsonl":
            bad = [f.name for f in data.schema if pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)]
            if bad:
                raise SchemaError(
                    f"Column(s) {bad} are binary, which JSON lines cannot hold as such.",
                    "Use format='parquet', or encode the column (e.g. base64) in the query.",
                )
        else:
            check_schema(self._schemas.get(txn.task.batch.app_id), data, where)
        txn.columns = tuple(names)
        txn.schema = schema_json(data.schema, self.config.partition_by)
        txn.data_schema = pa.schema([f for f in data.schema if f.name not in self.config.partition_by])

    def _check_rows(self, txn: _Txn, data: pa.RecordBatch, where: str) -> None:
        if self.config.format == "parquet":
            check_record_sizes(data, self.config.max_record_bytes, where)
        for key in txn.keys:
            nulls = data.column(data.schema.get_field_index(key)).null_count
            if nulls:
                raise BadRecordError(
                    f"{nulls} row(s) have a null in key column {key!r} ({where}); they cannot be upserted.",
                    f"Filter out or fill rows where {key!r} is null before writing.",
                )

    def _split(self, txn: _Txn, data: pa.RecordBatch, where: str) -> list[tuple[str, pa.RecordBatch]]:
        """``(folder, rows without the partition columns)`` per partition folder the rows go to."""
        assert txn.data_schema is not None
        cols = self.config.partition_by
        body = data.select(txn.data_schema.names) if cols else data
        if not cols:
            return [("", body)]
        out = []
        for row, indices in groups(data, cols):
            name = "".join(folder(c, v, where) + "/" for c, v in zip(cols, row, strict=True))
            if name not in txn.partitions:  # null and '' share the default folder: both are read back as null
                txn.partitions[name] = {c: partition_text(v) or None for c, v in zip(cols, row, strict=True)}
            out.append((name, body if indices is None else body.take(indices)))
        return out

    def _encoder(self, txn: _Txn, folder: str) -> ObjectEncoder:
        found = txn.open.get(folder)
        if found is not None:
            return found
        task = txn.task
        key = self.layout.object_key(
            folder,
            task.batch.app_id,
            task.batch.batch_id,
            task.participant,
            task.epoch,
            task.attempt if task.transactional else None,
            txn.seq,
            extension(self.config),
        )
        txn.seq += 1
        intent = functools.partial(self._record_intent, task.batch.app_id) if task.transactional else None
        writer = PartWriter(
            self.config, self._s3, key, create_client=self._s3_once, before_create=intent, after_create=intent
        )
        writer.record.partition = dict(txn.partitions.get(folder, {}))
        assert txn.data_schema is not None
        encoder = txn.open[folder] = ObjectEncoder(self.config, writer, txn.data_schema)
        return encoder

    def _record_intent(self, app_id: str, key: str, upload_id: str | None = None) -> None:
        """PUT the intent of the upload of ``key`` before the upload exists, and again with its id once it does:
        whatever happens to the attempt next, recovery finds the upload from it (``_intents``)."""
        self._s3.put_object(
            Bucket=self.config.bucket,
            Key=self.layout.intent_key(app_id, key),
            Body=encode_intent(key, upload_id),
            ContentType="text/plain",
            **self.config.sse_args(),
        )

    def _roll(self, txn: _Txn, folder: str) -> None:
        """Finish the folder's object once it passes max_object_bytes; the next rows start another."""
        encoder = txn.open[folder]
        if encoder.size >= self.config.max_object_bytes:
            txn.done.append(encoder.finish(transactional=txn.task.transactional))
            del txn.open[folder]

    def _bound_memory(self, txn: _Txn) -> None:
        """Finish the objects holding the most in memory while the attempt holds more than max_buffer_bytes."""
        while txn.open and sum(e.buffered for e in txn.open.values()) > self.config.max_buffer_bytes:
            folder = max(txn.open, key=lambda f: txn.open[f].buffered)
            txn.done.append(txn.open.pop(folder).finish(transactional=txn.task.transactional))

    def _fail(self, txn: _Txn) -> None:
        """Abort the attempt's uploads (best effort) and close it."""
        txn.closed = True
        for encoder in txn.open.values():
            with self._quiet(f"aborting an upload of {txn.id}"):
                encoder.abort()
                if encoder.record.upload_id is not None and txn.task.transactional:
                    self._s3.delete_object(
                        Bucket=self.config.bucket, Key=self.layout.intent_key(txn.task.batch.app_id, encoder.record.key)
                    )
        txn.open.clear()

    def pre_commit(self, txn: _Txn) -> Committable:
        """Check the epoch, upload every object's last part; complete them only if the task is not transactional."""
        self._open_txn(txn, "be prepared")
        task = txn.task
        try:
            with self._errors(f"pre_commit of {txn.id}"):
                self._check_epoch(task.batch.app_id, task.epoch, "pre_commit")
                for folder in sorted(txn.open):
                    txn.done.append(txn.open.pop(folder).finish(transactional=task.transactional))
        except BaseException:
            self._fail(txn)
            raise
        txn.closed = True
        payload: dict[str, Any] = {
            "objects": [r.to_json() for r in txn.done],
            "schema": txn.schema,
            "transactional": task.transactional,
            "keys": list(txn.keys),
        }
        return Committable(task.batch, task.epoch, task.participant, id=txn.id, rows=txn.rows, payload=payload)
