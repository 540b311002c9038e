"""The HDFS sink's admin (:class:`~eosink.admin.SinkAdmin`): what ``eosink status`` and ``eosink recover`` read.

Per app_id (one directory under ``<target>/_eosink/apps/``): its epoch, its newest committed batch
(the bundle beside the batch's files) and its in-doubt work (prepared attempt directories and
staged files, with their age from the attempt's UUIDv7). Read-only.
"""

from __future__ import annotations

import time

from eosink.admin import AppStatus, InDoubtWork, SinkAdmin, SinkStatus
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs.config import HdfsConfig
from eosink.connectors.hdfs.sink import HdfsSink
from eosink.errors import ConfigurationError
from eosink.participant import attempt_time

__all__ = ["HdfsAdmin"]


class HdfsAdmin(SinkAdmin):
    """One HDFS sink configuration (its target directory)."""

    def __init__(self, config: HdfsConfig) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"HdfsAdmin({self.config!r})"

    def describe(self) -> str:
        return f"target directory {self.config.target_url}"

    def make_sink(self) -> HdfsSink:
        return HdfsSink(self.config)

    def app_ids(self) -> list[str]:
        """Every app_id that has fenced on this target."""
        sink = self.make_sink()
        with sink._errors("listing app_ids"):
            found = []
            for name in sink.fs.names(f"{sink._own()}/apps"):
                text = sink.fs.read_text(f"{sink._own()}/apps/{name}/app_id")
                if text is not None and L.app_key(text) == name:
                    found.append(text)
        return sorted(found)

    def status(self, app_id: str | None = None) -> SinkStatus:
        sink = self.make_sink()
        with sink._errors("status"):
            exists = sink.fs.info(sink.root) is not None
        apps = self.app_ids() if exists else []
        if app_id is not None:
            if app_id not in apps:
                raise ConfigurationError(
                    f"app_id {app_id!r} has never written to {self.config.target_url}.",
                    f"Check --app-id; known app_ids: {', '.join(apps) or 'none'}.",
                )
            apps = [app_id]
        return SinkStatus("hdfs", self.describe(), exists, tuple(self._app(sink, a) for a in apps))

    def _app(self, sink: HdfsSink, app_id: str) -> AppStatus:
        last = sink.fetch_last_bundle(app_id)
        with sink._errors("status"):
            epoch = sink.current_epoch(app_id)
        work = []
        now = time.time()
        for c in sink.recover(app_id):
            parsed = L.parse_task(c.id)
            began = attempt_time(parsed.attempt) if parsed else None
            age = max(0.0, now - began) if began else 0.0
            work.append(InDoubtWork("prepared", c.id, c.batch.batch_id, c.participant, c.epoch, round(age, 3), c.rows))
        return AppStatus(
            app_id,
            epoch or None,
            None if last is None else last.batch.batch_id,
            None if last is None else last.fingerprint.rows,
            None,
            None if last is None else last.strategy,
            None if last is None else last.checkpoint_id,
            tuple(work),
        )

    def drop_app(self, app_id: str) -> None:
        """Abort the app_id's in-doubt work and delete its bookkeeping (its committed batches stay)."""
        sink = self.make_sink()
        sink.abort(sink.recover(app_id))
        with sink._errors(f"dropping app_id {app_id!r}"):
            sink.fs.delete(f"{sink._own()}/apps/{L.app_key(app_id)}")

    def scrub(self, text: str) -> str:
        return self.config.scrub(text)
