"""DeltaSink on local disk: statistics as delta-rs writes them, the commit's races (zombie, lost reply),
the sweep of failed attempts' files, and schema checks before anything is written."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from eosink.connectors.delta import DeltaConfig, DeltaSink, _log
from eosink.connectors.delta._stats import FileStats
from eosink.connectors.delta.testing import read_table
from eosink.contract import BatchRef, CommitStatus, TaskRef
from eosink.contracts._steps import bundle_for, canon, prepare, rows_for
from eosink.contracts.harness import CONTRACT_SCHEMA
from eosink.errors import (
    AmbiguousCommitError,
    BadRecordError,
    CommitAbortedError,
    CommittedWorkLostError,
    ConfigurationError,
    EosinkError,
    SchemaError,
    TransientError,
)

APP = "delta-app"


def sink_at(tmp_path: Path, **options: Any) -> DeltaSink:
    sink = DeltaSink(DeltaConfig(str(tmp_path / "table"), **options))
    sink.bind_schema(CONTRACT_SCHEMA)
    return sink


def typed_table() -> pa.Table:
    utc = dt.timezone.utc
    return pa.table(
        {
            "i": pa.array([3, None, -7], pa.int64()),
            "s": pa.array(["b", "a", None], pa.string()),
            "f": pa.array([1.5, -2.25, None], pa.float64()),
            "d": pa.array([dt.date(2024, 1, 2), None, dt.date(1999, 12, 31)], pa.date32()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, 0, 0, 0, 123000, utc), None, dt.datetime(2023, 6, 1, tzinfo=utc)],
                pa.timestamp("us", "UTC"),
            ),
            "ntz": pa.array([dt.datetime(2024, 1, 1, 1, 2, 3), None, None], pa.timestamp("us")),
            "dec": pa.array([decimal.Decimal("-4.50"), decimal.Decimal("7.25"), None], pa.decimal128(10, 2)),
            "b": pa.array([True, None, False]),
            "st": pa.array([{"x": 1, "y": "q"}, None, {"x": None, "y": "r"}]),
        }
    )


def test_statistics_are_those_delta_rs_writes_for_the_same_rows(tmp_path: Path) -> None:
    """Pass: numRecords, minValues, maxValues and nullCount of our stats equal delta-rs's own for a file of
    ints, strings, floats, dates, zoned and naive timestamps, decimals, booleans and a struct (values chosen
    so that neither side widens a bound)."""
    from deltalake import write_deltalake

    data = typed_table()
    write_deltalake(str(tmp_path / "ref"), data)
    entry = (tmp_path / "ref" / "_delta_log" / f"{0:020d}.json").read_text().splitlines()
    theirs = next(json.loads(json.loads(line)["add"]["stats"]) for line in entry if '"add"' in line)
    stats = FileStats(data.schema)
    stats.add(data.slice(0, 2))
    stats.add(data.slice(2))
    ours = json.loads(stats.to_json())
    assert ours == theirs


def test_a_bound_that_json_cannot_hold_exactly_is_widened_or_left_out() -> None:
    """Pass: a timestamp maximum with microseconds is rounded up to the next millisecond (the minimum cut
    down); a string longer than 32 characters keeps a cut minimum and no maximum; a float column holding NaN
    has no bounds; binary and list columns have no figures at all."""
    long = "z" * 40
    data = pa.table(
        {
            "ts": pa.array([dt.datetime(2024, 1, 1, 0, 0, 0, 1500), dt.datetime(2024, 1, 1, 0, 0, 0, 500)]),
            "s": pa.array(["a" * 40, long]),
            "f": pa.array([1.0, float("nan")]),
            "bin": pa.array([b"x", b"y"]),
            "l": pa.array([[1], [2]]),
        }
    )
    stats = FileStats(data.schema)
    stats.add(data)
    doc = json.loads(stats.to_json())
    assert doc["minValues"] == {"ts": "2024-01-01 00:00:00", "s": "a" * 32}
    assert doc["maxValues"] == {"ts": "2024-01-01 00:00:00.002"}
    assert doc["nullCount"] == {"ts": 0, "s": 0, "f": 0}


def test_a_commit_whose_reply_is_lost_is_ambiguous_and_the_log_tells_it_landed(tmp_path: Path) -> None:
    """The log entry is written, then the store's answer is lost.

    Pass: AmbiguousCommitError; commit_status from a new process is COMMITTED; committing again changes
    nothing; every row is visible once."""
    sink = sink_at(tmp_path)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    shares = [rows_for(APP, 0, p, 3) for p in range(2)]
    made = [prepare(sink, batch, epoch, p, rows) for p, rows in enumerate(shares)]
    bundle = bundle_for(batch, epoch, made)
    real = _log.commit_at

    def lost(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        raise OSError("Generic LocalFileSystem error: connection reset by peer")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_log, "commit_at", lost)
        with pytest.raises(AmbiguousCommitError):
            sink.commit(batch, made, bundle)
    after = sink_at(tmp_path)
    assert after.commit_status(batch, made) is CommitStatus.COMMITTED
    after.commit(batch, made, bundle)
    assert canon(read_table(after.config)) == canon([r for s in shares for r in s])
    assert after.fetch_last_bundle(APP) == bundle


def test_files_of_an_attempt_that_died_writing_go_at_the_next_fence_and_prepared_ones_stay(tmp_path: Path) -> None:
    """Attempt A writes and dies before pre_commit; attempt B of the same batch prepares.

    Pass: after a new fence, A's file is gone and B's stays; B's batch commits whole."""
    sink = sink_at(tmp_path)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    dead = sink.begin(TaskRef(batch, epoch, 0, "attempt-dead"))
    sink.write(dead, pa.RecordBatch.from_pylist(rows_for(APP, 0, 0, 3), schema=CONTRACT_SCHEMA))
    dead_files = list(dead.files.open.values())
    dead_paths = [f.path for f in dead_files]
    for f in dead_files:  # the process died: its streams are flushed by the OS, never closed by eosink
        f.parquet.close()
        f.stream.finish()
    rows = rows_for(APP, 0, 0, 3)
    made = [prepare(sink, batch, epoch, 0, rows)]
    table_dir = tmp_path / "table"
    assert all((table_dir / p).exists() for p in dead_paths)
    newer = sink_at(tmp_path)
    new_epoch = newer.fence(APP)
    assert not any((table_dir / p).exists() for p in dead_paths)
    assert all((table_dir / a["path"]).exists() for a in made[0].payload["adds"])
    newer.commit(batch, made, bundle_for(batch, new_epoch, made))
    assert canon(read_table(newer.config)) == canon(rows)


