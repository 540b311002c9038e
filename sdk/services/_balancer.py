"""A round-robin TCP balancer: one address in front of several servers, as a load balancer is in front of a cluster.

Each client connection goes to the next backend in turn. A backend is skipped when it refuses the connection, or
when its health port refuses one: that port is the server's own (past any fault proxy in front of it), so a server
that was killed is skipped at once although the proxy in front of it still listens, as a load balancer's TCP
health check skips it. A server that is stopped (SIGSTOP) still accepts connections in its kernel, so it is not
skipped: clients time out on it, as behind a real balancer until its health check gives up. With every backend
skipped, the client's connection is closed at once.

Bytes are copied unchanged both ways, so an HTTP client's ``Host`` header (which SigV4 signs) passes as sent. The
balancer runs an asyncio loop in a daemon thread, as :class:`~eosink.services.proxy.FaultProxy` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

__all__ = ["Backend", "Balancer", "BalancerStats"]

CHUNK = 65536
#: How long a connection to a backend (or its health port) may take before the backend is skipped.
CONNECT_TIMEOUT_S = 2.0
#: How long closing waits for the connections' handlers to end after their sockets were cut.
SHUTDOWN_GRACE_S = 5.0


@dataclass(frozen=True)
class Backend:
    """A server behind the balancer: where connections go, and optionally a port of its own that must accept a
    connection first (its health check)."""

    host: str
    port: int
    health_port: int | None = None


@dataclass
class BalancerStats:
    """What the balancer has done so far: connections per backend (by index), skips, clients turned away."""

    connections: list[int] = field(default_factory=list)
    skipped: list[int] = field(default_factory=list)
    turned_away: int = 0


class Balancer:
    """Spreads connections to ``127.0.0.1:port`` across ``backends`` round-robin (see the module docstring)."""

    def __init__(self, backends: Sequence[Backend], *, listen_port: int = 0, listen_host: str = "127.0.0.1") -> None:
        if not backends:
            raise ValueError("a balancer needs at least one backend")
        if not listen_host.startswith("127."):
            raise ValueError(f"a balancer listens on loopback only, not {listen_host!r}")
        self.backends = tuple(backends)
        self.listen_host = listen_host
        self._listen_port = listen_port
        self._next = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="eosink-balancer", daemon=True)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats = BalancerStats([0] * len(self.backends), [0] * len(self.backends))

    def __repr__(self) -> str:
        targets = ", ".join(f"{b.host}:{b.port}" for b in self.backends)
        return f"Balancer({self.listen_host}:{self._listen_port} -> {targets})"

    @property
    def port(self) -> int:
        """The port clients connect to (fixed at the first start)."""
        return self._listen_port

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> Balancer:
        """Start listening; returns self."""
        if not self._thread.is_alive():
            self._thread.start()
        self._call(self._listen())
        return self

    def close(self) -> None:
        """Stop listening, cut every connection, stop the loop."""
        if self._thread.is_alive():
            self._call(self._shutdown())
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)
        if not self._thread.is_alive() and not self._loop.is_closed():
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self._loop.close()

    def __enter__(self) -> Balancer:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- the loop side ---------------------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, None]) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, self.listen_host, self._listen_port)
            self._listen_port = self._server.sockets[0].getsockname()[1]

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        if self._tasks:  # the connections' handlers end once their sockets are gone
            await asyncio.wait(list(self._tasks), timeout=SHUTDOWN_GRACE_S)

    def _turns(self) -> list[int]:
        """The backends' indexes in the order this connection tries them: from the next in turn on."""
        first = self._next
        self._next = (first + 1) % len(self.backends)
        return [(first + k) % len(self.backends) for k in range(len(self.backends))]

    async def _connect(self) -> tuple[int, asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the first backend in turn that takes one (and whose health port does)."""
        for i in self._turns():
            backend = self.backends[i]
            try:
                if backend.health_port is not None:
                    _, probe = await asyncio.wait_for(
                        asyncio.open_connection(backend.host, backend.health_port), CONNECT_TIMEOUT_S
                    )
                    probe.transport.abort()
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection(backend.host, backend.port), CONNECT_TIMEOUT_S
                )
            except (OSError, asyncio.TimeoutError):
                self.stats.skipped[i] += 1
                continue
            self.stats.connections[i] += 1
            return i, reader, writer
        return None

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        with contextlib.suppress(asyncio.CancelledError):  # closed with the loop: nothing to report
            await self._forward(client_r, client_w)

    async def _forward(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        self._writers.add(client_w)
        try:
            found = await self._connect()
            if found is None:
                self.stats.turned_away += 1
                return
            _, server_r, server_w = found
            self._writers.add(server_w)
            try:
                await asyncio.gather(_copy(client_r, server_w), _copy(server_r, client_w))
            finally:
                self._writers.discard(server_w)
                server_w.transport.abort()
        finally:
            self._writers.discard(client_w)
            client_w.transport.abort()


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of stream, then half-close the other side; a reset ends the whole connection."""
    try:
        while chunk := await reader.read(CHUNK):
            writer.write(chunk)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        writer.transport.abort()
        return
    if writer.can_write_eof():
        with contextlib.suppress(OSError):
            writer.write_eof()
