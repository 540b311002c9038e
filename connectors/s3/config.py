"""S3Config: everything an S3Sink needs, as one frozen, picklable value; and S3Connection, how to reach the store.

The secret key and the session token travel with the configuration (executors need them to
sign requests) but never appear in ``repr``/``str``; :meth:`S3Connection.scrub` removes them
from any text (an error message) that might echo them. Without explicit keys, boto3's usual
chain applies (environment, shared files, instance or container roles).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from eosink.errors import ConfigurationError
from eosink.stores.s3 import ENV_VARS, MAX_PARTS, MIN_PART_BYTES, S3Connection

__all__ = ["ENV_VARS", "S3Config", "S3Connection"]

MIB = 1 << 20
MAX_KEY_BYTES = 1024
"""S3's longest object key, in UTF-8 bytes."""
MAX_SEGMENT_BYTES = 255
"""The longest segment (between slashes) of a key eosink writes: MinIO keeps objects as files and refuses
longer names (as HDFS does by default); AWS S3 would take them, but the dataset could then not be copied."""

MAX_SEGMENT_BATCHES = 10_000
"""The most batches one segment may hold: a segment is one object, read whole (1-2 KB per batch, more with
many objects per batch or a wide schema)."""


_PARQUET_CODECS = ("snappy", "zstd", "gzip", "lz4", "brotli", "none")
_JSONL_CODECS = ("none", "gzip")
_SSE = ("AES256", "aws:kms", "aws:kms:dsse")
# Characters AWS lists as safe in keys, plus "=" (hive-style partition folders). Anything else in a
# prefix is refused: it needs URL encoding somewhere, and Spark, Hive and pyarrow disagree on which.
_PREFIX_CHARS = re.compile(r"^[A-Za-z0-9!\-_.*'()/=]*$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")