def test_a_batch_with_other_columns_is_a_schema_error_before_a_byte_is_written(tmp_path: Path) -> None:
    """Pass: a batch with an extra column, or with a column of another type, raises SchemaError at its first
    write, naming the column; the table's directory holds no data file afterwards."""
    sink = sink_at(tmp_path)
    epoch = sink.fence(APP)
    extra = pa.table(
        {
            **{n: pa.array([None], t) for n, t in zip(CONTRACT_SCHEMA.names, CONTRACT_SCHEMA.types, strict=True)},
            "more": pa.array([1]),
        }
    )
    wrong = pa.table({"id": pa.array(["1"]), "name": ["a"], "amount": [1.0], "tag": ["t"]})
    for data, name in ((extra, "more"), (wrong, "id")):
        txn = sink.begin(TaskRef(BatchRef(APP, 0), epoch, 0, f"a-{name}"))
        with pytest.raises(SchemaError, match=name):
            sink.write(txn, data.to_batches()[0])
    assert not list((tmp_path / "table").glob("*.parquet"))


def test_with_add_columns_a_new_nullable_column_joins_the_table_in_the_batchs_commit(tmp_path: Path) -> None:
    """Pass: under schema_evolution='add_columns' a batch with a new column commits; the table's schema has
    the column; older rows read it as null."""
    sink = sink_at(tmp_path, schema_evolution="add_columns")
    epoch = sink.fence(APP)
    first = [prepare(sink, BatchRef(APP, 0), epoch, 0, rows_for(APP, 0, 0, 2))]
    sink.commit(BatchRef(APP, 0), first, bundle_for(BatchRef(APP, 0), epoch, first))
    wider = pa.table(
        {
            **{
                n: pa.array([7], pa.int64()) if n == "id" else pa.array([None], t)
                for n, t in zip(CONTRACT_SCHEMA.names, CONTRACT_SCHEMA.types, strict=True)
            },
            "extra": pa.array(["new"]),
        }
    )
    batch = BatchRef(APP, 1)
    txn = sink.begin(TaskRef(batch, epoch, 0, "wide"))
    sink.write(txn, wider.to_batches()[0])
    made = [sink.pre_commit(txn)]
    sink.commit(batch, made, bundle_for(batch, epoch, made))
    rows = read_table(sink.config)
    assert {r["id"]: r["extra"] for r in rows}.get(7) == "new"
    assert all(r["extra"] is None for r in rows if r["id"] != 7)


