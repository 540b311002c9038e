"""The coordinator side of S3Sink (driver): commit, abort, commit_status, recover, fetch_last_bundle.

What each does (``ctl`` is ``<prefix>/_eosink/<app-dir>/``)::

    commit(batch, cs, b)   1. the epoch (GET ctl/epoch.json): a newer one -> FencedError
                           2. the batch's marker (GET ctl/commits/<batch>.json; for a batch older than
                              the newest this process listed, also the segment of its range, which is
                              authoritative once it exists): there with the same committables ->
                              done; with others, or a folded range without it -> CommitAbortedError
                           3. CompleteMultipartUpload of every object, up to eight at once (each
                              reply checked: a 200 can carry an error); an upload that is gone is
                              looked up with HEAD, as is one whose complete fails for the moment
                              (a store busy or not answering): the object exists (an earlier commit
                              completed it) -> go on; it does not, and its upload intent is there ->
                              TransientError (retried: a node that is down may hold it), and once
                              it stayed unfound for lost_after_s (or at once without an intent) ->
                              CommitAbortedError (the work is lost), the batch's objects that were
                              completed are deleted again
                           4. the epoch again (a writer that fenced meanwhile keeps the batch out)
                           5. the marker, PUT with If-None-Match: * : 412 -> read it (the same
                              committables: done; others: CommitAbortedError); no reply ->
                              AmbiguousCommitError (the marker's SHA-256 is remembered)
                           6. housekeeping, never failing the commit: old markers folded into
                              segments (``_fold``; one one-key LIST, a fold every S batches), the
                              batch's upload intents deleted (one DeleteObjects)
    abort(cs)              refuses work a marker (or a segment) names (CommitAbortedError), except a
                           stray upload recover() found at a committed key (the object is complete:
                           only that upload is aborted); AbortMultipartUpload of every upload,
                           DeleteObjects of the keys (an object a partial commit completed) and
                           of their intents;
                           idempotent-strategy work (visible, unnamed by attempt) stays
    commit_status(b, cs)   the marker (HEAD; for an older batch also its range's segment, one GET by
                           name) exists -> COMMITTED (its SHA-256 told apart from ours after a lost
                           reply, for the log); else every object either still has its upload
                           (ListParts) or exists (HEAD) -> PREPARED; else ABORTED
    recover(app_id)        the incomplete uploads the intents name (ctl/uploads/, written by the
                           attempt before it created the upload and again with the upload's id:
                           ListParts of that upload; an intent without an id: ListMultipartUploads
                           with the whole key as prefix), and those ListMultipartUploads under the
                           prefix shows with the app_id's hash in their names, each confirmed with
                           ListParts; grouped into one committable per attempt (what is in flight
                           or left by failed attempts, not the history). A node of a MinIO cluster
                           lists uploads from one drive of its own, missing those created while it
                           was down: the intents' ids are what finds the rest (``_intents``)
    fetch_last_bundle      the newest marker: one LIST page of ctl/commits/ (at most about 1.5 S
                           markers are left unfolded; from the last marker seen, in a process that
                           saw one), then one GET; the newest segment only when commits/ is empty

Nothing here lists the history: markers are folded into one segment per S batches, and the
newest of a folder is found without listing it from its start (``_listing``).

Commit requests go through a client that never retries by itself (``_client``): each outcome is
known, or the error says it is not.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from eosink import faults
from eosink.connectors.s3._base import _S3Base
from eosink.connectors.s3._fold import Folder
from eosink.connectors.s3._intents import decode_intent
from eosink.connectors.s3._layout import Layout, app_hash, parse_object_name
from eosink.connectors.s3._listing import first_numbered, list_all, list_page, newest_numbered
from eosink.connectors.s3._markers import SHA_META, CommitMarker, MarkedObject
from eosink.connectors.s3._segments import Segment
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable
from eosink.errors import AmbiguousCommitError, CommitAbortedError, TransientError
from eosink.stores.s3 import NOT_FOUND_SETTLE_S, asked_again, open_uploads, uploads_of_key
from eosink.stores.s3_errors import error_code, is_connection_error, is_precondition_failed, translate
from eosink.stores.s3_upload import ObjectRecord, UploadGone, abort_upload, complete, expected_etag

__all__ = ["SETTLE_S", "_CommitSide"]

SETTLE_S = NOT_FOUND_SETTLE_S
"""How long a HEAD's 404 for an object whose upload is gone is asked again before the commit is retried."""

