"""Bounded waiting: poll a condition until it holds, and the backoff between retries.

The one place eosink waits for something: tests, the service harness and the coordinator all
poll with a bound (never a fixed sleep as synchronisation), and retry with the same capped
exponential backoff.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["backoff_s", "wait_until"]


def backoff_s(attempt: int, base_s: float, max_s: float) -> float:
    """The pause before retry ``attempt`` (1, 2, ...): ``base_s`` doubled each time, at most ``max_s``."""
    return float(min(base_s * 2 ** max(attempt - 1, 0), max_s))


def wait_until(
    predicate: Callable[[], bool],
    timeout_s: float,
    *,
    interval_s: float = 0.01,
    max_interval_s: float = 0.25,
) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout_s`` has passed (False).

    The pause between polls starts at ``interval_s`` and grows by half each time up to
    ``max_interval_s``, so a quick condition is seen at once and a slow one costs few polls.
    The predicate is asked once more at the deadline.
    """
    deadline = time.monotonic() + timeout_s
    delay = interval_s
    while True:
        if predicate():
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return bool(predicate())
        time.sleep(min(delay, remaining))
        delay = min(delay * 1.5, max_interval_s)