def compactions(sink: DeltaSink) -> list[int]:
    """The batches after which the log holds a compaction of APP, oldest first."""
    table = _log.load(sink.config.table, sink.config.delta_options())
    assert table is not None
    return sorted(
        int(m["compaction"]) for _, m in _log.eosink_commits(table, APP, include_compactions=True) if "compaction" in m
    )


def test_compaction_every_n_batches_runs_once_even_when_a_crash_kept_it_from_running(tmp_path: Path) -> None:
    """compact_every=3, batches 0..6 of two files each; the process dies right after batch 2's commit, before
    its compaction; batch 6 is committed by a new process.

    Pass: the compaction after batch 2 runs at batch 3's commit (from a new process), the one after batch 5
    after its commit, and batch 6's commit runs none again: two compaction commits, one per window; the rows
    a reader sees are every batch's, once; the table holds fewer files than were written."""
    sink = sink_at(tmp_path, compact_every=3)
    epoch = sink.fence(APP)
    rows: list[dict[str, Any]] = []
    for batch_id in range(6):
        batch = BatchRef(APP, batch_id)
        shares = [rows_for(APP, batch_id, p, 3) for p in range(2)]
        made = [prepare(sink, batch, epoch, p, share) for p, share in enumerate(shares)]
        rows += [r for s in shares for r in s]
        if batch_id == 2:
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(DeltaSink, "_compact_if_due", lambda *a: None)  # the process dies first
                sink.commit(batch, made, bundle_for(batch, epoch, made))
            assert compactions(sink) == []
            sink = sink_at(tmp_path, compact_every=3)
            continue
        sink.commit(batch, made, bundle_for(batch, epoch, made))
    assert compactions(sink) == [2, 5]
    again = sink_at(tmp_path, compact_every=3)  # a new process: batch 6 finds batch 5's compaction done
    made = [prepare(again, BatchRef(APP, 6), epoch, 0, rows_for(APP, 6, 0, 3))]
    again.commit(BatchRef(APP, 6), made, bundle_for(BatchRef(APP, 6), epoch, made))
    rows += rows_for(APP, 6, 0, 3)
    assert compactions(sink) == [2, 5]
    assert canon(read_table(sink.config)) == canon(rows)
    table = _log.load(sink.config.table, sink.config.delta_options())
    assert table is not None and len(table.file_uris()) < 12


def test_a_panic_in_delta_rs_is_a_terminal_error_naming_the_restart_and_the_hdfs_setting() -> None:
    """delta-rs's engine stops for the whole process after a panic (hdfs-native's on a short read, say): retrying
    in the same process cannot help. Pass: the error is terminal (not a TransientError), says to restart, and
    names the NameNode setting that causes it on HDFS; the store's secret stays out of the text."""
    from eosink.connectors.delta._errors import translate
    from eosink.errors import EosinkError, TransientError

    config = DeltaConfig("s3://lake/t", access_key_id="writer", secret_access_key="s3cr3t-value")
    panic = OSError("Generic DeltaTable error: task 7 panicked: TokioMultiThreadExecutor has crashed (s3cr3t-value)")
    error = translate(config, panic, "commit of batch app#3")
    assert type(error) is EosinkError and not isinstance(error, TransientError)
    text = str(error)
    assert "Restart the process" in text and "num-committed-allowed" in text
    assert "s3cr3t-value" not in text


