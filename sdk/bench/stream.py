"""The streaming-latency runs: a rate-limited source, a small trigger, and a poller on the target.

Spark's ``rate`` source emits rows at a fixed rate, each stamped with its generation time
(``at``). A poller, in a process of its own so that decoding what it reads never holds the
driver's interpreter lock, queries the target every ``poll_ms``: for the rows that became visible
since its last poll, the server's statement time minus ``at`` (bucketed per millisecond), so
input-to-visible latency is measured on the server's clock, late by at most one poll interval.
It also notes when each batch's bundle first shows up, which against the moment Spark's
commit-log file for that batch appeared gives 2PC's "visible after the commit log" delay.
"""

from __future__ import annotations

import multiprocessing
import queue
import time
from collections import Counter
from pathlib import Path
from typing import Any

from eosink.bench.job import Job
from eosink.bench.runs import BenchAdapter
from eosink.bench.session import finish_writer, start_query, warm_up

__all__ = ["latency_job", "percentile"]


def percentile(hist: Counter[int], q: float) -> float | None:
    """The ``q`` quantile (nearest rank) of a histogram {value: count}; None when it is empty."""
    total = sum(hist.values())
    if total == 0:
        return None
    rank = q * (total - 1)
    seen = 0
    for value in sorted(hist):
        seen += hist[value]
        if seen > rank:
            return float(value)
    return float(max(hist))


def logged_at(commit_file: Path) -> float:
    """When Spark's commit log came to hold the batch: the rename of ``commits/N`` into place.

    Spark writes the file under a temporary name and renames it; until the rename the batch is not
    committed (a crash replays it), and 2PC may not commit it. The file's mtime is the end of the
    write, which can be 50-150 ms earlier on a busy machine. Linux file systems stamp a rename in
    the inode's change time; where one does not, ctime is the write's time too, and the delay is
    measured from the (earlier) write as before.
    """
    stat = commit_file.stat()
    return max(stat.st_mtime, stat.st_ctime)


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))], 2)


class _Poller:
    """Polls the target every ``poll_ms``: latency histogram of newly visible rows, first sight of each batch."""

    def __init__(self, adapter: BenchAdapter, ns: str, warm_from_us: int) -> None:
        self.adapter, self.ns, self.warm_from_us = adapter, ns, warm_from_us
        self.hist: Counter[int] = Counter()
        self.first_seen: dict[int, float] = {}
        self.after = -1
        self.last_batch = -1

    def poll(self) -> None:
        buckets, self.after, batch = self.adapter.poll_visible(self.ns, self.after, self.warm_from_us)
        now = time.time()
        for ms, count in buckets:
            self.hist[ms] += count
        if batch is not None and batch > self.last_batch:
            for b in range(self.last_batch + 1, batch + 1):
                self.first_seen[b] = now
            self.last_batch = batch


def _stamp_batches(adapter: Any, ns: str, poll_ms: int, stop: Any, first_seen: dict[int, float]) -> None:
    """Note when each batch is first seen committed, through the adapter's cheap ``poll_batch``: reading rows
    (decoding thousands of records a poll) never delays a batch's stamp by more than a thread switch."""
    last = -1
    while not stop.wait(poll_ms / 1000):
        batch = adapter.poll_batch(ns)
        now = time.time()
        if batch is not None and batch > last:
            for b in range(last + 1, batch + 1):
                first_seen.setdefault(b, now)
            last = batch


def _poll_until(sink: str, ns: str, warm_from_us: int, poll_ms: int, stop: Any, out: Any) -> None:
    """The poller process: poll until ``stop`` is set, poll once more, and put what it saw on ``out``.

    An adapter with ``poll_batch`` has batches stamped by a thread (and an adapter) of their own."""
    import threading

    from eosink.bench.runner import get_adapter

    adapter = get_adapter(sink)
    poller = _Poller(adapter, ns, warm_from_us)
    stamper: threading.Thread | None = None
    stamps: dict[int, float] = {}
    errors: list[BaseException] = []
    if hasattr(adapter, "poll_batch"):
        other = get_adapter(sink)

        def stamp() -> None:
            try:
                _stamp_batches(other, ns, poll_ms, stop, stamps)
            except BaseException as exc:
                errors.append(exc)
            finally:
                getattr(other, "close", lambda: None)()

        stamper = threading.Thread(target=stamp, name="bench-batches", daemon=True)
        stamper.start()
    try:
        while not stop.wait(poll_ms / 1000) and not errors:
            poller.poll()
        poller.poll()
        if stamper is not None:
            stamper.join(30)
        if errors:
            raise errors[0]
        first_seen = stamps if stamper is not None else poller.first_seen
        out.put((dict(poller.hist), first_seen, None))
    except BaseException as exc:
        out.put((dict(poller.hist), poller.first_seen, f"{type(exc).__name__}: {exc}"))
    finally:
        getattr(adapter, "close", lambda: None)()


