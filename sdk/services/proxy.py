"""A TCP fault proxy: sits in front of any server and passes, cuts, delays or refuses connections.

Clients connect to the proxy's port on 127.0.0.1 instead of the server's. Faults are switched
from the test, at any time, from any thread:

* :meth:`FaultProxy.passthrough` — forward everything (the default);
* :meth:`FaultProxy.cut_after_request` — the next client request containing given bytes (say
  ``b"COMMIT"``, or matching a ``re.Pattern[bytes]``) is forwarded to the server and its reply
  is dropped: the client's connection is cut when the server answers (so the request has taken
  effect when the client sees the connection error: an *ambiguous commit*), or at once with
  ``wait_for_reply=False`` (the outcome may then still be in progress);
* :meth:`FaultProxy.cut_before_request` — the next matching request never reaches the server:
  both sides are cut instead (a lost request: the server rolls back what the session had open);
* :meth:`FaultProxy.hold_request` — the next matching request reaches the server late (after its client
  may have given up and moved on: a delayed request), and the connection's later requests wait behind it;
* :meth:`FaultProxy.delay` — hold every chunk, both ways, for a while;
* :meth:`FaultProxy.refuse` — stop listening: new connections are refused; open ones are cut;
* :meth:`FaultProxy.cut_all` — cut every open connection now.

It matches plain bytes, so request matching needs an unencrypted protocol; under TLS use
:meth:`FaultProxy.cut_all`. A server that tells clients its own address (Kafka's advertised
listeners) is only partly proxied, unless it advertises the proxy's port
(:class:`eosink.services.kafka.KafkaEndpoint` has such a listener; ``listen_port`` fixes the
port). The proxy runs an asyncio loop in a daemon thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

__all__ = ["FaultProxy", "ProxyStats", "RequestMatch"]

RequestMatch = bytes | re.Pattern[bytes]
"""What picks a request: bytes it contains, or a regular expression it matches somewhere (for
binary protocols whose requests are told apart by fields that are not adjacent)."""

CHUNK = 65536
SERVER_GRACE_S = 10.0


@dataclass
class ProxyStats:
    """What the proxy has seen and done so far."""

    connections: int = 0
    refused: int = 0
    cuts: int = 0
    requests_cut: list[bytes] = field(default_factory=list)
    requests_held: list[bytes] = field(default_factory=list)
    """Requests :meth:`FaultProxy.hold_request` held, once each was delivered."""
    holding: int = 0
    """Requests being held right now."""
    bytes_to_server: int = 0
    bytes_to_client: int = 0


@dataclass(eq=False)
class _Conn:
    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    cut: bool = False
    finishing: bool = False
    """Cut when the reply comes: the rest of the cut request (an HTTP body sent after its headers) still goes on."""
    held: bool = False
    """A request of this connection was held: the server side stays open for its reply after the client leaves."""


class FaultProxy:
    """A proxy on ``127.0.0.1:port`` in front of ``target_host:target_port``.

    ``listen_host`` may be another loopback address (``127.0.0.2``): a client that reaches a TLS server
    through it checks the server's certificate against a name the certificate does not carry.
    """

    def __init__(
        self, target_host: str, target_port: int, *, listen_port: int = 0, listen_host: str = "127.0.0.1"
    ) -> None:
        if not listen_host.startswith("127."):
            raise ValueError(f"a fault proxy listens on loopback only, not {listen_host!r}")
        self.target = (target_host, target_port)
        self._listen_port = listen_port
        self.listen_host = listen_host
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="eosink-fault-proxy", daemon=True)
        self._server: asyncio.Server | None = None
        self._conns: set[_Conn] = set()
        self._lock = threading.Lock()
        self._match: RequestMatch | None = None
        self._cuts_left = 0
        self._wait_for_reply = True
        self._drop_request = False
        self._skip = 0
        self._tasks: set[asyncio.Task[None]] = set()
        self._delay_s = 0.0
        self._hold: tuple[RequestMatch, int, float] | None = None
        self._cut_event = threading.Event()
        self._held_event = threading.Event()
        self._release = threading.Event()
        self.stats = ProxyStats()

    def __repr__(self) -> str:
        return f"FaultProxy({self.listen_host}:{self._listen_port} -> {self.target[0]}:{self.target[1]})"

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> FaultProxy:
        """Start listening; returns self. The port is fixed at the first start."""
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
            # Connections still open past the shutdown's grace: end them here, on the stopped loop, so that no
            # handler is left to run its cleanup on a closed loop when it is garbage-collected.
            pending = asyncio.all_tasks(self._loop)
            for task in pending:
                task.cancel()
            if pending:
                self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    @property
    def port(self) -> int:
        """The port clients connect to."""
        return self._listen_port

    # -- faults ----------------------------------------------------------------------------

    def passthrough(self) -> None:
        """Forward everything; listen again if refusing."""
        with self._lock:
            self._match, self._cuts_left, self._delay_s, self._hold = None, 0, 0.0, None
        self._call(self._listen())

    def cut_after_request(
        self, match: RequestMatch = b"", *, times: int = 1, wait_for_reply: bool = True, skip: int = 0
    ) -> None:
        """Arm: the next ``times`` client requests containing ``match`` reach the server; their replies do not.

        The client's connection is cut when the server's reply arrives (``wait_for_reply``), or
        right after the request is forwarded. The first ``skip`` matching requests pass untouched,
        so ``match=b"", skip=k`` cuts the (k+1)-th request from now, whatever it is.
        """
        with self._lock:
            self._match, self._cuts_left, self._wait_for_reply = match, times, wait_for_reply
            self._drop_request, self._skip = False, skip
        self._cut_event.clear()

    def cut_before_request(self, match: RequestMatch = b"", *, times: int = 1) -> None:
        """Arm: the next ``times`` client requests containing ``match`` are dropped and both sides cut."""
        with self._lock:
            self._match, self._cuts_left, self._drop_request, self._skip = match, times, True, 0
        self._cut_event.clear()

    def hold_request(self, match: RequestMatch, seconds: float, *, times: int = 1) -> None:
        """Arm: the next ``times`` client requests matching ``match`` reach the server ``seconds`` late.

        The connection's later requests queue behind the held one, as on one TCP stream. A client that gives up
        meanwhile and closes the connection does not stop it: the request is delivered anyway, and the server
        side stays open for its reply (dropped), as a request delayed in the network arrives after its sender
        has moved on. :meth:`wait_for_held` says when one was delivered; :meth:`release_held` delivers the ones
        held now at once (a test that orders the late request after some step of its own).
        """
        with self._lock:
            self._hold = (match, times, seconds)
        self._held_event.clear()
        self._release.clear()

    def release_held(self) -> None:
        """Deliver the requests held now without waiting out the rest of their hold."""
        self._release.set()

    def wait_for_held(self, timeout_s: float) -> bool:
        """Block until a request armed by :meth:`hold_request` was delivered (or ``timeout_s`` passes)."""
        return self._held_event.wait(timeout_s)

    def delay(self, seconds: float) -> None:
        """Hold every forwarded chunk, both ways, ``seconds`` long (0 to stop)."""
        with self._lock:
            self._delay_s = seconds

    def refuse(self) -> None:
        """Stop listening (connections are refused) and cut open connections."""
        self._call(self._stop_listening())
        self.cut_all()

    def cut_all(self) -> int:
        """Cut every open connection now; returns how many."""
        return self._call(self._cut_all())

    def wait_for_cut(self, timeout_s: float) -> bool:
        """Block until an armed request cut has happened (or ``timeout_s`` passes)."""
        return self._cut_event.wait(timeout_s)

    # -- the loop side ---------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, int]) -> int:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    async def _listen(self) -> int:
        if self._server is None:
            self._server = await asyncio.start_server(self._handle, self.listen_host, self._listen_port)
            self._listen_port = self._server.sockets[0].getsockname()[1]
        return 0

    async def _stop_listening(self) -> int:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        return 0

    async def _cut_all(self) -> int:
        conns = list(self._conns)
        for conn in conns:
            conn.cut = True
            conn.client.transport.abort()
            conn.server.transport.abort()
        self.stats.cuts += len(conns)
        return len(conns)

    async def _shutdown(self) -> int:
        await self._stop_listening()
        cut = await self._cut_all()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=SERVER_GRACE_S)
        return cut

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            self.stats.refused += 1
            client_w.transport.abort()
            return
        conn = _Conn(client_w, server_w)
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._conns.add(conn)
        self.stats.connections += 1
        try:
            await asyncio.gather(self._upstream(conn, client_r), self._downstream(conn, server_r))
        finally:
            self._conns.discard(conn)
            client_w.transport.abort()
            server_w.transport.abort()

    def _should_cut(self, chunk: bytes) -> tuple[bool, bool, bool]:
        """(cut this request?, only when its reply arrives?, drop it instead of forwarding?)"""
        with self._lock:
            if self._match is None or self._cuts_left <= 0 or not _matches(self._match, chunk):
                return False, False, False
            if self._skip > 0:
                self._skip -= 1
                return False, False, False
            self._cuts_left -= 1
            return True, self._wait_for_reply, self._drop_request

    def _should_hold(self, chunk: bytes) -> float:
        """How long to hold this request (0: not at all)."""
        with self._lock:
            if self._hold is None or not _matches(self._hold[0], chunk):
                return 0.0
            match, left, seconds = self._hold
            self._hold = (match, left - 1, seconds) if left > 1 else None
            return seconds

    async def _held_for(self, seconds: float) -> None:
        """Wait ``seconds``, or less once :meth:`release_held` was called."""
        loop = asyncio.get_running_loop()
        end = loop.time() + seconds
        while not self._release.is_set() and (left := end - loop.time()) > 0:
            await asyncio.sleep(min(left, 0.05))

    async def _pause(self) -> None:
        with self._lock:
            delay = self._delay_s
        if delay > 0:
            await asyncio.sleep(delay)

    async def _upstream(self, conn: _Conn, client_r: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            while chunk := await client_r.read(CHUNK):
                await self._pause()
                if conn.cut and not conn.finishing:
                    return
                if conn.finishing:  # the rest of the request that is cut when its reply comes
                    conn.server.write(chunk)
                    await conn.server.drain()
                    self.stats.bytes_to_server += len(chunk)
                    continue
                if held_s := self._should_hold(chunk):
                    conn.held = True
                    self.stats.holding += 1
                    await self._held_for(held_s)
                    self.stats.holding -= 1
                    conn.server.write(chunk)
                    await conn.server.drain()
                    self.stats.bytes_to_server += len(chunk)
                    self.stats.requests_held.append(chunk)
                    self._held_event.set()
                    continue
                cut, on_reply, drop = self._should_cut(chunk)
                if cut:
                    conn.cut = True  # from now on the server's replies are dropped
                    self.stats.cuts += 1
                    self.stats.requests_cut.append(chunk)
                if drop:
                    conn.server.transport.abort()
                    self._cut_client(conn)
                    return
                conn.server.write(chunk)
                await conn.server.drain()
                self.stats.bytes_to_server += len(chunk)
                if cut:
                    if not on_reply:
                        self._cut_client(conn)
                        return
                    conn.finishing = True  # a request may come in several chunks: the server gets all of it
        if not conn.cut and not conn.held and conn.server.can_write_eof():
            with contextlib.suppress(OSError):
                conn.server.write_eof()

    async def _downstream(self, conn: _Conn, server_r: asyncio.StreamReader) -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
            while True:
                timeout = SERVER_GRACE_S if conn.cut else None
                chunk = await asyncio.wait_for(server_r.read(CHUNK), timeout)
                if not chunk:
                    break
                if not conn.cut:
                    await self._pause()
                if conn.cut:
                    self._cut_client(conn)  # the server answered the cut request: its reply is dropped
                    return
                conn.client.write(chunk)
                await conn.client.drain()
                self.stats.bytes_to_client += len(chunk)
        if conn.cut:
            self._cut_client(conn)
        elif conn.client.can_write_eof():
            with contextlib.suppress(OSError):
                conn.client.write_eof()

    def _cut_client(self, conn: _Conn) -> None:
        conn.client.transport.abort()
        self._cut_event.set()


def _matches(match: RequestMatch, chunk: bytes) -> bool:
    return match in chunk if isinstance(match, bytes) else match.search(chunk) is not None
