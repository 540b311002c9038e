"""The streaming-latency runs: a rate-limited source, a small trigger, and a poller on the target.

Spark's ``rate`` source emits rows at a fixed rate, each stamped with its generation time
(``at``). A poller thread queries the target every ``poll_ms``: for the rows that became visible
since its last poll, the server's statement time minus ``at`` (bucketed per millisecond), so
input-to-visible latency is measured on the server's clock, late by at most one poll interval.
It also notes when each batch's bundle first shows up, which against the moment Spark's
commit-log file for that batch appeared gives 2PC's "visible after the commit log" delay.
"""

from __future__ import annotations

import threading
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


class _Poller(threading.Thread):
    """Polls the target every ``poll_ms``: latency histogram of newly visible rows, first sight of each batch."""

    def __init__(self, job: Job, adapter: BenchAdapter, warm_from_us: int) -> None:
        super().__init__(name="bench-poller", daemon=True)
        self.job, self.adapter, self.warm_from_us = job, adapter, warm_from_us
        self.hist: Counter[int] = Counter()
        self.first_seen: dict[int, float] = {}
        self.after = -1
        self.last_batch = -1
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def poll(self) -> None:
        buckets, self.after, batch = self.adapter.poll_visible(self.job.ns, self.after, self.warm_from_us)
        now = time.time()
        for ms, count in buckets:
            self.hist[ms] += count
        if batch is not None and batch > self.last_batch:
            for b in range(self.last_batch + 1, batch + 1):
                self.first_seen[b] = now
            self.last_batch = batch

    def run(self) -> None:
        try:
            while not self.stop_event.wait(self.job.poll_ms / 1000):
                self.poll()
        except BaseException as exc:
            self.error = exc


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
    poller = _Poller(job, adapter, int((started + job.warmup_s) * 1_000_000))
    poller.start()
    query = start_query(df, fn, str(checkpoint), job.participants, {"processingTime": f"{job.trigger_ms} milliseconds"})
    deadline = time.monotonic() + job.warmup_s + job.duration_s
    while time.monotonic() < deadline and query.exception() is None and poller.error is None:
        time.sleep(0.2)
    failure = query.exception()
    query.stop()
    progress = list(query.recentProgress)
    commit_ms = finish_writer(fn, strict=False)
    time.sleep(job.poll_ms * 3 / 1000)  # the last commit's rows are seen by a poll or two more
    poller.stop_event.set()
    poller.join(10)
    poller.poll()
    if poller.error is not None:
        raise poller.error
    if failure is not None:
        raise RuntimeError(str(failure))
    hist = Counter({k: v for k, v in poller.hist.items() if k >= 0})
    add_batch = [float(p.durationMs.get("addBatch", 0)) for p in progress if p.numInputRows > 0]
    after_log = []
    for batch_id, seen in poller.first_seen.items():
        commit_file = checkpoint / "commits" / str(batch_id)
        if commit_file.exists() and batch_id >= 1:  # batch 0 carries the query's start-up
            after_log.append((seen - logged_at(commit_file)) * 1000)
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
