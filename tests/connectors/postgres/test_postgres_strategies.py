"""PostgresSink per strategy, on the real server: txid-check without prepared transactions, lost COMMIT
replies resolved by pg_xact_status, metrics, the scheduled cleanup, control-schema upgrades, prepared slots."""

from __future__ import annotations

import functools
import logging
import uuid
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from eosink.connectors.postgres import PostgresConfig, PostgresSink
from eosink.connectors.postgres import sink as sink_module
from eosink.connectors.postgres._control import SCHEMA_VERSION, TXN_COLUMN, ensure_control_schema
from eosink.connectors.postgres._errors import pgbouncer_problem
from eosink.connectors.postgres.grants import writer_grants
from eosink.connectors.postgres.testing import PostgresHarness
from eosink.contract import BatchRef, Bundle, CommitStatus, Committable, Fingerprint, TaskRef
from eosink.contracts._mini import wait_until
from eosink.errors import AmbiguousCommitError, ConfigurationError
from eosink.services.postgres import PostgresEndpoint
from eosink.services.proxy import FaultProxy

APP = "app_strategies"
HARNESS = PostgresHarness()
SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _batch(start: int, n: int = 3) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([{"id": i, "name": f"n{i}"} for i in range(start, start + n)], schema=SCHEMA)


def _sink(endpoint: PostgresEndpoint, names: dict[str, str], **options: Any) -> PostgresSink:
    options.setdefault("create_table", True)
    return PostgresSink(PostgresConfig(endpoint.url, table=names["table"], control_schema=names["ctl"], **options))


def _write(
    sink: PostgresSink, batch_id: int, epoch: int, data: pa.RecordBatch, strategy: str, p: int = 0
) -> Committable:
    task = TaskRef(BatchRef(APP, batch_id), epoch, p, uuid.uuid4().hex[:16], None, True, strategy)
    txn = sink.begin(task)
    sink.write(txn, data)
    return sink.pre_commit(txn)


def _commit(sink: PostgresSink, batch_id: int, epoch: int, committables: list[Committable]) -> None:
    batch = BatchRef(APP, batch_id)
    sink.commit(batch, committables, Bundle(batch, epoch, Fingerprint(), tuple(c.id for c in committables)))


def _prepared_gids(ctl: str) -> list[str]:
    from eosink.connectors.postgres._control import gid_prefix

    prefix = gid_prefix(ctl)
    rows = (
        HARNESS.admin()
        .execute("SELECT gid FROM pg_prepared_xacts WHERE left(gid, %s) = %s", (len(prefix), prefix))
        .fetchall()
    )
    return [r["gid"] for r in rows]


def _ids(names: dict[str, str]) -> list[int]:
    return sorted(r["id"] for r in HARNESS.read_rows(None, names["table"]))


# -- txid-check: staged and committed, no prepared transaction ------------------------------------------------


