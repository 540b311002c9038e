"""Connecting to the right server: the one given, or, of a primary and its standbys, the newest primary.

A conninfo may name several servers (``host=a,b,c port=1,2,3``, libpq's multi-host form), as
Patroni, CloudNativePG and the managed services' clients do, so that clients find the primary
after a failover. libpq takes the first one that accepts the connection (with
``target_session_attrs=read-write``: the first primary). That is not enough for exactly-once:
after a failover the old primary may come back (paused, partitioned, restarted by hand) and still
accept writes, on the timeline it had (split brain). Work written there is lost to the new
primary's readers.

So with several servers, each is asked at once, and the connection goes to the read-write server
on the newest timeline of the cluster (:mod:`._lineage`); a read-write server on an older
timeline is a zombie old primary, named in a warning and never written to. A server that does not
answer within the connect timeout is passed over; with none read-write the last error stands (a
TransientError: retried while a standby is promoted). With one server, libpq connects as usual.

:func:`newer_primary` asks the other servers again, for the driver's long-lived connection: one
opened before a failover still reaches the old primary, which may answer after it resumed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import suppress
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from eosink.connectors.postgres._lineage import Lineage, read_lineage
from eosink.connectors.postgres._pool import Conn
from eosink.connectors.postgres.config import PostgresConfig
from eosink.errors import ConfigurationError

__all__ = ["PROBE_TIMEOUT_S", "connect_to", "newer_primary", "open_connection", "server_addresses", "warn_zombie"]

log = logging.getLogger("eosink.postgres")

PROBE_TIMEOUT_S = 3.0
"""The longest :func:`newer_primary` waits for the other servers (a paused one never answers)."""

_warned: set[tuple[str, int, int]] = set()
_warned_lock = threading.Lock()


def server_addresses(conninfo: str) -> list[tuple[str, str]]:
    """The (host, port) pairs a conninfo names, in order (one pair for a single server)."""
    params = conninfo_to_dict(conninfo)
    hosts = str(params.get("host") or params.get("hostaddr") or "").split(",")
    ports = str(params.get("port") or "").split(",")
    if len(ports) == 1:
        ports = ports * len(hosts)
    return list(zip(hosts, ports, strict=False))


def connect_to(
    config: PostgresConfig, host: str, port: str, autocommit: bool, *, any_role: bool = False
) -> tuple[Conn, Lineage]:
    """A connection to exactly ``host:port`` of the conninfo, with its server's lineage (``any_role``: a standby
    too, whatever ``target_session_attrs`` the conninfo asks for)."""
    extra = {"target_session_attrs": "any"} if any_role else {}
    single = make_conninfo(config.conninfo, host=host, port=port or None, hostaddr=None, **extra)
    conn: Conn = psycopg.connect(single, autocommit=autocommit, **config.connect_kwargs())
    conn.prepare_threshold = None  # no server-side prepared statements (see open_connection)
    try:
        lineage = read_lineage(conn)
        if not autocommit:
            conn.rollback()  # the read opened a transaction: the caller starts its own
    except BaseException:
        conn.close()
        raise
    return conn, lineage


def open_connection(config: PostgresConfig, autocommit: bool) -> tuple[Conn, Lineage | None]:
    """A connection for the sink and, with several servers, the lineage of the one chosen (else None)."""
    addresses = server_addresses(config.conninfo)
    if len(addresses) <= 1:
        conn: Conn = psycopg.connect(config.conninfo, autocommit=autocommit, **config.connect_kwargs())
        # No server-side prepared statements: they break behind PgBouncer's transaction pooling, and the
        # sink's statements are few and cheap to plan.
        conn.prepare_threshold = None
        return conn, None
    answers, errors = _ask_all(config, addresses, autocommit)
    primaries = [(conn, lineage) for conn, lineage in answers if not lineage.standby]
    for conn, lineage in answers:
        if lineage.standby:
            conn.close()
    if not primaries:
        for conn, _ in answers:
            conn.close()
        if errors:
            raise errors[0]
        raise psycopg.OperationalError(
            f"none of the {len(addresses)} servers of the conninfo is a primary (read-write): a failover is under way"
        )
    chosen = _newest(primaries)
    for conn, _ in primaries:
        if conn is not chosen[0]:
            conn.close()
    return chosen


def _ask_all(
    config: PostgresConfig, addresses: Sequence[tuple[str, str]], autocommit: bool
) -> tuple[list[tuple[Conn, Lineage]], list[psycopg.Error]]:
    """Connect to every server at once; the answers (in the conninfo's order) and the errors."""
    pool = ThreadPoolExecutor(max_workers=len(addresses), thread_name_prefix="eosink-pg-connect")
    try:
        futures = [pool.submit(connect_to, config, host, port, autocommit) for host, port in addresses]
        wait(futures)
    finally:
        pool.shutdown(wait=False)
    answers: list[tuple[Conn, Lineage]] = []
    errors: list[psycopg.Error] = []
    for future in futures:
        exc = future.exception()
        if exc is None:
            answers.append(future.result())
        elif isinstance(exc, psycopg.Error):
            errors.append(exc)
        else:
            for conn, _ in answers:
                conn.close()
            raise exc
    return answers, errors


def _newest(primaries: list[tuple[Conn, Lineage]]) -> tuple[Conn, Lineage]:
    """The primary on the newest timeline; the others are zombies of an older one (warned once each)."""
    clusters = {lineage.system_identifier for _, lineage in primaries}
    if len(clusters) > 1:
        for conn, _ in primaries:
            conn.close()
        named = ", ".join(f"{lineage.address}: system {lineage.system_identifier}" for _, lineage in primaries)
        raise ConfigurationError(
            f"The conninfo names servers of different PostgreSQL clusters, each a primary ({named}).",
            "List only the servers of one cluster (its primary and standbys) in the conninfo.",
        )
    chosen = max(primaries, key=lambda answer: answer[1].timeline)
    for _, lineage in primaries:
        if lineage.timeline < chosen[1].timeline:
            warn_zombie(lineage, chosen[1])
    return chosen


def warn_zombie(zombie: Lineage, newest: Lineage) -> None:
    """Warn, once per server and timeline, that ``zombie`` took writes after ``newest`` was promoted over it."""
    key = (zombie.address, zombie.system_identifier, zombie.timeline)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(
        "eosink: %s still accepts writes, but %s was promoted after it: the old primary is a zombie (split brain); "
        "eosink writes to the newest timeline only. Stop or rewind the old primary (pg_rewind) and make it a standby.",
        zombie,
        newest,
    )


def newer_primary(config: PostgresConfig, current: Lineage) -> Lineage | None:
    """A primary of the same cluster on a newer timeline than ``current``, among the conninfo's other servers.

    Asked within :data:`PROBE_TIMEOUT_S`: a server that does not answer in time is passed over.
    None with a single server, or when ``current`` is the newest primary that answered.
    """
    addresses = [a for a in server_addresses(config.conninfo) if f"{a[0]}:{a[1]}" != current.address]
    if len(addresses) == len(server_addresses(config.conninfo)) or not addresses:
        return None  # one server, or ``current`` is not one of the conninfo's (reached some other way)
    pool = ThreadPoolExecutor(max_workers=len(addresses), thread_name_prefix="eosink-pg-probe")
    try:
        futures = [pool.submit(connect_to, config, host, port, True) for host, port in addresses]
        done, _ = wait(futures, timeout=PROBE_TIMEOUT_S)
    finally:
        pool.shutdown(wait=False)  # a paused server's thread ends when its connect times out
    newest: Lineage | None = None
    for future in futures:
        if future not in done or future.exception() is not None:
            if future not in done:
                future.add_done_callback(_close_late)
            continue
        conn, lineage = future.result()
        conn.close()
        if (
            not lineage.standby
            and lineage.newer_than(current)
            and (newest is None or lineage.timeline > newest.timeline)
        ):
            newest = lineage
    return newest


def _close_late(future: Any) -> None:
    """Close a probe's connection that was made after :func:`newer_primary` stopped waiting for it."""
    with suppress(Exception):
        if future.exception() is None:
            future.result()[0].close()
