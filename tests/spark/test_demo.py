"""``eosink demo`` end to end, as a newcomer runs it: real Spark drivers killed and restarted, an embedded
PostgreSQL, lost COMMIT replies through the fault proxies; eosink's table exact, the plain writer's not.

The quick case (2PC, what ``make test`` runs) uses fewer, smaller batches than ``make demo``; the other
strategies, and the demo into each other sink, run in ``make test-full``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.spark


def _demo(tmp_path: Path, *args: str) -> tuple[str, str]:
    """Run ``python -m eosink.demo`` with 7 batches of 80 payments; its output and the same on one line.
    Pass (for both): exit 0, eosink's side exact with 0 duplicated and every balance right after at
    least two crashes and a lost COMMIT reply on eosink's connection, nothing left in doubt, and the
    plain writer's side with duplicates."""
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, COLUMNS="140")
    cmd = [sys.executable, "-m", "eosink.demo", *args, "--seed", "7", "--batches", "7"]
    cmd += ["--rows", "80", "--workdir", str(tmp_path / "demo")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1200, start_new_session=True)
    out = proc.stdout
    flat = " ".join(out.split())  # the console wraps long lines
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-3000:]
    assert "EXACT: every payment landed once in" in flat
    assert flat.count("SIGKILL of the driver's session") >= 2
    assert "COMMIT sent on eosink's connection, reply lost" in flat
    row = re.search(r"duplicated\s*│\s*(\d+)\s*│\s*(\d+)", out)
    assert row is not None, out[-3000:]
    assert int(row.group(1)) > 0 and int(row.group(2)) == 0
    balances = re.search(r"account balances right\s*│\s*(\d+)/(\d+)\s*│\s*(\d+)/(\d+)", out)
    assert balances is not None and balances.group(3) == balances.group(4) and balances.group(1) != balances.group(2)
    assert "0 transaction(s) left in doubt" in flat
    return out, flat


@pytest.mark.parametrize(
    "strategy",
    ["2pc", pytest.param("txid-check", marks=pytest.mark.full), pytest.param("idempotent", marks=pytest.mark.full)],
)
def test_demo_is_exact_for_eosink_and_shows_the_plain_writers_damage(tmp_path: Path, strategy: str) -> None:
    """Pass: as :func:`_demo`, with eosink's table payments_eosink, and a lost COMMIT reply on the plain
    writer's connection too."""
    _, flat = _demo(tmp_path, "--strategy", strategy)
    assert "EXACT: every payment landed once in payments_eosink" in flat
    assert "COMMIT sent on the plain writer's connection, reply lost" in flat


@pytest.mark.full
def test_kafka_demo_is_exact_for_eosink_and_shows_spark_kafka_sinks_duplicates(tmp_path: Path) -> None:
    """``eosink demo --sink kafka`` (2PC): a private broker, Spark's own Kafka sink as the plain writer.

    Pass: as :func:`_demo`, with eosink's topic payments_eosink and its lost EndTxn reply. Spark's
    Kafka sink duplicated the replayed batches (its idempotent producer absorbs a cut reply, so it
    gets a crash before Spark's commit log instead)."""
    _, flat = _demo(tmp_path, "--sink", "kafka")
    assert "EXACT: every payment landed once in topic payments_eosink" in flat
    assert "Spark's Kafka sink" in flat


@pytest.mark.full
def test_s3_demo_is_exact_for_eosink_and_shows_spark_parquet_writers_duplicates(tmp_path: Path) -> None:
    """``eosink demo --sink s3`` (2PC): a private MinIO, Spark's own Parquet writer on ``s3a://`` as the
    plain writer.

    Pass: as :func:`_demo`, with eosink's prefix payments_eosink read through its commit markers and a lost
    reply to a commit marker's PUT. The Parquet writer duplicated the replayed batches, as a listing of its
    prefix shows (its job commit has no one request to cut, so it gets a crash before Spark's commit log)."""
    _, flat = _demo(tmp_path, "--sink", "s3")
    assert "EXACT: every payment landed once in s3://eosink-demo/payments_eosink/" in flat
    assert "Spark's Parquet writer (s3a)" in flat


@pytest.mark.full
def test_hdfs_demo_is_exact_for_eosink_and_shows_spark_parquet_writers_duplicates(tmp_path: Path) -> None:
    """``eosink demo --sink hdfs`` (2PC): a private MiniDFSCluster, Spark's own Parquet writer on ``hdfs://`` as
    the plain writer.

    Pass: as :func:`_demo`, with eosink's directory /payments_eosink read through its batch records and a lost
    reply to the rename that commits a batch. The Parquet writer duplicated the replayed batches, as a listing
    of its directory shows (its job commit has no one request to cut, so it gets a crash before Spark's commit
    log)."""
    _, flat = _demo(tmp_path, "--sink", "hdfs")
    assert "EXACT: every payment landed once in hdfs:///payments_eosink/" in flat
    assert "Spark's Parquet writer (hdfs)" in flat


@pytest.mark.full
def test_delta_demo_is_exact_for_eosink_and_shows_delta_sparks_duplicates(tmp_path: Path) -> None:
    """``eosink demo --sink delta`` (2PC): Delta tables on a private MinIO, delta-spark's batch writer in
    foreachBatch as the plain writer.

    Pass: as :func:`_demo`, with eosink's table payments_eosink read as any Delta reader reads it (its newest
    snapshot) and a lost reply to the PUT of a log entry. delta-spark's writer appended the replayed batches
    again (its S3 client retries a cut reply, so it gets a crash before Spark's commit log)."""
    _, flat = _demo(tmp_path, "--sink", "delta")
    assert "EXACT: every payment landed once in s3://eosink-demo/payments_eosink" in flat
    assert "delta-spark's writer in foreachBatch" in flat


@pytest.mark.full
@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
def test_fanout_demo_is_exact_in_both_sinks(tmp_path: Path, strategy: str) -> None:
    """``eosink demo --sink postgres+kafka``: one query into the embedded PostgreSQL and a private broker (the
    fan-out, PostgreSQL committed first), crashed once between the two sinks' commits (F14); the plain writer
    is one foreachBatch writing each sink in turn.

    Pass: as :func:`_demo`, and a result table per sink: eosink's side 0 duplicated and every balance right in
    each, the plain writer's PostgreSQL table with duplicates."""
    out, flat = _demo(tmp_path, "--sink", "postgres+kafka", "--strategy", strategy)
    assert "EXACT: every payment landed once in payments_eosink and topic payments_eosink" in flat
    assert "SIGKILL at F14" in flat and "result: postgres" in flat and "result: kafka" in flat
    rows = re.findall(r"duplicated\s*│\s*(\d+)\s*│\s*(\d+)", out)
    assert len(rows) == 2 and all(int(eos) == 0 for _, eos in rows), rows
    balances = re.findall(r"account balances right\s*│\s*(\d+)/(\d+)\s*│\s*(\d+)/(\d+)", out)
    assert len(balances) == 2 and all(b[2] == b[3] for b in balances), balances
