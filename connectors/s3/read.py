"""Reading what an S3Sink committed, whole batches only: :func:`committed_files` and :func:`read_committed`.

Both follow the commit markers: an object is read only when a marker names it, so a reader never
sees part of a batch whose commit is running, an object of a failed or fenced attempt, or an
idempotent object whose batch has no marker yet. Old markers are folded into segments
(``<prefix>/_eosink/<app-dir>/segments/``, see ``_segments``), the recent ones are marker
objects (``.../commits/``): a reader lists the markers first, then the segments, reads the
segments, then the markers no segment's range holds (a segment is authoritative for its range).
A fold writes its segment before it deletes the range's markers, so a marker missing from the
first listing is in a segment the second finds; a listed marker that is gone when it is read
(folded in between) makes the reader look again (at most :data:`READ_ATTEMPTS` times). No batch
is missed, none counted twice.
Readers that list the prefix instead (``spark.read.parquet(prefix)``, Athena, a plain
``aws s3 ls``) see every complete object: part of a batch while its commit runs, and leftovers
of attempts that never committed.

Upserts (``mode="upsert"``, or the idempotent strategy's keys) are merged on read: per key, the
row of the newest batch wins (within a batch, the later row).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from eosink._newest import newest_per_key, with_order
from eosink.connectors.s3._encode import schema_of
from eosink.connectors.s3._layout import Layout, app_dir
from eosink.connectors.s3._markers import CommitMarker, list_marker_keys
from eosink.connectors.s3._segments import Segment, first_segment_key, list_segment_keys, range_of, span_of
from eosink.connectors.s3.config import S3Config
from eosink.errors import ConfigurationError, EosinkError, TransientError
from eosink.stores.parquet import parquet_table
from eosink.stores.s3 import client as s3_client
from eosink.stores.s3_errors import is_not_found, translated

if TYPE_CHECKING:
    import pyarrow.dataset as ds

__all__ = [
    "READ_ATTEMPTS",
    "CommittedObject",
    "committed_files",
    "committed_marker",
    "committed_markers",
    "read_committed",
]

READ_ATTEMPTS = 5
"""How often a reader lists again when markers it listed were folded before it read them (each fold takes
S batches to become due again, so a second look normally succeeds)."""


@dataclass(frozen=True)
class CommittedObject:
    """One object a commit marker names."""

    app_id: str
    batch_id: int
    key: str
    etag: str
    size: int
    rows: int
    partition: dict[str, str | None]
    bucket: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.key}"


def committed_markers(
    config: S3Config, app_id: str | None = None, *, after_batch: int | None = None
) -> list[CommitMarker]:
    """The commit markers of ``app_id`` (or of every app_id under the prefix), oldest batch first per app_id,
    from its segments and its marker objects; with ``after_batch``, only those of later batches (``app_id``
    needed; the segments of earlier ranges are not read)."""
    conn = config.connection()
    s3 = s3_client(conn)
    layout = Layout(config.prefix)
    with translated(conn, f"reading the commit markers under {config.root}"):
        apps = [app_id] if app_id is not None else _app_ids(s3, config, layout)
        out = []
        for app in apps:
            out += _markers_of(s3, config, layout, app, after_batch)
    return out


def committed_marker(config: S3Config, app_id: str, batch_id: int) -> CommitMarker | None:
    """The marker that commits ``batch_id`` of ``app_id`` (from its segment once its range is folded), or None:
    a GET of the marker, then (one one-key listing for the span) a GET of its range's segment."""
    conn = config.connection()
    s3 = s3_client(conn)
    layout = Layout(config.prefix)
    with translated(conn, f"reading the commit marker of batch {batch_id} under {config.root}"):
        data = _fetch(s3, config.bucket, layout.marker_key(app_id, batch_id))
        marker = None if data is None else _marker(data, app_id, layout.marker_key(app_id, batch_id))
        first = first_segment_key(s3, config.bucket, layout, app_id)
        span = None if first is None else span_of(first)
        if span is None:
            return marker
        key = layout.segment_key(app_id, *range_of(batch_id, span))
        data = _fetch(s3, config.bucket, key)
        return marker if data is None else _segment(data, app_id, key).get(batch_id)


def _markers_of(s3: Any, config: S3Config, layout: Layout, app: str, after_batch: int | None) -> list[CommitMarker]:
    for _ in range(READ_ATTEMPTS):
        found = _snapshot(s3, config, layout, app, after_batch)
        if found is not None:
            return found
    raise TransientError(
        f"The commit markers of {app!r} under {config.root} were folded into segments while they were read, "
        f"{READ_ATTEMPTS} times in a row.",
        "Read again: folds are rare (one per segment_batches batches per app_id).",
    )