def test_txid_check_stages_without_prepared_transactions(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under txid-check a participant's work is durable and invisible without PREPARE TRANSACTION, so the strategy
    works where max_prepared_transactions = 0 (simulated); 2pc then stops with an error that points to txid-check."""
    monkeypatch.setattr(sink_module, "_max_prepared", lambda conn: 0)
    sink = _sink(postgres_endpoint, names)
    epoch = sink.fence(APP)
    with pytest.raises(ConfigurationError, match="max_prepared_transactions") as info:
        _write(sink, 0, epoch, _batch(0), "2pc")
    assert info.value.fix and "idempotent" in info.value.fix
    cs = [_write(sink, 0, epoch, _batch(0), "txid-check", 0), _write(sink, 0, epoch, _batch(3), "txid-check", 1)]
    assert _prepared_gids(names["ctl"]) == []
    assert _ids(names) == []  # staged, invisible
    assert sorted(c.id for c in sink.recover(APP)) == sorted(c.id for c in cs)  # and recoverable
    assert sink.commit_status(BatchRef(APP, 0), cs) is CommitStatus.PREPARED
    _commit(sink, 0, epoch, cs)
    assert _ids(names) == list(range(6))
    assert sink.recover(APP) == []
    # abort of staged txid-check work drops its staged rows
    c = _write(sink, 1, epoch, _batch(10), "txid-check")
    sink.abort([c])
    assert sink.commit_status(BatchRef(APP, 1), [c]) is CommitStatus.ABORTED
    assert sink.recover(APP) == []
    assert _ids(names) == list(range(6))


@pytest.mark.parametrize("strategy", ["2pc", "txid-check"])
@pytest.mark.parametrize("cut", ["reply", "request"])
def test_lost_commit_reply_is_resolved_by_pg_xact_status(
    postgres_endpoint: PostgresEndpoint,
    names: dict[str, str],
    strategy: str,
    cut: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The publishing COMMIT is cut after the server got it (reply lost) or before (request lost): commit raises
    AmbiguousCommitError naming the transaction; commit_status asks pg_xact_status() and answers COMMITTED, or
    PREPARED (then a re-commit completes it) — the table ends exact either way, and the metrics say how."""
    caplog.set_level(logging.INFO, logger="eosink.postgres")
    direct = _sink(postgres_endpoint, names)
    epoch = direct.fence(APP)
    with FaultProxy(postgres_endpoint.host, postgres_endpoint.port) as proxy:
        via = PostgresSink(direct.config.with_address("127.0.0.1", proxy.port))
        cs = [_write(via, 0, epoch, _batch(0), strategy, 0), _write(via, 0, epoch, _batch(3), strategy, 1)]
        if cut == "reply":
            proxy.cut_after_request(b"COMMIT\x00")
        else:
            proxy.cut_before_request(b"COMMIT\x00")
        with pytest.raises(AmbiguousCommitError, match=r"transaction [0-9]+") as info:
            _commit(via, 0, epoch, cs)
        assert "password" not in str(info.value).lower()
        seen: list[CommitStatus] = []
        assert wait_until(
            lambda: seen.append(via.commit_status(BatchRef(APP, 0), cs)) or seen[-1] is not CommitStatus.IN_PROGRESS
        )
        status = seen[-1]
        snap = via.metrics_for(APP)
        assert snap.ambiguous_commits == 1
        if cut == "reply":
            assert status is CommitStatus.COMMITTED
            assert snap.ambiguous_resolved["committed"] == 1
        else:
            assert status is CommitStatus.PREPARED
            assert snap.ambiguous_resolved["recommit"] == 1
            assert _ids(names) == []
            _commit(via, 0, epoch, cs)
        states = [r.getMessage() for r in caplog.records if "of batch 0 is" in r.getMessage()]
        assert states and states[-1].endswith("committed" if cut == "reply" else "aborted")
    assert _ids(names) == list(range(6))
    assert direct.commit_status(BatchRef(APP, 0), cs) is CommitStatus.COMMITTED
    assert direct.recover(APP) == []


# -- metrics -------------------------------------------------------------------------------------------------


def test_metrics_count_rows_bytes_latency_and_in_doubt_work(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="eosink.postgres")
    sink = _sink(postgres_endpoint, names)
    epoch = sink.fence(APP)
    empty = sink.metrics_for(APP)
    assert (empty.batches_committed, empty.in_doubt, empty.oldest_in_doubt_s) == (0, 0, None)
    cs = [_write(sink, 0, epoch, _batch(0, 5), "2pc")]
    doubt = sink.metrics_for(APP)
    assert doubt.in_doubt == 1 and doubt.oldest_in_doubt_s is not None and doubt.oldest_in_doubt_s >= 0
    _commit(sink, 0, epoch, cs)
    snap = sink.metrics_for(APP)
    assert snap.in_doubt == 0
    assert (snap.batches_committed, snap.rows_committed, snap.last_batch_id, snap.last_batch_rows) == (1, 5, 0, 5)
    assert snap.last_batch_bytes == _batch(0, 5).nbytes > 0
    assert snap.commit_latency_p50_ms is not None and snap.commit_latency_max_ms is not None
    assert snap.to_json()["rows_committed"] == 5
    assert any("committed batch 0: 5 rows" in r.getMessage() for r in caplog.records)


# -- cleanup ----------------------------------------------------------------------------------------------------


def test_cleanup_removes_old_bookkeeping_and_orphans_but_never_in_doubt_work(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    sink = _sink(postgres_endpoint, names, cleanup_interval_s=None, retention_s=0)
    epoch = sink.fence(APP)
    for b in range(3):
        _commit(sink, b, epoch, [_write(sink, b, epoch, _batch(10 * b), "txid-check")])
    doubt_2pc = _write(sink, 3, epoch, _batch(30), "2pc")
    doubt_txid = _write(sink, 3, epoch, _batch(40), "txid-check", 1)
    admin, ctl = HARNESS.admin(), names["ctl"]
    staging = admin.execute(
        "SELECT relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = %s AND relname LIKE 's\\_%%'",
        (ctl,),
    ).fetchone()["relname"]
    admin.execute(
        sql.SQL("INSERT INTO {} ({}, id, name) VALUES ('orphan', 99, 'x')").format(
            sql.Identifier(ctl, staging), sql.Identifier(TXN_COLUMN)
        )
    )
    report = sink.cleanup()
    assert (report.txns, report.bundles, report.staged_rows) == (3, 2, 1)
    assert sink.fetch_last_bundle(APP) is not None and sink.fetch_last_bundle(APP).batch.batch_id == 2  # type: ignore[union-attr]
    assert sorted(c.id for c in sink.recover(APP)) == sorted([doubt_2pc.id, doubt_txid.id])
    _commit(sink, 3, epoch, [doubt_2pc, doubt_txid])
    assert _ids(names) == [0, 1, 2, 10, 11, 12, 20, 21, 22, 30, 31, 32, 40, 41, 42]


def test_cleanup_runs_once_per_interval_across_sinks(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    from eosink.connectors.postgres._cleanup import claim_cleanup

    sink = _sink(postgres_endpoint, names, cleanup_interval_s=3600)
    sink.setup(APP)  # the first setup claims and runs the cleanup
    conn = psycopg.connect(postgres_endpoint.url, autocommit=True)
    with conn:
        assert claim_cleanup(conn, names["ctl"], 3600) is False  # claimed within the hour already
        assert claim_cleanup(conn, names["ctl"], 0.001) is True


# -- control schema upgrades --------------------------------------------------------------------------------


def test_upgrade_from_version_1_keeps_in_doubt_work_safe(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """A v1 control schema with a prepared transaction in doubt (holding locks on txns and staging) is upgraded
    by the current code without waiting on those locks; the in-doubt batch then commits exactly."""
    with psycopg.connect(postgres_endpoint.url, autocommit=True) as conn:
        ensure_control_schema(conn, names["ctl"], version=1)
    old = _sink(postgres_endpoint, names, cleanup_interval_s=None)
    old._ready = True  # an old writer: it finds the v1 schema as it is
    epoch = old.fence(APP)
    doubt = _write(old, 0, epoch, _batch(0), "2pc")
    assert _prepared_gids(names["ctl"]) == [doubt.id]
    new = _sink(postgres_endpoint, names)
    new.setup(APP)  # upgrades to the current version
    row = HARNESS.admin().execute(sql.SQL("SELECT version FROM {}").format(sql.Identifier(names["ctl"], "version")))
    assert row.fetchone()["version"] == SCHEMA_VERSION == 2
    assert [c.id for c in new.recover(APP)] == [doubt.id]
    _commit(new, 0, new.fence(APP), [doubt])
    assert _ids(names) == [0, 1, 2]


def test_a_newer_control_schema_is_refused(postgres_endpoint: PostgresEndpoint, names: dict[str, str]) -> None:
    sink = _sink(postgres_endpoint, names)
    sink.setup(APP)
    HARNESS.admin().execute(sql.SQL("UPDATE {} SET version = 99").format(sql.Identifier(names["ctl"], "version")))
    with pytest.raises(ConfigurationError, match="newer than this eosink") as info:
        _sink(postgres_endpoint, names).setup(APP)
    assert info.value.fix and "Upgrade eosink" in info.value.fix


# -- prepared-transaction slots --------------------------------------------------------------------------------


def test_too_few_prepared_slots_names_the_setting_and_the_number_needed(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """Every slot taken (by other prepared work): PREPARE fails with a ConfigurationError that names
    max_prepared_transactions, its value and a number to raise it to; nothing of the batch stays behind."""
    sink = _sink(postgres_endpoint, names)
    epoch = sink.fence(APP)
    _commit(sink, 0, epoch, [_write(sink, 0, epoch, _batch(0), "2pc")])  # target and staging exist
    filler = f"filler_{uuid.uuid4().hex[:8]}_"
    taken: list[str] = []
    conn = psycopg.connect(postgres_endpoint.url)
    try:
        limit = int(conn.execute("SELECT current_setting('max_prepared_transactions')").fetchone()[0])  # type: ignore[index]
        in_use = int(conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()[0])  # type: ignore[index]
        conn.rollback()
        for i in range(limit - in_use):
            conn.execute("SELECT 1")
            conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(f"{filler}{i}")))
            taken.append(f"{filler}{i}")
        with pytest.raises(ConfigurationError, match=f"max_prepared_transactions = {limit} is too few") as info:
            _write(sink, 1, epoch, _batch(10), "2pc")
        assert info.value.fix and f"at least {limit + 1}" in info.value.fix and "txid-check" in info.value.fix
    finally:
        conn.autocommit = True
        for gid in taken:
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
        conn.close()
    assert sink.recover(APP) == []
    _commit(sink, 1, epoch, [_write(sink, 1, epoch, _batch(10), "2pc")])  # after the fix: resumes
    assert _ids(names) == [0, 1, 2, 10, 11, 12]


def test_pgbouncer_refusals_are_explained() -> None:
    problem = pgbouncer_problem("FATAL: unsupported startup parameter: options")
    assert problem is not None and "PgBouncer" in problem[0] and "ignore_startup_parameters" in problem[1]
    assert pgbouncer_problem('prepared statement "_pg3_0" does not exist') is not None
    assert pgbouncer_problem("relation does not exist") is None


# -- least privilege ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_the_documented_least_privilege_grants_are_enough(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str], mode: str
) -> None:
    """A writer role with only the grants docs/connectors/postgres.md lists (``writer_grants``: its own control
    schema, INSERT on the target, plus UPDATE and SELECT for upserts) runs every strategy end to end on the plain
    server too (the secured tests take each grant away)."""
    from psycopg.conninfo import make_conninfo

    role, password = f"eo_writer_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin = HARNESS.admin()
    table = sql.Identifier(names["table"])
    admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
    try:
        admin.execute(sql.SQL("CREATE TABLE {} (id bigint PRIMARY KEY, name text)").format(table))
        conninfo = make_conninfo(postgres_endpoint.url, user=role, password=password)
        options: dict[str, Any] = {"mode": "upsert", "key_columns": ("id",)} if mode == "upsert" else {}
        config = PostgresConfig(
            conninfo, table=names["table"], control_schema=names["ctl"], create_table=False, **options
        )
        for grant in writer_grants(config, role, postgres_endpoint.dbname):
            admin.execute(grant.statement)
        sink = PostgresSink(config)
        epoch = sink.fence(APP)
        for b, strategy in enumerate(["2pc", "txid-check"]):
            _commit(sink, b, epoch, [_write(sink, b, epoch, _batch(10 * b), strategy)])
        task = TaskRef(BatchRef(APP, 2), epoch, 0, "idem", ("id",), False, "idempotent")
        if mode == "upsert":
            txn = sink.begin(task)
            sink.write(txn, _batch(20))
            _commit(sink, 2, epoch, [sink.pre_commit(txn)])
        sink.close()
        expected = [0, 1, 2, 10, 11, 12] + ([20, 21, 22] if mode == "upsert" else [])
        assert _ids(names) == expected
    finally:
        admin.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(table))
        HARNESS.drop(names["ctl"], [])
        admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))  # its grants
        admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


