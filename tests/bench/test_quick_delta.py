"""One real, small ``eosink bench --sink delta`` run: eosink's 2pc, its at-least-once path and Delta's own
streaming sink (``writeStream.format("delta")``) into tables on MinIO, and the report files.

A few minutes on a quiet 2-core machine (three Spark drivers with delta-spark's jars); in
``make test-delta-full``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eosink.services.minio import S3Endpoint

from ._quick import run_quick

ROWS = 20_000
RUNS = {"eosink-2pc", "eosink-at-least-once", "spark-delta-sink"}


@pytest.mark.spark
@pytest.mark.full
def test_quick_delta_bench_run(s3_endpoint: S3Endpoint, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass: each run writes every row once into its own table (a Delta reader counts them), eosink's 2pc
    commit is timed, the report names the three runs and Spark's baseline, the secret key is nowhere in it."""
    for name, value in s3_endpoint.env().items():
        monkeypatch.setenv(name, value)
    out = tmp_path / "results"
    runs = run_quick("delta", RUNS, ROWS, tmp_path)
    assert runs["eosink-2pc"].commit_ms
    body = json.loads((out / "bench-delta.json").read_text())
    targets = {t["id"]: t for t in body["targets"]}
    assert any("spark-delta-sink" in key for key in targets), sorted(targets)
    text = (out / "bench-delta.md").read_text() + (out / "bench-delta.json").read_text()
    assert "| spark-delta-sink |" in text
    assert s3_endpoint.secret_key not in text