def _snapshot(
    s3: Any, config: S3Config, layout: Layout, app: str, after_batch: int | None
) -> list[CommitMarker] | None:
    """Every committed batch's marker after ``after_batch``, in batch order; None when a listed object vanished
    before it was read (a fold deleted it): the caller looks again."""
    start = layout.marker_key(app, after_batch) if after_batch is not None else None
    marker_keys = list_marker_keys(s3, config.bucket, layout, app, start)  # markers first ...
    segment_keys = list_segment_keys(s3, config.bucket, layout, app, after_batch)  # ... then segments
    found: dict[int, CommitMarker] = {}
    folded: list[tuple[int, int]] = []
    for key in segment_keys:
        data = _fetch(s3, config.bucket, key)
        if data is None:
            return None
        segment = _segment(data, app, key)
        folded.append((segment.first, segment.last))
        for marker in segment.markers():
            if after_batch is None or marker.batch_id > after_batch:
                found.setdefault(marker.batch_id, marker)  # overlapping segments hold the same marker
    covered = _merged(folded)
    firsts = [f for f, _ in covered]
    for key in marker_keys:
        batch_id = Layout.marker_batch(key)
        assert batch_id is not None
        at = bisect_right(firsts, batch_id) - 1
        if at >= 0 and batch_id <= covered[at][1]:
            continue  # a segment is authoritative for its range: a leftover or a zombie's marker
        data = _fetch(s3, config.bucket, key)
        if data is None:
            return None
        found.setdefault(batch_id, _marker(data, app, key))
    return [found[b] for b in sorted(found)]


def _merged(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The batch ranges as disjoint ranges, ascending."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(ranges):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def _fetch(s3: Any, bucket: str, key: str) -> bytes | None:
    """The object's bytes; None when it does not exist (any longer)."""
    from botocore.exceptions import ClientError

    try:
        body: bytes = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        if is_not_found(exc):
            return None
        raise
    return body


def _marker(data: bytes, app: str, key: str) -> CommitMarker:
    try:
        marker = CommitMarker.decode(data)
    except (ValueError, KeyError, TypeError) as exc:
        raise EosinkError(
            f"The commit marker {key!r} is damaged ({exc}).",
            "Only eosink writes under _eosink/; restore it from a backup or a versioned bucket.",
        ) from None
    if marker.app_id != app:
        raise EosinkError(f"The marker {key!r} is of app_id {marker.app_id!r}.", "Use another app_id.")
    return marker


def _segment(data: bytes, app: str, key: str) -> Segment:
    try:
        return Segment.decode(data, app, key)
    except (ValueError, KeyError, TypeError) as exc:
        raise EosinkError(
            f"The segment {key!r} is damaged ({exc}).",
            "Only eosink writes under _eosink/; restore it from a backup or a versioned bucket.",
        ) from None


def _app_ids(s3: Any, config: S3Config, layout: Layout) -> list[str]:
    """Every app_id with an epoch or markers under the prefix (read from its epoch object or a marker)."""
    apps = []
    args: dict[str, Any] = {"Bucket": config.bucket, "Prefix": layout.control_root, "Delimiter": "/"}
    while True:
        reply = s3.list_objects_v2(**args)
        for entry in reply.get("CommonPrefixes", []):
            folder = entry["Prefix"][len(layout.control_root) :].rstrip("/")
            if folder == "probe":
                continue
            app = _app_of(s3, config, f"{entry['Prefix']}")
            if app is not None and app_dir(app) == folder:
                apps.append(app)
        if not reply.get("IsTruncated"):
            return sorted(apps)
        args["ContinuationToken"] = reply["NextContinuationToken"]


def _app_of(s3: Any, config: S3Config, control: str) -> str | None:
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=config.bucket, Key=f"{control}epoch.json")["Body"].read()
        return str(json.loads(body)["app_id"])
    except ClientError:
        pass
    reply = s3.list_objects_v2(Bucket=config.bucket, Prefix=f"{control}commits/", MaxKeys=1)
    for entry in reply.get("Contents", []):
        return CommitMarker.decode(s3.get_object(Bucket=config.bucket, Key=entry["Key"])["Body"].read()).app_id
    reply = s3.list_objects_v2(Bucket=config.bucket, Prefix=f"{control}segments/", MaxKeys=1)
    for entry in reply.get("Contents", []):
        body = json.loads(s3.get_object(Bucket=config.bucket, Key=entry["Key"])["Body"].read())
        return str(body["app_id"])
    return None


def committed_files(
    config: S3Config, app_id: str | None = None, *, after_batch: int | None = None
) -> list[CommittedObject]:
    """Every object a commit marker names, in batch order (per app_id); never another object."""
    return [
        CommittedObject(m.app_id, m.batch_id, o.key, o.etag, o.size, o.rows, dict(o.partition), config.bucket)
        for m in committed_markers(config, app_id, after_batch=after_batch)
        for o in m.objects
    ]