# -- races ----------------------------------------------------------------------------------------------------


def test_participants_racing_to_create_the_staging_template_both_succeed(
    postgres_endpoint: PostgresEndpoint, names: dict[str, str]
) -> None:
    """The first batch of a fresh control schema: two participants in two processes' worth of sinks reach the
    staging template's CREATE together (released by a barrier); both write, the batch commits whole."""
    HARNESS.admin().execute(sql.SQL("CREATE TABLE {} (id bigint, name text)").format(sql.Identifier(names["table"])))
    for attempt in range(5):
        ctl = f"{names['ctl']}_{attempt}"
        config = PostgresConfig(postgres_endpoint.url, table=names["table"], control_schema=ctl)
        sinks = [PostgresSink(config), PostgresSink(config)]
        epoch = sinks[0].fence(APP)
        txns = [
            s.begin(TaskRef(BatchRef(APP, 0), epoch, p, f"a{p}", None, True, "txid-check")) for p, s in enumerate(sinks)
        ]
        calls = [
            functools.partial(s.write, t, _batch(100 * attempt + 10 * p, 2))
            for p, (s, t) in enumerate(zip(sinks, txns, strict=True))
        ]
        errors = _race(calls)
        assert errors == []
        cs = [s.pre_commit(t) for s, t in zip(sinks, txns, strict=True)]
        _commit(sinks[0], 0, epoch, cs)
        for s in sinks:
            s.close()
        HARNESS.drop(ctl, [])
    assert len(_ids(names)) == 5 * 4


def _race(calls: list[Any]) -> list[BaseException]:
    """Run ``calls`` in threads released together by a barrier; the exceptions they raised."""
    import threading

    barrier, errors = threading.Barrier(len(calls)), []

    def run(call: Any) -> None:
        barrier.wait()
        try:
            call()
        except Exception as exc:  # collected for the caller to assert on
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(c,)) for c in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors
