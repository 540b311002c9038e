"""The fault proxy makes real ambiguous commits against PostgreSQL."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from eosink.services.postgres import PostgresEndpoint
from eosink.services.proxy import FaultProxy

ProxyFactory = Callable[[str, int], FaultProxy]


def _via(endpoint: PostgresEndpoint, proxy: FaultProxy) -> str:
    return endpoint.url.replace(f"@{endpoint.host}:{endpoint.port}/", f"@127.0.0.1:{proxy.port}/")


@pytest.fixture
def table(postgres_endpoint: PostgresEndpoint) -> Iterator[sql.Identifier]:
    name = sql.Identifier(f"proxy_{uuid.uuid4().hex[:10]}")
    with psycopg.connect(postgres_endpoint.url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE TABLE {} (v text)").format(name))
        yield name
        conn.execute(sql.SQL("DROP TABLE {}").format(name))


def _settled_status(endpoint: PostgresEndpoint, xid: str, timeout_s: float = 10.0) -> str:
    """pg_xact_status of ``xid``, polled (bounded) while the server still reports it in progress."""
    deadline = time.monotonic() + timeout_s
    with psycopg.connect(endpoint.url, autocommit=True) as conn:
        while True:
            row = conn.execute("SELECT pg_xact_status(%s::xid8)", (xid,)).fetchone()
            assert row is not None
            if row[0] != "in progress" or time.monotonic() > deadline:
                return str(row[0])
            time.sleep(0.02)


def _count(endpoint: PostgresEndpoint, table: sql.Identifier) -> int:
    with psycopg.connect(endpoint.url, autocommit=True) as conn:
        row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()
        return int(row[0]) if row else -1


@pytest.mark.parametrize("wait_for_reply", [True, False], ids=["cut-at-reply", "cut-at-request"])
def test_ambiguous_commit_is_committed_on_server_while_client_sees_connection_error(
    postgres_endpoint: PostgresEndpoint, fault_proxy: ProxyFactory, table: sql.Identifier, wait_for_reply: bool
) -> None:
    """COMMIT goes through the proxy, the reply is cut: the client gets a connection error, the row is committed.

    Pass condition: ``commit()`` raises ``OperationalError``; the proxy cut exactly the COMMIT
    request; the transaction id captured before COMMIT settles to ``committed`` in
    ``pg_xact_status``; the row is visible to another connection.
    """
    proxy = fault_proxy(postgres_endpoint.host, postgres_endpoint.port)
    with psycopg.connect(_via(postgres_endpoint, proxy)) as conn:
        xid_row = conn.execute("SELECT pg_current_xact_id()::text").fetchone()
        assert xid_row is not None
        conn.execute(sql.SQL("INSERT INTO {} VALUES ('landed')").format(table))
        proxy.cut_after_request(b"COMMIT", wait_for_reply=wait_for_reply)
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
    assert proxy.stats.cuts == 1
    assert [b"COMMIT" in r for r in proxy.stats.requests_cut] == [True]
    assert _settled_status(postgres_endpoint, xid_row[0]) == "committed"
    assert _count(postgres_endpoint, table) == 1


def test_passthrough_forwards_everything(
    postgres_endpoint: PostgresEndpoint, fault_proxy: ProxyFactory, table: sql.Identifier
) -> None:
    """With no fault armed, a transaction through the proxy commits normally and nothing is cut."""
    proxy = fault_proxy(postgres_endpoint.host, postgres_endpoint.port)
    with psycopg.connect(_via(postgres_endpoint, proxy)) as conn:
        conn.execute(sql.SQL("INSERT INTO {} VALUES ('a'), ('b')").format(table))
        conn.commit()
    assert _count(postgres_endpoint, table) == 2
    assert proxy.stats.cuts == 0 and proxy.stats.connections == 1
    assert proxy.stats.bytes_to_server > 0 and proxy.stats.bytes_to_client > 0


def test_request_that_does_not_match_is_not_cut(
    postgres_endpoint: PostgresEndpoint, fault_proxy: ProxyFactory, table: sql.Identifier
) -> None:
    """An armed cut waits for its match: ROLLBACK passes, and the cut is still armed for COMMIT afterwards."""
    proxy = fault_proxy(postgres_endpoint.host, postgres_endpoint.port)
    proxy.cut_after_request(b"COMMIT")
    with psycopg.connect(_via(postgres_endpoint, proxy)) as conn:
        conn.execute(sql.SQL("INSERT INTO {} VALUES ('rolled back')").format(table))
        conn.rollback()
        conn.execute(sql.SQL("INSERT INTO {} VALUES ('kept')").format(table))
        with pytest.raises(psycopg.OperationalError):
            conn.commit()
    assert proxy.stats.cuts == 1
    assert _count(postgres_endpoint, table) == 1


def test_refuse_then_passthrough(postgres_endpoint: PostgresEndpoint, fault_proxy: ProxyFactory) -> None:
    """``refuse`` cuts the open connection and refuses new ones; ``passthrough`` serves again on the same port."""
    proxy = fault_proxy(postgres_endpoint.host, postgres_endpoint.port)
    url = _via(postgres_endpoint, proxy)
    with psycopg.connect(url, autocommit=True) as conn:
        proxy.refuse()
        with pytest.raises(psycopg.OperationalError):
            conn.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(url, connect_timeout=3)
    proxy.passthrough()
    with psycopg.connect(url, autocommit=True) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_delay_holds_traffic(postgres_endpoint: PostgresEndpoint, fault_proxy: ProxyFactory) -> None:
    """``delay(s)`` holds each chunk: a query round trip takes at least 0.6 s (one chunk each way, 0.3 s each)."""
    proxy = fault_proxy(postgres_endpoint.host, postgres_endpoint.port)
    with psycopg.connect(_via(postgres_endpoint, proxy), autocommit=True) as conn:
        proxy.delay(0.3)
        started = time.monotonic()
        assert conn.execute("SELECT 1").fetchone() == (1,)
        assert time.monotonic() - started >= 0.6
        proxy.delay(0)