def test_an_upsert_into_a_partitioned_table_keeps_partition_values_and_one_row_per_key(tmp_path: Path) -> None:
    """Idempotent by ``id`` into a table partitioned by ``tag``: batch 0 lands ids 0-5; batch 1 updates id 1 and
    brings id 50 twice (two participants), the later participant's row winning.

    Pass: every row keeps its own ``tag`` (a MERGE source without the partition columns would put new rows in
    the null partition); each id is there once; id 1 and id 50 hold batch 1's later values."""
    sink = sink_at(tmp_path, partition_by=("tag",))
    epoch = sink.fence(APP)
    keys = ("id",)
    first = [{"id": i, "name": f"n{i}", "amount": float(i), "tag": f"t{i % 2}"} for i in range(6)]
    batch = BatchRef(APP, 0)
    made = [prepare(sink, batch, epoch, 0, first, upsert_keys=keys)]
    sink.commit(batch, made, bundle_for(batch, epoch, made, "idempotent"))
    early = [
        {"id": 50, "name": "early", "amount": 1.0, "tag": "t0"},
        {"id": 1, "name": "new", "amount": 9.0, "tag": "t1"},
    ]
    late = [{"id": 50, "name": "late", "amount": 2.0, "tag": "t0"}]
    batch = BatchRef(APP, 1)
    made = [prepare(sink, batch, epoch, p, rows, upsert_keys=keys) for p, rows in enumerate([early, late])]
    sink.commit(batch, made, bundle_for(batch, epoch, made, "idempotent"))
    rows = {r["id"]: r for r in read_table(sink.config)}
    assert sorted(rows) == [0, 1, 2, 3, 4, 5, 50]
    assert all(rows[i]["tag"] == f"t{i % 2}" for i in range(6)), rows
    assert (rows[1]["name"], rows[1]["amount"]) == ("new", 9.0)
    assert (rows[50]["name"], rows[50]["tag"]) == ("late", "t0")


def test_a_batch_whose_commit_left_the_logs_history_is_committed_for_good(tmp_path: Path) -> None:
    """Batch 0 committed; then the log's history no longer holds its commit (as after delta.logRetentionDuration:
    the log starts after version 0) while the app's txn still says batch 0, and its manifest is still there (the
    tidy after the commit failed).

    Pass: recovery does not hand the manifest back as in doubt and deletes none of the batch's files; a second
    commit of the batch is a no-op; commit_status answers COMMITTED; the rows are there once. fetch_last_bundle
    comes from ``last-bundle.json``, and without it is an error naming that file."""
    sink = sink_at(tmp_path)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    rows = rows_for(APP, 0, 0, 4)
    made = [prepare(sink, batch, epoch, 0, rows)]
    bundle = bundle_for(batch, epoch, made)
    sink.commit(batch, made, bundle)
    sink._write_manifest(made[0])  # as if the tidy after the commit had failed
    table = _log.load(sink.config.table, sink.config.delta_options())
    assert table is not None
    table.create_checkpoint()  # what a log cleanup keeps: a checkpoint, and the entries after it
    first_entry = tmp_path / "table" / "_delta_log" / f"{0:020d}.json"
    first_entry.rename(first_entry.with_suffix(".kept"))  # a log cleaned up to its retention starts later
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_log, "bundle_of", lambda *a: None)  # the commit info has left the retained history
        again = sink_at(tmp_path)
        assert again.fetch_last_bundle(APP) == bundle
        assert again.recover(APP) == []
        again.commit(batch, made, bundle)
        assert again.commit_status(batch, made) is CommitStatus.COMMITTED
        with pytest.raises(CommitAbortedError):  # the kept bundle names it: committed work is never aborted
            again.abort(made)
        (tmp_path / "table" / again._app_dir(APP) / "last-bundle.json").unlink()
        with pytest.raises(EosinkError, match=r"last-bundle\.json"):
            again.fetch_last_bundle(APP)
        again._write_manifest(made[0])
        assert again.recover(APP) == []  # committed by the txn: tidied, not in doubt
        again.abort(made)  # whose work it was, nothing says now: a file the log names is never deleted
        assert canon(read_table(again.config)) == canon(rows)


