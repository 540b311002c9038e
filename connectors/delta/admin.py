"""The Delta sink's admin (:class:`~eosink.admin.SinkAdmin`): what ``eosink status`` and ``eosink recover`` read.

Per app_id (named by ``<table>/_eosink/apps/<key>/app_id``, written at its first fence): its writer
epoch and newest committed batch (both from the table's log: the app's txn versions and the
bundle in that commit's info) and its in-doubt work (manifests of prepared attempts whose batch
the log does not hold, with their age from the attempt's UUIDv7). Read-only.
"""

from __future__ import annotations

import time

from eosink.admin import AppStatus, SinkAdmin, SinkStatus, prepared_work
from eosink.connectors.delta.config import DeltaConfig
from eosink.connectors.delta.sink import DeltaSink
from eosink.errors import ConfigurationError
from eosink.participant import attempt_time

__all__ = ["DeltaAdmin"]


class DeltaAdmin(SinkAdmin):
    """One Delta sink configuration (its table)."""

    def __init__(self, config: DeltaConfig) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"DeltaAdmin({self.config!r})"

    def describe(self) -> str:
        return f"Delta table {self.config.table}"

    def make_sink(self) -> DeltaSink:
        return DeltaSink(self.config)

    def app_ids(self) -> list[str]:
        """Every app_id that has fenced on this table."""
        return self.make_sink().app_ids()

    def status(self, app_id: str | None = None) -> SinkStatus:
        sink = self.make_sink()
        with sink._errors("status"):
            exists = sink._table() is not None
        apps = self.app_ids() if exists else []
        if app_id is not None:
            if app_id not in apps:
                raise ConfigurationError(
                    f"app_id {app_id!r} has never written to {self.config.table}.",
                    f"Check --app-id; known app_ids: {', '.join(apps) or 'none'}.",
                )
            apps = [app_id]
        return SinkStatus("delta", self.describe(), exists, tuple(self._app(sink, a) for a in apps))

    def _app(self, sink: DeltaSink, app_id: str) -> AppStatus:
        work = prepared_work(
            sink.recover(app_id), lambda c: attempt_time(str(c.payload.get("attempt", ""))), time.time()
        )
        return AppStatus.of(app_id, sink.current_epoch(app_id), sink.fetch_last_bundle(app_id), work)

    def drop_app(self, app_id: str) -> None:
        """Abort the app_id's in-doubt work and delete its bookkeeping (its committed batches and txns stay)."""
        sink = self.make_sink()
        sink.abort(sink.recover(app_id))
        sink.forget_app(app_id)

    def scrub(self, text: str) -> str:
        return self.config.scrub(text)
