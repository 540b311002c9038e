"""Every example in ``examples/`` runs as a user runs it (a subprocess, settings in the environment),
against the harness's real PostgreSQL, Kafka and MinIO; the sink then holds every input row exactly once.

``make test`` runs each example once (the one command works, the rows land once); ``make
test-full`` also runs each through a SIGKILL mid-batch and a restart (the Spark kill tests prove
the same for every strategy in ``make test``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from eosink._procs import kill_session

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _java_options() -> str:
    """A quicker JVM start for these short runs (C1 only, serial GC, Spark's class-data archive)."""
    from eosink._procs import spark_cds_options
    from eosink.demo.session import JAVA_OPTS

    return f"{JAVA_OPTS} {spark_cds_options()}".strip()


def run(
    script: str, args: list[str], env: dict[str, str], faults: str | None = None
) -> subprocess.CompletedProcess[str]:
    """Run an example; with ``faults`` (a fault point that kills), expect it to die by SIGKILL."""
    env = dict(env, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable, JAVA_TOOL_OPTIONS=_java_options())
    env.pop("EOSINK_FAULTS", None)
    env["EOSINK_FAULT_SESSION"] = "own"  # a kill crashes the example's whole session (started below)
    if faults:
        env["EOSINK_FAULTS"] = faults
    proc = subprocess.Popen(
        [sys.executable, str(EXAMPLES / script), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        kill_session(proc.pid)  # a crash ends the whole driver, its JVM and Python workers included
        proc.wait()
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if faults:
        assert proc.returncode == -signal.SIGKILL, f"the fault {faults} did not fire:\n{err[-3000:]}"
    else:
        assert proc.returncode == 0, f"{script} failed:\n{out[-2000:]}\n{err[-4000:]}"
    return result


def table_rows(url: str, table: str, columns: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        q = sql.SQL("SELECT {} FROM {}").format(sql.SQL(columns), sql.Identifier(table))
        return conn.execute(q).fetchall()


def test_files_to_postgres_runs_as_documented(tmp_path: Path, postgres_endpoint: Any) -> None:
    """One run of the example, as a user runs it. Pass: the 120 payments of 3 files land once."""
    table = f"ex_files_{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, EOSINK_POSTGRES_URL=postgres_endpoint.url)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--table", table]
    first = run("files_to_postgres.py", [*common, "--generate", "3", "--rows", "40"], env)
    assert f"{table}: 120 payments (120 distinct ids)" in first.stdout
    assert sorted(table_rows(postgres_endpoint.url, table, "id, account, amount")) == _sent(tmp_path / "in")


def _sent(inbox: Path) -> list[tuple[Any, ...]]:
    sent = [json.loads(line) for f in sorted(inbox.iterdir()) for line in f.read_text().splitlines()]
    return sorted((p["id"], p["account"], p["amount"]) for p in sent)


@pytest.mark.full
def test_files_to_postgres_through_a_kill(tmp_path: Path, postgres_endpoint: Any) -> None:
    """Pass: 3 files land once; a run killed at F4 (after the manifest, before the commit) and restarted
    lands 3 more files once; a run with nothing new writes nothing; the balances match the input."""
    table = f"ex_files_{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, EOSINK_POSTGRES_URL=postgres_endpoint.url)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--table", table]
    first = run("files_to_postgres.py", [*common, "--generate", "3", "--rows", "40"], env)
    assert f"{table}: 120 payments (120 distinct ids)" in first.stdout
    run("files_to_postgres.py", [*common, "--generate", "3", "--rows", "40"], env, faults="F4@2:kill")
    run("files_to_postgres.py", common, env)
    again = run("files_to_postgres.py", common, env)
    assert f"{table}: 240 payments (240 distinct ids)" in again.stdout
    assert "0 batch(es) committed in this run" in again.stdout
    rows = table_rows(postgres_endpoint.url, table, "id, account, amount")
    assert len(rows) == len(set(rows)) == 240
    assert sorted(rows) == _sent(tmp_path / "in")


def _kafka_env(postgres_endpoint: Any | None, kafka_endpoint: Any) -> dict[str, str]:
    from eosink.services.spark_jars import SparkJars

    env = dict(
        os.environ,
        EOSINK_KAFKA_BOOTSTRAP=kafka_endpoint.bootstrap_servers,
        EOSINK_EXAMPLE_SPARK_JARS=SparkJars().spark_conf("kafka")["spark.jars"],
    )
    if postgres_endpoint is not None:
        env["EOSINK_POSTGRES_URL"] = postgres_endpoint.url
    return env


@pytest.mark.full  # make test: Kafka as the source in kafka_to_kafka, PostgreSQL as the sink in files_to_postgres
def test_kafka_to_postgres_runs_as_documented(tmp_path: Path, postgres_endpoint: Any, kafka_endpoint: Any) -> None:
    """One run of the example, as a user runs it. Pass: 600 records land once, each (partition, offset) once."""
    table = f"ex_kafka_{uuid.uuid4().hex[:8]}"
    topic = f"ex-payments-{uuid.uuid4().hex[:8]}"
    env = _kafka_env(postgres_endpoint, kafka_endpoint)
    common = ["--topic", topic, "--checkpoint", str(tmp_path / "ckpt"), "--table", table, "--max-offsets", "200"]
    first = run("kafka_to_postgres.py", [*common, "--produce", "600", "--seed", "1"], env)
    assert f"{table}: 600 rows for 600 distinct Kafka records" in first.stdout
    rows = table_rows(postgres_endpoint.url, table, "id, kafka_partition, kafka_offset")
    assert len({r[0] for r in rows}) == 600 and len({(r[1], r[2]) for r in rows}) == 600 == len(rows)


@pytest.mark.full
def test_kafka_to_postgres_through_a_kill(tmp_path: Path, postgres_endpoint: Any, kafka_endpoint: Any) -> None:
    """Pass: 600 records land once; 400 more, with the driver killed at F4 and restarted, land once;
    every (partition, offset) of the topic is in the table exactly once."""
    table = f"ex_kafka_{uuid.uuid4().hex[:8]}"
    topic = f"ex-payments-{uuid.uuid4().hex[:8]}"
    env = _kafka_env(postgres_endpoint, kafka_endpoint)
    common = ["--topic", topic, "--checkpoint", str(tmp_path / "ckpt"), "--table", table, "--max-offsets", "200"]
    first = run("kafka_to_postgres.py", [*common, "--produce", "600", "--seed", "1"], env)
    assert f"{table}: 600 rows for 600 distinct Kafka records" in first.stdout
    run("kafka_to_postgres.py", [*common, "--produce", "400", "--seed", "2"], env, faults="F4@3:kill")
    last = run("kafka_to_postgres.py", common, env)
    assert f"{table}: 1000 rows for 1000 distinct Kafka records" in last.stdout
    rows = table_rows(postgres_endpoint.url, table, "id, kafka_partition, kafka_offset")
    assert len({r[0] for r in rows}) == 1000 and len({(r[1], r[2]) for r in rows}) == 1000


def test_kafka_to_kafka_runs_as_documented(tmp_path: Path, kafka_endpoint: Any) -> None:
    """One run of the example, as a user runs it. Pass: 600 input records become 600 output records,
    each input (partition, offset) once, as a read_committed consumer reads the output topic."""
    tag = uuid.uuid4().hex[:8]
    env = _kafka_env(None, kafka_endpoint)
    common = ["--topic", f"ex-in-{tag}", "--output", f"ex-out-{tag}", "--checkpoint", str(tmp_path / "ckpt")]
    first = run("kafka_to_kafka.py", [*common, "--max-offsets", "200", "--produce", "600", "--seed", "1"], env)
    assert f"ex-out-{tag}: 600 records for 600 distinct input records" in first.stdout, first.stdout


@pytest.mark.full
def test_kafka_to_kafka_through_a_kill(tmp_path: Path, kafka_endpoint: Any) -> None:
    """Pass: 600 records land once; 400 more, with the driver killed after Spark's commit log (F5: the
    batch's transactions prepared, not yet committed) and restarted, land once."""
    tag = uuid.uuid4().hex[:8]
    env = _kafka_env(None, kafka_endpoint)
    common = ["--topic", f"ex-in-{tag}", "--output", f"ex-out-{tag}", "--checkpoint", str(tmp_path / "ckpt")]
    common += ["--max-offsets", "200"]
    first = run("kafka_to_kafka.py", [*common, "--produce", "600", "--seed", "1"], env)
    assert f"ex-out-{tag}: 600 records for 600 distinct input records" in first.stdout
    run("kafka_to_kafka.py", [*common, "--produce", "400", "--seed", "2"], env, faults="F5@3:kill")
    last = run("kafka_to_kafka.py", common, env)
    assert f"ex-out-{tag}: 1000 records for 1000 distinct input records" in last.stdout, last.stdout


def _topic_payments(bootstrap: str, topic: str) -> list[tuple[Any, ...]]:
    """Every payment record of the topic (two partitions) as a read_committed consumer reads them."""
    from kafka import KafkaAdminClient

    from eosink.connectors.kafka.testing import read_topic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="eosink-example-test")
    try:
        values = [json.loads(r.value) for r in read_topic(admin, topic, 2) if r.value is not None]
        return sorted((v["id"], v["account"], v["amount"]) for v in values)
    finally:
        admin.close()


def test_files_to_kafka_runs_as_documented(tmp_path: Path, kafka_endpoint: Any) -> None:
    """One run of the example, as a user runs it. Pass: the 120 payments of 3 files are 120 records of
    the topic, each payment once, as a read_committed consumer reads them."""
    topic = f"ex-f2k-{uuid.uuid4().hex[:8]}"
    env = _kafka_env(None, kafka_endpoint)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--topic", topic]
    first = run("files_to_kafka.py", [*common, "--generate", "3", "--rows", "40"], env)
    assert f"{topic}: 120 records for 120 distinct payments" in first.stdout, first.stdout
    assert _topic_payments(kafka_endpoint.bootstrap_servers, topic) == _sent(tmp_path / "in")


@pytest.mark.full
def test_files_to_kafka_through_a_kill(tmp_path: Path, kafka_endpoint: Any) -> None:
    """Pass: 3 files land once; a run killed at F4 (the batch's transactions prepared, Spark's commit log
    not yet written) and restarted lands 3 more once; the topic holds exactly the payments sent."""
    topic = f"ex-f2k-{uuid.uuid4().hex[:8]}"
    env = _kafka_env(None, kafka_endpoint)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--topic", topic]
    run("files_to_kafka.py", [*common, "--generate", "3", "--rows", "40"], env)
    run("files_to_kafka.py", [*common, "--generate", "3", "--rows", "40"], env, faults="F4@2:kill")
    last = run("files_to_kafka.py", common, env)
    assert f"{topic}: 240 records for 240 distinct payments" in last.stdout, last.stdout
    assert _topic_payments(kafka_endpoint.bootstrap_servers, topic) == _sent(tmp_path / "in")


@pytest.mark.parametrize("strategy", ["2pc", pytest.param("txid-check", marks=pytest.mark.full)])
def test_fanout_example_killed_between_the_sinks_lands_each_payment_once_in_each(
    tmp_path: Path, postgres_endpoint: Any, kafka_endpoint: Any, strategy: str
) -> None:
    """The fan-out example (one query into a PostgreSQL table, then a Kafka topic) killed after PostgreSQL
    committed batch 1 and before Kafka did (F14), then run again, as ``make example-fanout`` does.

    Pass: the restart prints 120 rows and 120 events for 120 distinct payments; the table and the topic
    each hold exactly the payments sent."""
    table = f"ex_fanout_{uuid.uuid4().hex[:8]}"
    topic = f"ex-fanout-{uuid.uuid4().hex[:8]}"
    env = _kafka_env(postgres_endpoint, kafka_endpoint)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--strategy", strategy]
    common += ["--table", table, "--topic", topic]
    run("files_to_postgres_and_kafka.py", [*common, "--generate", "3", "--rows", "40"], env, faults="F14@1:kill")
    last = run("files_to_postgres_and_kafka.py", common, env)
    assert f"{table}: 120 rows for 120 distinct payments" in last.stdout, last.stdout
    assert f"{topic}: 120 events for 120 distinct payments" in last.stdout, last.stdout
    sent = _sent(tmp_path / "in")
    assert sorted(table_rows(postgres_endpoint.url, table, "id, account, amount")) == sent
    assert _topic_payments(kafka_endpoint.bootstrap_servers, topic) == sent


def _s3_env(s3_endpoint: Any, kafka_endpoint: Any | None = None) -> dict[str, str]:
    env = _kafka_env(None, kafka_endpoint) if kafka_endpoint is not None else dict(os.environ)
    env.update(s3_endpoint.env())  # EOSINK_S3_ENDPOINT and its keys, as `eosink services env minio` sets them
    return env


def _s3_config(s3_endpoint: Any, prefix: str) -> Any:
    """The examples' default bucket and ``prefix``, as a reader of the commit markers reaches them."""
    from eosink.connectors.s3 import S3Config

    return S3Config(
        "eosink-examples",
        prefix,
        endpoint_url=s3_endpoint.endpoint_url,
        access_key_id=s3_endpoint.access_key,
        secret_access_key=s3_endpoint.secret_key,
        region=s3_endpoint.region,
    )


def _s3_payments(s3_endpoint: Any, prefix: str) -> list[tuple[Any, ...]]:
    """Every committed payment under ``prefix``, as a reader of the commit markers reads them."""
    from eosink.connectors.s3 import read_committed

    rows = read_committed(_s3_config(s3_endpoint, prefix)).to_pylist()
    return sorted((r["id"], r["account"], r["amount"]) for r in rows)


def test_files_to_s3_runs_as_documented(tmp_path: Path, s3_endpoint: Any) -> None:
    """One run of the example, as a user runs it. Pass: the 120 payments of 3 files are 120 committed rows
    of Parquet objects, each payment once, as a reader of the commit markers reads them."""
    prefix = f"ex-f2s-{uuid.uuid4().hex[:8]}"
    env = _s3_env(s3_endpoint)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--prefix", prefix]
    first = run("files_to_s3.py", [*common, "--generate", "3", "--rows", "40"], env)
    assert f"s3://eosink-examples/{prefix}: 120 rows for 120 distinct payments" in first.stdout, first.stdout
    assert _s3_payments(s3_endpoint, prefix) == _sent(tmp_path / "in")


@pytest.mark.full
def test_files_to_s3_through_a_kill(tmp_path: Path, s3_endpoint: Any) -> None:
    """Pass: 3 files land once; a run killed at F4 (the batch's uploads left incomplete, Spark's commit log
    not yet written) and restarted lands 3 more once; the committed rows are exactly the payments sent."""
    prefix = f"ex-f2s-{uuid.uuid4().hex[:8]}"
    env = _s3_env(s3_endpoint)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--prefix", prefix]
    run("files_to_s3.py", [*common, "--generate", "3", "--rows", "40"], env)
    run("files_to_s3.py", [*common, "--generate", "3", "--rows", "40"], env, faults="F4@2:kill")
    last = run("files_to_s3.py", common, env)
    assert f"s3://eosink-examples/{prefix}: 240 rows for 240 distinct payments" in last.stdout, last.stdout
    assert _s3_payments(s3_endpoint, prefix) == _sent(tmp_path / "in")


def _delta_payments(s3_endpoint: Any, table: str) -> list[tuple[Any, ...]]:
    """Every payment a Delta reader sees in the table's newest snapshot (deltalake, not eosink)."""
    from eosink.connectors.delta import DeltaConfig
    from eosink.connectors.delta.testing import read_table

    config = DeltaConfig.on_endpoint(table, s3_endpoint)
    rows = read_table(config)
    return sorted((r["id"], r["account"], r["amount"]) for r in rows)


def test_files_to_delta_runs_as_documented(tmp_path: Path, s3_endpoint: Any) -> None:
    """One run of the example, as a user runs it. Pass: the 120 payments of 3 files are 120 rows of the Delta
    table, each payment once, as deltalake reads its newest snapshot."""
    table = f"s3://eosink-examples/ex-f2d-{uuid.uuid4().hex[:8]}"
    env = _s3_env(s3_endpoint)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--table", table]
    first = run("files_to_delta.py", [*common, "--generate", "3", "--rows", "40"], env)
    assert f"{table} (version" in first.stdout and "120 rows for 120 distinct payments" in first.stdout, first.stdout
    assert _delta_payments(s3_endpoint, table) == _sent(tmp_path / "in")


@pytest.mark.full
def test_files_to_delta_through_a_kill(tmp_path: Path, s3_endpoint: Any) -> None:
    """Pass: 3 files land once; a run killed at F4 (the batch's files prepared, Spark's commit log not yet
    written) and restarted lands 3 more once; the table holds exactly the payments sent."""
    table = f"s3://eosink-examples/ex-f2d-{uuid.uuid4().hex[:8]}"
    env = _s3_env(s3_endpoint)
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--table", table]
    run("files_to_delta.py", [*common, "--generate", "3", "--rows", "40"], env)
    run("files_to_delta.py", [*common, "--generate", "3", "--rows", "40"], env, faults="F4@2:kill")
    last = run("files_to_delta.py", common, env)
    assert "240 rows for 240 distinct payments" in last.stdout, last.stdout
    assert _delta_payments(s3_endpoint, table) == _sent(tmp_path / "in")


def _hdfs_payments(hdfs_endpoint: Any, directory: str) -> list[tuple[Any, ...]]:
    """Every payment a reader that lists ``directory`` reads (what ``spark.read.parquet`` finds)."""
    from eosink.connectors.hdfs import HdfsConfig, read_committed
    from eosink.connectors.hdfs.testing import listed_rows

    config = HdfsConfig(hdfs_endpoint.url.rstrip("/") + directory)
    listed = sorted((r["id"], r["account"], r["amount"]) for r in listed_rows(config))
    committed = sorted((r["id"], r["account"], r["amount"]) for r in read_committed(config).to_pylist())
    assert listed == committed, "a reader listing the directory and the batch records disagree"
    return listed


def test_files_to_hdfs_runs_as_documented(tmp_path: Path, hdfs_endpoint: Any) -> None:
    """One run of the example, as a user runs it, with its checkpoint on HDFS. Pass: the 120 payments of 3
    files are 120 rows of Parquet files that Spark's own reader finds in the directory, each payment once."""
    directory = f"/eosink-examples/f2h-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **hdfs_endpoint.env()}
    checkpoint = f"{hdfs_endpoint.url.rstrip('/')}{directory}-checkpoint"
    common = ["--input", str(tmp_path / "in"), "--checkpoint", checkpoint, "--directory", directory]
    first = run("files_to_hdfs.py", [*common, "--generate", "3", "--rows", "40"], env)
    assert f"{directory}: 120 rows for 120 distinct payments" in first.stdout, first.stdout
    assert _hdfs_payments(hdfs_endpoint, directory) == _sent(tmp_path / "in")


@pytest.mark.full
def test_files_to_hdfs_through_a_kill(tmp_path: Path, hdfs_endpoint: Any) -> None:
    """Pass: 3 files land once; a run killed at F5 (batch prepared and in Spark's commit log, not yet
    renamed into place) and restarted lands 3 more once; the listed rows are exactly the payments sent."""
    directory = f"/eosink-examples/f2h-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, **hdfs_endpoint.env()}
    common = ["--input", str(tmp_path / "in"), "--checkpoint", str(tmp_path / "ckpt"), "--directory", directory]
    run("files_to_hdfs.py", [*common, "--generate", "3", "--rows", "40"], env)
    run("files_to_hdfs.py", [*common, "--generate", "3", "--rows", "40"], env, faults="F5@2:kill")
    last = run("files_to_hdfs.py", common, env)
    assert f"{directory}: 240 rows for 240 distinct payments" in last.stdout, last.stdout
    assert _hdfs_payments(hdfs_endpoint, directory) == _sent(tmp_path / "in")


@pytest.mark.full  # make test: Kafka as the source in kafka_to_kafka, S3 as the sink in files_to_s3
def test_kafka_to_s3_runs_as_documented(tmp_path: Path, kafka_endpoint: Any, s3_endpoint: Any) -> None:
    """One run of the example, as a user runs it. Pass: 600 input records become 600 committed rows, each
    input (partition, offset) once, in one ``account=`` folder per account."""
    from eosink.connectors.s3 import committed_files

    tag = uuid.uuid4().hex[:8]
    env = _s3_env(s3_endpoint, kafka_endpoint)
    common = ["--topic", f"ex-in-{tag}", "--prefix", f"ex-k2s-{tag}", "--checkpoint", str(tmp_path / "ckpt")]
    first = run("kafka_to_s3.py", [*common, "--max-offsets", "200", "--produce", "600", "--seed", "1"], env)
    assert f"s3://eosink-examples/ex-k2s-{tag}: 600 rows for 600 distinct input records" in first.stdout, first.stdout
    folders = {o.partition["account"] for o in committed_files(_s3_config(s3_endpoint, f"ex-k2s-{tag}"))}
    assert folders == {f"acct-{i}" for i in range(5)}


@pytest.mark.full
def test_kafka_to_s3_through_a_kill(tmp_path: Path, kafka_endpoint: Any, s3_endpoint: Any) -> None:
    """Pass: 600 records land once; 400 more, with the driver killed after Spark's commit log (F5: the
    batch's uploads still incomplete, its marker not yet written) and restarted, land once."""
    tag = uuid.uuid4().hex[:8]
    env = _s3_env(s3_endpoint, kafka_endpoint)
    common = ["--topic", f"ex-in-{tag}", "--prefix", f"ex-k2s-{tag}", "--checkpoint", str(tmp_path / "ckpt")]
    common += ["--max-offsets", "200"]
    first = run("kafka_to_s3.py", [*common, "--produce", "600", "--seed", "1"], env)
    assert f"s3://eosink-examples/ex-k2s-{tag}: 600 rows for 600 distinct input records" in first.stdout
    run("kafka_to_s3.py", [*common, "--produce", "400", "--seed", "2"], env, faults="F5@3:kill")
    last = run("kafka_to_s3.py", common, env)
    assert f"s3://eosink-examples/ex-k2s-{tag}: 1000 rows for 1000 distinct input records" in last.stdout, last.stdout
