"""The chaos harness's S3 target (:class:`~eosink.chaos.target.ChaosTarget`).

A private :class:`~eosink.services.minio.MinioServer` that the harness restarts and crashes on
purpose; :class:`~eosink.connectors.s3.S3Sink` writing Parquet objects under the schedule's
prefix (its ``table``; the control objects live under ``<prefix>/_eosink/``, so the control
schema is not used); Spark's own ``df.write.parquet("s3a://...")`` as the plain baseline. The fault
proxy sits in front of the server and cuts the reply of a commit marker's PUT.

Two readers, as users have them: where eosink wrote (its epoch object exists from the first
fence, before any data object), a reader of the commit markers
(:func:`~eosink.connectors.s3.read_committed`); where the baseline wrote, a reader that lists
the prefix, as ``spark.read.parquet`` does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from eosink.chaos.minio import BUCKET, DIRECT_VAR, MinioSide
from eosink.chaos.oracle import Row
from eosink.chaos.target import Names, Snapshot, oracle_rows, snapshot_of

__all__ = ["S3ChaosTarget"]

CONTROL = "_eosink"
COLUMNS = ("batch_id", "key", "running_sum", "concat", "n_tokens")


class S3ChaosTarget(MinioSide):
    """S3: a private MinIO (restarted and crashed on purpose), :class:`~eosink.connectors.s3.S3Sink` with
    Parquet objects, and Spark's Parquet writer to ``s3a://`` as the baseline."""

    name = "s3"
    reader = ""
    """The engine the snapshots are read with, for the report (the sink's own reader: unnamed)."""

    # -- the runner's side -------------------------------------------------------------------

    def atomic(self, strategy: str) -> bool:
        return strategy != "idempotent"  # readers of the markers see whole batches (S3Sink's capabilities)

    def _config(self, prefix: str) -> Any:
        from eosink.connectors.s3 import S3Config

        conn = self.connection()
        return S3Config(
            BUCKET,
            prefix,
            endpoint_url=conn.endpoint_url,
            access_key_id=conn.access_key_id,
            secret_access_key=conn.secret_access_key,
            region=conn.region,
        )

    def _written_by_eosink(self, s3: Any, prefix: str) -> bool:
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/{CONTROL}/", MaxKeys=1)
        return bool(listed.get("KeyCount", 0))

    def _tables(self, names: Names) -> tuple[list[dict[str, Any]], frozenset[int] | None]:
        """The rows a reader sees, and the batches with a commit marker (None: the baseline's prefix, read
        by listing it). The markers are read first and the rows of later markers left out: one snapshot."""
        from eosink.connectors.s3 import committed_markers, read_committed
        from eosink.connectors.s3.testing import listed_parquet

        s3 = self._client()
        if not self._written_by_eosink(s3, names.table):
            listed = listed_parquet(s3, BUCKET, names.table, COLUMNS)
            return (listed.to_pylist() if listed is not None else []), None
        config = self._config(names.table)
        markers = frozenset(m.batch_id for m in committed_markers(config, names.app_id))
        table: Any = read_committed(config, names.app_id, columns=list(COLUMNS))
        return [r for r in table.to_pylist() if r["batch_id"] in markers], markers

    def read_rows(self, names: Names) -> list[Row]:
        return oracle_rows(self._tables(names)[0])

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        """A poll function: committed rows per batch and the batches with a marker; None while the server
        is down (it is restarted on purpose). The baseline's prefix has no markers."""
        from botocore.exceptions import BotoCoreError, ClientError

        from eosink.errors import EosinkError

        def poll() -> Snapshot | None:
            try:
                return snapshot_of(*self._tables(names), reader=self.reader)
            except (BotoCoreError, ClientError, EosinkError, OSError):
                return None

        return poll

    def leftovers(self, names: Names) -> dict[str, int]:
        """In-doubt work of the schedule left behind: its incomplete multipart uploads."""
        from eosink.connectors.s3.testing import incomplete_uploads

        return {"incomplete_uploads": len(incomplete_uploads(self._client(), BUCKET, names.table))}

    def drop(self, names: Names) -> None:
        from eosink.connectors.s3.testing import empty_prefix

        empty_prefix(self._client(), BUCKET, names.table)

    # -- the job's side ----------------------------------------------------------------------

    def job_sink(self, table: str, control_schema: str) -> Any:
        """The eosink sink, reaching the store through the fault proxy (``EOSINK_S3_ENDPOINT``)."""
        from eosink.connectors.s3 import S3Config, S3Sink

        return S3Sink(S3Config.from_env(BUCKET, table, part_size_bytes=5 << 20))

    def job_frame(self, df: Any) -> Any:
        return df  # S3Sink reserves no column name

    def job_naive_writer(self, table: str) -> Callable[[Any, int], None]:
        """Spark's Parquet writer appending each batch under ``s3a://`` (at-least-once: what eosink replaces)."""
        from eosink.connectors.s3 import S3Connection
        from eosink.connectors.s3.spark import s3a_options

        connection = S3Connection.from_env(endpoint_url=os.environ[DIRECT_VAR])
        target = f"s3a://{BUCKET}/{table}"

        options = s3a_options(connection)  # as write options: Spark redacts them in plans and logs

        def write(df: Any, batch_id: int) -> None:
            df.write.mode("append").options(**options).parquet(target)

        return write
