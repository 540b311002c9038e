"""A long history against a real PostgreSQL: every query a start, a fetch_last_bundle and a commit send uses an
index (none scans the control tables' history), and the retention cleanup keeps the tables bounded
(see ``tests/connectors/history.py``)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from psycopg.types.json import Jsonb

from eosink.connectors.postgres import PostgresConfig, PostgresSink

from ..history import HISTORY, SHORT, History, measure, report, synthetic_bundle
from .conftest import HARNESS

HISTORY_TABLES = ("bundles", "txns")


def write_history(config: PostgresConfig, history: History, age_days: float = 30.0) -> None:
    """Bundles and committed txns rows of batches 0 .. last, as commits leave them, ``age_days`` old (the newest
    batch one day old), written in bulk on the server (generate_series)."""
    schema = config.control_schema
    first = synthetic_bundle(history, 0).to_json()
    with psycopg.connect(config.conninfo, autocommit=True) as conn:
        conn.execute(
            sql.SQL(
                "INSERT INTO {b} (app_id, batch_id, bundle, committed_at) "
                "SELECT %(app)s, n, jsonb_set(jsonb_set(%(first)s, '{{batch,batch_id}}', to_jsonb(n)), "
                "'{{committables}}', jsonb_build_array('synthetic-' || n)), "
                "now() - make_interval(days => 1) - make_interval(secs => (%(last)s - n) * %(step)s) "
                "FROM generate_series(0, %(last)s) AS n"
            ).format(b=sql.Identifier(schema, "bundles")),
            {"app": history.app_id, "first": Jsonb(first), "last": history.last, "step": age_days * 86400 / HISTORY},
        )
        conn.execute(
            sql.SQL(
                "INSERT INTO {t} (id, app_id, batch_id, epoch, participant, attempt, state, transactional, rows, "
                "created_at, updated_at) "
                "SELECT 'synthetic-' || n || '-' || %(app)s, %(app)s, n, 1, 0, 'a', 'committed', true, 10, "
                "now() - make_interval(days => 1) - make_interval(secs => (%(last)s - n) * %(step)s), "
                "now() - make_interval(days => 1) - make_interval(secs => (%(last)s - n) * %(step)s) "
                "FROM generate_series(0, %(last)s) AS n"
            ).format(t=sql.Identifier(schema, "txns")),
            {"app": history.app_id, "last": history.last, "step": age_days * 86400 / HISTORY},
        )
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "bundles")))
        conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, "txns")))
    found = PostgresSink(config).fetch_last_bundle(history.app_id)
    assert found == synthetic_bundle(history, history.last), found


class StatementLog:
    """Records the statements the sink sends (to EXPLAIN the reads among them) and counts them per step."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.sent: list[tuple[Any, Any]] = []
        real = psycopg.Connection.execute

        def execute(conn: Any, query: Any, params: Any = None, **kwargs: Any) -> Any:
            self.sent.append((query, params))
            return real(conn, query, params, **kwargs)

        monkeypatch.setattr(psycopg.Connection, "execute", execute)

    def __call__(self) -> Counter[str]:
        return Counter({"statements": len(self.sent)})


def _plan_nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _plan_nodes(child)


def history_scans(conn: psycopg.Connection[Any], schema: str, sent: list[tuple[Any, Any]]) -> tuple[int, list[str]]:
    """How many of ``sent`` read a history table (bundles or txns), and those whose plan reads it whole (a
    sequential scan)."""
    found: list[str] = []
    examined = 0
    for query, params in sent:
        text = query.as_string(conn) if isinstance(query, sql.Composable) else str(query)
        reads_history = any(f'"{schema}"."{table}"' in text for table in HISTORY_TABLES)
        if not reads_history or not text.lstrip().upper().startswith(("SELECT", "WITH")):
            continue
        plan = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + sql.SQL(text), params).fetchone()
        assert plan is not None
        examined += 1
        found += [
            text
            for node in _plan_nodes(plan[0][0]["Plan"])
            if node.get("Node Type") == "Seq Scan" and node.get("Relation Name") in HISTORY_TABLES
        ]
    return examined, found


@pytest.fixture
def config(names: dict[str, str]) -> PostgresConfig:
    return PostgresConfig(
        HARNESS.endpoint().url, names["table"], control_schema=names["ctl"], create_table=True, cleanup_interval_s=None
    )


def test_a_long_history_is_read_through_indexes_and_the_cleanup_bounds_it(
    config: PostgresConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """100,000 batches behind an app_id (EOSINK_HISTORY_BATCHES in make test), a month of them: a start, a
    fetch_last_bundle and a commit send no statement that scans the control tables' history, and the same number
    of statements as with 10 batches; the cleanup then leaves the app_id its newest bundle and the week of
    bookkeeping retention_s keeps."""
    warm, short, long = History("app_warm", SHORT), History("app_short", SHORT), History("app_long", HISTORY)
    setup = PostgresSink(config)
    try:
        setup.setup(long.app_id)
    finally:
        setup.close()
    for history in (long, warm, short):
        write_history(config, history)

    def make() -> PostgresSink:
        return PostgresSink(config)

    measure(make, warm, tmp_path / "warm")
    statements = StatementLog(monkeypatch)
    a = measure(make, short, tmp_path / "short", statements)
    sent_short = len(statements.sent)
    b = measure(make, long, tmp_path / "long", statements)
    monkeypatch.undo()
    long_sent = statements.sent[sent_short:]
    for step in ("fetch", "start", "commit"):
        assert b.work[step]["statements"] == a.work[step]["statements"], (step, a.work, b.work)
    with psycopg.connect(config.conninfo, autocommit=True) as conn:
        examined, scans = history_scans(conn, config.control_schema, long_sent)
    assert examined >= 3, f"only {examined} reads of the history tables examined"
    assert not scans, f"statements that scan the history: {scans}"

    sink = make()
    try:
        cleaned = sink.cleanup()
    finally:
        sink.close()
    with psycopg.connect(config.conninfo, autocommit=True) as conn:
        count = sql.SQL("SELECT count(*) FROM {} WHERE app_id = %s")
        kept = {
            table: conn.execute(count.format(sql.Identifier(config.control_schema, table)), (long.app_id,)).fetchone()[
                0
            ]  # type: ignore[index]
            for table in HISTORY_TABLES
        }
    week = round(HISTORY * 7 / 30) + 2  # batches younger than retention_s (7 days) of a 30-day history, and ours
    bounds = {"bundles": week, "txns": week + 2}
    for table, bound in bounds.items():
        assert kept[table] <= bound, f"{table}: {kept} (cleanup: {cleaned})"
    assert kept["bundles"] >= 1
    with capsys.disabled():
        print("\n" + report("postgres", a, b, kept, bounds) + f"\n  cleanup: {cleaned}")
