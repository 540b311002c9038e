"""The S3 connector's bad-input catalogue, driven through the real protocol into the real MinIO.

Each case runs batches through the real Coordinator in Spark's order
(:class:`~eosink.contracts._mini.SparkOrderDriver`) until the bad input stops the query, then checks:

1. the error's class (ConfigurationError / SchemaError / BadRecordError / TransientError), that its
   problem names what is wrong and its fix names what to change, and that no secret (secret key,
   session token) is in its text, repr, arguments, traceback or chained errors, nor in the log;
2. nothing of the failing batch is visible: readers of the commit markers see the batches
   committed before it, once, and a plain listing of the prefix shows no other object;
3. after the fix, a restart (a new sink and Coordinator, the same checkpoint and app_id) resumes,
   and the store holds every batch exactly once, each with its marker, no upload left incomplete
   and no manifest left in the checkpoint.

Settings that cannot be right (a prefix with illegal characters, limits that contradict each
other) are refused when the S3Config is made, before any query exists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest
from botocore.exceptions import ClientError

from eosink.connectors.s3 import S3Config, S3Sink, committed_files, committed_markers, read_committed
from eosink.connectors.s3.admin import S3Admin
from eosink.connectors.s3.testing import empty_prefix, incomplete_uploads
from eosink.contracts._mini import SCHEMA, VARIANTS, MemoryBatch, SparkOrderDriver, Variant, canon, make_rows
from eosink.errors import (
    AuthenticationError,
    BadRecordError,
    ConfigurationError,
    EosinkError,
    PermissionDeniedError,
    SchemaError,
    TransientError,
)
from eosink.services._process import free_port
from eosink.stores.s3_errors import PERMISSIONS
from tests.connectors._no_conditions import NoConditionsProxy
from tests.connectors.postgres._badinput import ArrowBatch, assert_refused

from .conftest import HARNESS

APP = "app_bad"
TWO_PC = next(v for v in VARIANTS if v.id == "2pc")
UNREACHABLE_WITHIN_S = 30.0


class Driver(SparkOrderDriver[S3Config]):
    """:class:`~eosink.contracts._mini.SparkOrderDriver` around :class:`S3Sink`."""

    def __init__(self, tmp_path: Path, config: S3Config, variant: Variant = TWO_PC) -> None:
        super().__init__(tmp_path, variant, config, S3Sink, APP)


def work(n: int = 3, *, bad: dict[str, Any] | None = None, at: int = 1) -> list[MemoryBatch]:
    """``n`` batches of the contract schema; ``bad`` overrides fields of batch ``at``'s last row (the last
    participant's, so that the participants before it have prepared their uploads when it fails)."""
    out = []
    for b in range(n):
        rows = make_rows(b)
        if bad is not None and b == at:
            rows[-1] = {**rows[-1], **bad}
        out.append(MemoryBatch(rows))
    return out


def expected(batches: Sequence[MemoryBatch]) -> Counter[str]:
    return canon([r for b in batches for r in b.rows])


def visible(config: S3Config) -> Counter[str]:
    """What readers of the commit markers see of APP."""
    rows: list[dict[str, Any]] = read_committed(config, APP).to_pylist()
    return canon(rows)


def listed(config: S3Config) -> set[str]:
    """What a plain listing of the prefix shows, eosink's bookkeeping (``_eosink/``) left out."""
    s3, root = HARNESS.client(), f"{config.prefix}/"
    pages = s3.get_paginator("list_objects_v2").paginate(Bucket=config.bucket, Prefix=root)
    keys = {o["Key"] for page in pages for o in page.get("Contents", [])}
    return {k for k in keys if not k.startswith(f"{root}_eosink/")}


def uploads_left(config: S3Config) -> list[str]:
    return [str(u["Key"]) for u in incomplete_uploads(HARNESS.client(), config.bucket, config.prefix)]