def test_a_batch_whose_predecessor_the_log_lost_is_refused_and_nothing_of_it_lands(tmp_path: Path) -> None:
    """The store lost the log's newest entry (batch 1's commit: a restore, an asynchronously replicated bucket).

    Pass: batch 2, whose bundle follows batch 1, is refused with CommittedWorkLostError naming batch 1, in the
    commit that would have made it visible: the table still holds batch 0's rows only."""
    sink = sink_at(tmp_path)
    epoch = sink.fence(APP)
    rows0: list[dict[str, Any]] = []
    for batch_id in (0, 1):
        batch = BatchRef(APP, batch_id)
        rows = rows_for(APP, batch_id, 0, 4)
        rows0 = rows0 or rows
        made = [prepare(sink, batch, epoch, 0, rows)]
        follows = batch_id - 1 if batch_id else None
        sink.commit(batch, made, replace(bundle_for(batch, epoch, made), follows=follows))
    log_dir = tmp_path / "table" / "_delta_log"
    newest = max(log_dir.glob("*.json"))
    newest.rename(newest.with_suffix(".lost"))  # the store no longer has batch 1's commit
    again = sink_at(tmp_path)
    batch2 = BatchRef(APP, 2)
    made2 = [prepare(again, batch2, epoch, 0, rows_for(APP, 2, 0, 4))]
    with pytest.raises(CommittedWorkLostError) as lost:
        again.commit(batch2, made2, replace(bundle_for(batch2, epoch, made2), follows=1))
    assert lost.value.batches == (1,)
    assert canon(read_table(again.config)) == canon(rows0)


def test_a_new_column_joins_as_nullable_even_from_a_non_nullable_field(tmp_path: Path) -> None:
    """With add_columns, batch 1 brings ``extra`` declared NOT NULL by Spark. Pass: the table's new column is
    nullable (batch 0's rows hold no value for it) and both batches read back."""
    sink = sink_at(tmp_path, schema_evolution="add_columns")
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    made = [prepare(sink, batch, epoch, 0, rows_for(APP, 0, 0, 2))]
    sink.commit(batch, made, bundle_for(batch, epoch, made))
    wider = pa.schema([*CONTRACT_SCHEMA, pa.field("extra", pa.int64(), nullable=False)])
    txn = sink.begin(TaskRef(BatchRef(APP, 1), epoch, 0, "attempt-extra"))
    rows = [{**r, "extra": 7} for r in rows_for(APP, 1, 0, 2)]
    sink.write(txn, pa.RecordBatch.from_pylist(rows, schema=wider))
    made = [sink.pre_commit(txn)]
    sink.commit(BatchRef(APP, 1), made, bundle_for(BatchRef(APP, 1), epoch, made))
    table = _log.load(sink.config.table, sink.config.delta_options())
    assert table is not None
    assert pa.schema(table.schema().to_arrow()).field("extra").nullable
    assert sorted(r["extra"] is None for r in read_table(sink.config)) == [False, False, True, True]


def test_a_refused_commit_that_lost_no_race_is_an_error_not_a_hundred_retries(tmp_path: Path) -> None:
    """delta-rs refuses a commit (CommitFailedError) while no other writer took the next version. Pass: one
    EosinkError saying nothing was written, after one try; nothing visible."""
    sink = sink_at(tmp_path)
    epoch = sink.fence(APP)
    batch = BatchRef(APP, 0)
    made = [prepare(sink, batch, epoch, 0, rows_for(APP, 0, 0, 2))]
    calls = []

    def refused(*args: Any, **kwargs: Any) -> None:
        calls.append(1)
        raise _log.Conflict("Transaction failed: unsupported writer feature")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_log, "commit_at", refused)
        with pytest.raises(EosinkError, match="nothing was written"):
            sink.commit(batch, made, bundle_for(batch, epoch, made))
    assert calls == [1]
    assert read_table(sink.config) == []