def read_committed(
    config: S3Config,
    app_id: str | None = None,
    *,
    columns: Sequence[str] | None = None,
    after_batch: int | None = None,
    as_dataset: bool = False,
) -> pa.Table | ds.Dataset:
    """The committed rows as one pyarrow Table (``as_dataset=True``: a pyarrow Dataset over the same objects,
    read lazily through ``pyarrow.fs.S3FileSystem``; for upserts, an in-memory Dataset of the merged rows).

    Partition columns come back with their types, at their places; upserts are merged (newest batch wins).
    """
    markers = committed_markers(config, app_id, after_batch=after_batch)
    keys = _merge_keys(markers)
    if as_dataset and not keys and markers:
        return _lazy_dataset(config, markers)
    table = _read_table(config, markers, keys)
    if keys:
        table = newest_per_key(table, keys)
    if columns is not None and markers and table.num_columns:  # nothing committed yet: no schema to select from
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            raise ConfigurationError(
                f"read_committed: no column {missing} in the committed objects under {config.root}; "
                f"they have {table.column_names}.",
                "Ask for columns the batches were written with.",
            )
        table = table.select(list(columns))
    if as_dataset:
        import pyarrow.dataset as ds

        return ds.dataset(table)
    return table


def _merge_keys(markers: Sequence[CommitMarker]) -> tuple[str, ...]:
    found = {m.keys for m in markers if m.keys}
    if len(found) > 1:
        raise ConfigurationError(
            f"The commit markers name different upsert keys: {sorted(found)}.",
            "Read one app_id at a time (read_committed(config, app_id)).",
        )
    return next(iter(found), ())


def _schema(markers: Sequence[CommitMarker]) -> pa.Schema | None:
    for m in reversed(markers):
        if m.schema is not None:
            return schema_of(m.schema)
    return None


def _read_table(config: S3Config, markers: Sequence[CommitMarker], keys: Sequence[str]) -> pa.Table:
    conn = config.connection()
    s3 = s3_client(conn)
    schema = _schema(markers)
    if schema is None:
        return pa.table({})
    tables = []
    order = 0
    with translated(conn, f"reading committed objects under {config.root}"):
        for m in markers:
            full = schema_of(m.schema) if m.schema is not None else schema
            for o in m.objects:
                data = s3.get_object(Bucket=config.bucket, Key=o.key)["Body"].read()
                part = _decode(data, m.format, o.key, full, m.schema.get("partition_by", []) if m.schema else [])
                part = _with_partition(part, full, o.partition)
                if keys:
                    part = with_order(part, order)
                    order += part.num_rows
                tables.append(part)
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables, promote_options="default")


def _decode(data: bytes, file_format: str, key: str, full: pa.Schema, partition_by: Sequence[str]) -> pa.Table:
    body_schema = pa.schema([f for f in full if f.name not in partition_by])
    if file_format == "parquet":
        return parquet_table(data)
    import gzip

    import pyarrow.json as pj

    if key.endswith(".gz"):
        data = gzip.decompress(data)
    if not data.strip():
        return body_schema.empty_table()
    options = pj.ParseOptions(explicit_schema=body_schema, unexpected_field_behavior="ignore")
    return pj.read_json(pa.BufferReader(data), read_options=pj.ReadOptions(use_threads=False), parse_options=options)


def _with_partition(table: pa.Table, full: pa.Schema, partition: dict[str, str | None]) -> pa.Table:
    """``table`` with the partition columns put back, typed and in the schema's column order."""
    if not partition:
        return table
    columns = []
    for f in full:
        if f.name in partition:
            value = partition[f.name]
            scalar = pa.scalar(value, pa.string()).cast(f.type) if value is not None else pa.scalar(None, f.type)
            columns.append(pa.array([scalar.as_py()] * table.num_rows, f.type))
        else:
            columns.append(table.column(f.name))
    return pa.table(columns, names=full.names)


def _lazy_dataset(config: S3Config, markers: Sequence[CommitMarker]) -> ds.Dataset:
    import pyarrow.dataset as ds
    from pyarrow import fs as pafs

    conn = config.connection()
    options: dict[str, Any] = {"region": conn.region or "us-east-1"}
    if conn.access_key_id is not None:
        options.update(access_key=conn.access_key_id, secret_key=conn.secret_access_key)
        if conn.session_token:
            options["session_token"] = conn.session_token
    if conn.endpoint_url is not None:
        scheme, _, host = conn.endpoint_url.partition("://")
        options.update(endpoint_override=host, scheme=scheme)
    if conn.uses_path_style:
        options["force_virtual_addressing"] = False
    filesystem = pafs.S3FileSystem(**options)
    schema = _schema(markers)
    assert schema is not None
    partition_by = list(markers[-1].schema.get("partition_by", [])) if markers[-1].schema else []
    paths = [f"{config.bucket}/{o.key}" for m in markers for o in m.objects]
    partitioning = (
        ds.partitioning(pa.schema([schema.field(c) for c in partition_by]), flavor="hive") if partition_by else None
    )
    base = f"{config.bucket}/{config.prefix}".rstrip("/")
    file_format = "parquet" if markers[-1].format == "parquet" else "json"
    found = ds.dataset(
        paths,
        schema=schema,
        format=file_format,
        filesystem=filesystem,
        partitioning=partitioning,
        partition_base_dir=base,
    )
    return found
