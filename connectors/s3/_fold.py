"""Folding old commit markers into segments: housekeeping after a commit, and :meth:`S3Sink.compact` for operators.

A :class:`Folder` does it for one sink (a collaborator the coordinator side makes per use, not a
mixin: the fold is housekeeping after the commit point, with crash tests of its own).

What a segment is, and why folding never changes what a reader sees: ``_segments``.

When: after a commit created its batch's marker (never before, and never failing the commit),
the commit lists the oldest marker of the app_id (one one-key LIST). When that marker's range
is foldable (the batch just committed is at least ``ceil(S/2)`` past the range's end), it folds
that range and the next, at most :data:`FOLDS_PER_COMMIT` ranges per commit: in steady state
one range every ``S`` batches, and a bucket with thousands of markers (written before segments
existed) is caught up over the following commits, or at once by ``compact``. A process that
keeps its sink (a ``foreach_batch`` driver) remembers when the next range becomes foldable and
lists only then; ``format("eosink")``'s short-lived workers list at every commit.

What one fold costs: a listing page of ``commits/``, GETs of the range's (up to ``S``) markers,
eight at a time, one PUT of the segment (``If-None-Match: *``) and one DeleteObjects of the
markers (per 1000 keys).

Concurrent folders (a zombie and its successor, ``eosink recover`` beside a driver, ``compact``)
are safe: the segment is create-only, so one of them writes it; one whose PUT gets 412 reads the
segment that exists and deletes the markers of its range; markers are deleted only once a
segment of their range exists. A fold that fails (a lost reply, a denied request) is logged as a
warning and tried again at a later commit.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from eosink.connectors.s3._base import _S3Base
from eosink.connectors.s3._layout import Layout
from eosink.connectors.s3._listing import first_numbered
from eosink.connectors.s3._markers import list_marker_batches
from eosink.connectors.s3._segments import Segment, due_ranges, foldable, margin, range_of
from eosink.errors import EosinkError, TransientError
from eosink.stores.s3_errors import is_precondition_failed

__all__ = ["FOLDS_PER_COMMIT", "Folder"]

log = logging.getLogger("eosink.s3")

FOLDS_PER_COMMIT = 2
"""The most ranges one commit folds (a catch-up is spread over commits; ``compact`` folds every one at once)."""
_GET_THREADS = 8
"""Marker GETs a fold has in flight at once."""


class Folder:
    """Folds the old markers of one sink's app_ids into segments (see the module docstring).

    ``due`` is the sink's memory, per app_id, of the batch from whose commit on its oldest marker's range
    is foldable (this process's view: a commit before it does not list).
    """

    def __init__(self, sink: _S3Base, due: dict[str, int]) -> None:
        self.sink = sink
        self.due = due

    def compact(self, app_id: str) -> int:
        """Fold every range that may be folded now; how many ranges were folded (see ``S3Sink.compact``)."""
        sink = self.sink
        with sink._errors(f"compacting the commit markers of {app_id!r}"):
            span = sink._span(app_id)
            batches = list_marker_batches(sink._s3, sink.config.bucket, sink.layout, app_id, span, None)
            folded = self._fold(app_id, span, batches, batches[-1], None) if batches else 0
        self.due.pop(app_id, None)
        return folded

    def after_commit(self, app_id: str, batch_id: int) -> None:
        """Fold what the commit of ``batch_id`` made foldable (at most FOLDS_PER_COMMIT ranges); never raises."""
        due = self.due.get(app_id)
        if due is not None and batch_id < due:
            return
        sink = self.sink
        try:
            with sink._errors(f"folding the old commit markers of {app_id!r}"):
                self._fold_some(app_id, batch_id)
        except Exception as exc:  # housekeeping: the batch is committed, whatever happens here
            why = exc.problem if isinstance(exc, EosinkError) else sink._conn.scrub(f"{type(exc).__name__}: {exc}")
            log.warning(
                "eosink %s: folding old commit markers after batch %d failed (%s); a later commit tries again",
                app_id,
                batch_id,
                why,
            )
            self.due[app_id] = batch_id + sink._spans.get(app_id, sink.config.segment_batches)

    def _fold_some(self, app_id: str, newest: int) -> None:
        sink = self.sink
        span = sink._span(app_id)
        oldest_key = first_numbered(sink._s3, sink.config.bucket, sink.layout.markers(app_id), Layout.marker_batch)
        oldest = None if oldest_key is None else Layout.marker_batch(oldest_key)
        if oldest is None:
            self.due[app_id] = newest + 1
            return
        _, last = range_of(oldest, span)
        if not foldable(last, newest, span):
            self.due[app_id] = last + margin(span)
            return
        batches = list_marker_batches(sink._s3, sink.config.bucket, sink.layout, app_id, span, FOLDS_PER_COMMIT)
        self._fold(app_id, span, batches, newest, FOLDS_PER_COMMIT)
        self.due.pop(app_id, None)  # more may be foldable: the next commit looks

    def _fold(self, app_id: str, span: int, batches: list[int], newest: int, limit: int | None) -> int:
        """Fold the foldable ranges of ``batches`` (oldest first, at most ``limit``); how many were folded."""
        folded = 0
        for first, last, listed in due_ranges(batches, span, newest, limit):
            folded += self._fold_range(app_id, first, last, listed)
        return folded

    def _fold_range(self, app_id: str, first: int, last: int, batches: list[int]) -> bool:
        """Make sure a segment of first..last exists, then delete the range's listed markers; False when it cannot
        be folded now (a listed marker vanished and no segment holds the range)."""
        sink = self.sink
        bodies = self._marker_bodies(app_id, batches)
        if len(bodies) < len(batches):  # folded meanwhile by another folder, or deleted by hand
            if sink._read_segment(app_id, first, last) is None:
                log.warning(
                    "eosink %s: a commit marker of batches %d..%d vanished before it was folded, and no segment "
                    "holds them; the range stays as it is",
                    app_id,
                    first,
                    last,
                )
                return False
        else:
            try:
                segment = Segment.of(app_id, first, last, bodies)
            except ValueError as exc:
                raise EosinkError(
                    f"The commit markers of batches {first}..{last} of {app_id!r} cannot be folded ({exc}).",
                    "Only eosink writes under _eosink/; restore the markers from a backup or a versioned bucket.",
                ) from None
            if not self.put_segment(segment) and sink._read_segment(app_id, first, last) is None:
                raise TransientError(
                    f"The segment of batches {first}..{last} of {app_id!r} exists (412) but cannot be read.",
                    "Nothing to do: a later commit folds the range again.",
                )
        self.delete_markers(app_id, batches)  # the segment there covers them all (see _segments)
        log.info("eosink %s: folded the commit markers of batches %d..%d into a segment", app_id, first, last)
        return True

    def _marker_bodies(self, app_id: str, batches: list[int]) -> list[dict[str, Any]]:
        """The JSON bodies of the markers that still exist, each checked as a marker of its batch."""
        sink = self.sink

        def read(batch_id: int) -> dict[str, Any] | None:
            found = sink._get(sink.layout.marker_key(app_id, batch_id))
            if found is None:
                return None
            sink._decode_marker(found[0], app_id, batch_id)  # a damaged marker is an error, not folded
            body: dict[str, Any] = json.loads(found[0])
            return body

        with ThreadPoolExecutor(max(1, min(len(batches), _GET_THREADS)), thread_name_prefix="eosink-s3-fold") as pool:
            return [body for body in pool.map(read, batches) if body is not None]

    def put_segment(self, segment: Segment) -> bool:
        """Create the segment (If-None-Match: *); False when one of its range exists already."""
        from botocore.exceptions import ClientError

        sink = self.sink
        try:
            sink._s3_once.put_object(
                Bucket=sink.config.bucket,
                Key=sink.layout.segment_key(segment.app_id, segment.first, segment.last),
                Body=segment.encode(),
                IfNoneMatch="*",
                ContentType="application/json",
                **sink.config.sse_args(),
            )
        except ClientError as exc:
            if is_precondition_failed(exc):
                return False
            raise
        return True

    def delete_markers(self, app_id: str, batches: list[int]) -> None:
        """DeleteObjects of the markers of ``batches``, whose range a segment holds (one that fails to go stays for
        a later fold)."""
        sink = self.sink
        keys = [sink.layout.marker_key(app_id, b) for b in batches]
        for start in range(0, len(keys), 1000):
            objects = [{"Key": k} for k in keys[start : start + 1000]]
            reply = sink._s3.delete_objects(Bucket=sink.config.bucket, Delete={"Objects": objects, "Quiet": True})
            errors = reply.get("Errors") or []
            if errors:
                log.warning(
                    "eosink %s: %d folded commit marker(s) were not deleted (%s: %s); a later fold deletes them",
                    app_id,
                    len(errors),
                    errors[0].get("Code"),
                    errors[0].get("Key"),
                )