class _PollerProcess:
    """:func:`_poll_until` in a spawned process (the adapter's connection comes from the environment)."""

    def __init__(self, job: Job, warm_from_us: int) -> None:
        context = multiprocessing.get_context("spawn")
        self.stop_event = context.Event()
        self.out: Any = context.Queue()
        args = (job.sink, job.ns, warm_from_us, job.poll_ms, self.stop_event, self.out)
        self.process = context.Process(target=_poll_until, args=args, name="bench-poller", daemon=True)
        self.process.start()

    def alive(self) -> bool:
        return self.process.is_alive()

    def finish(self, timeout_s: float = 60.0) -> tuple[Counter[int], dict[int, float]]:
        """Stop polling; the latency histogram and the first sight of each batch."""
        self.stop_event.set()
        try:
            hist, first_seen, error = self.out.get(timeout=timeout_s)
        except queue.Empty:
            raise RuntimeError(f"the latency poller gave no result within {timeout_s:.0f} s") from None
        finally:
            self.process.join(10)
            if self.process.is_alive():
                self.process.kill()
        if error is not None:
            raise RuntimeError(f"the latency poller failed: {error}")
        return Counter(hist), first_seen


def latency_job(job: Job, adapter: BenchAdapter, spark: Any) -> dict[str, Any]:
    checkpoint = Path(job.root) / "checkpoint"
    warm_up(spark, adapter, job, None)
    fn = adapter.batch_function(job.spec, job.ns, str(checkpoint), job.participants)
    df = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", job.rate)
        .option("numPartitions", job.participants)
        .load()
        .selectExpr(
            "value AS id",
            "concat('customer-', lpad(cast(value % 10000 AS string), 6, '0')) AS name",
            "cast((value % 10000000) / 100 AS decimal(12,2)) AS amount",
            "timestamp AS at",
            "'alpha bravo charlie delta echo foxtrot golf' AS note",
        )
    )
    started = time.time()
    poller = _PollerProcess(job, int((started + job.warmup_s) * 1_000_000))
    query = start_query(df, fn, str(checkpoint), job.participants, {"processingTime": f"{job.trigger_ms} milliseconds"})
    deadline = time.monotonic() + job.warmup_s + job.duration_s
    while time.monotonic() < deadline and query.exception() is None and poller.alive():
        time.sleep(0.2)
    failure = query.exception()
    query.stop()
    progress = list(query.recentProgress)
    commit_ms = finish_writer(fn, strict=False)
    time.sleep(job.poll_ms * 3 / 1000)  # the last commit's rows are seen by a poll or two more
    seen, first_seen = poller.finish()
    if failure is not None:
        raise RuntimeError(str(failure))
    hist = Counter({k: v for k, v in seen.items() if k >= 0})
    add_batch = [float(p.durationMs.get("addBatch", 0)) for p in progress if p.numInputRows > 0]
    after_log = []
    for batch_id, at in first_seen.items():
        commit_file = checkpoint / "commits" / str(batch_id)
        if commit_file.exists() and batch_id >= 1:  # batch 0 carries the query's start-up
            after_log.append((at - logged_at(commit_file)) * 1000)
    return {
        "seconds": job.duration_s,
        "rows": sum(hist.values()),
        "batches": len(add_batch),
        "p50_ms": percentile(hist, 0.5),
        "p99_ms": percentile(hist, 0.99),
        "commit_p50_ms": _p(commit_ms[1:], 0.5),
        "batch_p50_ms": _p(add_batch[1:], 0.5),
        "visible_after_commit_log_p50_ms": _p(after_log, 0.5),
        "visible_after_commit_log_p99_ms": _p(after_log, 0.99),
    }