@dataclass(frozen=True, repr=False)
class S3Config:
    """Configuration of an :class:`~eosink.connectors.s3.S3Sink`: where objects go, how they are encoded,
    and how to reach the store.

    * ``bucket`` and ``prefix``: objects go under ``s3://bucket/prefix/``; eosink's bookkeeping under
      ``prefix/_eosink/`` (Spark, Hive and pyarrow skip folders starting with ``_``). The prefix may
      hold letters, digits and ``!-_.*'()/=``; no empty, ``.`` or ``..`` segment, none over 255 bytes.
    * ``format``: ``"parquet"`` (pyarrow; ``compression`` snappy by default, ``compression_level``) or
      ``"jsonl"`` (one JSON object per line; ``compression`` none or gzip).
    * ``partition_by``: columns written as ``key=value/`` folders, as Spark does (the columns leave the
      files); values are percent-escaped as Spark escapes them, and a value that is a path (``/``,
      ``\\``, ``.``, ``..``, control characters) is refused.
    * ``mode``: ``"append"``, or ``"upsert"`` by ``key_columns``: readers of the commit markers
      (:func:`~eosink.connectors.s3.read_committed`) keep the newest row per key.
    * ``sse``: server-side encryption passed through (``AES256``, ``aws:kms`` with ``sse_kms_key_id``,
      ``aws:kms:dsse``; ``bucket_key_enabled``).
    * ``part_size_bytes`` (>= 5 MiB): bytes per uploaded part; ``row_group_bytes`` and ``row_group_rows``:
      a Parquet row group is written when either is reached; ``max_object_bytes``: a participant
      starts a new object beyond it; ``max_record_bytes``: a larger row is refused (BadRecordError);
      ``max_buffer_bytes``: what a participant holds in memory across its open objects (neither
      ``max_record_bytes`` nor ``row_group_bytes`` may exceed it).
    * ``check_conditional_writes``: at setup, prove that the store honours ``If-None-Match: *`` and
      ``If-Match`` (commit markers and the epoch object rely on them).
    * ``segment_batches``: how many batches' commit markers are folded into one segment object once
      they are old (1 to 10,000; 100 by default). Markers are the readers' manifest, so they are
      folded, not deleted: the sink keeps about 1.5 x ``segment_batches`` markers and one segment per
      ``segment_batches`` batches. An app_id keeps the size of its first segment for good.
    * ``lost_after_s``: how long a commit keeps looking for an object whose upload is gone and that the store
      does not show (30 s by default; the commit is retried meanwhile) before it calls the batch's work lost.
      A store of several nodes that lost one while it completed the upload shows neither the upload nor the
      object until that node is back: raise it where a node takes longer to come back.

    Connection settings (``endpoint_url``, ``region``, ``path_style``, credentials, timeouts,
    ``max_attempts``, ``ca_bundle``) are those of :class:`S3Connection`; :meth:`connection` returns them as
    one.
    """

    bucket: str
    prefix: str = ""
    format: Literal["parquet", "jsonl"] = "parquet"
    compression: str | None = None
    compression_level: int | None = None
    partition_by: tuple[str, ...] = ()
    mode: Literal["append", "upsert"] = "append"
    key_columns: tuple[str, ...] = ()
    endpoint_url: str | None = None
    region: str | None = None
    path_style: bool | None = None
    access_key_id: str | None = None
    secret_access_key: str | None = field(default=None, repr=False)
    session_token: str | None = field(default=None, repr=False)
    profile: str | None = None
    sse: Literal["AES256", "aws:kms", "aws:kms:dsse"] | None = None
    sse_kms_key_id: str | None = None
    bucket_key_enabled: bool | None = None
    part_size_bytes: int = 8 * MIB
    row_group_bytes: int = 64 * MIB
    row_group_rows: int = 1_000_000
    max_object_bytes: int = 1024 * MIB
    max_record_bytes: int = 16 * MIB
    max_buffer_bytes: int = 256 * MIB
    connect_timeout_s: float = 10.0
    read_timeout_s: float = 60.0
    max_attempts: int = 3
    ca_bundle: str | None = None
    check_conditional_writes: bool = True
    segment_batches: int = 100
    lost_after_s: float = 30.0

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        if not isinstance(self.bucket, str) or not _BUCKET.match(self.bucket) or ".." in self.bucket:
            raise ConfigurationError(
                f"bucket={self.bucket!r} is not a valid S3 bucket name.",
                "Use 3-63 lowercase letters, digits, dots and hyphens, starting and ending with a letter or "
                "digit (no s3:// and no path: the path goes in prefix).",
            )
        set_(self, "prefix", _check_prefix(self.prefix))
        for name in ("partition_by", "key_columns"):
            value = getattr(self, name)
            if isinstance(value, str):
                value = (value,)
            set_(self, name, tuple(value))
            if not all(isinstance(c, str) and c for c in getattr(self, name)):
                raise ConfigurationError(f"{name} must be column names, not {value!r}.", f"Pass {name}=('col',).")
        if self.format not in ("parquet", "jsonl"):
            raise ConfigurationError(f"Unknown format {self.format!r} for S3Sink.", "Use 'parquet' or 'jsonl'.")
        codecs = _PARQUET_CODECS if self.format == "parquet" else _JSONL_CODECS
        codec = (self.compression or ("snappy" if self.format == "parquet" else "none")).lower()
        if codec not in codecs:
            raise ConfigurationError(
                f"compression={self.compression!r} is not available for format {self.format!r}.",
                f"Use one of {', '.join(codecs)}.",
            )
        set_(self, "compression", codec)
        if self.mode not in ("append", "upsert"):
            raise ConfigurationError(f"Unknown mode {self.mode!r} for S3Sink.", "Use 'append' or 'upsert'.")
        if self.mode == "upsert" and not self.key_columns:
            raise ConfigurationError("mode='upsert' needs key_columns.", "Pass key_columns=('id',).")
        overlap = set(self.key_columns) & set(self.partition_by)
        if len(set(self.partition_by)) != len(self.partition_by) or (overlap and self.mode == "upsert"):
            raise ConfigurationError(
                f"partition_by={self.partition_by!r} repeats a column or holds a key column {sorted(overlap)}.",
                "Name each partition column once; a key column must stay in the files.",
            )
        if self.sse is not None and self.sse not in _SSE:
            raise ConfigurationError(f"Unknown sse={self.sse!r}.", f"Use one of {', '.join(_SSE)}, or None.")
        if self.sse_kms_key_id is not None and self.sse not in ("aws:kms", "aws:kms:dsse"):
            raise ConfigurationError("sse_kms_key_id needs sse='aws:kms'.", "Set sse='aws:kms' or drop the key id.")
        self._check_sizes()
        self.connection()  # validates the connection settings

    def _check_sizes(self) -> None:
        if not isinstance(self.part_size_bytes, int) or self.part_size_bytes < MIN_PART_BYTES:
            raise ConfigurationError(
                f"part_size_bytes={self.part_size_bytes!r} is below S3's minimum part of 5 MiB.",
                "Use at least 5 * 1024 * 1024 (the default is 8 MiB).",
            )
        if self.part_size_bytes > 5 * 1024 * MIB:
            raise ConfigurationError("part_size_bytes is above S3's largest part of 5 GiB.", "Use 8 MiB to 512 MiB.")
        for name in ("row_group_bytes", "row_group_rows", "max_object_bytes", "max_record_bytes", "max_buffer_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be a positive integer, not {value!r}.", f"Fix {name}.")
        segment = self.segment_batches
        if not isinstance(segment, int) or isinstance(segment, bool) or not 1 <= segment <= MAX_SEGMENT_BATCHES:
            raise ConfigurationError(
                f"segment_batches must be an integer from 1 to {MAX_SEGMENT_BATCHES}, not {segment!r}: it is how "
                "many batches' commit markers one segment object holds.",
                "Use the default (100); more means fewer, larger segments and more markers kept unfolded.",
            )
        lost = self.lost_after_s
        if not isinstance(lost, (int, float)) or isinstance(lost, bool) or lost < 0:
            raise ConfigurationError(
                f"lost_after_s must be a number of seconds, 0 or more, not {lost!r}.",
                "Use the default (30); it is how long a commit looks for an object whose upload is gone.",
            )
        if self.max_object_bytes > self.part_size_bytes * MAX_PARTS:
            raise ConfigurationError(
                f"max_object_bytes={self.max_object_bytes} needs more than S3's {MAX_PARTS} parts of "
                f"{self.part_size_bytes} bytes.",
                "Raise part_size_bytes or lower max_object_bytes.",
            )
        for name in ("max_record_bytes", "row_group_bytes"):
            if getattr(self, name) > self.max_buffer_bytes:
                raise ConfigurationError(
                    f"{name}={getattr(self, name)} is larger than max_buffer_bytes={self.max_buffer_bytes}: "
                    f"{'such a record' if name == 'max_record_bytes' else 'a row group that size'} could never be "
                    "buffered.",
                    f"Keep {name} <= max_buffer_bytes (raise max_buffer_bytes, or lower {name}).",
                )

    @classmethod
    def from_env(cls, bucket: str, prefix: str = "", **options: Any) -> S3Config:
        """A configuration whose connection comes from :meth:`S3Connection.from_env` (``options`` win)."""
        conn = S3Connection.from_env()
        settings = {f.name: getattr(conn, f.name) for f in fields(S3Connection)}
        settings.update(options)
        return cls(bucket, prefix, **settings)

    def connection(self) -> S3Connection:
        """The connection settings of this configuration."""
        return S3Connection(**{f.name: getattr(self, f.name) for f in fields(S3Connection)})

    def with_endpoint(self, endpoint_url: str) -> S3Config:
        """The same configuration reaching the store at another endpoint (a fault proxy, in tests)."""
        return replace(self, endpoint_url=endpoint_url)

    @property
    def root(self) -> str:
        """``s3://bucket/prefix`` (no trailing slash)."""
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")

    def scrub(self, text: str) -> str:
        """``text`` without the secret key or session token."""
        return self.connection().scrub(text)

    def sse_args(self) -> dict[str, Any]:
        """The server-side-encryption arguments of PutObject and CreateMultipartUpload."""
        args: dict[str, Any] = {}
        if self.sse is not None:
            args["ServerSideEncryption"] = self.sse
        if self.sse_kms_key_id is not None:
            args["SSEKMSKeyId"] = self.sse_kms_key_id
        if self.bucket_key_enabled is not None:
            args["BucketKeyEnabled"] = self.bucket_key_enabled
        return args

    def __repr__(self) -> str:
        return (
            f"S3Config(root={self.root!r}, format={self.format!r}, compression={self.compression!r}, "
            f"partition_by={self.partition_by!r}, mode={self.mode!r}, key_columns={self.key_columns!r}, "
            f"endpoint_url={self.endpoint_url!r}, region={self.region!r}, sse={self.sse!r})"
        )

    __str__ = __repr__


