"""The demo's Delta target (:class:`~eosink.demo.target.DemoTarget`).

A private MinIO of the demo's own (:class:`~eosink.demo.minio.MinioDemo`) and two Delta tables of
payments in its bucket: ``payments_eosink``, written by :class:`~eosink.connectors.delta.DeltaSink`
(one Delta commit per batch, with the batch's txn and bundle), and ``payments_plain``, written by what
Spark users have today in ``foreachBatch``, delta-spark's batch writer
(``df.write.format("delta").mode("append")`` without ``txnAppId``: a replayed batch is appended again).

Both sides are read as any Delta reader reads them, through ``deltalake``: the table's newest
snapshot. Each side reaches MinIO through its fault proxy; eosink's lost COMMIT reply is the reply
to the PUT that creates the log's next entry. delta-spark's S3 client retries a request whose reply
was cut, so the demo cuts none on the plain side and crashes a run before Spark's commit log there
instead, where a replay appends the batch again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosink.demo.minio import BUCKET, MinioDemo
from eosink.demo.target import Payment, Side
from eosink.services.spark_jars import DELTA_SPARK_CONF

__all__ = ["DeltaDemoTarget"]

TABLES: dict[Side, str] = {"eosink": "payments_eosink", "plain": "payments_plain"}
COLUMNS = ["id", "account", "amount"]


class DeltaDemoTarget(MinioDemo):
    """Delta tables on a private MinIO, as the demo drives them."""

    title = "Delta tables on a private MinIO"
    plain_cuts = False
    plain_title = "delta-spark's writer in foreachBatch"
    jar_groups = ("s3", "delta")
    spark_conf = DELTA_SPARK_CONF

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root, "eosink-demo-delta-")

    def where(self, side: Side) -> str:
        return f"s3://{BUCKET}/{TABLES[side]}"

    def counts(self) -> dict[Side, tuple[int, int]] | None:
        try:
            out: dict[Side, tuple[int, int]] = {}
            for side in TABLES:
                ids = [r[0] for r in self._rows(side)]
                out[side] = (len(ids), len(ids) - len(set(ids)))
            return out
        except Exception:  # the store restarting or a table not created yet: the view waits for the next poll
            return None

    def payments(self, side: Side) -> Counter[Payment]:
        return Counter(self._rows(side))

    def in_doubt(self) -> int:
        from eosink.connectors.delta.admin import DeltaAdmin

        return DeltaAdmin(self._config("eosink")).status().in_doubt

    def _config(self, side: Side, via: Side | None = None) -> Any:
        from eosink.connectors.delta import DeltaConfig

        conn = self.connection(via)
        return DeltaConfig(
            self.where(side),
            endpoint_url=conn.endpoint_url,
            region=conn.region,
            access_key_id=conn.access_key_id,
            secret_access_key=conn.secret_access_key,
        )

    def _rows(self, side: Side) -> list[Payment]:
        from eosink.connectors.delta.readers import DeltaLakeReader

        table = DeltaLakeReader(self._config(side)).table(COLUMNS)
        if table is None:
            return []
        return [(int(r["id"]), str(r["account"]), int(r["amount"])) for r in table.to_pylist()]

    # -- the job's side ------------------------------------------------------------------------------

    def job_sink(self, app_id: str) -> Any:
        from eosink.connectors.delta import DeltaSink

        return DeltaSink(self._config("eosink", via="eosink"))

    def job_plain_writer(self) -> Callable[[Any, int], None]:
        from eosink.stores.s3 import s3a_options

        # As write options: delta-spark hands a writer's fs.* options to its Hadoop configuration, and Spark
        # redacts keys and secrets in plans and logs.
        options = s3a_options(self.connection("plain"))
        path = f"s3a://{BUCKET}/{TABLES['plain']}"

        def write(df: Any, batch_id: int) -> None:
            df.write.format("delta").mode("append").options(**options).save(path)

        return write
