"""S3Sink: exactly-once Parquet or JSON-lines objects in S3 (boto3), whole batches for readers of its commit markers.

The contract maps onto S3 like this (``ctl`` is ``<prefix>/_eosink/<app-dir>/``, see ``_layout``)::

    setup(app_id)          HeadBucket (a 403 is asked again as a one-key listing, whose error says
                           whether the keys or a permission is wrong); once per process, endpoint and
                           bucket, a probe that the store honours If-None-Match: * and If-Match (a
                           store that ignores them is refused)
    fence(app_id)          ctl/epoch.json read, then written as epoch + 1 with If-Match on the ETag
                           read (If-None-Match: * for the first): two writers fencing at once both
                           get an epoch of their own, and a lost reply is recognised by a nonce
    begin, write,          participants (executors): each attempt streams its rows into multipart
    pre_commit             uploads, one object per partition folder (more past max_object_bytes),
                           named by app_id, batch, participant, epoch and attempt; pre_commit checks
                           the epoch and uploads the last parts, leaving every upload incomplete
                           (invisible); idempotent: completed at once, under names without the
                           attempt. Step by step: ``_write_side``
    commit, abort,         the coordinator (driver): complete every upload, then create the commit
    commit_status,         marker with If-None-Match: * ; abort aborts uploads; commit_status asks the
    recover,               marker, then the uploads; recover lists the app_id's incomplete uploads;
    fetch_last_bundle      fetch_last_bundle reads the newest marker. Step by step: ``_commit_side``
    compact(app_id)        not in the contract: old markers are folded into segments, one object per
                           segment_batches batches, by commits as they go (``_fold``, ``_segments``);
                           compact folds every foldable range at once, for operators

Why this is exactly-once: a batch is committed exactly when its marker exists (or, once its
range is folded, when the range's segment holds the marker), and the marker is created once
(create-only) after all of the batch's objects are complete; it names them, with their ETags.
Readers that follow the markers (:func:`~eosink.connectors.s3.committed_files`,
:func:`~eosink.connectors.s3.read_committed`) see whole batches only, and never an object of a
failed or fenced attempt. A reader that lists the prefix (Spark's plain ``spark.read.parquet``)
sees each object as soon as it is complete: part of a batch while a commit runs, and under the
idempotent strategy objects before their marker. S3 cannot show several objects atomically.

Fencing: the epoch object is changed only with conditional writes, and ``pre_commit`` and
``commit`` (before completing and again before the marker) refuse an older epoch. As with
PostgreSQL's COMMIT PREPARED, completing an upload cannot check the epoch itself: a writer fenced
in the moment between its last epoch check and its marker can still complete objects, but the
marker it writes is create-only, so the batch is still committed once. A marker such a writer
creates late into a range already folded is ignored (the range's segment is authoritative, and
holds the batch as its successor committed it).

What the sink keeps under ``ctl`` stays bounded: the epoch object, the newest markers (at most
``S + ceil(S/2) - 1`` for ``S = segment_batches``, plus any whose fold failed, until a later commit
folds them), and one segment per ``S`` batches of history.

The sink pickles to its configuration (and the schemas of the app_ids it has seen committed) and
makes clients lazily, per process.
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
import uuid
from typing import Any

from eosink._extras import require
from eosink.connectors.s3._commit_side import _CommitSide
from eosink.connectors.s3._layout import Layout
from eosink.connectors.s3._write_side import _Txn, _WriteSide
from eosink.connectors.s3.config import S3Config
from eosink.contract import Capabilities, Sink
from eosink.errors import ConfigurationError, TransientError
from eosink.stores.s3_errors import http_status, is_connection_error, is_precondition_failed, translate

__all__ = ["S3Sink"]

log = logging.getLogger("eosink.s3")

_PROBED: set[tuple[int, Any, str]] = set()
"""(pid, connection, bucket) whose conditional writes this process has probed: a property of the store
and bucket, not of a prefix, so a second sink on the same bucket does not pay the probe's four requests again."""
_PROBE_LOCK = threading.Lock()
FENCE_ATTEMPTS = 50
PROBE_MAX_AGE_S = 3600.0
"""A probe object older than this is a leftover of a process that died mid-probe (a probe takes milliseconds;
the hour leaves room for a store clock that is off by minutes, which S3 refuses past 15)."""


