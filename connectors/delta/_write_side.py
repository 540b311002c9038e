"""The participant side of DeltaSink (executors): ``begin``, ``write``, ``pre_commit``.

::

    begin(task)            the epoch checked against the table's log (FencedError)
    write(txn, batch)      first write: the batch's columns against the table's (SchemaError) before
                           a byte is written; every write: no null where the table says NOT NULL
                           (BadRecordError); then rows stream into Parquet files of the attempt's own
                           names in the table's directory (invisible: no add action names them yet)
    pre_commit(txn)        every file closed (written through to the store), the epoch checked again,
                           and the attempt's manifest (its committable) written under
                           _eosink/apps/<app key>/pending/<batch>/, for recovery; the committable
                           carries the files' add actions
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from eosink._attempts import attempt_closed, columns_changed
from eosink.connectors.delta._base import _SinkBase
from eosink.connectors.delta._files import DataFiles, file_prefix
from eosink.connectors.delta._rules import TableRules
from eosink.connectors.delta._schema import check_batch, delta_columns
from eosink.contract import Committable, TaskRef
from eosink.errors import SchemaError
from eosink.keys import KEY_COLUMN

__all__ = ["_Txn", "_WriteSide"]


@dataclass
class _Txn:
    """One participant attempt's files; lives only in the writing process."""

    task: TaskRef
    id: str
    files: DataFiles
    pid: int
    table_columns: dict[str, Any] | None
    rules: TableRules
    rows: int = 0
    schema: pa.Schema | None = None
    done: bool = False


class _WriteSide(_SinkBase):
    """``begin``, ``write`` and ``pre_commit`` of :class:`DeltaSink`."""

    def begin(self, task: TaskRef) -> _Txn:
        """Check the epoch; the attempt's file names."""
        app = task.batch.app_id
        with self._errors("begin"):
            table = self._table()
            self._check_epoch(table, app, task.epoch, "begin")
            columns = self._columns(table) if table is not None else None
            rules = self._rules(table) if table is not None else TableRules()
            store = self._storage()
        prefix = file_prefix(app, task.batch.batch_id, task.participant, task.attempt)

        def opened(paths: list[str]) -> None:  # before a file is created: what a sweep removes if we die
            self._write_json(self._writing(app, task.batch.batch_id, prefix), {"epoch": task.epoch, "files": paths})

        files = DataFiles(
            store,
            prefix,
            self._partition_by(table),
            self.config.row_group_rows,
            self.config.file_rows,
            opened,
        )
        return _Txn(task, prefix, files, os.getpid(), columns, rules)

    def _open(self, txn: _Txn, what: str) -> None:
        if txn.done or txn.pid != os.getpid():
            raise attempt_closed(f"The attempt {txn.id}", what)

    def write(self, txn: _Txn, data: pa.RecordBatch) -> None:
        """Check the batch's columns (first write), then stream its rows into the attempt's files."""
        self._open(txn, "be written")
        if data.num_rows == 0:
            return
        where = f"participant {txn.task.participant} of batch {txn.task.batch}"
        try:
            if txn.schema is None:
                if txn.table_columns is not None:
                    check_batch(
                        txn.table_columns,
                        delta_columns(data.schema),
                        txn.files.partition_by,
                        self.config.schema_evolution == "add_columns",
                        where,
                        (KEY_COLUMN,),
                        txn.rules.required_columns,
                    )
                missing = [c for c in txn.files.partition_by if c not in data.schema.names]
                if missing:
                    raise SchemaError(f"{where} lacks the partition columns {missing}.", "Select them in the query.")
                txn.schema = data.schema
            elif data.schema.names != txn.schema.names:
                raise columns_changed(txn.schema.names, data.schema.names)
            txn.rules.check_rows(data, where)
            data = txn.rules.conform(data)
            txn.rows += data.num_rows
            with self._errors(f"write ({where})"):
                txn.files.add(data)
        except BaseException:
            self._fail(txn)
            raise

    def _fail(self, txn: _Txn) -> None:
        """Forget the attempt after an error. Its files, unnamed by the log and so invisible, stay until the
        sweep at the app's next fence (recorded under ``writing/`` before each was created)."""
        txn.done = True
        txn.files.discard()

    def pre_commit(self, txn: _Txn) -> Committable:
        """Close the files; check the epoch; write the manifest; the committable with the add actions."""
        self._open(txn, "be prepared")
        task = txn.task
        app = task.batch.app_id
        try:
            with self._errors(f"pre_commit (participant {task.participant} of batch {task.batch})"):
                added = txn.files.close()
                self._check_epoch(self._table(), app, task.epoch, "pre_commit")
                payload: dict[str, Any] = {"adds": [a.to_json() for a in added], "attempt": task.attempt}
                if task.upsert_keys:
                    payload["keys"] = list(task.upsert_keys)
                if txn.schema is not None:
                    payload["schema"] = txn.schema.serialize().to_pybytes().hex()
                committable = Committable(task.batch, task.epoch, task.participant, txn.id, txn.rows, payload=payload)
                self._write_manifest(committable)
                self._delete(self._writing(app, task.batch.batch_id, txn.id))
                txn.done = True
                return committable
        except BaseException:
            self._fail(txn)
            raise
