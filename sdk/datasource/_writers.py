"""The writers Spark runs for ``format("eosink")``: participants on executors, the coordinator beside the driver.

:class:`StreamWriter` for ``writeStream``, :class:`JobWriter` for ``df.write`` (one batch per job run).

Spark runs a Python data source's driver-side steps in short-lived Python workers, never in
the driver's own process, so nothing of eosink lives between two batches. Per micro-batch:

1. planning (a worker, before any task): ``streamWriter()`` runs the coordinator's
   :meth:`~eosink.coordinator.Coordinator.begin_batch` for the batch Spark's offsets log
   announces (fence, recover, settle), and the plan travels to the executors in the writer;
2. tasks: each runs an eosink participant on its partition's Arrow batches (or, for a replay
   of a batch the sink has committed, only fingerprints it) and returns a message;
3. commit (another worker): the coordinator resumes under the plan's epoch and finishes the
   batch, or compares the replay's fingerprint; ``abort`` aborts the batch's attempts.

Every message carries the epoch, so a commit after a newer writer fenced is refused by the sink.
"""

from __future__ import annotations

import itertools
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from datetime import timezone
from types import FrameType
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)

from eosink import faults
from eosink._spark_schema import arrow_schema as spark_arrow_schema
from eosink.checkpoint import SparkCheckpoint
from eosink.contract import Committable, Fingerprint
from eosink.coordinator import Coordinator
from eosink.datasource._options import ParsedOptions
from eosink.errors import ConfigurationError
from eosink.fanout import FanOut, replay_fingerprints
from eosink.faults import FaultPoint
from eosink.fingerprint import FINGERPRINT_VERSION, fingerprint_of
from eosink.participant import WritePlan, run_participants

try:  # PySpark 4.1+: tasks get Arrow record batches
    from pyspark.sql.datasource import DataSourceStreamArrowWriter as _StreamBase

    STREAM_ARROW = True
except ImportError:  # pragma: no cover - PySpark 4.0: rows, converted back to Arrow here
    _StreamBase = DataSourceStreamWriter  # type: ignore[misc,assignment]
    STREAM_ARROW = False

__all__ = ["STREAM_ARROW", "EosinkMessage", "JobWriter", "RowJobWriter", "RowStreamWriter", "StreamWriter", "planning"]

_PLANNING_MODULE = "pyspark.sql.worker.write_into_data_source"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"


class EosinkMessage(WriterCommitMessage):
    """What one task reports to the commit, per sink (one, or a fan-out's in order): the plan's epoch, and a
    committable or a replay's fingerprint."""

    def __init__(
        self, epochs: list[int], committables: list[dict[str, Any] | None], fingerprints: list[dict[str, Any] | None]
    ) -> None:
        self.epochs = epochs
        self.committables = committables
        self.fingerprints = fingerprints


