"""Where an HdfsSink keeps what, under its target directory ``T``, and how names are read back.

::

    T/eosink_range=<app>-<first>/                 the app's committed batches first .. first + RANGE - 1
      eosink_batch=<batch>/                       a committed batch: visible, renamed into place at once
        [col=value/]part-p<n>-<task>.<ext>        its data files (Hive-style partition directories;
                                                  idempotent: part-p<n>.<ext>, the same for every attempt)
        _eosink_bundle.json                       its record: the bundle, the files, keys and schema
    T/_eosink/layout.json                         the target's layout: {"layout": "grouped", "range": 1000}
    T/_eosink/schema.json                         the target's schema (by the first commit, create-only)
    T/_eosink/apps/<app>/app_id                   the app_id itself (its directory's name is a hash)
    T/_eosink/apps/<app>/epochs/<epoch>           one empty file per writer epoch, created create-only
    T/_eosink/apps/<app>/pending/<batch>/.w-e<epoch>-p<n>-<attempt>/  a participant writing (not prepared)
    T/_eosink/apps/<app>/pending/<batch>/<task>/      a participant's prepared files
    T/_eosink/apps/<app>/staging/<batch>/         a batch being gathered by its commit

Committed batches are grouped by ranges of :data:`RANGE` batches (``first`` is the batch id rounded
down to a multiple of it), so that no directory holds more than a few thousand entries however long a
query runs (HDFS refuses a directory's 1,048,577th entry by default) and the newest batch is found by
listing ``T`` (a few entries per app) and one range, never the whole history. Both levels are named
``name=value`` on purpose: Spark's partition discovery refuses a plain directory between partition
directories ("Conflicting directory structures detected"), while two partition levels read as two
columns, ``eosink_range`` and ``eosink_batch``.

A target written by eosink before ranges (no ``layout.json``, batches at
``T/eosink_batch=<app>-<batch>/``) is *flat*: it is read and written flat until
:func:`~eosink.connectors.hdfs.admin.migrate_layout` moves its batches into ranges (the two layouts are
never mixed in one target: Spark refuses partition directories of unequal depth).

``<app>`` is the app_id made safe for a path plus a hash of it, so that ``fetch_last_bundle`` and
``recover`` match one app_id exactly (no prefix, case or glob match); ``<batch>`` and ``<first>`` are
zero-padded to 20 digits, so names sort as numbers. ``<task>`` names one participant attempt:
``b<batch>-p<participant>-e<epoch>-r<rows>-f<files>-<attempt>``; it is the committable's id, and
everything recovery needs is in it. Every name eosink keeps beside readers' data starts with ``_``
or ``.``, which Hadoop, Spark, Hive and pyarrow readers skip.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from eosink.stores.naming import digest, token

__all__ = [
    "BUNDLE_FILE",
    "COMMIT_REQUEST_MARKER",
    "FLAT",
    "GROUPED",
    "LAYOUT_FILE",
    "OWN_DIR",
    "RANGE",
    "Layout",
    "TaskName",
    "app_key",
    "batch_name",
    "epoch_of_file",
    "flat_batch_dir_name",
    "flat_batch_of",
    "grouped_batch_dir_name",
    "parse_flat_batch_dir",
    "parse_grouped_batch_dir",
    "parse_range_dir",
    "parse_task",
    "range_dir_name",
    "range_of",
    "task_of_file",
    "writing_epoch",
    "writing_name",
]

OWN_DIR = "_eosink"
BUNDLE_FILE = "_eosink_bundle.json"
LAYOUT_FILE = "layout.json"
BATCH_PREFIX = "eosink_batch="
RANGE_PREFIX = "eosink_range="
WRITING_PREFIX = ".w-"
RANGE = 1000
"""Committed batches per range directory in a new target (an existing target keeps the size its
``layout.json`` names). A range directory holds at most this many batch directories, and ``T`` one
range directory per ``RANGE`` batches of each app: 100 after 100,000 batches, about 3,200 after a year
at a batch every 10 s; finding the newest batch lists ``T`` and one or two ranges."""
COMMIT_REQUEST_MARKER = re.compile(rb"rename2[\s\S]*/eosink_batch=(?:[^/\x00]*-)?\d{20}(?:/_eosink_bundle\.json)?\x18")
"""The request that commits a batch, for fault proxies that cut its reply: Hadoop RPC names the method
(``rename2``) in the request header, then the request carries source and destination, the destination
followed by the ``overwrite`` field (tag ``0x18``). It is the rename of the staging directory onto the
batch's directory, ``eosink_range=<app>-<first>/eosink_batch=<batch>`` (or, in a flat target,
``eosink_batch=<app>-<batch>``; transactional), or of the batch record into that directory
(idempotent); file moves into staging, the participants' renames and the ``mkdirs`` of a range
directory do not match (the renames of :func:`~eosink.connectors.hdfs.admin.migrate_layout` do)."""
_SAFE = re.compile(r"[^A-Za-z0-9_-]")
_KEY = r"[A-Za-z0-9_-]{0,40}-[0-9a-f]{16}"
_FLAT_ANY = re.compile(rf"^{re.escape(BATCH_PREFIX)}({_KEY})-(\d{{20}})$")
_RANGE_ANY = re.compile(rf"^{re.escape(RANGE_PREFIX)}({_KEY})-(\d{{20}})$")
_GROUPED = re.compile(rf"^{re.escape(BATCH_PREFIX)}(\d{{20}})$")
_TASK = re.compile(r"^b(\d+)-p(\d+)-e(\d+)-r(\d+)-f(\d+)-([A-Za-z0-9_]{1,64})$")
_FILE_TASK = re.compile(r"^part-p\d+-(b\d+-p\d+-e\d+-r\d+-f\d+-[A-Za-z0-9_]{1,64})\.[a-z]+$")


def app_key(app_id: str) -> str:
    """A path-safe name unique to ``app_id``: its safe characters (at most 40) and 16 hex digits of its hash."""
    return f"{_SAFE.sub('_', app_id)[:40]}-{digest(app_id)}"


def batch_name(batch_id: int) -> str:
    return f"{batch_id:020d}"


def range_dir_name(app_id: str, first: int) -> str:
    """The range directory (under the target) of ``app_id``'s batches ``first`` .. ``first + size - 1``."""
    return f"{RANGE_PREFIX}{app_key(app_id)}-{batch_name(first)}"


