"""Where everything lives in the bucket: object names, commit markers, the epoch, partition folders.

::

    <prefix>/
      [col=value/...]eo1-<app16>-<batch:020d>-p<participant>-e<epoch>-a<attempt>-<n>.<ext>
                                     an object of one attempt (2pc, txid-check): its multipart upload
                                     stays incomplete, so invisible, until the commit completes it
      [col=value/...]eo1-<app16>-<batch:020d>-p<participant>-k-<n>.<ext>
                                     an object of the idempotent strategy: no attempt in the name, so a
                                     replay overwrites it (same participant, same rows)
      _eosink/<app-dir>/epoch.json   the app_id's writer epoch, changed only with If-Match / If-None-Match
      _eosink/<app-dir>/commits/<batch:020d>.json
                                     a commit marker (the bundle, the objects, the schema), created with
                                     If-None-Match: * ; zero-padded, so names sort as numbers do
      _eosink/<app-dir>/segments/<first:020d>-<last:020d>.json
                                     the markers of batches first..last folded into one object once they
                                     are old (``_segments``); authoritative for its range
      _eosink/probe/<uuid>           setup's conditional-write probe, deleted at once (leftovers of a
                                     process that died mid-probe are swept by the next probe)

``<app16>`` is 64 bits of SHA-256 of the app_id, so in-doubt uploads are told apart per app_id
exactly (no prefix, case or pattern match); ``<app-dir>`` is the app_id made safe, a dash and
``<app16>``. Partition folders are named by the store kit (:mod:`eosink.stores.partitions`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from eosink.connectors.s3.config import MAX_KEY_BYTES, MAX_SEGMENT_BYTES
from eosink.errors import BadRecordError
from eosink.stores.naming import digest, token

__all__ = [
    "TAG",
    "Layout",
    "ObjectName",
    "app_dir",
    "app_hash",
    "attempt_token",
    "parse_object_name",
]

TAG = "eo1"
BATCH_DIGITS = 20  # 10**20 > 2**63: every batch id Spark can give
_SEGMENT = re.compile(rf"^(\d{{{BATCH_DIGITS}}})-(\d{{{BATCH_DIGITS}}})\.json$")
_OBJECT = re.compile(
    rf"^{TAG}-(?P<app>[0-9a-f]{{16}})-(?P<batch>\d{{{BATCH_DIGITS}}})-p(?P<participant>\d+)-"
    r"(?:e(?P<epoch>\d+)-a(?P<attempt>[0-9A-Za-z]{1,64})|k)-(?P<seq>\d+)\.(?P<ext>[a-z.]+)$"
)


def app_hash(app_id: str) -> str:
    """64 bits of SHA-256 of ``app_id``, in hex: what names an app_id's objects and uploads."""
    return digest(app_id)


def app_dir(app_id: str) -> str:
    """The app_id's folder under ``_eosink/``: readable, safe, and unique (its hash)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", app_id)[:48]
    return f"{safe}-{app_hash(app_id)}"


def attempt_token(attempt: str) -> str:
    """A task attempt's id as it may appear in a key: itself when it is 1-64 letters and digits (eosink's
    are UUIDv7s in hex), else 32 hex digits of its hash."""
    return token(attempt, r"[0-9A-Za-z]{1,64}")


@dataclass(frozen=True)
class ObjectName:
    """What an object's name says about it."""

    app16: str
    batch_id: int
    participant: int
    epoch: int | None
    attempt: str | None
    seq: int

    @property
    def transactional(self) -> bool:
        return self.attempt is not None

    def committable_id(self) -> str:
        """The id of the committable this object belongs to (one per task attempt)."""
        return committable_id(self.app16, self.batch_id, self.participant, self.attempt or "k")


def committable_id(app16: str, batch_id: int, participant: int, attempt: str) -> str:
    return f"{TAG}:{app16}:{batch_id}:{participant}:{attempt}"


def parse_object_name(key: str) -> ObjectName | None:
    """The parts of an eosink object's key (its last segment), or None for any other key."""
    m = _OBJECT.match(key.rsplit("/", 1)[-1])
    if m is None:
        return None
    epoch = m.group("epoch")
    return ObjectName(
        m.group("app"),
        int(m.group("batch")),
        int(m.group("participant")),
        int(epoch) if epoch is not None else None,
        m.group("attempt"),
        int(m.group("seq")),
    )