def planning() -> bool:
    """Whether Spark calls us to plan a write (its writer then goes to the tasks), not to commit or abort one."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == _PLANNING_MODULE:
            return True
        frame = frame.f_back
    return False


class _Steps:
    """What both writers do: plan a batch (a driver-side worker), run a task, finish or abort the batch.

    A fan-out (several sinks) plans, writes and finishes each sink as :class:`~eosink.fanout.FanOut` does:
    one pass over each task's rows into every sink that lacks the batch, each sink's replay check, every
    manifest recorded, then the commits in the sinks' order.
    """

    parsed: ParsedOptions
    schema: Any
    location: str
    plans: list[WritePlan | None] | None = None
    batch_id: int | None = None
    epochs: list[int] | None = None
    replay_versions: list[int | None] | None = None

    def _engines(self) -> tuple[FanOut | None, list[Coordinator]]:
        """The fan-out (None for one sink) and each sink's coordinator, in commit order."""
        parsed, checkpoint = self.parsed, SparkCheckpoint(self.location)
        if not parsed.fanout:
            return None, [Coordinator(parsed.sink, parsed.app_id, parsed.strategy, checkpoint)]
        fan = FanOut(parsed.fanout, parsed.app_id, parsed.strategy, checkpoint, threaded=False)
        return fan, fan.coordinators

    def _begin(self, batch_id: int) -> None:
        fan, coordinators = self._engines()
        for coordinator in coordinators:
            coordinator.sink.bind_schema(spark_arrow_schema(self.schema))
        try:
            self.plans = [coordinators[0].begin_batch(batch_id)] if fan is None else fan.begin_batch(batch_id)
            epochs = [c.epoch for c in coordinators]
            assert all(e is not None for e in epochs)  # begin_batch started every sink
            self.epochs = [e for e in epochs if e is not None]
            self.replay_versions = [
                c.last_bundle.fingerprint.version if plan is None and c.last_bundle is not None else None
                for c, plan in zip(coordinators, self.plans, strict=True)
            ]
        finally:
            for coordinator in coordinators:
                coordinator.sink.close()
        self.batch_id = batch_id

    def _task(self, iterator: Iterator[Any], partition: int) -> EosinkMessage:
        assert self.epochs is not None and self.plans is not None and self.replay_versions is not None
        writing = [plan for plan in self.plans if plan is not None]
        # The write pass fingerprints in FINGERPRINT_VERSION; the tap takes a replay's other versions beside it.
        wanted = {v for v in self.replay_versions if v is not None and not (writing and v == FINGERPRINT_VERSION)}
        tap = _FingerprintTap(_arrow(iterator, self.schema), wanted)
        made = iter(run_participants(writing, partition, tap) if writing else tap.drain())
        committables: list[dict[str, Any] | None] = []
        written = Fingerprint(version=FINGERPRINT_VERSION) if writing else None
        for plan in self.plans:
            committable = next(made) if plan is not None else None
            if committable is not None and committable.fingerprint.rows:
                written = committable.fingerprint
            committables.append(committable.to_json() if committable is not None else None)
        taken = replay_fingerprints(self.replay_versions, written, tap.fingerprints.__getitem__)
        fingerprints = [f.to_json() if f is not None else None for f in taken]
        return EosinkMessage(list(self.epochs), committables, fingerprints)

    def _finish(self, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> None:
        found = [m for m in messages if isinstance(m, EosinkMessage)]
        if not found:  # no task ran: nothing was written
            return
        fan, coordinators = self._engines()
        try:
            written: list[tuple[Coordinator, list[Committable]]] = []
            for n, coordinator in enumerate(coordinators):
                coordinator.resume(max(m.epochs[n] for m in found))
            for n, coordinator in enumerate(coordinators):
                taken = [Fingerprint.from_json(f) for m in found if (f := m.fingerprints[n]) is not None]
                if taken:
                    coordinator.skip_replay(batch_id, sum(taken, Fingerprint()))
                else:
                    written.append((coordinator, [Committable.from_json(c) for m in found if (c := m.committables[n])]))
            if fan is not None:
                fan.finish_written(batch_id, written)
            elif written:
                coordinator, committables = written[0]
                coordinator.finish_batch(batch_id, committables)
        finally:
            for coordinator in coordinators:
                coordinator.sink.close()

    def _abort(self, messages: Sequence[WriterCommitMessage | None], batch_id: int) -> None:
        found = [m for m in messages if isinstance(m, EosinkMessage)]
        _, coordinators = self._engines()
        try:
            for n, coordinator in enumerate(coordinators):
                if found:
                    coordinator.resume(max(m.epochs[n] for m in found))
                else:
                    coordinator.sink.setup(coordinator.app_id)
                coordinator.abort_batch(batch_id)
        finally:
            for coordinator in coordinators:
                coordinator.sink.close()


class _FingerprintTap:
    """The task's record batches, passed through while fingerprinted in each row-hash version wanted (a replay's
    check in a sink that holds the batch, in one pass with the writes into the sinks that lack it)."""

    def __init__(self, batches: Iterator[pa.RecordBatch], versions: set[int]) -> None:
        self.batches = batches
        self.fingerprints = {v: Fingerprint(version=v) for v in versions}

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        for batch in self.batches:
            if batch.num_rows:
                for version in self.fingerprints:
                    self.fingerprints[version] += fingerprint_of(batch, version)
            yield batch

    def drain(self) -> list[Committable | None]:
        """Read every batch (nothing to write: only fingerprints); no committables."""
        for _ in self:
            pass
        return []


class _StreamSteps(_Steps):
    """``writeStream.format("eosink")``'s writer steps; the classes below say how tasks get their input."""

    def __init__(self, parsed: ParsedOptions, schema: Any) -> None:
        assert parsed.checkpoint_location is not None
        self.parsed = parsed
        self.schema = schema
        self.location = parsed.checkpoint_location
        if planning():
            self._plan()

    def _plan(self) -> None:
        checkpoint = SparkCheckpoint(self.location)
        batch_id = checkpoint.latest_offsets()
        if batch_id is None:
            raise ConfigurationError(
                f"Spark plans a batch, but its checkpoint {self.location!r} has no offsets log.",
                "Give writeStream the query's own checkpointLocation option.",
            )
        if batch_id > 0 and checkpoint.is_committed(batch_id - 1):
            # The first eosink code that runs after Spark wrote the previous batch to its commit log.
            faults.hit(FaultPoint.F5, batch_id - 1)
        self._begin(batch_id)

    def write(self, iterator: Iterator[Any]) -> EosinkMessage:
        """Run one participant on this task's rows (on an executor)."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        running = ctx.getLocalProperty(_BATCH_ID_PROPERTY) if ctx is not None else None
        if ctx is None or running is None or int(running) != self.batch_id:
            raise ConfigurationError(
                f"eosink planned batch {self.batch_id}, but this task runs batch {running} of the stream.",
                "Report this: the stream's writer was planned outside Spark's micro-batch planning.",
            )
        return self._task(iterator, ctx.partitionId())

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Finish batch ``batchId``: commit it (txid-check, idempotent) or check the replay's fingerprint."""
        self._finish(messages, int(batchId))

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """A task failed: abort every attempt of batch ``batchId`` the sink holds."""
        self._abort(messages, int(batchId))


class StreamWriter(_StreamSteps, _StreamBase):
    """``writeStream.format("eosink")``'s writer: tasks take Arrow record batches (PySpark 4.1+)."""


class RowStreamWriter(_StreamSteps, DataSourceStreamWriter):
    """``writeStream.format("eosink")`` with option ``arrow=false``: tasks take Spark's rows, turned into Arrow."""


class _JobSteps(_Steps):
    """``df.write.format("eosink")``'s writer steps: the whole job is batch ``batch_id`` of the app_id.

    A job has no Spark checkpoint: the coordinator keeps its manifest in a directory of its own
    (``checkpointLocation`` when given, else a private temporary directory on the driver, gone
    with the job). Without a kept manifest, a job that crashed after preparing has its work
    aborted by the rerun's recovery and written again; a rerun after the commit finds the bundle.
    """

    def __init__(self, parsed: ParsedOptions, schema: Any) -> None:
        assert parsed.batch_id is not None
        self.parsed = parsed
        self.schema = schema
        self.location = parsed.checkpoint_location or ""
        self._own_location = False
        if planning():
            if not self.location:
                self.location = tempfile.mkdtemp(prefix="eosink-job-")
                self._own_location = True
            self._begin(parsed.batch_id)

    def write(self, iterator: Iterator[Any]) -> EosinkMessage:
        """Run one participant on this task's rows (on an executor)."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        return self._task(iterator, ctx.partitionId() if ctx is not None else 0)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Commit the job's batch, or skip a rerun of a committed one after comparing fingerprints."""
        assert self.batch_id is not None
        try:
            self._finish(messages, self.batch_id)
        finally:
            self._drop_location()

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """A task failed: abort every attempt of the job's batch the sink holds."""
        assert self.batch_id is not None
        try:
            self._abort(messages, self.batch_id)
        finally:
            self._drop_location()

    def _drop_location(self) -> None:
        if self._own_location:
            shutil.rmtree(self.location, ignore_errors=True)


class JobWriter(_JobSteps, DataSourceArrowWriter):
    """``df.write.format("eosink")``'s writer: tasks take Arrow record batches."""


class RowJobWriter(_JobSteps, DataSourceWriter):
    """``df.write.format("eosink")`` with option ``arrow=false``: tasks take Spark's rows, turned into Arrow."""


def _arrow(iterator: Iterator[Any], schema: Any) -> Iterator[pa.RecordBatch]:
    """The task's input as Arrow record batches (a row writer, or PySpark 4.0's stream writer, gets rows).

    Rows become what Spark's Arrow path hands over: timestamps as UTC instants (a row carries them
    as naive local times)."""
    first = next(iterator, None)
    if first is None:
        return
    if isinstance(first, pa.RecordBatch):
        yield first
        yield from iterator
        return
    from pyspark.sql.types import TimestampType

    arrow_schema = spark_arrow_schema(schema)
    instants = [f.name for f in schema.fields if isinstance(f.dataType, TimestampType)]
    chunk: list[dict[str, Any]] = []
    for row in itertools.chain([first], iterator):
        values = row.asDict(recursive=True)
        for name in instants:
            value = values[name]
            if value is not None and value.tzinfo is None:
                values[name] = value.astimezone(timezone.utc)
        chunk.append(values)
        if len(chunk) >= 10_000:
            yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)
            chunk = []
    if chunk:
        yield pa.RecordBatch.from_pylist(chunk, schema=arrow_schema)
