"""Synthetic S3 histories: commit markers and segments as the sink would have left them, written in bulk.

Markers are built from :func:`tests.connectors.history.synthetic_bundle` (one made-up object each,
no schema) and written as marker objects exactly as a commit writes them (create-only, with their
SHA-256); segments are built and written with the connector's own code (``Segment.of`` and the
fold's create-only PUT). Many requests at once, from a thread pool: 100,000 batches in seconds.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor

from botocore.exceptions import BotoCoreError, ClientError

from eosink.connectors.s3 import S3Config, S3Sink
from eosink.connectors.s3._fold import Folder
from eosink.connectors.s3._markers import SHA_META, CommitMarker, MarkedObject
from eosink.connectors.s3._segments import Segment, foldable, range_of
from eosink.stores.s3_errors import is_precondition_failed

from ..history import History, synthetic_bundle

THREADS = 16
ATTEMPTS = 4  # per synthetic object: the writes go through the client that never retries by itself


def synthetic_marker(history: History, batch_id: int, committables: tuple[str, ...] = ()) -> CommitMarker:
    """The marker a commit of ``batch_id`` of ``history`` would leave: its synthetic bundle, one object."""
    bundle = synthetic_bundle(history, batch_id, committables)
    obj = MarkedObject(f"synthetic/{history.app_id}/{batch_id:020d}.parquet", '"0"', 100, 10, bundle.committables[0])
    return CommitMarker(history.app_id, bundle, (obj,), None, "parquet")


def _created(create: Callable[[], bool]) -> bool:
    """``create()`` (a create-only PUT: False when the key exists), again after a connection error, as the writes
    go through the client that never retries by itself and many run at once. After an error, False is taken for
    the earlier attempt's object: its reply was the one lost."""
    for attempt in range(ATTEMPTS):
        try:
            return create() or attempt > 0
        except BotoCoreError:
            if attempt == ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


def put_markers(sink: S3Sink, markers: Iterable[CommitMarker]) -> None:
    """Marker objects, as a commit creates them (If-None-Match: *, the SHA-256 as metadata)."""

    def put(marker: CommitMarker) -> None:
        body, sha = marker.encode()
        key = sink.layout.marker_key(marker.app_id, marker.batch_id)

        def create() -> bool:
            try:
                sink._s3_once.put_object(
                    Bucket=sink.config.bucket,
                    Key=key,
                    Body=body,
                    IfNoneMatch="*",
                    ContentType="application/json",
                    Metadata={SHA_META: sha},
                )
            except ClientError as exc:
                if not is_precondition_failed(exc):
                    raise
                return sink._s3.head_object(Bucket=sink.config.bucket, Key=key)["Metadata"].get(SHA_META) == sha
            return True

        assert _created(create), f"{key} exists with another body"

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(put, markers))


def put_segments(
    sink: S3Sink, app_id: str, ranges: Sequence[tuple[int, int]], marker: Callable[[int], CommitMarker]
) -> None:
    """The segments of ranges (first, last), of the markers ``marker(batch)`` of every batch in them, built and
    created with the connector's fold code."""

    folder = Folder(sink, {})

    def put(item: tuple[int, int]) -> None:
        first, last = item
        bodies = [json.loads(marker(b).encode()[0]) for b in range(first, last + 1)]
        segment = Segment.of(app_id, first, last, bodies)
        assert _created(lambda: folder.put_segment(segment)), f"segment {first}..{last} exists"

    with ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(put, ranges))


def folded_until(batches: int, span: int) -> int:
    """The first batch of the oldest range the sink keeps as markers, with batches 0 .. batches - 1 committed."""
    newest = batches - 1
    k = 0
    while foldable(k * span + span - 1, newest, span):
        k += 1
    return k * span


def write_history(config: S3Config, history: History, *, folded: bool = True) -> tuple[int, int]:
    """Batches 0 .. history.last of ``history``, as the sink leaves them: every range that commits would have
    folded as a segment, the rest as marker objects (``folded=False``: every batch a marker object, as a
    version without segments left them). Returns (segments, markers) written."""
    sink = S3Sink(config)
    span = config.segment_batches
    start = folded_until(history.batches, span) if folded else 0
    ranges = [range_of(first, span) for first in range(0, start, span)]
    put_segments(sink, history.app_id, ranges, lambda b: synthetic_marker(history, b))
    put_markers(sink, (synthetic_marker(history, b) for b in range(start, history.batches)))
    return len(ranges), history.batches - start
