"""Where an HdfsSink keeps what, under its target directory ``T``, and how names are read back.

::

    T/eosink_batch=<app>-<batch>/                 a committed batch: visible, renamed into place at once
        [col=value/]part-p<n>-<task>.<ext>        its data files (Hive-style partition directories;
                                                  idempotent: part-p<n>.<ext>, the same for every attempt)
        _eosink_bundle.json                       its record: the bundle, the files, keys and schema
    T/_eosink/schema.json                         the target's schema (by the first commit, create-only)
    T/_eosink/apps/<app>/epochs/<epoch>           one empty file per writer epoch, created create-only
    T/_eosink/apps/<app>/pending/<batch>/.w-e<epoch>-p<n>-<attempt>/  a participant writing (not prepared)
    T/_eosink/apps/<app>/pending/<batch>/<task>/      a participant's prepared files
    T/_eosink/apps/<app>/staging/<batch>/         a batch being gathered by its commit

``<app>`` is the app_id made safe for a path plus a hash of it, so that ``fetch_last_bundle`` and
``recover`` match one app_id exactly (no prefix, case or glob match); ``<batch>`` is the batch id
zero-padded to 20 digits, so names sort as numbers. ``<task>`` names one participant attempt:
``b<batch>-p<participant>-e<epoch>-r<rows>-f<files>-<attempt>``; it is the committable's id, and
everything recovery needs is in it. Every name eosink keeps beside readers' data starts with ``_``
or ``.``, which Hadoop, Spark, Hive and pyarrow readers skip.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

__all__ = [
    "BUNDLE_FILE",
    "COMMIT_REQUEST_MARKER",
    "OWN_DIR",
    "TaskName",
    "app_key",
    "batch_dir_name",
    "batch_name",
    "parse_batch_dir",
    "parse_task",
    "task_of_file",
    "writing_epoch",
    "writing_name",
]

OWN_DIR = "_eosink"
BUNDLE_FILE = "_eosink_bundle.json"
BATCH_PREFIX = "eosink_batch="
WRITING_PREFIX = ".w-"
COMMIT_REQUEST_MARKER = re.compile(rb"rename2[\s\S]*/eosink_batch=[^/\x00]*-\d{20}(?:/_eosink_bundle\.json)?\x18")
"""The request that commits a batch, for fault proxies that cut its reply: Hadoop RPC names the method
(``rename2``) in the request header, then the request carries source and destination, the destination
followed by the ``overwrite`` field (tag ``0x18``). It is the rename of the staging directory onto
``eosink_batch=<app>-<batch>`` (transactional), or of the batch record into that directory
(idempotent); file moves into staging and the participants' renames do not match."""
_SAFE = re.compile(r"[^A-Za-z0-9_-]")
_TASK = re.compile(r"^b(\d+)-p(\d+)-e(\d+)-r(\d+)-f(\d+)-([A-Za-z0-9_]{1,64})$")
_FILE_TASK = re.compile(r"^part-p\d+-(b\d+-p\d+-e\d+-r\d+-f\d+-[A-Za-z0-9_]{1,64})\.[a-z]+$")


def app_key(app_id: str) -> str:
    """A path-safe name unique to ``app_id``: its safe characters (at most 40) and 16 hex digits of its hash."""
    digest = hashlib.sha256(app_id.encode("utf-8")).hexdigest()[:16]
    return f"{_SAFE.sub('_', app_id)[:40]}-{digest}"


def batch_name(batch_id: int) -> str:
    return f"{batch_id:020d}"


def batch_dir_name(app_id: str, batch_id: int) -> str:
    """The committed batch's directory under the target."""
    return f"{BATCH_PREFIX}{app_key(app_id)}-{batch_name(batch_id)}"


def parse_batch_dir(name: str, app_id: str) -> int | None:
    """The batch id of a committed batch directory of ``app_id``, or None for any other name."""
    prefix = f"{BATCH_PREFIX}{app_key(app_id)}-"
    rest = name[len(prefix) :] if name.startswith(prefix) else ""
    return int(rest) if len(rest) == 20 and rest.isdigit() else None


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
    if re.fullmatch(r"[A-Za-z0-9_]{1,64}", attempt):
        return attempt
    return hashlib.sha256(attempt.encode("utf-8")).hexdigest()[:32]


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


_WRITING = re.compile(r"^\.w-e(\d+)-p(\d+)-([A-Za-z0-9_]{1,64})$")


def writing_name(epoch: int, participant: int, attempt: str) -> str:
    """The hidden directory of a participant that has not prepared yet."""
    return f"{WRITING_PREFIX}e{epoch}-p{participant}-{safe_attempt(attempt)}"


def writing_epoch(name: str) -> int | None:
    """The epoch of a hidden ``.w-`` directory, or None for another name."""
    found = _WRITING.match(name)
    return int(found.group(1)) if found else None
