"""Segments: the commit markers of a range of old batches, folded into one object.

Markers are not only bookkeeping: they are the readers' manifest (``read.py`` follows them to
see whole batches only), so old ones cannot simply be deleted. One marker per batch forever
would make every new process list a history's worth of keys to find its last bundle, so once a
range of batches is old, its markers are copied, as they were, into one segment object::

    _eosink/<app-dir>/segments/<first:020d>-<last:020d>.json     format eosink.s3.segment/1

created with ``If-None-Match: *`` (one per range, whoever folds it), and only then are the
range's marker objects deleted. Ranges are aligned, ``[k*S, (k+1)*S - 1]``, where ``S`` is the
app_id's span: the size of its first segment, or ``segment_batches`` while it has none (so a
changed ``segment_batches`` never makes two segments overlap). A range is folded only when a
marker at least ``ceil(S/2)`` batches past its end exists (:func:`foldable`): the last bundle and
the markers a retry or ``commit_status`` may still ask about stay marker objects.

A segment is authoritative for its range: the committed batches of ``first..last`` are exactly
the ones it holds. A marker in its range is ignored, by readers and by the sink: one a fold left
behind when it stopped between its PUT and its deletes (the same marker, in the segment too), or
one a fenced zombie created late, after the range was folded and its marker deleted (that batch
was committed by its successor, whose marker the segment holds). So a batch is never counted
twice, and deleting the markers of a folded range never changes what a reader sees.

Each marker in a segment is stored without its ``format`` tag (the segment's own format implies
it): a segment's PUT is not a commit, and tools that recognise the commit request by the marker's
format tag (the fault proxy) must not take it for one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from eosink.connectors.s3._layout import Layout
from eosink.connectors.s3._listing import first_numbered, list_page
from eosink.connectors.s3._markers import FORMAT as MARKER_FORMAT
from eosink.connectors.s3._markers import CommitMarker

__all__ = [
    "FORMAT",
    "Segment",
    "due_ranges",
    "first_segment_key",
    "foldable",
    "list_segment_keys",
    "margin",
    "range_of",
    "span_of",
]

FORMAT = "eosink.s3.segment/1"


def range_of(batch_id: int, span: int) -> tuple[int, int]:
    """The range (first, last) of ``span`` batches that holds ``batch_id``."""
    first = batch_id - batch_id % span
    return first, first + span - 1


def margin(span: int) -> int:
    """How many batches past a range's end the newest marker must be before the range is folded."""
    return (span + 1) // 2


def foldable(last: int, newest: int, span: int) -> bool:
    """Whether the range ending at ``last`` may be folded while ``newest`` is the newest marker's batch."""
    return newest >= last + margin(span)


def due_ranges(batches: list[int], span: int, newest: int, limit: int | None) -> list[tuple[int, int, list[int]]]:
    """The foldable ranges (first, last, their batches among ``batches``) while ``newest`` is the newest marker's
    batch: oldest first, at most ``limit`` (None: all)."""
    groups: dict[int, list[int]] = {}
    for batch_id in batches:
        groups.setdefault(batch_id // span, []).append(batch_id)
    out: list[tuple[int, int, list[int]]] = []
    for k in sorted(groups):
        first, last = k * span, k * span + span - 1
        if not foldable(last, newest, span) or (limit is not None and len(out) >= limit):
            break
        out.append((first, last, groups[k]))
    return out


def span_of(key: str) -> int | None:
    """The number of batches a segment key's range covers."""
    found = Layout.segment_range(key)
    return None if found is None else found[1] - found[0] + 1


@dataclass(frozen=True)
class Segment:
    """The markers of batches ``first..last`` (those that were committed), in batch order, as they were."""

    app_id: str
    first: int
    last: int
    entries: tuple[dict[str, Any], ...]
    """each marker's JSON body, as its object held it (without the ``format`` tag)"""

    def covers(self, batch_id: int) -> bool:
        return self.first <= batch_id <= self.last

    @property
    def batch_ids(self) -> list[int]:
        return [int(e["bundle"]["batch"]["batch_id"]) for e in self.entries]

    def markers(self) -> list[CommitMarker]:
        return [CommitMarker.from_json({**e, "format": MARKER_FORMAT}) for e in self.entries]

    def get(self, batch_id: int) -> CommitMarker | None:
        """The marker of ``batch_id``; None when the range holds no committed batch of that id."""
        for entry, found in zip(self.entries, self.batch_ids, strict=True):
            if found == batch_id:
                return CommitMarker.from_json({**entry, "format": MARKER_FORMAT})
        return None

    @classmethod
    def of(cls, app_id: str, first: int, last: int, bodies: list[dict[str, Any]]) -> Segment:
        """The segment of markers given by their JSON bodies (any order); ValueError for one that does not belong."""
        entries = []
        for body in bodies:
            marker = CommitMarker.from_json(body)  # ValueError for a body that is no marker
            if marker.app_id != app_id or not first <= marker.batch_id <= last:
                raise ValueError(f"the marker of {marker.app_id!r} batch {marker.batch_id} is not of this range")
            entries.append((marker.batch_id, {k: v for k, v in body.items() if k != "format"}))
        entries.sort(key=lambda e: e[0])
        if len({b for b, _ in entries}) != len(entries):
            raise ValueError("two markers of one batch")
        return cls(app_id, first, last, tuple(e for _, e in entries))

    def encode(self) -> bytes:
        body = {"format": FORMAT, "app_id": self.app_id, "first": self.first, "last": self.last}
        body["markers"] = list(self.entries)
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode("utf-8")

    @classmethod
    def decode(cls, data: bytes, app_id: str, key: str) -> Segment:
        """The segment ``key`` holds; ValueError when it is damaged or not the app_id's."""
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("format") != FORMAT:
            raise ValueError(f"not an eosink S3 segment (format {_format(body)!r})")
        first, last = int(body["first"]), int(body["last"])
        if body.get("app_id") != app_id or Layout.segment_range(key) != (first, last):
            raise ValueError(f"it is of {body.get('app_id')!r} batches {first}..{last}")
        return cls.of(app_id, first, last, [{**e, "format": MARKER_FORMAT} for e in body.get("markers", [])])


def first_segment_key(client: Any, bucket: str, layout: Layout, app_id: str) -> str | None:
    """The app_id's oldest segment key (one one-key listing); None when it has no segment."""
    return first_numbered(client, bucket, layout.segments(app_id), Layout.segment_first)


def _format(body: object) -> object:
    return body.get("format") if isinstance(body, dict) else None


def list_segment_keys(
    client: Any, bucket: str, layout: Layout, app_id: str, after_batch: int | None = None
) -> list[str]:
    """The app_id's segment keys in batch order; with ``after_batch``, those of ranges ending after it (found
    from the first segment's span, so the segments before are not listed)."""
    prefix = layout.segments(app_id)
    start = None
    if after_batch is not None:
        first = first_segment_key(client, bucket, layout, app_id)
        span = None if first is None else span_of(first)
        if span is None:
            return []
        begin, _ = range_of(after_batch + 1, span)
        start = layout.segment_after(app_id, begin - 1) if begin > 0 else None
    keys: list[str] = []
    while True:
        page, more = list_page(client, bucket, prefix, start)
        for key in page:
            found = Layout.segment_range(key)
            if found is not None and (after_batch is None or found[1] > after_batch):
                keys.append(key)
        if not more or not page:
            return keys
        start = page[-1]
