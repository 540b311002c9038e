"""The S3 sink's admin (:class:`~eosink.admin.SinkAdmin`): what ``eosink status`` and ``eosink recover`` read.

Per app_id under the prefix: its epoch (the epoch object), its newest commit marker (batch, rows,
age, strategy, checkpoint id) and its incomplete multipart uploads, one in-doubt entry per task
attempt, with the age of its oldest upload. Incomplete uploads with eosink's names whose app_id
is not among those found are orphans. Errors go through the connector's one translator.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from eosink.admin import AppStatus, InDoubtWork, SinkAdmin, SinkStatus
from eosink.connectors.s3._layout import Layout, app_hash, parse_object_name
from eosink.connectors.s3.config import S3Config
from eosink.connectors.s3.read import _app_ids
from eosink.connectors.s3.sink import S3Sink
from eosink.errors import ConfigurationError
from eosink.stores.s3 import client as s3_client
from eosink.stores.s3_errors import translated

__all__ = ["S3Admin"]


class S3Admin(SinkAdmin):
    """One S3 sink configuration (bucket, prefix, connection)."""

    def __init__(self, config: S3Config) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"S3Admin({self.config!r})"

    def describe(self) -> str:
        return f"{self.config.root} at {self.config.connection().describe()}"

    def make_sink(self) -> S3Sink:
        return S3Sink(self.config)

    def status(self, app_id: str | None = None) -> SinkStatus:
        conn = self.config.connection()
        s3 = s3_client(conn)
        layout = Layout(self.config.prefix)
        sink = self.make_sink()
        sink._head_bucket()  # a 403 says whether the keys or a permission is wrong
        with translated(conn, f"reading the status of {self.config.root}"):
            apps = [app_id] if app_id is not None else _app_ids(s3, self.config, layout)
            uploads = sink._uploads()
            now = dt.datetime.now(dt.timezone.utc)
            known = {app_hash(a): a for a in apps}
            work: dict[str, dict[str, list[dict[str, Any]]]] = {}
            orphans: dict[str, list[dict[str, Any]]] = {}
            for upload in uploads:
                name = parse_object_name(upload["Key"])
                if name is None or not name.transactional:
                    continue
                owner = known.get(name.app16)
                bucket = orphans if owner is None else work.setdefault(owner, {})
                bucket.setdefault(name.committable_id(), []).append(upload)
            found = []
            for app in apps:
                epoch, _, _ = sink._read_epoch(app)
                marker = sink.last_marker(app)
                if app_id is not None and epoch == 0 and marker is None and app not in work:
                    raise ConfigurationError(
                        f"app_id {app_id!r} has no epoch, commit marker or upload under {self.config.root}.",
                        "Check --app-id, --bucket and --prefix (eosink status without --app-id lists every app_id).",
                    )
                age = None
                if marker is not None:
                    head = sink._head(layout.marker_key(app, marker.batch_id))
                    if head is not None:
                        age = max(0.0, (now - head["LastModified"]).total_seconds())
                doubt = tuple(_work(cid, ups, now) for cid, ups in sorted(work.get(app, {}).items()))
                found.append(
                    AppStatus(
                        app,
                        epoch or None,
                        None if marker is None else marker.batch_id,
                        None if marker is None else marker.rows,
                        age,
                        None if marker is None else marker.bundle.strategy,
                        None if marker is None else marker.bundle.checkpoint_id,
                        doubt,
                    )
                )
        where = f"{self.config.root} at {conn.describe()}"
        lost = tuple(_work(cid, ups, now) for cid, ups in sorted(orphans.items())) if app_id is None else ()
        return SinkStatus("s3", where, True, tuple(found), lost)

    def drop_app(self, app_id: str) -> None:
        """Abort the app_id's in-doubt uploads, then delete its epoch, commit markers and segments (its objects
        stay)."""
        sink = self.make_sink()
        sink.abort(sink.recover(app_id))
        conn = self.config.connection()
        s3 = s3_client(conn)
        layout = Layout(self.config.prefix)
        with translated(conn, f"dropping app_id {app_id!r}"):
            paginator = s3.get_paginator("list_objects_v2")
            for page in paginator.paginate(Bucket=self.config.bucket, Prefix=layout.control(app_id)):
                keys = [{"Key": o["Key"]} for o in page.get("Contents", [])]
                if keys:
                    s3.delete_objects(Bucket=self.config.bucket, Delete={"Objects": keys, "Quiet": True})

    def scrub(self, text: str) -> str:
        return self.config.scrub(text)


def _work(cid: str, uploads: list[dict[str, Any]], now: dt.datetime) -> InDoubtWork:
    name = parse_object_name(uploads[0]["Key"])
    assert name is not None
    oldest = min(u["Initiated"] for u in uploads)
    details = {"uploads": str(len(uploads)), "first_key": str(uploads[0]["Key"])}
    return InDoubtWork(
        "upload",
        cid,
        name.batch_id,
        name.participant,
        name.epoch,
        max(0.0, (now - oldest).total_seconds()),
        details=details,
    )
