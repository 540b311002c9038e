"""A background poll for the independent readers that judge fault tests and chaos runs (``audit`` modules)."""

from __future__ import annotations

import threading
from typing import TypeVar

__all__ = ["BackgroundPoll"]

_P = TypeVar("_P", bound="BackgroundPoll")


class BackgroundPoll:
    """:meth:`start` calls :meth:`poll_once` every ``interval_s`` in a daemon thread until :meth:`stop`. A failed
    round is noted in :attr:`errors` and the next one reads again: the store may be failing over, and a failure
    that outlasts the run is the final read's to report."""

    errors: list[str]
    _thread_name = "eosink-audit"

    def poll_once(self) -> None:
        raise NotImplementedError

    def start(self: _P, interval_s: float = 0.5) -> _P:
        self.__dict__.setdefault("errors", [])
        stop = self._stopping()

        def run() -> None:
            while not stop.wait(interval_s):
                try:
                    self.poll_once()
                except Exception as exc:  # a node down: the next round reads again
                    self.errors.append(f"poll: {exc}")

        thread = threading.Thread(target=run, name=self._thread_name, daemon=True)
        self.__dict__["_poll_thread"] = thread
        thread.start()
        return self

    def stop(self) -> None:
        self._stopping().set()
        thread: threading.Thread | None = self.__dict__.get("_poll_thread")
        if thread is not None:
            thread.join(timeout=60)

    def _stopping(self) -> threading.Event:
        event: threading.Event = self.__dict__.setdefault("_poll_stop", threading.Event())
        return event
