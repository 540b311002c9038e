"""One real, small ``eosink bench`` run: Spark drivers, PostgreSQL, psql, the report files.

About a minute on a quiet 2-core machine (three Spark drivers of 10-20 s each, plus ``psql``); in
``make test-postgres-full``.
"""

from __future__ import annotations

import json
from pathlib import Path

import psycopg
import pytest

from eosink.bench.cli import plan_from_args, run
from eosink.services.postgres import PostgresEndpoint

ROWS = 20_000


def _bench_schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute("SELECT nspname FROM pg_namespace WHERE nspname LIKE 'eosink_bench_ctl_%'").fetchall()
    return {r[0] for r in rows}


@pytest.mark.spark
def test_quick_bench_run(postgres_endpoint: PostgresEndpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOSINK_POSTGRES_URL", postgres_endpoint.url)
    before = _bench_schemas(postgres_endpoint.url)
    out = tmp_path / "results"
    plan = plan_from_args(
        [
            *("--quick", "--rows", str(ROWS), "--rates", "0", "--rss-rows", "0", "--no-docs"),
            *("--only", "eosink-2pc,eosink-at-least-once,raw-copy,eosink-datasource-txid-check"),
            *("--out", str(out), "--cache", str(tmp_path / "cache")),
        ]
    )
    report = run(plan)

    runs = {r.name: r for r in report.throughput[ROWS]}
    assert set(runs) == {"eosink-2pc", "eosink-at-least-once", "raw-copy", "eosink-datasource-txid-check"}
    for r in runs.values():
        assert r.ok, (r.name, r.error)
        assert r.verified_rows == ROWS and r.seconds > 0 and r.bytes > 80 * ROWS
    assert runs["eosink-2pc"].mode == "atomic" and runs["eosink-2pc"].commit_ms  # 2PC committed once, timed

    body = json.loads((out / "bench-postgres.json").read_text())
    assert {"name", "rows", "seconds", "rows_per_s"} <= set(body["runs"][0])
    targets = {t["id"]: t for t in body["targets"]}
    assert targets["2pc-vs-at-least-once"]["value"] > 0
    assert targets["eo-vs-jdbc-default"]["met"] is None  # not run here, so not judged
    assert (out / "bench-postgres.png").read_bytes()[:4] == b"\x89PNG"
    text = (out / "bench-postgres.md").read_text() + (out / "bench-postgres.json").read_text()
    assert "eosink-at-least-once" in text
    assert "| eosink-datasource-txid-check |" in text and "Two ways in" in text  # format("eosink") wrote every row
    if postgres_endpoint.password:
        assert postgres_endpoint.password not in text
    assert _bench_schemas(postgres_endpoint.url) == before  # every run's bookkeeping dropped
