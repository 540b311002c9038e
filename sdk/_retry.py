"""Riding out a short outage: a driver-side step retried through TransientError, for a bounded time.

A stream should not die on a blip that Spark's own clients ride out (a sink or the checkpoint's
store restarting, a connection dropped). Every driver-side step that is safe to repeat (checkpoint
reads and writes, fence, recover, commit, commit_status, abort, fetch_last_bundle) goes through
:func:`retry_transient`: capped exponential backoff, a warning per retry, and after
``timeout_s`` (``CommitPolicy.transient_timeout_s``, 60 s by default) the TransientError again,
saying how long it was tried. Executor-side errors are Spark's task retries' to handle.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

from eosink._waiting import backoff_s
from eosink.errors import TransientError

__all__ = ["GAVE_UP", "retry_transient"]

T = TypeVar("T")
log = logging.getLogger("eosink")

GAVE_UP = "eosink_retried_s"
"""Attribute of a TransientError that a retry gave up on: an outer retry does not start over with it."""


def retry_transient(
    what: str,
    call: Callable[[], T],
    *,
    timeout_s: float,
    backoff: float = 0.2,
    max_backoff: float = 5.0,
    retry_on: tuple[type[BaseException], ...] = (TransientError,),
    wrap: Callable[[BaseException], TransientError] | None = None,
    permanent: tuple[type[BaseException], ...] = (),
) -> T:
    """``call()``, retried while it raises one of ``retry_on``, for up to ``timeout_s`` after the first failure.

    ``wrap`` turns a caught error that is not a TransientError (e.g. an OSError) into one, for the log and
    the final raise; one of ``permanent`` (e.g. FileNotFoundError) is wrapped and raised at once. The final
    TransientError says how long the step was tried; it carries :data:`GAVE_UP`.
    """
    first: float | None = None
    attempt = 0
    while True:
        try:
            return call()
        except retry_on as caught:
            if getattr(caught, GAVE_UP, None) is not None:
                raise  # an inner retry has given up on it already
            exc = caught if isinstance(caught, TransientError) else (wrap(caught) if wrap else None)
            if exc is None:
                raise
            if isinstance(caught, permanent):
                raise exc from caught
            now = time.monotonic()
            first = now if first is None else first
            attempt += 1
            spent = now - first
            if spent >= timeout_s:
                final = TransientError(
                    f"{exc.problem.rstrip('.')} (tried {attempt} times over {spent:.0f} s).", exc.fix
                )
                setattr(final, GAVE_UP, spent)
                raise final from caught
            delay = min(backoff_s(attempt, backoff, max_backoff), max(timeout_s - spent, 0.0))
            log.warning(
                "eosink: %s failed (%s); retry %d in %.1f s (stops %.0f s after the first failure)",
                what,
                exc.problem,
                attempt,
                delay,
                timeout_s,
            )
            time.sleep(delay)