def only(config: S3Config, batches: Sequence[MemoryBatch]) -> None:
    """Exactly ``batches`` are visible, each once with its marker, to readers of the markers and to a plain
    listing of the prefix alike."""
    assert visible(config) == expected(batches)
    assert [m.batch_id for m in committed_markers(config, APP)] == list(range(len(batches)))
    assert listed(config) == {f.key for f in committed_files(config, APP)}


def stop_fix_resume(
    driver: Driver,
    bad: Sequence[MemoryBatch],
    error: type[EosinkError],
    *,
    fixed: Sequence[MemoryBatch] | None = None,
    config: S3Config | None = None,
    fix: Callable[[], object] = lambda: None,
    committed: int = 0,
) -> EosinkError:
    """Run the ``bad`` batches until the query stops with ``error``; check that only the first ``committed``
    batches are visible; restart with the fix (``fix()`` on the store, the ``fixed`` batches, the ``config``);
    check that every batch is there once, no upload is left incomplete and no manifest in the checkpoint.
    The error, to check."""
    err = driver.fail(bad, error)
    fix()
    fixed = bad if fixed is None else fixed
    only(config or driver.config, fixed[:committed])
    driver.restart(config)
    driver.run(fixed)
    driver.close()
    only(driver.config, fixed)
    assert uploads_left(driver.config) == []
    assert driver.ckpt.spark().manifest_batches(APP) == []
    return err


# -- where the store is, and who may write ------------------------------------------------------------


def test_a_missing_bucket_stops_the_query_and_resumes_once_it_is_created(tmp_path: Path, prefix: str) -> None:
    """A bucket that does not exist: ConfigurationError naming it, fix "Create the bucket", from the query
    and from ``eosink status`` alike; once it is created, the restart writes every batch once."""
    bucket = f"eosink-bad-{uuid.uuid4().hex[:10]}"
    config = dataclasses.replace(HARNESS.config(prefix), bucket=bucket)
    with pytest.raises(ConfigurationError) as status:
        S3Admin(config).status(APP)
    assert_refused(status.value, problem=[bucket, "bucket does not exist"], fix=["Create the bucket"])
    admin = HARNESS.client()
    try:
        fix = functools.partial(admin.create_bucket, Bucket=bucket)
        err = stop_fix_resume(Driver(tmp_path, config), work(), ConfigurationError, fix=fix)
        assert_refused(err, problem=[bucket, "bucket does not exist"], fix=["Create the bucket"])
    finally:
        with contextlib.suppress(ClientError):  # NoSuchBucket: the test failed before it was made
            empty_prefix(admin, bucket, prefix)
            admin.delete_bucket(Bucket=bucket)