def test_storage_options_that_say_how_to_reach_s3_are_refused_and_sse_c_keys_are_hidden() -> None:
    with pytest.raises(ConfigurationError, match="AWS_ENDPOINT_URL"):
        DeltaConfig("s3://lake/t", access_key_id="a", secret_access_key="b", storage_options={"AWS_ENDPOINT_URL": "x"})
    config = DeltaConfig(
        "s3://lake/t", access_key_id="a", secret_access_key="b", storage_options={"aws_sse_customer_key_base64": "K3Y"}
    )
    assert "K3Y" not in repr(config) and config.scrub("key K3Y") == "key ***"


def strict_table(tmp_path: Path, **options: Any) -> DeltaSink:
    """A table made outside eosink whose ``id`` and ``tag.code`` (in a nullable struct) are NOT NULL."""
    from deltalake import write_deltalake

    code = pa.struct([pa.field("code", pa.string(), nullable=False)])
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string()), ("tag", code)])
    write_deltalake(str(tmp_path / "table"), pa.table({"id": [0], "name": ["seed"], "tag": [{"code": "a"}]}, schema))
    sink = DeltaSink(DeltaConfig(str(tmp_path / "table"), **options))
    sink.bind_schema(
        pa.schema([("id", pa.int64()), ("name", pa.string()), ("tag", pa.struct([("code", pa.string())]))])
    )
    return sink


def test_a_null_where_the_table_says_not_null_is_a_bad_record_and_nothing_lands(tmp_path: Path) -> None:
    """The table's ``id`` and ``tag.code`` are NOT NULL; Spark's batches declare every column nullable. Pass: a
    batch with a null id, or a present tag whose code is null, raises BadRecordError naming the place and the
    fix, before any file is written; a null tag (the struct itself may be null) is fine; after the fix the
    batch lands once and the table still reads."""
    from deltalake import DeltaTable

    sink = strict_table(tmp_path)
    epoch = sink.fence(APP)
    kinds = pa.schema([("id", pa.int64()), ("name", pa.string()), ("tag", pa.struct([("code", pa.string())]))])
    for rows, place in (
        ([{"id": 1, "name": "a", "tag": None}, {"id": None, "name": "b", "tag": None}], "id (1 null)"),
        ([{"id": 1, "name": "a", "tag": {"code": None}}, {"id": 2, "name": "b", "tag": None}], "tag.code (1 null)"),
    ):
        txn = sink.begin(TaskRef(BatchRef(APP, 0), epoch, 0, f"bad-{place[:3]}"))
        with pytest.raises(BadRecordError, match=re.escape(place)) as err:
            sink.write(txn, pa.RecordBatch.from_pylist(rows, schema=kinds))
        assert err.value.fix and "coalesce" in err.value.fix
    assert [p.name for p in (tmp_path / "table").glob("*.parquet") if "eosink" in p.name] == []
    batch = BatchRef(APP, 0)
    txn = sink.begin(TaskRef(batch, epoch, 0, "fixed"))
    sink.write(txn, pa.RecordBatch.from_pylist([{"id": 1, "name": "a", "tag": None}], schema=kinds))
    made = [sink.pre_commit(txn)]
    sink.commit(batch, made, bundle_for(batch, epoch, made))
    assert sorted(r["id"] for r in DeltaTable(str(tmp_path / "table")).to_pyarrow_table().to_pylist()) == [0, 1]