def parse_range_dir(name: str, app_id: str) -> int | None:
    """The first batch id of a range directory of ``app_id``, or None for any other name."""
    found = range_of(name)
    return found[1] if found is not None and found[0] == app_key(app_id) else None


def range_of(name: str) -> tuple[str, int] | None:
    """(app key, first batch id) of a range directory of any app, or None for any other name."""
    found = _RANGE_ANY.match(name)
    return (found.group(1), int(found.group(2))) if found else None


def grouped_batch_dir_name(batch_id: int) -> str:
    """A committed batch's directory inside its range directory."""
    return f"{BATCH_PREFIX}{batch_name(batch_id)}"


def parse_grouped_batch_dir(name: str) -> int | None:
    """The batch id of a batch directory inside a range directory, or None for any other name."""
    found = _GROUPED.match(name)
    return int(found.group(1)) if found else None


def flat_batch_dir_name(app_id: str, batch_id: int) -> str:
    """A committed batch's directory right under a flat target (the layout before ranges)."""
    return f"{BATCH_PREFIX}{app_key(app_id)}-{batch_name(batch_id)}"


def parse_flat_batch_dir(name: str, app_id: str) -> int | None:
    """The batch id of a flat target's batch directory of ``app_id``, or None for any other name."""
    found = flat_batch_of(name)
    return found[1] if found is not None and found[0] == app_key(app_id) else None


def flat_batch_of(name: str) -> tuple[str, int] | None:
    """(app key, batch id) of a flat target's batch directory of any app, or None for any other name."""
    found = _FLAT_ANY.match(name)
    return (found.group(1), int(found.group(2))) if found else None


@dataclass(frozen=True)
class Layout:
    """How a target names its committed batches: in ranges of ``size`` batches, or flat (before ranges)."""

    grouped: bool
    size: int = RANGE

    def first(self, batch_id: int) -> int:
        """The first batch id of ``batch_id``'s range."""
        return batch_id - batch_id % self.size

    def batch_dir(self, app_id: str, batch_id: int) -> str:
        """The batch's directory, relative to the target."""
        if not self.grouped:
            return flat_batch_dir_name(app_id, batch_id)
        return f"{range_dir_name(app_id, self.first(batch_id))}/{grouped_batch_dir_name(batch_id)}"

    def encode(self) -> bytes:
        """``layout.json``'s content (grouped targets only: a flat target has none)."""
        return json.dumps({"layout": "grouped", "range": self.size}).encode("utf-8")

    @classmethod
    def decode(cls, text: str) -> Layout | None:
        """The layout ``layout.json`` names; None when it is damaged or names a layout this version does not know."""
        try:
            body = json.loads(text)
            size = body["range"]
            if body["layout"] != "grouped" or not isinstance(size, int) or size < 1:
                return None
        except (ValueError, KeyError, TypeError):
            return None
        return cls(True, size)


GROUPED = Layout(True)
"""The layout of a new target."""
FLAT = Layout(False)
"""The layout of a target eosink wrote before ranges."""


@dataclass(frozen=True)
class TaskName:
    """One participant attempt, as named on HDFS (the committable's id)."""

    batch_id: int
    participant: int
    epoch: int
    rows: int
    files: int
    attempt: str

    def __str__(self) -> str:
        return f"b{self.batch_id}-p{self.participant}-e{self.epoch}-r{self.rows}-f{self.files}-{self.attempt}"


def safe_attempt(attempt: str) -> str:
    """The attempt id as it can stand in a name (a UUIDv7's hex stays as it is)."""
    return token(attempt, r"[A-Za-z0-9_]{1,64}")


def parse_task(name: str) -> TaskName | None:
    found = _TASK.match(name)
    if found is None:
        return None
    b, p, e, r, f, a = found.groups()
    return TaskName(int(b), int(p), int(e), int(r), int(f), a)


def task_of_file(basename: str) -> str | None:
    """The task (committable id) a gathered data file belongs to, from its name."""
    found = _FILE_TASK.match(basename)
    return found.group(1) if found else None


_EPOCH_FILE = re.compile(r"^\.?(\d{1,20})(?:\.[0-9a-f]{32}\.tmp)?$")


def epoch_of_file(name: str) -> int | None:
    """The epoch of an epoch file, or of the hidden temporary file a fence writes before renaming it into place."""
    found = _EPOCH_FILE.match(name)
    hidden = name.startswith(".")
    if found is None or hidden != name.endswith(".tmp"):
        return None
    return int(found.group(1))


_WRITING = re.compile(r"^\.w-e(\d+)-p(\d+)-([A-Za-z0-9_]{1,64})$")


def writing_name(epoch: int, participant: int, attempt: str) -> str:
    """The hidden directory of a participant that has not prepared yet."""
    return f"{WRITING_PREFIX}e{epoch}-p{participant}-{safe_attempt(attempt)}"


def writing_epoch(name: str) -> int | None:
    """The epoch of a hidden ``.w-`` directory, or None for another name."""
    found = _WRITING.match(name)
    return int(found.group(1)) if found else None
