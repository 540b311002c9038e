"""The HDFS sink's admin (:class:`~eosink.admin.SinkAdmin`): what ``eosink status`` and ``eosink recover`` read,
and :func:`migrate_layout`, which moves a target of eosink before batch ranges into them.

Per app_id (one directory under ``<target>/_eosink/apps/``): its epoch, its newest committed batch
(the bundle beside the batch's files) and its in-doubt work (prepared attempt directories and
staged files, with their age from the attempt's UUIDv7). Read-only.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

from eosink.admin import AppStatus, SinkAdmin, SinkStatus, prepared_work
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs._batches import layout_file, store_layout
from eosink.connectors.hdfs._errors import translated
from eosink.connectors.hdfs.config import HdfsConfig
from eosink.connectors.hdfs.sink import HdfsSink
from eosink.contract import Committable
from eosink.errors import ConfigurationError
from eosink.participant import attempt_time
from eosink.stores.hdfs import Fs

__all__ = ["HdfsAdmin", "migrate_layout"]

log = logging.getLogger("eosink.hdfs")


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

        def started(c: Committable) -> float | None:
            parsed = L.parse_task(c.id)
            return attempt_time(parsed.attempt) if parsed else None

        return AppStatus.of(app_id, epoch, last, prepared_work(sink.recover(app_id), started, time.time()))

    def drop_app(self, app_id: str) -> None:
        """Abort the app_id's in-doubt work and delete its bookkeeping (its committed batches stay)."""
        sink = self.make_sink()
        sink.abort(sink.recover(app_id))
        with sink._errors(f"dropping app_id {app_id!r}"):
            sink.fs.delete(f"{sink._own()}/apps/{L.app_key(app_id)}")

    def scrub(self, text: str) -> str:
        return self.config.scrub(text)


def migrate_layout(config: HdfsConfig, *, workers: int = 8) -> int:
    """Move a flat target's batch directories into batch ranges and mark it grouped; the number of batches moved.

    A target written by eosink before ranges keeps every batch right under it
    (``eosink_batch=<app>-<batch>``); this renames each into ``eosink_range=<app>-<first>/eosink_batch=<batch>``
    (one rename per batch: atomic, files and record together), then writes ``_eosink/layout.json``. Stop the
    target's queries and readers first: a listing reader meanwhile sees partition directories of two depths,
    which Spark refuses. A crash or an error part way leaves some batches moved: run it again, it moves the
    rest (until ``layout.json`` is written, the sink refuses the half-moved target with a ConfigurationError
    saying so). A grouped target is left as it is (0)."""
    fs = Fs(config)
    with translated(config, "migrating the target's layout"):
        layout = _stored_layout(fs, config)
        flat = [f for f in map(L.flat_batch_of, fs.names(config.path)) if f is not None]
        for key, first in sorted({(key, layout.first(batch_id)) for key, batch_id in flat}):
            fs.mkdirs(f"{config.path}/{L.RANGE_PREFIX}{key}-{L.batch_name(first)}")
        with ThreadPoolExecutor(max(1, workers), thread_name_prefix="eosink-hdfs-migrate") as pool:
            list(pool.map(lambda f: _move_batch(fs, config, layout, *f), flat))
        store_layout(fs, config.path, layout)
    log.info("eosink: %s: %d batch directories moved into ranges of %d", config.target_url, len(flat), layout.size)
    return len(flat)


def _stored_layout(fs: Fs, config: HdfsConfig) -> L.Layout:
    """The grouped layout the target names already (a rerun), or the layout of a new target."""
    text = fs.read_text(layout_file(config.path))
    if text is None:
        return L.GROUPED
    layout = L.Layout.decode(text)
    if layout is None:
        raise ConfigurationError(
            f"{config.target_url}/{L.OWN_DIR}/{L.LAYOUT_FILE} is damaged or of a newer eosink: {text[:200]!r}.",
            "Migrate with the eosink that wrote it, or restore the file.",
        )
    return layout


def _move_batch(fs: Fs, config: HdfsConfig, layout: L.Layout, key: str, batch_id: int) -> None:
    """One flat batch directory renamed into its range (without overwrite)."""
    src = f"{config.path}/{L.BATCH_PREFIX}{key}-{L.batch_name(batch_id)}"
    first = layout.first(batch_id)
    dst = f"{config.path}/{L.RANGE_PREFIX}{key}-{L.batch_name(first)}/{L.grouped_batch_dir_name(batch_id)}"
    try:
        fs.rename(src, dst, checked=False)
    except FileExistsError:
        raise ConfigurationError(
            f"Batch {batch_id} is both at {src} and at {dst}: a writer committed it again during the migration.",
            "Stop every writer of the target, compare the two directories' _eosink_bundle.json and remove the copy "
            "that is not the one Spark's checkpoint committed; then run migrate_layout again.",
        ) from None
