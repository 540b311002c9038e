"""Spark Structured Streaming integration: ``foreach_batch`` for ``writeStream.foreachBatch``.

Participants run on executors inside ``mapInArrow``: each writes its partition's Arrow
record batches straight into the sink and returns one small committable row. The driver
collects only those rows, never the data. Nothing here touches py4j or ``_jvm``, so it
runs unchanged under Spark Connect, where foreachBatch runs in a separate Python process.

pyspark is imported lazily: eosink installs without it (clusters bring their own Spark).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

import pyarrow as pa

from eosink._extras import from_missing_module, missing_on_executors
from eosink._query import BatchGate, Query
from eosink._spark_schema import arrow_schema
from eosink._waiting import wait_until
from eosink.checkpoint import SparkCheckpoint
from eosink.contract import Committable, Fingerprint, Sink
from eosink.coordinator import CommitPolicy, Coordinator, Stats
from eosink.errors import ConfigurationError, EosinkError, InjectedFault, TransientError
from eosink.fanout import FanOut, name_sinks
from eosink.participant import WritePlan, fingerprint_participant, run_participants
from eosink.strategies import Strategy, resolve_strategy

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.streaming.readwriter import DataStreamWriter

__all__ = ["BatchWriter", "FanOutWriter", "Query", "foreach_batch", "register"]

log = logging.getLogger("eosink")

_RESULT_SCHEMA = "eosink string"
_DEFAULT_PARTICIPANTS = 4


MIN_PYSPARK = (3, 5)
"""The oldest PySpark eosink supports (``mapInArrow``, ``foreachBatch`` under Spark Connect)."""


def _require_pyspark() -> None:
    try:
        import pyspark
    except ImportError:
        raise ConfigurationError(
            "pyspark is not installed in this Python environment.",
            "pip install 'eosink[spark]' (or use the Spark your cluster provides).",
        ) from None
    check_pyspark_version(str(getattr(pyspark, "__version__", "0")))


def check_pyspark_version(version: str) -> None:
    """Raise ConfigurationError for a PySpark older than :data:`MIN_PYSPARK`."""
    parts = []
    for piece in version.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    if tuple(parts) < MIN_PYSPARK:
        raise ConfigurationError(
            f"PySpark {version} is too old for eosink, which needs PySpark {'.'.join(map(str, MIN_PYSPARK))} or newer "
            "(Spark 3.5: foreachBatch under Spark Connect, stable mapInArrow).",
            "Upgrade to PySpark/Spark 3.5 or 4.x (pip install 'eosink[spark]'), or use a cluster runtime with Spark "
            ">= 3.5.",
        )


def _partition_id() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return ctx.partitionId() if ctx is not None else 0


def _result(kind: str, body: dict[str, Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"eosink": [json.dumps({"kind": kind, **body})]})


class _Participant:
    """The function mapInArrow runs on executors (pickled with the plans and sinks): one pass over the
    partition, writing into the sink of each plan (one, or a fan-out's several)."""

    def __init__(self, plans: Sequence[WritePlan]) -> None:
        self.plans = list(plans)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        try:
            try:
                committables = run_participants(self.plans, _partition_id(), batches)
            except ModuleNotFoundError as missing:  # this executor lacks the connector's extra
                raise from_missing_module(missing) or missing from None
        except EosinkError as exc:
            if isinstance(exc, (TransientError, InjectedFault)):
                raise  # fail this task attempt: Spark retries it
            yield _result(
                "error", {"type": type(exc).__name__, "problem": exc.problem, "fix": exc.fix, **_details(exc)}
            )
            return
        for n, committable in enumerate(committables):
            if committable is not None:
                yield _result("committable", {**committable.to_json(), "plan": n})


class _FingerprintPartition:
    """The function mapInArrow runs to fingerprint a replayed batch under the bundle's row-hash version."""

    def __init__(self, version: int) -> None:
        self.version = version

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield _result("fingerprint", fingerprint_participant(batches, self.version).to_json())


def _details(exc: EosinkError) -> dict[str, Any]:
    """What an error carries beyond its text (the lost batches, their app_id, a permission), as JSON values."""
    found = {k: list(v) if isinstance(v, tuple) else v for k, v in vars(exc).items() if k not in ("problem", "fix")}
    return {"details": {k: v for k, v in found.items() if isinstance(v, (str, int, float, bool, list, type(None)))}}


def _raise_remote(body: dict[str, Any]) -> None:
    from eosink import errors

    cls = getattr(errors, str(body.get("type")), None)
    if not (isinstance(cls, type) and issubclass(cls, EosinkError)):
        cls = EosinkError
    error = cls(str(body.get("problem")), body.get("fix"))
    for name, value in (body.get("details") or {}).items():
        setattr(error, name, tuple(value) if isinstance(value, list) else value)
    raise error


class SparkBatch:
    """One foreachBatch DataFrame as a :class:`~eosink.coordinator.BatchInput` and a
    :class:`~eosink.fanout.FanOutInput`."""

    def __init__(self, df: DataFrame, participants: int) -> None:
        self.df = df
        self.participants = participants

    def _run(self, frame: DataFrame, fn: Any) -> list[dict[str, Any]]:
        try:
            rows = frame.mapInArrow(fn, _RESULT_SCHEMA).collect()
        except Exception as exc:
            missing = missing_on_executors(str(exc))
            if missing is None:
                raise
            raise missing from exc
        results = [json.loads(row[0]) for row in rows]
        for body in results:
            if body.get("kind") == "error":
                _raise_remote(body)
        return results

    def write(self, plan: WritePlan) -> list[Committable]:
        return self.write_many([plan])[0]

    def write_many(self, plans: Sequence[WritePlan]) -> list[list[Committable]]:
        frame = self.df
        if any(p.generate_keys for p in plans):  # identical rows must meet in one participant for stable ordinals
            frame = frame.repartition(self.participants, *frame.columns)
        else:
            frame = frame.coalesce(self.participants)
        made: list[list[Committable]] = [[] for _ in plans]
        for body in self._run(frame, _Participant(plans)):
            if body["kind"] == "committable":
                made[int(body.pop("plan"))].append(Committable.from_json(body))
        return made

    def fingerprint(self, version: int) -> Fingerprint:
        parts = self._run(self.df, _FingerprintPartition(version))
        return sum((Fingerprint.from_json(b) for b in parts), Fingerprint())


_LIVE: weakref.WeakSet[_StreamWriter] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:  # backstop on interpreter exit: commit what Spark committed
    for writer in list(_LIVE):
        with contextlib.suppress(Exception):
            writer.close()


_W = TypeVar("_W", bound="_StreamWriter")

Engine = Coordinator | FanOut
"""What drives a writer's batches: one sink's coordinator, or a fan-out's."""


class _StreamWriter:
    """What both writers share: the checks, the checkpoint, pickling, starting the query, closing."""

    def __init__(
        self,
        *,
        app_id: str,
        strategy: Strategy | str,
        checkpoint_location: str | os.PathLike[str],
        participants: int,
        policy: CommitPolicy | None,
    ) -> None:
        if not isinstance(app_id, str) or not app_id.strip() or len(app_id) > 200:
            raise ConfigurationError(
                f"app_id must be a non-empty string of at most 200 characters, got {app_id!r}.",
                "Choose a stable name for this (query, sink) pair, e.g. 'payments-to-ledger'.",
            )
        if not isinstance(participants, int) or participants < 1:
            raise ConfigurationError(
                f"participants must be a positive integer, got {participants!r}.",
                "Use the number of parallel writers per batch you want, e.g. 4.",
            )
        self.app_id = app_id
        self.strategy = resolve_strategy(strategy)
        self.checkpoint = SparkCheckpoint(checkpoint_location)
        self.participants = participants
        self.policy = policy or CommitPolicy()
        self._engine: Engine | None = None
        self._gate = BatchGate()
        self._closed = False  # close() ran and no batch or start since: a second close() does nothing
        self._last_batch: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_engine"] = None
        return state

    def _sinks(self) -> list[Sink[Any]]:
        raise NotImplementedError

    def _new_engine(self) -> Engine:
        raise NotImplementedError

    @property
    def engine(self) -> Engine:
        """The driver-side protocol engine (created on first use)."""
        if self._engine is None:
            self._engine = self._new_engine()
            _LIVE.add(self)
        return self._engine

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        _require_pyspark()
        self._closed = False
        with self._gate.batch(int(batch_id)):
            if not self.engine.started:  # the first batch of a run: is this the query's checkpoint?
                self.checkpoint.require_offsets(int(batch_id))
                self._bind(arrow_schema(df.schema))
            self.engine.process(int(batch_id), SparkBatch(df, self.participants))
            self._last_batch = int(batch_id)

    def start(self, stream: DataStreamWriter, *, preflight: bool = True) -> Query:
        """Start ``stream`` (``df.writeStream...``) with this writer and its checkpoint location.

        Sets Spark's ``checkpointLocation`` to the writer's and ``foreachBatch`` to the writer, so
        the path is stated once::

            writer = eosink.foreach_batch(sink, app_id="payments", checkpoint_location="/chk/payments")
            query = writer.start(df.writeStream.trigger(processingTime="10 seconds"))
            query.run()  # until the input ends (availableNow) or Ctrl-C / SIGTERM; then the writer is closed

        First, with ``preflight``, what the first batch would find wrong stops it here, before Spark starts
        the query, with the eosink error (:meth:`preflight`). The :class:`~eosink.spark.Query` it returns is
        Spark's query, whose ``awaitTermination`` raises the eosink error that stopped it, and whose
        ``stop()`` stops after the batch in flight and closes this writer. Under Spark Connect the checks run
        in the client, and the batches on the server: pass ``preflight=False`` if only the server reaches
        the sink.
        """
        _require_pyspark()
        self._closed = False
        if preflight:
            self.preflight(stream)
        query = stream.option("checkpointLocation", self.checkpoint.location).foreachBatch(self).start()
        return Query(query, self._gate, self._settle, self.close)

    def preflight(self, stream: DataStreamWriter | None = None) -> None:
        """Check now what the first batch would find wrong, changing nothing: each sink reached with its
        credentials, its target (table, topic, ...) against the stream's schema (from ``stream``, the
        ``df.writeStream`` to start), what the strategy needs of the server, and the app_id against the
        checkpoint. Raises the eosink error with its fix (:meth:`start` calls it)."""
        schema = _stream_schema(stream)
        if schema is not None:
            self._bind(schema)
        try:
            self.engine.preflight(schema)
        except BaseException:
            self._drop_engine()  # nothing started: close() has nothing to finish
            raise

    def _bind(self, schema: pa.Schema) -> None:
        """Hand the stream's schema to every sink (one that creates its target keeps it for that)."""
        for sink in self._sinks():
            sink.bind_schema(schema)

    def _drop_engine(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            _LIVE.discard(self)
            engine.close()

    def _settle(self, timeout_s: float) -> None:
        """Wait (up to ``timeout_s``) until Spark's commit log holds the last batch this writer processed."""
        last = self._last_batch
        if last is not None and not wait_until(lambda: self.checkpoint.has_commit_file(last), timeout_s):
            log.warning("eosink: Spark's commit log lacks batch %d after %.0f s; it may run again", last, timeout_s)

    def __enter__(self: _W) -> _W:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def recover(self) -> None:
        """Fence older writers and resolve in-doubt batches now, before the query starts."""
        self.engine.start()

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Wait until every batch Spark has committed is committed in the sink (2PC)."""
        if self._engine is None:
            return True
        return self._engine.flush(timeout_s)

    def close(self) -> None:
        """Commit what Spark has committed and release resources; call after the query stops.

        Also when no batch ran in this process (a restart that found no new input): batches
        Spark's commit log holds but the sink does not are committed then (2PC), and a batch
        Spark committed whose work the sink no longer has raises
        :class:`~eosink.errors.PreparedWorkLostError` (every strategy).
        """
        if self._closed:
            return
        if self._engine is None and self.checkpoint.exists():
            _ = self.engine  # a writer that processed no batch: commit what Spark committed, check for loss
        if self._engine is not None:
            try:
                self._engine.finish_spark_committed()
            finally:
                self._engine.close()
                _LIVE.discard(self)
        self._closed = True


class BatchWriter(_StreamWriter):
    """The callable handed to ``writeStream.foreachBatch``; see :func:`foreach_batch`.

    Picklable (Spark Connect ships it to the server): the coordinator, its thread and its
    connections are created on the first batch, in the process that runs foreachBatch.
    """

    def __init__(
        self,
        sink: Sink[Any],
        *,
        app_id: str,
        strategy: Strategy | str,
        checkpoint_location: str | os.PathLike[str],
        participants: int = _DEFAULT_PARTICIPANTS,
        policy: CommitPolicy | None = None,
    ) -> None:
        if not isinstance(sink, Sink):
            raise ConfigurationError(f"{sink!r} is not an eosink Sink.", "Pass a connector's sink object.")
        super().__init__(
            app_id=app_id,
            strategy=strategy,
            checkpoint_location=checkpoint_location,
            participants=participants,
            policy=policy,
        )
        self.sink = sink
        self.strategy.check(sink.capabilities, type(sink).__name__)

    def __repr__(self) -> str:
        return (
            f"BatchWriter(sink={self.sink!r}, app_id={self.app_id!r}, strategy={self.strategy!r}, "
            f"checkpoint_location={self.checkpoint.location!r})"
        )

    def _sinks(self) -> list[Sink[Any]]:
        return [self.sink]

    def _new_engine(self) -> Engine:
        return Coordinator(self.sink, self.app_id, self.strategy, self.checkpoint, self.policy)

    @property
    def coordinator(self) -> Coordinator:
        """The driver-side protocol engine (created on first use)."""
        engine = self.engine
        assert isinstance(engine, Coordinator)
        return engine

    @property
    def stats(self) -> Stats:
        """What the protocol did in this process: commits, skipped replays, resolved ambiguities."""
        return self.coordinator.stats


class FanOutWriter(_StreamWriter):
    """The callable handed to ``writeStream.foreachBatch`` for a fan-out: one pass per batch, exactly once
    into each sink, committed in the order given (see :mod:`eosink.fanout` and :func:`foreach_batch`)."""

    def __init__(
        self,
        sinks: Sequence[Sink[Any]] | Mapping[str, Sink[Any]],
        *,
        app_id: str,
        strategy: Strategy | str,
        checkpoint_location: str | os.PathLike[str],
        participants: int = _DEFAULT_PARTICIPANTS,
        policy: CommitPolicy | None = None,
    ) -> None:
        super().__init__(
            app_id=app_id,
            strategy=strategy,
            checkpoint_location=checkpoint_location,
            participants=participants,
            policy=policy,
        )
        self.sinks = name_sinks(sinks)
        for _, sink in self.sinks:
            self.strategy.check(sink.capabilities, type(sink).__name__)

    def __repr__(self) -> str:
        sinks = ", ".join(f"{name}={sink!r}" for name, sink in self.sinks)
        return (
            f"FanOutWriter(sinks=[{sinks}], app_id={self.app_id!r}, strategy={self.strategy!r}, "
            f"checkpoint_location={self.checkpoint.location!r})"
        )

    def _sinks(self) -> list[Sink[Any]]:
        return [sink for _, sink in self.sinks]

    def _new_engine(self) -> Engine:
        return FanOut(self.sinks, self.app_id, self.strategy, self.checkpoint, self.policy)

    @property
    def fanout(self) -> FanOut:
        """The driver-side protocol engine (created on first use)."""
        engine = self.engine
        assert isinstance(engine, FanOut)
        return engine

    @property
    def stats(self) -> dict[str, Stats]:
        """Per sink, by name: what the protocol did in this process."""
        return self.fanout.stats


def _stream_schema(stream: DataStreamWriter | None) -> pa.Schema | None:
    """The Arrow schema of the DataFrame ``stream`` writes (classic PySpark and Spark Connect keep it as
    ``_df``), or None when it cannot be had."""
    df = getattr(stream, "_df", None)
    if df is None:
        return None
    try:
        return arrow_schema(df.schema)
    except Exception as exc:  # a schema Arrow cannot take is the first batch's to report, as before
        log.debug("eosink: no Arrow schema for the stream before it starts: %s", exc)
        return None


def register(spark: Any) -> None:
    """Register ``format("eosink")`` with ``spark``: eosink as a Spark data source (see :mod:`eosink.datasource`)."""
    from eosink.datasource import register as _register

    _register(spark)


@overload
def foreach_batch(
    sink: Sink[Any],
    *,
    app_id: str,
    strategy: Strategy | str = "2pc",
    checkpoint_location: str | os.PathLike[str],
    participants: int = _DEFAULT_PARTICIPANTS,
    policy: CommitPolicy | None = None,
) -> BatchWriter: ...


@overload
def foreach_batch(
    sink: Sequence[Sink[Any]] | Mapping[str, Sink[Any]],
    *,
    app_id: str,
    strategy: Strategy | str = "2pc",
    checkpoint_location: str | os.PathLike[str],
    participants: int = _DEFAULT_PARTICIPANTS,
    policy: CommitPolicy | None = None,
) -> FanOutWriter: ...


def foreach_batch(
    sink: Sink[Any] | Sequence[Sink[Any]] | Mapping[str, Sink[Any]],
    *,
    app_id: str,
    strategy: Strategy | str = "2pc",
    checkpoint_location: str | os.PathLike[str],
    participants: int = _DEFAULT_PARTICIPANTS,
    policy: CommitPolicy | None = None,
) -> BatchWriter | FanOutWriter:
    """The exactly-once function for ``df.writeStream.foreachBatch(...)``.

    ``app_id`` names this query's writes for good; ``checkpoint_location`` must be the query's own
    ``checkpointLocation``: start the query with :meth:`BatchWriter.start`, which sets it (a location
    Spark does not write to is refused at the first batch). ``participants`` caps the parallel
    writers (and prepared transactions) per batch. Call ``close()`` on the result after the query
    stops, or use it as a context manager.

    One sink gives a :class:`BatchWriter`. Several, as a list or a ``{name: sink}`` mapping, give a
    :class:`FanOutWriter`: each batch passes once and lands exactly once in each sink, committed in
    the order given (:mod:`eosink.fanout`); sink ``name`` keeps its state under app_id
    ``<app_id>.<name>``.
    """
    if isinstance(sink, Sink):
        return BatchWriter(
            sink,
            app_id=app_id,
            strategy=strategy,
            checkpoint_location=checkpoint_location,
            participants=participants,
            policy=policy,
        )
    if isinstance(sink, (Sequence, Mapping)):
        return FanOutWriter(
            sink,
            app_id=app_id,
            strategy=strategy,
            checkpoint_location=checkpoint_location,
            participants=participants,
            policy=policy,
        )
    raise ConfigurationError(f"{sink!r} is not an eosink Sink.", "Pass a connector's sink object, or a list of them.")
