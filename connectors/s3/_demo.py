"""The demo's S3 target (:class:`~eosink.demo.target.DemoTarget`).

A private MinIO of the demo's own (:class:`~eosink.services.minio.MinioServer`), one bucket and
two prefixes of payments: ``payments_eosink``, written by :class:`~eosink.connectors.s3.S3Sink`
(Parquet objects and a commit marker per batch), and ``payments_plain``, written by what Spark
users have today, Spark's own Parquet writer on ``s3a://`` (``df.write.parquet`` in
``foreachBatch``, mode append: a replayed batch is written again, as new objects).

eosink's side is read as its readers read it, through the commit markers
(:func:`~eosink.connectors.s3.read_committed`; under the idempotent strategy, the newest row per
payment id); the plain writer's by listing its prefix with pyarrow, as ``spark.read.parquet``
does (folders and files starting with ``_`` or ``.``, such as ``_temporary/``, skipped).

Each side reaches MinIO through its fault proxy. eosink's lost COMMIT reply is the reply to the
commit marker's PUT (:data:`~eosink.connectors.s3.testing.COMMIT_REQUEST_MARKER`). The plain
writer's job commit is a series of copies and deletes with no one request to cut, which the S3A
client retries: the demo cuts none there and crashes a run before Spark's commit log instead,
where a replay writes the batch again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from eosink.demo.minio import BUCKET, MinioDemo
from eosink.demo.target import Payment, Side

__all__ = ["BUCKET", "PREFIXES", "S3DemoTarget"]

PREFIXES: dict[Side, str] = {"eosink": "payments_eosink", "plain": "payments_plain"}
COLUMNS = ("id", "account", "amount")


class S3DemoTarget(MinioDemo):
    """S3 (a private MinIO), as the demo drives it."""

    title = "a private MinIO (S3)"
    plain_cuts = False
    plain_title = "Spark's Parquet writer (s3a)"

    def where(self, side: Side) -> str:
        return f"s3://{BUCKET}/{PREFIXES[side]}/"

    def counts(self) -> dict[Side, tuple[int, int]] | None:
        try:
            out: dict[Side, tuple[int, int]] = {}
            for side in PREFIXES:
                ids = self._table(side).column("id").to_pylist()
                out[side] = (len(ids), len(ids) - len(set(ids)))
            return out
        except Exception:  # an object being written or a busy server: the view waits for the next poll
            return None

    def payments(self, side: Side) -> Counter[Payment]:
        rows = self._table(side).to_pylist()
        return Counter((int(r["id"]), str(r["account"]), int(r["amount"])) for r in rows)

    def in_doubt(self) -> int:
        from eosink.connectors.s3.admin import S3Admin

        return S3Admin(self._direct_config()).status().in_doubt  # incomplete uploads, orphans included

    def _table(self, side: Side) -> Any:
        """What a reader of ``side`` sees: eosink's committed batches, or every Parquet file of the prefix."""
        if side == "eosink":
            from eosink.connectors.s3 import read_committed

            table = read_committed(self._direct_config())
            return table.select(list(COLUMNS)) if table.num_columns else _empty()  # no batch committed yet
        from eosink.connectors.s3.testing import listed_parquet

        listed = listed_parquet(self._client(), BUCKET, PREFIXES["plain"], COLUMNS)
        return listed if listed is not None else _empty()

    def _direct_config(self) -> Any:
        """eosink's side, reached directly (not through a fault proxy)."""
        return _config(self.connection())

    # -- the job's side ------------------------------------------------------------------------------

    def job_sink(self, app_id: str) -> Any:
        from eosink.connectors.s3 import S3Sink

        return S3Sink(_config(self.connection("eosink")))

    def job_plain_writer(self) -> Callable[[Any, int], None]:
        path = f"s3a://{BUCKET}/{PREFIXES['plain']}"
        from eosink.connectors.s3.spark import s3a_options

        # As write options: Spark hands a file writer's options to its Hadoop configuration, and redacts
        # keys and secrets in plans and logs.
        options = s3a_options(self.connection("plain"))

        def write(df: Any, batch_id: int) -> None:
            df.write.mode("append").options(**options).parquet(path)

        return write


def _config(conn: Any) -> Any:
    """eosink's side: Parquet objects under ``payments_eosink/`` of the demo's bucket."""
    from eosink.connectors.s3 import S3Config

    return S3Config(
        BUCKET,
        PREFIXES["eosink"],
        endpoint_url=conn.endpoint_url,
        region=conn.region,
        access_key_id=conn.access_key_id,
        secret_access_key=conn.secret_access_key,
    )


def _empty() -> Any:
    """No payments, in the payments' schema."""
    import pyarrow as pa

    return pa.schema([("id", pa.int64()), ("account", pa.string()), ("amount", pa.int64())]).empty_table()