def test_with_add_columns_a_batch_may_leave_out_a_nullable_column_but_never_a_not_null_one(tmp_path: Path) -> None:
    """Pass: under add_columns a batch without ``name`` (nullable) is written; one without ``id`` (NOT NULL)
    is a SchemaError naming it, at setup and at the first write."""
    sink = strict_table(tmp_path, schema_evolution="add_columns")
    epoch = sink.fence(APP)
    txn = sink.begin(TaskRef(BatchRef(APP, 0), epoch, 0, "no-name"))
    sink.write(
        txn,
        pa.RecordBatch.from_pylist(
            [{"id": 5, "tag": None}],
            schema=pa.schema([("id", pa.int64()), ("tag", pa.struct([("code", pa.string())]))]),
        ),
    )
    txn = sink.begin(TaskRef(BatchRef(APP, 0), epoch, 1, "no-id"))
    with pytest.raises(SchemaError, match=r"\['id'\] are NOT NULL"):
        sink.write(txn, pa.RecordBatch.from_pylist([{"name": "x"}]))
    sink.bind_schema(pa.schema([("name", pa.string())]))
    with pytest.raises(SchemaError, match=r"\['id'\] are NOT NULL"):
        sink.setup(APP)


@pytest.mark.parametrize(
    ("declare", "named"),
    [
        (("constraint", ""), "CHECK constraint 'positive' (id > 0)"),
        (("delta.generationExpression", "id * 2"), "generated column 'twice'"),
        (("delta.invariants", '{"expression": {"expression": "twice > 0"}}'), "column invariant 'twice'"),
        (("delta.identity.start", "1"), "identity column 'twice'"),
    ],
)
def test_a_table_with_rules_eosink_would_not_enforce_is_refused_before_a_write(
    tmp_path: Path, declare: tuple[str, str], named: str
) -> None:
    """A CHECK constraint, or a generated, invariant or identity column (as field metadata), would not be
    evaluated on the rows eosink writes. Pass: setup and begin raise SchemaError naming the rule and the fix;
    the table's log is unchanged."""
    from deltalake import DeltaTable

    where = str(tmp_path / "table")
    key, value = declare
    meta = {} if key == "constraint" else {key: value}
    schema = pa.schema([pa.field("id", pa.int64()), pa.field("twice", pa.int64(), metadata=meta)])
    DeltaTable.create(where, schema)
    if key == "constraint":
        DeltaTable(where).alter.add_constraint({"positive": "id > 0"})
    version = DeltaTable(where).version()
    sink = DeltaSink(DeltaConfig(where))
    sink.bind_schema(schema)
    with pytest.raises(SchemaError, match=re.escape(named)) as err:
        sink.setup(APP)
    assert err.value.fix and "query" in err.value.fix
    with pytest.raises(SchemaError, match=re.escape(named)):
        sink.begin(TaskRef(BatchRef(APP, 0), 1, 0, "a"))
    assert DeltaTable(where).version() == version


@pytest.mark.parametrize(
    ("raised", "kind"),
    [
        (RuntimeError('DataTransferError("All nodes failed for write")'), TransientError),
        (RuntimeError("failed to complete file in time"), TransientError),
        (RuntimeError('RPCError("org.apache.hadoop.ipc.RetriableException", "NameNode not started")'), TransientError),
        (RuntimeError("channel closed"), TransientError),
        (OSError("Connection refused"), TransientError),
        (
            RuntimeError('RPCError("org.apache.hadoop.hdfs.protocol.DSQuotaExceededException", "quota")'),
            ConfigurationError,
        ),
    ],
)
def test_hdfs_failures_of_a_delta_table_are_read_as_the_hdfs_sink_reads_them(
    raised: BaseException, kind: type[EosinkError]
) -> None:
    """The store kit's reading of hdfs-native's failures (eosink.stores.hdfs_errors), shared with the HDFS sink.
    Pass: a lost DataNode, a file the NameNode could not confirm, a NameNode not serving yet and a dropped
    connection are TransientErrors (a retry writes new files); an exceeded quota is a ConfigurationError naming
    the fix."""
    from eosink.connectors.delta._errors import translate

    error = translate(DeltaConfig("hdfs://127.0.0.1:9/table"), raised, "write")
    assert type(error) is kind, (raised, error)
    if kind is ConfigurationError:
        assert error.fix and "setSpaceQuota" in error.fix
