"""What the PostgreSQL sink did, per app_id: a small object to read, log or forward.

Process-local counters (commits, rows, bytes, commit latency, ambiguous commits and how they
resolved) live in :class:`PostgresMetrics`, one per sink object; ``PostgresSink.metrics_for``
adds what only the server knows (in-doubt work and its age) and returns a frozen
:class:`MetricsSnapshot`. Every commit is also logged on the ``eosink.postgres`` logger, so a
logging handler is enough to ship the figures elsewhere::

    snap = sink.metrics_for("payments")
    statsd.gauge("eosink.in_doubt", snap.in_doubt)          # forward however you like
    print(snap.to_json())
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from eosink.contract import BatchRef, Committable

__all__ = ["MetricsSnapshot", "PostgresMetrics", "Resolution"]

log = logging.getLogger("eosink.postgres")

Resolution = Literal["committed", "recommit", "aborted"]
"""How a commit whose reply was lost turned out: it had committed; it had not and was committed
again; its prepared work was gone (the batch is replayed)."""

_LATENCY_WINDOW = 1000


@dataclass
class _App:
    batches: int = 0
    rows: int = 0
    bytes: int = 0
    last_batch_id: int | None = None
    last_rows: int = 0
    last_bytes: int = 0
    latency_ms: deque[float] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))
    ambiguous: int = 0
    resolved: dict[str, int] = field(default_factory=lambda: {"committed": 0, "recommit": 0, "aborted": 0})
    counted: deque[int] = field(default_factory=lambda: deque(maxlen=_LATENCY_WINDOW))  # batch ids already counted


@dataclass(frozen=True)
class MetricsSnapshot:
    """One app_id's figures at one moment (``in_doubt*`` are None when the server was not asked)."""

    app_id: str
    batches_committed: int
    rows_committed: int
    bytes_committed: int
    last_batch_id: int | None
    last_batch_rows: int
    last_batch_bytes: int
    commit_latency_p50_ms: float | None
    commit_latency_max_ms: float | None
    ambiguous_commits: int
    ambiguous_resolved: dict[str, int]
    in_doubt: int | None = None
    oldest_in_doubt_s: float | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class PostgresMetrics:
    """Counters of one sink object in this process, per app_id; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._apps: dict[str, _App] = {}

    def _app(self, app_id: str) -> _App:
        return self._apps.setdefault(app_id, _App())

    def committed(self, batch: BatchRef, committables: Sequence[Committable], seconds: float) -> None:
        """Count a batch this process committed: a commit that returned, one that found the batch already
        committed, or one whose lost reply was resolved as committed. Each batch counts once."""
        rows = sum(c.rows for c in committables)
        size = sum(int(c.payload.get("bytes", 0) or 0) for c in committables)
        with self._lock:
            app = self._app(batch.app_id)
            if batch.batch_id in app.counted:
                return
            app.counted.append(batch.batch_id)
            app.batches += 1
            app.rows += rows
            app.bytes += size
            app.last_batch_id, app.last_rows, app.last_bytes = batch.batch_id, rows, size
            app.latency_ms.append(seconds * 1000)
        log.info(
            "eosink %s: committed batch %d: %d rows, %d bytes (Arrow), %.1f ms",
            batch.app_id,
            batch.batch_id,
            rows,
            size,
            seconds * 1000,
        )

    def ambiguous(self, app_id: str) -> None:
        """Count a COMMIT whose reply was lost."""
        with self._lock:
            self._app(app_id).ambiguous += 1

    def resolved(self, app_id: str, how: Resolution) -> None:
        """Count how an ambiguous commit turned out."""
        with self._lock:
            self._app(app_id).resolved[how] += 1
        log.warning("eosink %s: an ambiguous commit was resolved: %s", app_id, how)

    def snapshot(self, app_id: str, in_doubt: int | None = None, oldest_s: float | None = None) -> MetricsSnapshot:
        """The figures of ``app_id`` (zeros if this process never committed for it)."""
        with self._lock:
            app = self._apps.get(app_id, _App())
            latency = sorted(app.latency_ms)
            return MetricsSnapshot(
                app_id=app_id,
                batches_committed=app.batches,
                rows_committed=app.rows,
                bytes_committed=app.bytes,
                last_batch_id=app.last_batch_id,
                last_batch_rows=app.last_rows,
                last_batch_bytes=app.last_bytes,
                commit_latency_p50_ms=round(latency[len(latency) // 2], 3) if latency else None,
                commit_latency_max_ms=round(latency[-1], 3) if latency else None,
                ambiguous_commits=app.ambiguous,
                ambiguous_resolved=dict(app.resolved),
                in_doubt=in_doubt,
                oldest_in_doubt_s=oldest_s,
            )

    def app_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._apps)
