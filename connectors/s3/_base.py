"""What both sides of S3Sink use: configuration, clients, error translation, the epoch, the markers and segments.

``_write_side`` (executors) and ``_commit_side`` (driver) derive from :class:`_S3Base`, so that each
type-checks on its own; ``sink.py`` puts them together.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from eosink.connectors.s3._layout import Layout
from eosink.connectors.s3._markers import SHA_META, CommitMarker
from eosink.connectors.s3._segments import Segment, first_segment_key, range_of, span_of
from eosink.connectors.s3.config import S3Config, S3Connection
from eosink.errors import EosinkError, FencedError
from eosink.stores.s3 import client as s3_client
from eosink.stores.s3_errors import is_not_found, translated

__all__ = ["_S3Base"]

log = logging.getLogger("eosink.s3")


class _S3Base:
    """The sink's core, shared by its participant and coordinator sides (a mixin base)."""

    config: S3Config
    layout: Layout
    _conn: S3Connection
    _schemas: dict[str, dict[str, Any]]
    """app_id -> the schema of its newest committed batch, as the driver learned it. Pickled with the sink,
    so that participants check a batch's schema without a request of their own."""
    _spans: dict[str, int]
    """app_id -> its segment span (batches per segment), once this process has looked it up"""

    # -- clients and errors ----------------------------------------------------------------------

    @property
    def _s3(self) -> Any:
        """The retrying client: reads and data uploads."""
        return s3_client(self._conn, retrying=True)

    @property
    def _s3_once(self) -> Any:
        """The single-attempt client: requests whose outcome must be known exactly (commits, conditional writes)."""
        return s3_client(self._conn, retrying=False)

    def _errors(self, what: str) -> AbstractContextManager[None]:
        """Turn botocore errors into eosink errors (the connector's one translator)."""
        return translated(self._conn, what)

    # -- small reads --------------------------------------------------------------------------------

    def _get(self, key: str) -> tuple[bytes, dict[str, Any]] | None:
        """The object's bytes and its reply (ETag, Metadata, ...); None when it does not exist."""
        from botocore.exceptions import ClientError

        try:
            reply = self._s3.get_object(Bucket=self.config.bucket, Key=key)
        except ClientError as exc:
            if is_not_found(exc):
                return None
            raise
        return reply["Body"].read(), reply

    def _head(self, key: str) -> dict[str, Any] | None:
        """The object's HEAD reply, None when it does not exist."""
        from botocore.exceptions import ClientError

        try:
            reply: dict[str, Any] = self._s3.head_object(Bucket=self.config.bucket, Key=key)
        except ClientError as exc:
            if is_not_found(exc):
                return None
            raise
        return reply

    # -- the epoch ---------------------------------------------------------------------------------

    def _read_epoch(self, app_id: str) -> tuple[int, str | None, dict[str, Any]]:
        """(epoch, ETag, body) of the app_id's epoch object; (0, None, {}) when it has none yet."""
        found = self._get(self.layout.epoch_key(app_id))
        if found is None:
            return 0, None, {}
        data, reply = found
        try:
            body = json.loads(data)
            return int(body["epoch"]), str(reply["ETag"]), body
        except (ValueError, KeyError, TypeError):
            raise EosinkError(
                f"The epoch object {self.layout.epoch_key(app_id)!r} in {self.config.root} is damaged.",
                "Only eosink writes under _eosink/; restore it, or delete it to start the app_id's epochs afresh "
                "(only while no writer of this app_id runs).",
            ) from None

    def _check_epoch(self, app_id: str, epoch: int, what: str) -> None:
        """FencedError when a newer writer than ``epoch`` holds ``app_id``."""
        current, _, _ = self._read_epoch(app_id)
        if current > epoch:
            raise FencedError(
                f"{what} of {app_id!r} at epoch {epoch} was fenced: a newer writer holds epoch {current}.",
                "Stop this older writer; only the newest may commit.",
            )

    # -- markers -------------------------------------------------------------------------------------

    def _read_marker(self, app_id: str, batch_id: int) -> CommitMarker | None:
        found = self._get(self.layout.marker_key(app_id, batch_id))
        return None if found is None else self._decode_marker(found[0], app_id, batch_id)

    def _decode_marker(self, data: bytes, app_id: str, batch_id: int) -> CommitMarker:
        try:
            marker = CommitMarker.decode(data)
        except (ValueError, KeyError, TypeError) as exc:
            raise EosinkError(
                f"The commit marker of batch {batch_id} of {app_id!r} in {self.config.root} is damaged ({exc}).",
                "Only eosink writes under _eosink/; restore the marker from a backup or a versioned bucket.",
            ) from None
        if marker.app_id != app_id or marker.batch_id != batch_id:
            raise EosinkError(
                f"The commit marker {self.layout.marker_key(app_id, batch_id)!r} is of {marker.app_id!r} batch "
                f"{marker.batch_id}, not of {app_id!r} batch {batch_id}.",
                "Two app_ids hash alike (very unlikely) or the marker was copied by hand: use another app_id.",
            )
        return marker

    def _marker_sha(self, app_id: str, batch_id: int) -> str | None:
        """The SHA-256 the marker was written with ('' when it exists without one); None when it does not exist."""
        head = self._head(self.layout.marker_key(app_id, batch_id))
        if head is None:
            return None
        return str(head.get("Metadata", {}).get(SHA_META, ""))

    # -- segments (old markers, folded: see _segments) ---------------------------------------------

    def _span(self, app_id: str) -> int:
        """Batches per segment of ``app_id``: its first segment's (one one-key listing, once per process), else
        ``segment_batches``. An app_id keeps its first span, so its segments do not overlap (two first folds at
        once with different settings could; they hold the same markers, and readers count a batch once)."""
        found = self._spans.get(app_id)
        if found is not None:
            return found
        first = first_segment_key(self._s3, self.config.bucket, self.layout, app_id)
        span = (span_of(first) if first is not None else None) or self.config.segment_batches
        if span != self.config.segment_batches:
            log.info(
                "eosink %s: segments of %d batches, as the app_id's first segment has (segment_batches=%d applies "
                "to new app_ids)",
                app_id,
                span,
                self.config.segment_batches,
            )
        self._spans[app_id] = span
        return span

    def _read_segment(self, app_id: str, first: int, last: int) -> Segment | None:
        """The segment of batches first..last, None when that range is not folded."""
        key = self.layout.segment_key(app_id, first, last)
        found = self._get(key)
        if found is None:
            return None
        try:
            return Segment.decode(found[0], app_id, key)
        except (ValueError, KeyError, TypeError) as exc:
            raise EosinkError(
                f"The segment {key!r} in {self.config.root} is damaged ({exc}).",
                "Only eosink writes under _eosink/; restore it from a backup or a versioned bucket.",
            ) from None

    def _segment_of(self, app_id: str, batch_id: int) -> Segment | None:
        """The segment whose range holds ``batch_id``, None while that range is not folded (one GET by name)."""
        first, last = range_of(batch_id, self._span(app_id))
        return self._read_segment(app_id, first, last)

    def _remember(self, marker: CommitMarker) -> None:
        if marker.schema is not None:
            self._schemas[marker.app_id] = marker.schema

    @contextmanager
    def _quiet(self, what: str) -> Iterator[None]:
        """Housekeeping that must never fail the batch: its errors are logged."""
        try:
            with self._errors(what):
                yield
        except EosinkError as exc:
            log.warning("eosink: %s skipped: %s", what, exc.problem)