def _check_prefix(prefix: object) -> str:
    if not isinstance(prefix, str):
        raise ConfigurationError(
            f"prefix must be a string, not {type(prefix).__name__}.", "Pass prefix='path/in/bucket'."
        )
    text = prefix.strip("/")
    if text.startswith("s3://") or text.startswith("s3a://"):
        raise ConfigurationError(
            f"prefix={prefix!r} is a URL.", "Give the bucket in bucket= and the path inside it in prefix=."
        )
    bad = sorted({ch for ch in text if not _PREFIX_CHARS.match(ch)})
    if bad:
        raise ConfigurationError(
            f"prefix={prefix!r} holds characters S3 keys should not: {', '.join(repr(c) for c in bad)}.",
            "Use letters, digits and !-_.*'()/= only (other characters need URL encoding, which Spark, Hive "
            "and pyarrow read differently).",
        )
    segments = text.split("/") if text else []
    if any(s in ("", ".", "..") for s in segments):
        raise ConfigurationError(
            f"prefix={prefix!r} has an empty, '.' or '..' segment.", "Write the path without '//', './' or '../'."
        )
    long = [s for s in segments if len(s.encode()) > MAX_SEGMENT_BYTES]
    if long:
        raise ConfigurationError(
            f"prefix={prefix!r} has a segment of {len(long[0].encode())} bytes: MinIO (and HDFS) refuse names over "
            f"{MAX_SEGMENT_BYTES} bytes between two slashes.",
            f"Split the prefix into shorter folders (at most {MAX_SEGMENT_BYTES} bytes each).",
        )
    if any(s.startswith("_eosink") for s in segments):
        raise ConfigurationError(f"prefix={prefix!r} is inside eosink's bookkeeping.", "Choose another prefix.")
    if len(text.encode()) > MAX_KEY_BYTES - 200:
        raise ConfigurationError(
            f"prefix={prefix!r} is {len(text.encode())} bytes: object keys under it would pass S3's 1024 bytes.",
            "Use a prefix of at most 800 bytes.",
        )
    return text