log = logging.getLogger("eosink.s3")

_COMPLETE_THREADS = 8
"""CompleteMultipartUpload requests a commit has in flight at once (boto3 pools 10 connections per client)."""


def records(c: Committable) -> list[ObjectRecord]:
    """The objects a committable carries."""
    return [ObjectRecord.from_json(o) for o in c.payload.get("objects", [])]


class _CommitSide(_S3Base):
    """The coordinator side of :class:`S3Sink` (a mixin; see ``sink.py``)."""

    _in_flight: dict[BatchRef, tuple[str, float]]
    """batch -> (SHA-256 of the marker sent, monotonic start) of a marker PUT whose reply was lost"""
    _unfound: dict[tuple[str, str], float]
    """(key, upload id) -> monotonic time since which an object whose upload is gone has not been found"""
    _last: dict[str, tuple[str, CommitMarker]]
    """app_id -> (key, marker) of the newest marker this process has seen"""
    _newest: dict[str, int]
    """app_id -> the newest batch with a marker as this process last listed them (and committed since)"""
    _fold_due: dict[str, int]
    """app_id -> the batch from whose commit on its oldest marker's range is foldable, as this process last saw"""

    def commit(self, batch: BatchRef, committables: Sequence[Committable], bundle: Bundle) -> None:
        """Complete every upload of the batch, then create its marker (see the module docstring)."""
        app = batch.app_id
        with self._errors(f"commit of batch {batch}"):
            self._check_epoch(app, bundle.epoch, "commit")
            existing, segment = self._lookup(app, batch.batch_id)
            if existing is not None:
                self._same(batch, existing, bundle)
                self._in_flight.pop(batch, None)
                return
            if segment is not None:
                raise CommitAbortedError(
                    f"Batch {batch} cannot be committed: the markers of batches {segment.first}..{segment.last} "
                    "were folded into a segment without it, and a segment is final for its range.",
                    "Abort this attempt: only a fenced writer commits a batch this far behind the newest one; the "
                    "query's current writer has moved on.",
                )
            objects = self._complete_all(batch, sorted(committables, key=lambda c: c.id))
            self._check_epoch(app, bundle.epoch, "commit")
            schema = next((c.payload.get("schema") for c in committables if c.payload.get("schema")), None)
            keys = next((tuple(c.payload.get("keys") or ()) for c in committables if c.payload.get("keys")), ())
            marker = CommitMarker(app, bundle, tuple(objects), schema, self.config.format, keys)
            self._put_marker(batch, marker, bundle)
        self._in_flight.pop(batch, None)
        self._seen(marker)
        if app in self._newest and batch.batch_id > self._newest[app]:
            self._newest[app] = batch.batch_id
        Folder(self, self._fold_due).after_commit(app, batch.batch_id)  # housekeeping: never raises
        with self._quiet(f"removing the upload intents of batch {batch}"):
            self._forget_intents(app, [c for c in committables if c.payload.get("transactional", True)])

    def compact(self, app_id: str) -> int:
        """Fold every range of ``app_id``'s commit markers that may be folded now; returns how many were folded.

        For operators: after an upgrade from a version without segments, a prefix holding thousands of
        markers is otherwise folded a few ranges per commit. Safe beside a running query (``_fold``). The
        markers of the newest ``ceil(S/2)`` to ``S + ceil(S/2) - 1`` batches stay marker objects.
        """
        return Folder(self, self._fold_due).compact(app_id)

    def _committed_marker(self, app_id: str, batch_id: int) -> CommitMarker | None:
        """The marker that commits ``batch_id`` (see :meth:`_lookup`), or None."""
        return self._lookup(app_id, batch_id)[0]

    def _lookup(self, app_id: str, batch_id: int) -> tuple[CommitMarker | None, Segment | None]:
        """The marker that commits ``batch_id``, and the segment of its range if that is folded. Once the
        segment exists it is authoritative (a marker in a folded range is a leftover or a zombie's), else the
        marker object is. The marker is read first, the segment second: a fold writes the segment before it
        deletes the marker, so one of them is found."""
        marker = self._read_marker(app_id, batch_id)
        if not self._may_be_folded(app_id, batch_id):
            return marker, None
        segment = self._segment_of(app_id, batch_id)
        return (marker, None) if segment is None else (segment.get(batch_id), segment)

    def _may_be_folded(self, app_id: str, batch_id: int) -> bool:
        """Whether ``batch_id``'s range may be folded: not when it is the newest batch this process listed (or
        committed since), nor a newer one. A range is folded only when a marker well past its end exists, and
        a writer that committed past a batch this process takes for new fenced this one before it did: the
        commit's epoch checks stop this one."""
        newest = self._newest.get(app_id)
        return newest is None or batch_id < newest

    def _same(self, batch: BatchRef, existing: CommitMarker, bundle: Bundle) -> None:
        if set(existing.bundle.committables) != set(bundle.committables):
            raise CommitAbortedError(
                f"Batch {batch} was already committed by another attempt "
                f"(committables {list(existing.bundle.committables)}, not {list(bundle.committables)}).",
                "Abort this attempt's committables; the batch is done.",
            )
        if not self._may_be_folded(batch.app_id, batch.batch_id):  # an old batch is not the newest seen
            self._seen(existing)

    def _complete_all(self, batch: BatchRef, committables: Sequence[Committable]) -> list[MarkedObject]:
        """Complete every object of the batch, up to ``_COMPLETE_THREADS`` at a time (each is one round trip
        of its own); an object whose upload cannot be completed and which does not exist either is looked for again
        (TransientError) until ``lost_after_s``, then makes the batch uncommittable: its objects that were
        completed are deleted again (CommitAbortedError)."""
        jobs = [(c, record) for c in committables for record in records(c)]
        outcomes: list[str | BaseException | None] = [None] * len(jobs)

        def run(n: int) -> None:
            c, record = jobs[n]
            try:
                outcomes[n] = self._complete_one(c, record)
            except Exception as exc:
                outcomes[n] = exc

        if len(jobs) == 1:
            run(0)
            faults.hit(faults.FaultPoint.F6, batch.batch_id)  # the objects complete, the marker not yet
        elif jobs:
            with ThreadPoolExecutor(min(len(jobs), _COMPLETE_THREADS), thread_name_prefix="eosink-s3-complete") as pool:
                for n, done in enumerate(as_completed([pool.submit(run, n) for n in range(len(jobs))])):
                    done.result()
                    if n == 0:
                        faults.hit(faults.FaultPoint.F6, batch.batch_id)  # some objects complete, the marker not yet
        lost = [(c, record) for (c, record), out in zip(jobs, outcomes, strict=True) if out is None]
        if lost:
            self._unfound_yet(batch, [record for _, record in lost])
            finished = [
                record.key
                for (c, record), out in zip(jobs, outcomes, strict=True)
                if isinstance(out, str) and c.payload.get("transactional", True)
            ]
            if finished:  # this call's, and those an earlier call completed before it was retried
                with self._quiet(f"removing the objects of batch {batch} that were completed"):
                    self._delete_keys(finished)
            c, record = lost[0]
            raise CommitAbortedError(
                f"Committable {c.id} of batch {batch}: the upload of {record.key!r} cannot be completed (gone, or "
                "parts missing) and the object does not exist; the batch cannot be committed.",
                "Abort the batch's other committables and replay the batch.",
            )
        for out in outcomes:
            if isinstance(out, BaseException):
                raise out
        for _, record in jobs:
            self._unfound.pop((record.key, record.upload_id or ""), None)
        return [
            MarkedObject(record.key, str(etag), record.size, record.rows, c.id, record.partition)
            for (c, record), etag in zip(jobs, outcomes, strict=True)
        ]

    def _unfound_yet(self, batch: BatchRef, lost: Sequence[ObjectRecord]) -> None:
        """TransientError (the commit is retried) until one of ``lost`` (objects whose upload cannot be completed and
        that a HEAD does not find) has been unfound for ``lost_after_s`` in this process; then return (the work is
        lost). An object whose upload intent is gone returns at once: an abort deletes the intents of what it
        aborted.

        A MinIO cluster that lost a node while that node applied the CompleteMultipartUpload can show neither the
        upload nor the object (each on fewer drives than a read needs) until the node is back."""
        doubtful = [r for r in lost if self._head(self.layout.intent_key(batch.app_id, r.key)) is not None]
        if not doubtful:  # no intent: the upload was aborted (an abort deletes its intent), or predates intents
            return
        now = time.monotonic()
        since = min(self._unfound.setdefault((r.key, r.upload_id or ""), now) for r in doubtful)
        window = self.config.lost_after_s
        if now - since < window:
            raise TransientError(
                f"Batch {batch}: the upload of {lost[0].key!r} cannot be completed and the object is not found either "
                f"(for {now - since:.0f} s); a node of the store may be down or restarting.",
                f"Nothing to do: the commit is retried, and the work is called lost after {window:g} s "
                "(lost_after_s; a node back by then lets the object be found).",
            )
        for r in lost:
            self._unfound.pop((r.key, r.upload_id or ""), None)

    def _complete_one(self, c: Committable, record: ObjectRecord) -> str | None:
        """The object's ETag once it is complete; None when its upload is gone (or some of its parts) and the object
        does not exist: the caller gives that ``lost_after_s`` before it calls the work lost."""
        if not c.payload.get("transactional", True) or record.upload_id is None:
            return record.etag or self._existing_etag(record)
        if not record.parts:  # a committable recover() listed: its parts are on the store
            record.parts = self._parts(record)
        try:
            return complete(self.config, self._s3_once, record)
        except UploadGone:
            found = self._existing_etag(record)
        except TransientError:
            # A MinIO node that died while applying an earlier complete can leave the object on a read quorum of
            # drives and the upload on fewer than a write quorum: every later complete then answers SlowDownWrite
            # for as long as that lasts, and only the object tells that the work is done. Without the object the
            # refusal is retried: a cluster short of its write quorum (a node restarting) answers the same.
            head = self._head(record.key)
            if head is None:
                raise
            found = self._etag_of(head, record)
        if found is not None:  # what is left of the upload on some drives would show as an incomplete one
            with self._quiet(f"aborting what is left of the completed upload of {record.key!r}"):
                abort_upload(self.config, self._s3_once, record.key, record.upload_id)
        return found

    def _existing_etag(self, record: ObjectRecord) -> str | None:
        """The ETag of an object whose upload is gone (completed before), or None (the object is lost).

        An upload that is gone was completed or aborted, whatever a repeated complete answers (MinIO's
        ``NoSuchUpload``); only the object tells which. A 404 is asked again for :data:`SETTLE_S` before the work
        is called lost (a MinIO node restarted a moment ago answers 404 for a while)."""
        head = asked_again(lambda: self._head(record.key), lambda found: found is not None, SETTLE_S)
        return None if head is None else self._etag_of(head, record)

    @staticmethod
    def _etag_of(head: dict[str, Any], record: ObjectRecord) -> str:
        """The ETag of the object found for ``record`` (its key is the attempt's own: the object is this upload's;
        an ETag other than its parts give, as under some server-side encryptions, is logged)."""
        etag = str(head["ETag"])
        if record.parts and etag != expected_etag(record.parts):
            log.warning("eosink: %s exists with ETag %s, not %s", record.key, etag, expected_etag(record.parts))
        return etag

    def _parts(self, record: ObjectRecord) -> list[tuple[int, str]]:
        parts: list[tuple[int, str]] = []
        args: dict[str, Any] = {"Bucket": self.config.bucket, "Key": record.key, "UploadId": record.upload_id}
        from botocore.exceptions import ClientError

        while True:
            try:
                reply = self._s3.list_parts(**args)
            except ClientError as exc:
                if error_code(exc) == "NoSuchUpload":
                    return []
                raise
            parts += [(int(p["PartNumber"]), str(p["ETag"])) for p in reply.get("Parts", [])]
            if not reply.get("IsTruncated"):
                return parts
            args["PartNumberMarker"] = reply["NextPartNumberMarker"]

    def _put_marker(self, batch: BatchRef, marker: CommitMarker, bundle: Bundle) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        body, sha = marker.encode()
        key = self.layout.marker_key(batch.app_id, batch.batch_id)
        started = time.monotonic()
        try:
            self._s3_once.put_object(
                Bucket=self.config.bucket,
                Key=key,
                Body=body,
                IfNoneMatch="*",
                ContentType="application/json",
                Metadata={SHA_META: sha},
                **self.config.sse_args(),
            )
        except (BotoCoreError, ClientError) as exc:
            if is_precondition_failed(exc):  # the marker exists: ours (a lost reply earlier) or another's
                existing = self._read_marker(batch.app_id, batch.batch_id)
                if existing is not None:
                    self._same(batch, existing, bundle)
                    return
            if is_connection_error(exc):
                self._in_flight[batch] = (sha, started)
                raise AmbiguousCommitError(
                    f"The commit marker of batch {batch} got no reply ({self._conn.scrub(str(exc))}).",
                    "Ask commit_status (the coordinator does): it looks the marker up with HEAD; never assume "
                    "either outcome.",
                ) from None
            raise translate(self._conn, exc, f"writing the commit marker of batch {batch}") from None

    def _delete_keys(self, keys: Sequence[str]) -> None:
        for start in range(0, len(keys), 1000):
            chunk = keys[start : start + 1000]
            self._s3.delete_objects(
                Bucket=self.config.bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True}
            )

    def _seen(self, marker: CommitMarker) -> None:
        self._remember(marker)
        key = self.layout.marker_key(marker.app_id, marker.batch_id)
        known = self._last.get(marker.app_id)
        if known is None or known[0] < key:
            self._last[marker.app_id] = (key, marker)

    # -- abort ----------------------------------------------------------------------------------------

    def abort(self, committables: Sequence[Committable]) -> None:
        """Abort every upload of the committables and delete their keys; committed work is refused.

        An incomplete upload :meth:`recover` found at a key of committed work is a stray: the committed object
        is complete, and completing the stray would replace it. Its upload is aborted; the key stays."""
        if not committables:
            return
        with self._errors("abort"):
            by_batch: dict[BatchRef, list[Committable]] = {}
            for c in committables:
                by_batch.setdefault(c.batch, []).append(c)
            strays: list[Committable] = []
            for batch, group in by_batch.items():
                marker = self._committed_marker(batch.app_id, batch.batch_id)
                named = set(marker.bundle.committables) if marker is not None else set()
                strays += [c for c in group if c.id in named and c.payload.get("recovered")]
                committed = sorted(c.id for c in group if c.id in named and not c.payload.get("recovered"))
                if committed:
                    raise CommitAbortedError(
                        f"Cannot abort committed work {committed}: the commit marker of batch {batch} names it.",
                        "Do not abort a batch whose commit succeeded; check commit_status first.",
                    )
            for c in strays:
                for record in records(c):
                    log.warning(
                        "eosink %s: batch %d is committed; aborting a stray upload at its key %r",
                        c.batch.app_id,
                        c.batch.batch_id,
                        record.key,
                    )
                    if record.upload_id is not None:
                        abort_upload(self.config, self._s3_once, record.key, record.upload_id)
            keys: list[str] = []
            aborted = [c for c in committables if c.payload.get("transactional", True)]
            for c in (c for c in aborted if not any(c is s for s in strays)):
                for record in records(c):  # idempotent objects are skipped: visible already, the replay's own
                    if record.upload_id is not None:
                        abort_upload(self.config, self._s3_once, record.key, record.upload_id)
                    keys.append(record.key)
            if keys:
                self._delete_keys(keys)
            self._forget_intents(committables[0].batch.app_id, aborted)

    def _forget_intents(self, app_id: str, committables: Sequence[Committable]) -> None:
        """Delete the upload intents of the committables' objects (their uploads are completed or aborted)."""
        intents = sorted({self.layout.intent_key(app_id, r.key) for c in committables for r in records(c)})
        if intents:
            self._delete_keys(intents)

    # -- status and recovery ---------------------------------------------------------------------------

    def commit_status(self, batch: BatchRef, committables: Sequence[Committable]) -> CommitStatus:
        """COMMITTED if the marker exists; PREPARED if every object is still committable; else ABORTED."""
        with self._errors("commit_status"):
            sha = self._marker_sha(batch.app_id, batch.batch_id)
            if self._may_be_folded(batch.app_id, batch.batch_id):
                segment = self._segment_of(batch.app_id, batch.batch_id)
                if segment is not None:  # authoritative for its range
                    folded = segment.get(batch.batch_id)
                    sha = None if folded is None else folded.encode()[1]
            sent = self._in_flight.pop(batch, None)
            if sha is not None:
                if sent is not None:
                    whose = "the one this process sent" if sha == sent[0] else "another attempt's"
                    log.info("eosink %s: batch %d's marker exists (%s)", batch.app_id, batch.batch_id, whose)
                return CommitStatus.COMMITTED
            for c in committables:
                found = records(c)
                if not found:
                    return CommitStatus.ABORTED
                for record in found:
                    if not self._alive(c, record):
                        return CommitStatus.ABORTED
        return CommitStatus.PREPARED

    def _alive(self, c: Committable, record: ObjectRecord) -> bool:
        """The object can still become part of the batch: its upload exists, or the object itself."""
        from botocore.exceptions import ClientError

        if c.payload.get("transactional", True) and record.upload_id is not None:
            try:
                self._s3.list_parts(Bucket=self.config.bucket, Key=record.key, UploadId=record.upload_id, MaxParts=1)
                return True
            except ClientError as exc:
                if error_code(exc) != "NoSuchUpload":
                    raise
        return self._head(record.key) is not None

    def recover(self, app_id: str) -> list[Committable]:
        """Every incomplete upload of ``app_id`` under the prefix, one committable per attempt."""
        mine = app_hash(app_id)
        found: dict[str, tuple[Any, list[dict[str, Any]]]] = {}
        with self._errors("recover"):
            listed = [u for u in self._listed_uploads() if _transactional_of(u, mine)]
            uploads = {(u["Key"], u["UploadId"]): u for u in open_uploads(self._s3, self.config.bucket, listed)}
            uploads.update(self._intended_uploads(app_id))
            for upload in uploads.values():
                name = parse_object_name(upload["Key"])
                assert name is not None
                cid = name.committable_id()
                entry = found.setdefault(cid, (name, []))
                entry[1].append({"key": upload["Key"], "upload_id": upload["UploadId"]})
        out = [
            Committable(
                BatchRef(app_id, name.batch_id),
                int(name.epoch or 0),
                name.participant,
                id=cid,
                payload={"objects": objs, "transactional": True, "recovered": True},
            )
            for cid, (name, objs) in found.items()
        ]
        return sorted(out, key=lambda c: (c.batch.batch_id, c.id))

    def _intended_uploads(self, app_id: str) -> dict[tuple[str, str], dict[str, Any]]:
        """The incomplete uploads the app_id's intents name (``Layout.intents``), by (key, upload id): the upload
        an intent names asked with ``ListParts`` (``open_uploads``), an intent without one by its key
        (``uploads_of_key``). An intent of a batch older than the newest this process knows committed whose
        upload is gone is deleted: its attempt is over."""
        out: dict[tuple[str, str], dict[str, Any]] = {}
        newest = self._newest.get(app_id)
        done: list[str] = []
        for intent in list_all(self._s3, self.config.bucket, self.layout.intents(app_id)):
            found = self._get(intent)
            if found is None:  # deleted since the listing
                continue
            key, upload_id = decode_intent(found[0])
            name = parse_object_name(key)
            if name is None or name.app16 != app_hash(app_id) or not name.transactional:
                continue
            if upload_id is None:
                open_ = uploads_of_key(self._s3, self.config.bucket, key)
            else:
                open_ = open_uploads(self._s3, self.config.bucket, [{"Key": key, "UploadId": upload_id}])
            out.update({(u["Key"], u["UploadId"]): u for u in open_})
            if not open_ and newest is not None and name.batch_id < newest:
                done.append(intent)
        if done:
            with self._quiet(f"removing {len(done)} upload intent(s) of finished attempts"):
                self._delete_keys(done)
        return out

    def _uploads(self) -> list[dict[str, Any]]:
        """Every incomplete multipart upload under the prefix that the store still has (``open_uploads``: a
        MinIO cluster's node may list one completed or aborted through another node)."""
        return open_uploads(self._s3, self.config.bucket, self._listed_uploads())

    def _listed_uploads(self) -> list[dict[str, Any]]:
        """Every multipart upload ``ListMultipartUploads`` shows under the prefix.

        AWS lists the uploads under a prefix; MinIO (and other S3-compatible stores) list only those of
        a key equal to the prefix, so with a custom endpoint the whole bucket is listed and filtered here.
        """
        root = self.layout.root
        args: dict[str, Any] = {"Bucket": self.config.bucket}
        if self._conn.endpoint_url is None and root:
            args["Prefix"] = root
        out: list[dict[str, Any]] = []
        while True:
            reply = self._s3.list_multipart_uploads(**args)
            out += [u for u in reply.get("Uploads", []) if str(u["Key"]).startswith(root)]
            if not reply.get("IsTruncated"):
                return out
            args["KeyMarker"] = reply.get("NextKeyMarker")
            args["UploadIdMarker"] = reply.get("NextUploadIdMarker")

    def fetch_last_bundle(self, app_id: str) -> Bundle | None:
        """The bundle of the newest marker of ``app_id`` (one LIST page of its unfolded markers, and one GET)."""
        marker = self.last_marker(app_id)
        return None if marker is None else marker.bundle

    def last_marker(self, app_id: str) -> CommitMarker | None:
        """The newest commit marker of ``app_id``, or None."""
        with self._errors("fetch_last_bundle"):
            known = self._last.get(app_id)
            key = self._newest_marker_key(app_id, known[0] if known else None)
            if key is None:
                if known:
                    return known[1]
                folded = self._newest_folded(app_id)
                if folded is not None:
                    self._seen(folded)
                self._newest[app_id] = max(-1 if folded is None else folded.batch_id, self._newest.get(app_id, -1))
                return folded
            batch_id = self.layout.marker_batch(key)
            assert batch_id is not None
            found = self._get(key)
            if found is None:  # deleted between the listing and the read
                return known[1] if known else None
            marker = self._decode_marker(found[0], app_id, batch_id)
        self._seen(marker)
        self._newest[app_id] = max(batch_id, self._newest.get(app_id, -1))
        return marker

    def _newest_marker_key(self, app_id: str, start_after: str | None) -> str | None:
        """The key of the app_id's newest marker (after ``start_after``): one listing page, as commits/ holds at most
        about 1.5 S markers; more (a prefix not folded yet) are skipped over, not listed (``_listing``)."""
        prefix = self.layout.markers(app_id)
        keys, more = list_page(self._s3, self.config.bucket, prefix, start_after)
        listed = [k for k in keys if Layout.marker_batch(k) is not None]
        if not more:
            return listed[-1] if listed else None
        known = listed[-1] if listed else first_numbered(self._s3, self.config.bucket, prefix, Layout.marker_batch)
        if known is None:
            return None
        return newest_numbered(
            self._s3,
            self.config.bucket,
            prefix,
            lambda n: self.layout.marker_key(app_id, n),
            Layout.marker_batch,
            known,
        )

    def _newest_folded(self, app_id: str) -> CommitMarker | None:
        """The newest marker held by a segment, for an app_id without a marker object (normally the newest marker
        is never folded, so this is a prefix whose markers were removed by hand): None when it has no segment."""
        prefix = self.layout.segments(app_id)
        first = first_numbered(self._s3, self.config.bucket, prefix, Layout.segment_first)
        if first is None:
            return None
        key = newest_numbered(
            self._s3,
            self.config.bucket,
            prefix,
            lambda n: self.layout.segment_after(app_id, n),
            Layout.segment_first,
            first,
        )
        found = Layout.segment_range(key)
        assert found is not None
        segment = self._read_segment(app_id, *found)
        markers = [] if segment is None else segment.markers()
        return markers[-1] if markers else None


def _transactional_of(upload: dict[str, Any], app16: str) -> bool:
    """Whether a listed upload is a transactional attempt's of the app whose hash is ``app16``."""
    name = parse_object_name(upload["Key"])
    return name is not None and name.app16 == app16 and name.transactional
