"""One real, small ``eosink bench --sink postgres+kafka`` run: the fan-out, its two separate queries and the
plain foreachBatch writing both, into the harness's PostgreSQL and Kafka, and the report files.

A few minutes on a quiet 2-core machine (four Spark drivers); in ``make test-fanout-full``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eosink.bench.fanout import BOTH, TWO_QUERIES
from eosink.services.kafka import KafkaEndpoint
from eosink.services.postgres import PostgresEndpoint

from ._quick import run_quick

ROWS = 20_000
RUNS = {"eosink-2pc", f"eosink-2pc-{TWO_QUERIES}", "eosink-txid-check", BOTH}


@pytest.mark.spark
@pytest.mark.full
def test_quick_fanout_bench_run(
    postgres_endpoint: PostgresEndpoint, kafka_endpoint: KafkaEndpoint, tmp_path: Path
) -> None:
    """Pass: each run lands every row once in PostgreSQL and in Kafka (the adapter fails a run whose sinks
    disagree), the fan-out's commits are timed, the report pairs 2pc with its two queries, no secret in it."""
    out = tmp_path / "results"
    runs = run_quick("postgres+kafka", RUNS, ROWS, tmp_path)
    assert runs["eosink-2pc"].commit_ms and runs["eosink-txid-check"].commit_ms
    body = json.loads((out / "bench-postgres+kafka.json").read_text())
    assert any(p["against"] == f"eosink-2pc-{TWO_QUERIES}" for p in body["goals"]["pairs"]), body["goals"]
    text = (out / "bench-postgres+kafka.md").read_text()
    assert f"| eosink-2pc-{TWO_QUERIES} |" in text and f"| {BOTH} |" in text
    assert postgres_endpoint.password not in text + json.dumps(body)