class S3Sink(_WriteSide, _CommitSide, Sink[_Txn]):
    """An exactly-once sink of Parquet (or JSON-lines) objects under one S3 prefix (see the module docstring).

    ``S3Sink(S3Config(...))`` or ``S3Sink(bucket, prefix=..., **options)``. Picklable with no client;
    safe to share between threads and processes.

    ``capabilities.atomic_batch_visibility`` is True for readers of the commit markers (what
    ``read_committed`` and the contract suite read); readers listing the prefix do not get it.
    """

    lost_work_hint = (
        "a lifecycle rule with AbortIncompleteMultipartUpload (or someone running AbortMultipartUpload) removed "
        "the batch's incomplete multipart uploads under the sink's prefix while the batch was in doubt. Exclude "
        "the prefix from such rules, or give them more days than an outage can last."
    )

    def __init__(self, config: S3Config | str, /, **options: Any) -> None:
        require("S3", "s3", "boto3")
        if isinstance(config, str):
            config = S3Config(config, **options)
        elif options:
            raise ConfigurationError("Pass either an S3Config or a bucket and options.", "Use one form.")
        self.config = config
        self.capabilities = Capabilities(
            supports_prepare=True,
            supports_txid_status=True,
            supports_keys=True,
            atomic_batch_visibility=True,
            supports_recover=True,
        )
        self._reset()

    def _reset(self) -> None:
        self.layout = Layout(self.config.prefix)
        self._conn = self.config.connection()
        self._schemas = {}
        self._in_flight = {}
        self._unfound = {}
        self._last = {}
        self._newest: dict[str, int] = {}
        self._spans: dict[str, int] = {}
        self._fold_due: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"S3Sink({self.config!r})"

    __str__ = __repr__

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "schemas": dict(self._schemas)}  # clients never travel

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]
        self._schemas.update(state.get("schemas") or {})

    # -- setup and fencing -------------------------------------------------------------------------

    def setup(self, app_id: str) -> None:
        """Check the bucket, and once per process and bucket that the store honours conditional writes."""
        self._head_bucket()
        if not self.config.check_conditional_writes:
            return
        key = (os.getpid(), self._conn, self.config.bucket)
        with _PROBE_LOCK:
            if key in _PROBED:
                return
        self._probe_conditional_writes()
        with _PROBE_LOCK:
            _PROBED.add(key)

    def _head_bucket(self) -> None:
        """HeadBucket; on a 403, a GET (a one-key listing) to learn why: a HEAD reply has no body, so its
        403 cannot tell wrong credentials from a missing permission, and the two need different fixes."""
        from botocore.exceptions import ClientError

        with self._errors(f"setup of {self.config.root}: HeadBucket"):
            try:
                self._s3.head_bucket(Bucket=self.config.bucket)
            except ClientError as exc:
                if http_status(exc) != 403:
                    raise
                self._s3.list_objects_v2(Bucket=self.config.bucket, Prefix=self.layout.root, MaxKeys=1)
                raise  # the listing is allowed: the HEAD's 403 stands

    def _probe_conditional_writes(self) -> None:
        """PUT a probe with If-None-Match: * twice and once with a wrong If-Match: the second and third must be
        refused with 412, or commit markers would not be create-only and fencing would not fence."""
        from botocore.exceptions import BotoCoreError, ClientError

        probe = f"{self.layout.probes}{uuid.uuid4().hex}"
        s3 = self._s3_once
        with self._errors(f"probing conditional writes under {self.config.root}"):
            s3.put_object(Bucket=self.config.bucket, Key=probe, Body=b"1", IfNoneMatch="*", **self.config.sse_args())
            try:
                ignored = []
                for what, condition in (("If-None-Match: *", {"IfNoneMatch": "*"}), ("If-Match", {"IfMatch": '"0"'})):
                    try:
                        s3.put_object(Bucket=self.config.bucket, Key=probe, Body=b"2", **condition)
                        ignored.append(what)
                    except (BotoCoreError, ClientError) as exc:
                        if not is_precondition_failed(exc):
                            if is_connection_error(exc):
                                raise
                            ignored.append(f"{what} ({translate(self._conn, exc, 'probe').problem})")
            finally:
                s3.delete_object(Bucket=self.config.bucket, Key=probe)
        self._sweep_probes()
        if ignored:
            raise ConfigurationError(
                f"The S3 store at {self._conn.describe()} does not honour conditional writes: it accepted a PUT "
                f"with {' and '.join(ignored)} that must be refused with 412 Precondition Failed. Without them "
                "commit markers are not create-only and fencing does not fence, so writes would not be "
                "exactly-once.",
                "Use a store with conditional writes (AWS S3 since 2024, MinIO since RELEASE.2024-05, and "
                "others that implement If-None-Match and If-Match on PutObject). check_conditional_writes=False "
                "skips this check; only for a store you know to have them.",
            )

    def _sweep_probes(self) -> None:
        """Delete probes older than PROBE_MAX_AGE_S: a process that died between its probe's PUT and DELETE left
        one (one LIST per probe, so per process; a DeleteObjects only when there are leftovers)."""
        with self._quiet(f"removing old conditional-write probes under {self.config.root}"):
            reply = self._s3.list_objects_v2(Bucket=self.config.bucket, Prefix=self.layout.probes, MaxKeys=1000)
            cutoff = time.time() - PROBE_MAX_AGE_S
            old = [o["Key"] for o in reply.get("Contents", []) if o["LastModified"].timestamp() < cutoff]
            if old:
                self._s3.delete_objects(
                    Bucket=self.config.bucket, Delete={"Objects": [{"Key": k} for k in old], "Quiet": True}
                )

    def fence(self, app_id: str) -> int:
        """Hand out the next epoch of ``app_id``: read the epoch object, write epoch + 1 conditionally."""
        from botocore.exceptions import BotoCoreError, ClientError

        nonce = uuid.uuid4().hex
        key = self.layout.epoch_key(app_id)
        for attempt in range(FENCE_ATTEMPTS):
            with self._errors(f"fence({app_id!r})"):
                current, etag, body = self._read_epoch(app_id)
                if body.get("nonce") == nonce:
                    return current  # our earlier write landed; its reply was lost
                new = current + 1
                data = json.dumps({"app_id": app_id, "epoch": new, "nonce": nonce, "at": time.time()}).encode()
                condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
                try:
                    self._s3_once.put_object(
                        Bucket=self.config.bucket,
                        Key=key,
                        Body=data,
                        ContentType="application/json",
                        **condition,
                        **self.config.sse_args(),
                    )
                    return new
                except (BotoCoreError, ClientError) as exc:
                    if not (is_precondition_failed(exc) or is_connection_error(exc)):
                        raise
                    log.debug("eosink: fence of %r raced or lost its reply (%s); again", app_id, type(exc).__name__)
            time.sleep(min(0.5, 0.005 * (attempt + 1)) * random.random())
        raise TransientError(
            f"fence({app_id!r}) lost the race for the epoch object {FENCE_ATTEMPTS} times.",
            "Another writer fences the same app_id in a loop: stop it, then start this query again.",
        )

    def close(self) -> None:
        """Nothing to release: clients are shared per process (and hold only pooled connections)."""
