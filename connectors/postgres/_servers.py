"""Every server the conninfo names, as ``eosink status`` shows them: role, system identifier, timeline, replication.

After a failover an operator wants to see at once which server is the primary, that the others
follow its timeline, which standbys are synchronous, and whether an old primary still takes
writes on an older timeline (split brain). Each server is asked on a connection of its own, in
parallel, read-only; one that does not answer is listed as unreachable, with the error.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import psycopg

from eosink.admin import ServerState
from eosink.connectors.postgres._connect import connect_to, server_addresses
from eosink.connectors.postgres._lineage import Lineage
from eosink.connectors.postgres._replication import Replication, read_replication
from eosink.connectors.postgres.config import PostgresConfig

__all__ = ["survey"]

_WALSENDERS = "SELECT application_name, state, sync_state FROM pg_stat_replication ORDER BY application_name"
_RECEIVER = "SELECT status FROM pg_stat_wal_receiver"


def survey(config: PostgresConfig) -> tuple[tuple[ServerState, ...], Replication | None]:
    """Each server of the conninfo, in its order, and the replication of the newest primary (None: none answered)."""
    addresses = server_addresses(config.conninfo)
    with ThreadPoolExecutor(max_workers=max(1, len(addresses)), thread_name_prefix="eosink-pg-status") as pool:
        answers = list(pool.map(lambda a: _ask(config, a[0], a[1]), addresses))
    primaries = [(lineage, replication) for _, lineage, replication in answers if lineage and not lineage.standby]
    newest = max(primaries, key=lambda p: p[0].timeline, default=None)
    states = []
    for state, lineage, _ in answers:
        if lineage is not None and newest is not None and newest[0].newer_than(lineage):
            if lineage.standby:
                state = replace(state, state=f"{state.state}; on an older timeline than the primary")
            else:
                state = replace(
                    state,
                    role="primary (zombie)",
                    state=f"split brain: {newest[0].address} was promoted over it (timeline {newest[0].timeline}); "
                    "eosink does not write here. Stop it, or rewind it (pg_rewind) into a standby",
                )
        states.append(state)
    return tuple(states), None if newest is None else newest[1]


def _ask(config: PostgresConfig, host: str, port: str) -> tuple[ServerState, Lineage | None, Replication | None]:
    address = f"{host}:{port}" if port else host
    try:
        conn, lineage = connect_to(config, host, port, True, any_role=True)
    except psycopg.Error as exc:
        return ServerState(address, "unreachable", "", config.scrub(_first_line(exc))), None, None
    with conn:
        identity = f"system {lineage.system_identifier}, timeline {lineage.timeline}"
        if lineage.standby:
            row = conn.execute(_RECEIVER).fetchone()
            receiving = "WAL receiver: " + (str(row[0]) if row and row[0] else "not running")
            return ServerState(address, "standby", identity, receiving), lineage, None
        replication = read_replication(conn)
        senders = [_sender(r) for r in conn.execute(_WALSENDERS).fetchall()]
        mode = "no standby streams" if replication.mode == "none" else f"{replication.mode} replication"
        state = mode + (f": {', '.join(senders)}" if senders else "")
        return ServerState(address, "primary", identity, state), lineage, replication


def _sender(row: tuple[Any, ...]) -> str:
    name, state, sync = row
    return f"{name or '?'} ({state or '?'}, {sync or 'sync state hidden'})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"