class Layout:
    """The keys of one configuration's prefix (``prefix`` without slashes at either end, maybe empty)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.root = f"{prefix}/" if prefix else ""

    def control(self, app_id: str) -> str:
        """``<prefix>/_eosink/<app-dir>/``"""
        return f"{self.root}_eosink/{app_dir(app_id)}/"

    @property
    def control_root(self) -> str:
        return f"{self.root}_eosink/"

    def epoch_key(self, app_id: str) -> str:
        return f"{self.control(app_id)}epoch.json"

    def markers(self, app_id: str) -> str:
        """The folder of the app_id's commit markers."""
        return f"{self.control(app_id)}commits/"

    def marker_key(self, app_id: str, batch_id: int) -> str:
        if batch_id < 0:
            raise ValueError(f"batch ids are not negative: {batch_id}")
        return f"{self.markers(app_id)}{batch_id:0{BATCH_DIGITS}d}.json"

    def segments(self, app_id: str) -> str:
        """The folder of the app_id's segments (old markers, folded)."""
        return f"{self.control(app_id)}segments/"

    def segment_key(self, app_id: str, first: int, last: int) -> str:
        if not 0 <= first <= last:
            raise ValueError(f"not a range of batch ids: {first}..{last}")
        return f"{self.segments(app_id)}{first:0{BATCH_DIGITS}d}-{last:0{BATCH_DIGITS}d}.json"

    @staticmethod
    def segment_range(key: str) -> tuple[int, int] | None:
        """(first, last) batch of a segment key (None for another key)."""
        m = _SEGMENT.match(key.rsplit("/", 1)[-1])
        if m is None:
            return None
        first, last = int(m.group(1)), int(m.group(2))
        return (first, last) if first <= last else None

    @staticmethod
    def segment_first(key: str) -> int | None:
        """The first batch of a segment key (None for another key): what segment keys sort by."""
        found = Layout.segment_range(key)
        return None if found is None else found[0]

    def segment_after(self, app_id: str, batch_id: int) -> str:
        """A ``StartAfter`` key that the segments whose range starts after ``batch_id`` follow, and no other."""
        return f"{self.segments(app_id)}{batch_id:0{BATCH_DIGITS}d}."  # '.' sorts after the '-' of batch_id's own

    def intents(self, app_id: str) -> str:
        """The folder of the app_id's upload intents: one small object per transactional upload, written before the
        upload is created and naming its key, so that recovery finds every upload by its key. Listing the uploads
        themselves is not enough: a node of a MinIO cluster lists only the uploads it knows of itself, and lists a
        prefix only when it is a whole key."""
        return f"{self.control(app_id)}uploads/"

    def intent_key(self, app_id: str, object_key: str) -> str:
        """The intent of the upload of ``object_key`` (its last segment is unique within the app_id)."""
        return f"{self.intents(app_id)}{object_key.rsplit('/', 1)[-1]}"

    @property
    def probes(self) -> str:
        """The folder of setup's conditional-write probes (shared by every app_id under the prefix)."""
        return f"{self.control_root}probe/"

    @staticmethod
    def marker_batch(key: str) -> int | None:
        """The batch id of a marker key (None for another key)."""
        name = key.rsplit("/", 1)[-1]
        digits = name.removesuffix(".json")
        return int(digits) if name.endswith(".json") and len(digits) == BATCH_DIGITS and digits.isdigit() else None

    def object_key(
        self,
        folder: str,
        app_id: str,
        batch_id: int,
        participant: int,
        epoch: int,
        attempt: str | None,
        seq: int,
        ext: str,
    ) -> str:
        """The key of one object; ``attempt`` None for an idempotent object (stable across attempts)."""
        who = f"e{epoch}-a{attempt_token(attempt)}" if attempt is not None else "k"
        name = f"{TAG}-{app_hash(app_id)}-{batch_id:0{BATCH_DIGITS}d}-p{participant}-{who}-{seq}.{ext}"
        key = f"{self.root}{folder}{name}"
        if len(key.encode("utf-8")) > MAX_KEY_BYTES:
            raise BadRecordError(
                f"The object key {key[:120]!r}... would be {len(key.encode())} bytes, over S3's {MAX_KEY_BYTES}: "
                "the partition values make it too long.",
                "Shorten the prefix or the partition values (or partition by fewer or shorter columns).",
            )
        _check_segments(folder)
        return key


def _check_segments(folder: str) -> None:
    """BadRecordError for a partition folder name over MAX_SEGMENT_BYTES: MinIO refuses such a key only
    at the upload of a part, with an error that does not say which value is at fault."""
    for segment in folder.split("/"):
        size = len(segment.encode("utf-8"))
        if size > MAX_SEGMENT_BYTES:
            raise BadRecordError(
                f"The partition folder {segment[:80]!r}... would be {size} bytes, over the {MAX_SEGMENT_BYTES} "
                "bytes that MinIO (and HDFS) allow between two slashes of a key.",
                "Shorten the partition values (e.g. substring or hash them), or partition by another column.",
            )
