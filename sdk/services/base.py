"""The service template: provision once, start detached, check with the connectors' client, stop by PID.

A service subclass supplies four steps — :meth:`Service.external`, :meth:`Service.provision`,
:meth:`Service.launch` and :meth:`Service.check` — and the ``@final`` template methods
(:meth:`Service.up`, :meth:`Service.down`, :meth:`Service.endpoint`) own state, logs and
cleanup, so every service behaves alike:

* ``up`` is idempotent: a running instance is reused; otherwise the service is provisioned
  (cached, quick when done), started on fresh data and free ports, and its endpoint recorded
  in ``run/<name>/state.json`` (mode 0600: it may hold generated credentials);
* an endpoint given by environment variables (your own server) replaces the local one;
* ``down`` stops the recorded PID's process group and removes the state; logs stay.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import signal
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, final

from eosink.errors import ServiceError
from eosink.services._layout import cache_lock, provision_dir, run_dir
from eosink.services._process import Proc, stop

__all__ = ["Endpoint", "Service"]

log = logging.getLogger("eosink.services")


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """How clients reach a service. Subclasses are frozen dataclasses; secrets use ``repr=False``."""

    def to_json(self) -> dict[str, Any]:
        """A JSON-able dict (secrets included: only for the 0600 state file)."""
        return dataclasses.asdict(self)

    def env(self) -> dict[str, str]:
        """The environment variables that point tests and examples at this endpoint."""
        return {}


E = TypeVar("E", bound=Endpoint)


class Service(ABC, Generic[E]):
    """One real server the tests, examples and benchmarks use."""

    #: Short name used by the CLI, Make targets and the cache layout.
    name: ClassVar[str]
    #: The endpoint dataclass this service hands out.
    endpoint_type: ClassVar[type[Endpoint]]
    #: Environment variables that select your own server instead of the local one.
    override_vars: ClassVar[tuple[str, ...]] = ()
    #: Seconds a start may take before it is declared failed.
    start_timeout_s: ClassVar[float] = 120.0
    #: The signal that asks the server for a clean, prompt shutdown.
    stop_signal: ClassVar[signal.Signals] = signal.SIGTERM

    @property
    def home(self) -> Path:
        """What provisioning produced (kept across runs)."""
        return provision_dir(self.name)

    @property
    def run(self) -> Path:
        """The running instance's directory: ``data/``, the log, ``state.json``."""
        return run_dir(self.name)

    @property
    def data(self) -> Path:
        """The running instance's data directory (fresh at every start)."""
        return self.run / "data"

    @property
    def log_path(self) -> Path:
        """The server's output (the previous run's is kept as ``.1``)."""
        return self.run / f"{self.name}.log"

    # -- the steps a service supplies --------------------------------------------------

    @abstractmethod
    def external(self) -> E | None:
        """The endpoint named by :attr:`override_vars`, or None to use a local server."""

    @abstractmethod
    def provision(self) -> None:
        """Download and build what the server needs, into :attr:`home`. Idempotent and cached."""

    @abstractmethod
    def launch(self) -> tuple[Proc, E]:
        """Start the server on fresh :attr:`data`, wait until it serves, return its process and endpoint."""

    @abstractmethod
    def check(self, endpoint: E) -> str:
        """Exercise the server with the client the connectors use; a one-line summary, or :class:`ServiceError`."""

    @final
    def provisioned(self) -> None:
        """:meth:`provision`, alone in the cache: parallel workers wait for one build instead of racing."""
        with cache_lock(f"provision-{self.name}"):
            self.provision()

    def after_stop(self) -> None:
        """Clean up what the stopped server left outside :attr:`run` (optional)."""

    # -- the template --------------------------------------------------------------------

    @final
    def up(self) -> E:
        """Make the service available: your own server, the running local one, or a new local one."""
        external = self.external()
        if external is not None:
            log.info("[%s] using your server from %s", self.name, ", ".join(self.override_vars))
            return external
        running = self._running()
        if running is not None:
            log.info("[%s] already running (pid %d)", self.name, running[0].pid)
            return running[1]
        started = time.monotonic()
        log.info("[%s] provisioning (cached in %s)", self.name, self.home)
        self.provisioned()
        log.info("[%s] starting", self.name)
        self._fresh_run_dir()
        proc, endpoint = self.launch()
        self._save(proc, endpoint)
        log.info("[%s] up in %.1f s (pid %d); log: %s", self.name, time.monotonic() - started, proc.pid, self.log_path)
        return endpoint

    @final
    def down(self) -> bool:
        """Stop the local server if one runs; True if one was stopped."""
        running = self._running()
        state_file = self.run / "state.json"
        if running is None:
            state_file.unlink(missing_ok=True)
            return False
        stop(running[0], what=self.name, sig=self.stop_signal)
        state_file.unlink(missing_ok=True)
        self.after_stop()
        log.info("[%s] stopped (pid %d)", self.name, running[0].pid)
        return True

    @final
    def endpoint(self) -> E:
        """Where the service is: your own server or the running local one; else a :class:`ServiceError`."""
        external = self.external()
        if external is not None:
            return external
        running = self._running()
        if running is None:
            names = " or ".join(self.override_vars)
            yours = f", or point the tests at your own server with {names}" if names else ""
            raise ServiceError(
                f"The {self.name} service is not running.",
                f"start it with `make services-up` (or `eosink services up {self.name}`){yours}.",
            )
        return running[1]

    @final
    def pid(self) -> int | None:
        """The PID of the running local server, if any."""
        running = self._running()
        return running[0].pid if running else None

    # -- state ---------------------------------------------------------------------------

    def _running(self) -> tuple[Proc, E] | None:
        state_file = self.run / "state.json"
        try:
            state = json.loads(state_file.read_text())
        except (OSError, ValueError):
            return None
        proc = Proc(int(state["pid"]), int(state["start_time"]))
        if not proc.alive():
            return None
        endpoint: E = self.endpoint_type(**state["endpoint"])  # type: ignore[assignment]
        return proc, endpoint

    def _save(self, proc: Proc, endpoint: E) -> None:
        state = {"pid": proc.pid, "start_time": proc.start_time, "endpoint": endpoint.to_json()}
        state_file = self.run / "state.json"
        tmp = state_file.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(state, out, indent=1)
        os.replace(tmp, state_file)

    def _fresh_run_dir(self) -> None:
        if self.data.exists():
            shutil.rmtree(self.data)
        self.data.mkdir(parents=True)
        if self.log_path.exists():
            os.replace(self.log_path, self.log_path.with_suffix(".log.1"))
