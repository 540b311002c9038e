"""The participant side of HdfsSink (executors): ``begin``, ``write``, ``pre_commit``.

::

    begin(task)            the epoch is checked; the attempt's hidden directory
                           pending/<batch>/.w-e<epoch>-p<participant>-<attempt>/ is its own
    write(txn, batch)      first write: the batch's schema against the target's (SchemaError),
                           partition columns and keys checked (BadRecordError) before a byte is
                           written; then rows stream into one file per partition directory,
                           ``part-p<participant>.<ext>``
    pre_commit(txn)        every file hsynced and closed; the epoch checked again (FencedError);
                           transactional: the directory renamed to its prepared name, which
                           records batch, participant, epoch, rows and files (durable, invisible);
                           idempotent: each file moved (overwriting) into the batch's directory,
                           visible now; a replay by the same participant overwrites the same names,
                           and the batch's commit deletes what no committable names
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from eosink._attempts import attempt_closed, columns_changed
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs._base import _SinkBase
from eosink.connectors.hdfs._files import (
    FileSet,
    check_keys,
    check_partition_types,
    check_schema,
    schema_doc,
)
from eosink.contract import Committable, TaskRef
from eosink.keys import KEY_COLUMN

__all__ = ["_Txn", "_WriteSide"]


@dataclass
class _Txn:
    """One participant attempt's files; lives only in the writing process."""

    task: TaskRef
    dir: str
    keys: tuple[str, ...]
    files: FileSet
    pid: int
    rows: int = 0
    columns: tuple[str, ...] | None = None
    schema: list[list[str]] | None = None
    done: bool = False


class _WriteSide(_SinkBase):
    """``begin``, ``write`` and ``pre_commit`` of :class:`HdfsSink`."""

    def _keys(self, task: TaskRef) -> tuple[str, ...]:
        if task.upsert_keys:
            return tuple(task.upsert_keys)
        return self.config.key_columns if self.config.mode == "upsert" else ()

    def begin(self, task: TaskRef) -> _Txn:
        """Check the epoch; the attempt's own hidden directory (created with its first file)."""
        self._ensure_target()
        app = task.batch.app_id
        with self._errors("begin"):
            self._check_epoch(app, task.epoch, "begin")
        name = L.writing_name(task.epoch, task.participant, task.attempt)
        where = f"{self._pending(app, task.batch.batch_id)}/{name}"
        files = FileSet(self.config, self.fs, where, name=f"part-p{task.participant:05d}")
        return _Txn(task, where, self._keys(task), files, os.getpid())

    def _open(self, txn: _Txn, what: str) -> None:
        if txn.done or txn.pid != os.getpid():
            raise attempt_closed(f"The attempt {txn.dir}", what)

    def write(self, txn: _Txn, data: pa.RecordBatch) -> None:
        """Check the batch, then stream its rows into the attempt's files."""
        self._open(txn, "be written")
        if data.num_rows == 0:
            return
        where = f"participant {txn.task.participant} of batch {txn.task.batch}"
        try:
            if txn.columns is None:
                stored = self._stored_schema()
                if stored is not None:
                    check_schema(stored, data.schema, where)
                check_partition_types(data.schema, self.config.partition_by, where)
                txn.columns = tuple(data.schema.names)
                txn.schema = schema_doc(data.schema)
            elif tuple(data.schema.names) != txn.columns:
                raise columns_changed(txn.columns, data.schema.names)
            check_keys(data, txn.keys, where)
            txn.rows += data.num_rows
            with self._errors(f"write ({where})"):
                txn.files.add(data, where)
        except BaseException:
            self._fail(txn)
            raise

    def _stored_schema(self) -> list[list[str]] | None:
        with self._errors("reading the target's schema"):
            return self._target_schema()

    def _fail(self, txn: _Txn) -> None:
        """Forget the attempt after an error; its hidden directory is removed by the next fence."""
        txn.done = True
        txn.files.open.clear()

    def pre_commit(self, txn: _Txn) -> Committable:
        """Sync and close the files; check the epoch; make them prepared (or, idempotent, visible)."""
        self._open(txn, "be prepared")
        task = txn.task
        app = task.batch.app_id
        try:
            with self._errors(f"pre_commit (participant {task.participant} of batch {task.batch})"):
                written = txn.files.close()
                self._check_epoch(app, task.epoch, "pre_commit")
                if not task.transactional:
                    self._publish(txn, written)
                else:
                    prepared = f"{self._pending(app, task.batch.batch_id)}/{self._task_name(txn, written)}"
                    if written:
                        self.fs.rename(txn.dir, prepared, checked=False)
                    else:
                        self.fs.mkdirs(prepared)
                txn.done = True
                return Committable(
                    task.batch,
                    task.epoch,
                    task.participant,
                    str(self._task_name(txn, written)),
                    txn.rows,
                    payload=self._payload(txn, written),
                )
        except BaseException:
            self._fail(txn)
            raise

    @staticmethod
    def _task_name(txn: _Txn, written: list[str]) -> L.TaskName:
        task = txn.task
        return L.TaskName(
            task.batch.batch_id, task.participant, task.epoch, txn.rows, len(written), L.safe_attempt(task.attempt)
        )

    def _payload(self, txn: _Txn, written: list[str]) -> dict[str, Any]:
        payload: dict[str, Any] = {}
        if txn.keys and txn.keys != (KEY_COLUMN,):
            payload["keys"] = list(txn.keys)  # readers of the batch records keep the newest row per key
        if txn.schema is not None:
            payload["schema"] = txn.schema
        if not txn.task.transactional:
            payload["files"] = written
        return payload

    def _publish(self, txn: _Txn, written: list[str]) -> None:
        """Idempotent: each file moved (overwriting) into the batch's directory: visible now."""
        final = self._final(txn.task.batch.app_id, txn.task.batch.batch_id)
        for rel in written:
            self.fs.mkdirs(f"{final}/{rel}".rsplit("/", 1)[0])
            self.fs.rename(f"{txn.dir}/{rel}", f"{final}/{rel}", overwrite=True, checked=False)
        self.fs.delete(txn.dir)