def test_wrong_credentials_stop_the_query_without_the_secret(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A wrong secret key: AuthenticationError about the credentials, from the query and from ``eosink status``
    alike, the secret in no text, repr or log line; with the right key the restart writes every batch once."""
    secret = f"not-the-secret-{uuid.uuid4().hex}"
    bad = HARNESS.config(prefix, secret_access_key=secret)
    with pytest.raises(AuthenticationError) as status:
        S3Admin(bad).status(APP)
    assert_refused(status.value, problem=["refused the credentials"], fix=["secret key"], secrets=[secret])
    err = stop_fix_resume(Driver(tmp_path, bad), work(), AuthenticationError, config=HARNESS.config(prefix))
    assert_refused(err, problem=["refused the credentials"], fix=["secret key"], secrets=[secret])
    for shown in (bad, S3Sink(bad), bad.connection()):
        assert secret not in f"{shown} {shown!r}"
    assert secret not in caplog.text


def session_credentials(prefix: str, actions: Sequence[str]) -> dict[str, str]:
    """Temporary credentials of MinIO (STS AssumeRole) whose session policy allows only ``actions`` on the
    prefix: MinIO's root user bypasses every policy, its temporary users do not."""
    ep = HARNESS.endpoint()
    sts = boto3.client(
        "sts",
        endpoint_url=ep.endpoint_url,
        aws_access_key_id=ep.access_key,
        aws_secret_access_key=ep.secret_key,
        region_name=ep.region,
    )
    bucket = f"arn:aws:s3:::{HARNESS.bucket}"
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Action": list(actions), "Resource": [bucket, f"{bucket}/{prefix}/*"]}],
    }
    reply = sts.assume_role(
        RoleArn="arn:minio:iam:::role/eosink-bad-input",
        RoleSessionName="eosink-bad-input",
        Policy=json.dumps(policy),
        DurationSeconds=900,
    )
    creds = reply["Credentials"]
    return {
        "access_key_id": creds["AccessKeyId"],
        "secret_access_key": creds["SecretAccessKey"],
        "session_token": creds["SessionToken"],
    }


def test_access_denied_by_a_read_only_policy_then_the_documented_permissions_suffice(
    tmp_path: Path, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A MinIO user whose policy only reads: PermissionDeniedError "access denied" naming the action the refused
    request needed (s3:PutObject) in its permission and fix; a user granted exactly the documented permissions
    (PERMISSIONS) resumes and writes every batch once."""
    read_only = session_credentials(prefix, ["s3:ListBucket", "s3:GetObject"])
    granted = session_credentials(prefix, PERMISSIONS.split(", "))
    driver = Driver(tmp_path, HARNESS.config(prefix, **read_only))
    err = stop_fix_resume(driver, work(), PermissionDeniedError, config=HARNESS.config(prefix, **granted))
    secrets = [read_only["secret_access_key"], read_only["session_token"]]
    assert_refused(err, problem=["access denied"], fix=["s3:PutObject"], secrets=secrets)
    assert isinstance(err, PermissionDeniedError) and err.permission == "s3:PutObject"
    assert all(s not in caplog.text for s in secrets)


def test_an_unreachable_endpoint_is_a_prompt_transient_error(tmp_path: Path, prefix: str) -> None:
    """An endpoint where nothing listens: TransientError naming the endpoint, within a bounded time (no
    endless retry); with the right endpoint the restart writes every batch once."""
    dead = f"http://127.0.0.1:{free_port()}"
    bad = HARNESS.config(prefix, endpoint_url=dead, connect_timeout_s=2.0, max_attempts=2)
    driver = Driver(tmp_path, bad)
    started, stopped = time.monotonic(), []  # the fix runs as soon as the query stopped: it times the stop
    err = stop_fix_resume(
        driver,
        work(),
        TransientError,
        config=HARNESS.config(prefix),
        fix=lambda: stopped.append(time.monotonic() - started),
    )
    assert_refused(err, problem=[dead, "no answer"], fix=["endpoint_url"])
    assert stopped[0] < UNREACHABLE_WITHIN_S, f"the query waited {stopped[0]:.1f} s for a dead endpoint"


@pytest.fixture
def no_conditions() -> Iterator[NoConditionsProxy]:
    proxy = NoConditionsProxy(HARNESS.endpoint())
    yield proxy
    proxy.close()


def test_a_store_without_conditional_writes_is_detected_and_explained(
    tmp_path: Path, prefix: str, no_conditions: NoConditionsProxy
) -> None:
    """A store that ignores If-None-Match and If-Match: setup's probe finds both ignored, ConfigurationError
    explaining that markers would not be create-only, naming stores that have them; on a store that honours
    them the restart writes every batch once."""
    bad = HARNESS.config(prefix).with_endpoint(no_conditions.url)
    err = stop_fix_resume(Driver(tmp_path, bad), work(), ConfigurationError, config=HARNESS.config(prefix))
    assert_refused(
        err,
        problem=["does not honour conditional writes", "If-None-Match: *", "If-Match", "create-only"],
        fix=["conditional writes", "MinIO"],
    )
    assert no_conditions.stripped >= 3, "the probe's three conditional PUTs went through the proxy"


# -- settings refused when the configuration is made --------------------------------------------------


@pytest.mark.parametrize(
    ("bad_prefix", "words"),
    [
        ("has space/x", ["' '"]),
        ("naïve", ["'ï'"]),
        ("a?b#c", ["'#'", "'?'"]),
        ("back\\slash", ["'\\\\'"]),
        ("a//b", ["empty"]),
        ("a/../b", ["'..'"]),
        ("s3://bucket/p", ["URL"]),
        ("data/_eosink", ["bookkeeping"]),
        ("x" * 300, ["300 bytes"]),
        ("/".join(["y" * 200] * 5), ["1004 bytes"]),
    ],
    ids=[
        "space",
        "non-ascii",
        "query-chars",
        "backslash",
        "empty-segment",
        "dotdot",
        "url",
        "bookkeeping",
        "long-segment",
        "long-prefix",
    ],
)
def test_a_prefix_with_illegal_characters_is_refused_when_the_config_is_made(bad_prefix: str, words: list[str]) -> None:
    """Characters that need URL encoding, path tricks, URLs, eosink's own folder, and prefixes too long for
    keys: ConfigurationError naming the prefix's fault and what a prefix may hold, before any request."""
    with pytest.raises(ConfigurationError) as info:
        S3Config("eosink-tests", bad_prefix)
    assert_refused(info.value, problem=words, fix=[])


@pytest.mark.parametrize("name", ["row_group_bytes", "max_record_bytes"])
def test_a_row_group_or_record_limit_over_the_buffer_is_refused_when_the_config_is_made(name: str) -> None:
    """A row group or a record allowed to be larger than what a participant may buffer: ConfigurationError
    naming both settings."""
    options: dict[str, Any] = {name: 64 << 20, "max_buffer_bytes": 32 << 20}
    with pytest.raises(ConfigurationError) as info:
        S3Config("eosink-tests", "p", **options)
    assert_refused(info.value, problem=[name, "max_buffer_bytes"], fix=[name, "max_buffer_bytes"])


# -- data the sink cannot write --------------------------------------------------------------------------


def schema_with(changes: dict[str, pa.DataType]) -> pa.Schema:
    """The contract schema with some columns' types changed, or columns added."""
    fields = [pa.field(f.name, changes.get(f.name, f.type)) for f in SCHEMA]
    return pa.schema(fields + [pa.field(n, t) for n, t in changes.items() if n not in SCHEMA.names])


@pytest.mark.parametrize(
    ("changes", "words"),
    [({"amount": pa.string()}, ["amount: double -> string"]), ({"extra": pa.int64()}, ["extra added"])],
    ids=["type-changed", "column-added"],
)
def test_a_schema_change_between_parquet_batches_is_refused(
    tmp_path: Path, prefix: str, changes: dict[str, pa.DataType], words: list[str]
) -> None:
    """Batch 2 with another schema than batches 0 and 1 (Parquet): SchemaError naming the change, batches 0
    and 1 stay visible once; a restart without the fix refuses it again (the committed schema is read back
    from the markers); after the fix the restart writes every batch once."""
    schema = schema_with(changes)
    batches = work()
    rows = [{**r, **{n: (str(r[n]) if n in r else 7) for n in changes}} for r in batches[2].rows]
    changed = [*batches[:2], ArrowBatch(rows, schema)]
    driver = Driver(tmp_path, HARNESS.config(prefix))
    err = driver.fail(changed, SchemaError)
    assert_refused(err, problem=words, fix=["committed schema", "new prefix"])
    driver.restart()
    stop_fix_resume(driver, changed, SchemaError, fixed=batches, committed=2)


def nested_batches(big_at: int) -> list[MemoryBatch]:
    """Three batches of 30 rows with a list column, each participant's rows in one record batch; batch
    ``big_at``'s last row holds 100,000 numbers (800 kB), less than 200 kB on average over its record batch."""
    schema = SCHEMA.append(pa.field("samples", pa.list_(pa.int64())))
    out: list[MemoryBatch] = []
    for b in range(3):
        rows = [{**r, "samples": [1, 2, 3]} for r in make_rows(b, 30)]
        if b == big_at:
            rows[-1]["samples"] = list(range(100_000))
        out.append(ArrowBatch(rows, schema, participants=2, chunk=100))
    return out


@pytest.mark.parametrize(
    ("fmt", "nested"),
    [("parquet", False), ("jsonl", False), ("parquet", True)],
    ids=["parquet", "jsonl", "parquet-nested"],
)
def test_a_record_too_large_for_max_record_bytes_is_refused(
    tmp_path: Path, prefix: str, fmt: str, nested: bool
) -> None:
    """A row over max_record_bytes (a long string, or a list of 100,000 numbers among small lists):
    BadRecordError naming the size and the setting; batch 0 stays visible once; with the limit raised
    the restart writes every batch once."""
    batches = nested_batches(big_at=1) if nested else work(bad={"name": "x" * 300_000})
    driver = Driver(tmp_path, HARNESS.config(prefix, format=fmt, max_record_bytes=200_000))
    raised = HARNESS.config(prefix, format=fmt, max_record_bytes=4 << 20)
    err = stop_fix_resume(driver, batches, BadRecordError, config=raised, committed=1)
    assert_refused(err, problem=["max_record_bytes=200000"], fix=["raise max_record_bytes"])


@pytest.mark.parametrize(
    "value",
    ["../", "..", ".", "/etc/passwd", "a/../../b", "a\\b", "line\nbreak"],
    ids=["dotdot-slash", "dotdot", "dot", "absolute", "traversal", "backslash", "control"],
)
def test_a_hostile_partition_value_is_refused(tmp_path: Path, prefix: str, value: str) -> None:
    """A partition value that is a path: BadRecordError naming the column and the value (nothing written
    outside the prefix, nothing of the batch visible); after cleaning it the restart writes every batch once."""
    driver = Driver(tmp_path, HARNESS.config(prefix, partition_by=("tag",)))
    cleaned = work(bad={"tag": "cleaned"})
    err = stop_fix_resume(driver, work(bad={"tag": value}), BadRecordError, fixed=cleaned, committed=1)
    assert_refused(err, problem=["'tag'", repr(value)[1:-1]], fix=["Clean or map column 'tag'"])


def test_partition_values_that_look_hostile_but_are_values_are_escaped_and_read_back(
    tmp_path: Path, prefix: str
) -> None:
    """Values with '=', '%', '*', '#', '?', ':', spaces, non-ASCII letters, empty and null: written under
    escaped folders inside the prefix, read back exactly as written."""
    tags = ["a=b", "50%", "*", "#?:", "with space", "naïve", "", None]
    batches = [MemoryBatch([{**r, "tag": tags[i % len(tags)]} for i, r in enumerate(make_rows(b))]) for b in range(2)]
    driver = Driver(tmp_path, HARNESS.config(prefix, partition_by=("tag",)))
    driver.run(batches)
    driver.close()
    assert all(k.startswith(f"{prefix}/tag=") for k in listed(driver.config))
    written = [{**r, "tag": r["tag"] or None} for b in batches for r in b.rows]
    assert visible(driver.config) == canon(written), "an empty value is read back as null, as Spark does"


@pytest.mark.parametrize("why", ["key-over-1024", "segment-over-255"])
def test_an_object_key_too_long_is_refused(tmp_path: Path, prefix: str, why: str) -> None:
    """Partition values that make a key over S3's 1024 bytes (under a 800-byte prefix), or one folder over
    the 255 bytes MinIO allows between slashes: BadRecordError naming the limit, before MinIO refuses a
    part; with shorter values the restart writes every batch once."""
    if why == "key-over-1024":
        deep = "/".join([prefix, *["p" * 200] * 3, "q" * 180])
        value, words = "v" * 240, ["1024"]
    else:
        deep, value, words = f"{prefix}/deep", "v" * 300, ["255 bytes"]
    driver = Driver(tmp_path, HARNESS.config(deep, partition_by=("tag",)))
    shorter = work(bad={"tag": "short"})
    err = stop_fix_resume(driver, work(bad={"tag": value}), BadRecordError, fixed=shorter, committed=1)
    assert_refused(err, problem=words, fix=["Shorten", "partition values"])
