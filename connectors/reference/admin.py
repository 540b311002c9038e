"""The reference sink's admin (:class:`~eosink.admin.SinkAdmin`): its SQLite file, read for ``eosink status``."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from eosink.admin import AppStatus, InDoubtWork, SinkAdmin, SinkStatus
from eosink.connectors.reference.sink import ReferenceSink
from eosink.contract import Bundle
from eosink.errors import ConfigurationError
from eosink.participant import attempt_time

__all__ = ["ReferenceAdmin"]


class ReferenceAdmin(SinkAdmin):
    """One reference sink file. The ages of in-doubt work come from their attempts' UUIDv7 ids."""

    def __init__(self, path: str | Path, *, atomic: bool = True) -> None:
        self.path = Path(path)
        self.atomic = atomic

    def __repr__(self) -> str:
        return f"ReferenceAdmin({str(self.path)!r})"

    def describe(self) -> str:
        return f"reference sink {str(self.path)!r}"

    def make_sink(self) -> ReferenceSink:
        return ReferenceSink(self.path, atomic=self.atomic)

    def status(self, app_id: str | None = None) -> SinkStatus:
        where = self.describe()
        if not self.path.exists():
            if app_id is not None:
                raise ConfigurationError(f"The {where} does not exist.", "Pass the sink's file with --path.")
            return SinkStatus("reference", where, exists=False)
        now = time.time()
        with sqlite3.connect(f"file:{self.path}?mode=ro", uri=True) as conn:
            epochs = dict(conn.execute("SELECT app_id, epoch FROM epochs").fetchall())
            if app_id is not None and app_id not in epochs:
                raise ConfigurationError(f"The {where} knows no app_id {app_id!r}.", "Check --app-id.")
            apps = []
            for app in sorted(epochs) if app_id is None else [app_id]:
                last = conn.execute(
                    "SELECT bundle FROM bundles WHERE app_id = ? ORDER BY batch_id DESC LIMIT 1", (app,)
                ).fetchone()
                work = conn.execute(
                    "SELECT id, batch_id, epoch, participant, rows FROM txns "
                    "WHERE app_id = ? AND state = 'prepared' ORDER BY id",
                    (app,),
                ).fetchall()
                apps.append(_app(app, int(epochs[app]), last, work, now))
        return SinkStatus("reference", where, exists=True, apps=tuple(apps))

    def drop_app(self, app_id: str) -> None:
        with sqlite3.connect(self.path) as conn:
            conn.execute("DELETE FROM staged WHERE txn_id IN (SELECT id FROM txns WHERE app_id = ?)", (app_id,))
            for table in ("txns", "bundles", "epochs"):
                conn.execute(f"DELETE FROM {table} WHERE app_id = ?", (app_id,))  # noqa: S608 - fixed names


def _app(app_id: str, epoch: int, last: Any, work: list[Any], now: float) -> AppStatus:
    bundle = Bundle.from_json(json.loads(last[0])) if last else None
    in_doubt = []
    for txn_id, batch_id, txn_epoch, participant, rows in work:
        began = attempt_time(txn_id)
        age = 0.0 if began is None else max(0.0, now - began)
        in_doubt.append(InDoubtWork("prepared", txn_id, batch_id, participant, txn_epoch, age, rows))
    return AppStatus(
        app_id,
        epoch,
        last_batch_id=None if bundle is None else bundle.batch.batch_id,
        last_rows=None if bundle is None else bundle.fingerprint.rows,
        last_strategy=None if bundle is None else bundle.strategy,
        last_checkpoint_id=None if bundle is None else bundle.checkpoint_id,
        in_doubt=tuple(in_doubt),
    )
