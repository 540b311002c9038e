"""The chaos harness's Delta target (:class:`~eosink.chaos.target.ChaosTarget`).

A private MinIO that the harness restarts and crashes on purpose (the S3 target's
:class:`~eosink.chaos.minio.MinioSide`); :class:`~eosink.connectors.delta.DeltaSink`
writing a Delta table at ``s3://eosink-chaos/<table>``; Spark's own Delta writer
(``df.write.format("delta")`` in ``foreachBatch``, delta-spark) as the plain baseline. The fault proxy
sits in front of the server and cuts the reply of the PUT that creates the log's next entry.

The reader polls the table as other engines read it (:mod:`eosink.connectors.delta.readers`), in
turn: ``deltalake`` and DuckDB's delta extension (in a worker process, :mod:`._chaos_reads` says why), and,
with ``EOSINK_CHAOS_SPARK_READER=1`` (``make chaos SINK=delta``), Spark with delta-spark in a process of its own.
Every engine sees one snapshot of the log, so every strategy is atomic: idempotent batches too commit as one
MERGE.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eosink.chaos.minio import BUCKET, DIRECT_VAR, MinioSide
from eosink.chaos.oracle import Row
from eosink.chaos.target import Names, Snapshot, oracle_rows
from eosink.connectors.delta._chaos_reads import ReadsProcess
from eosink.services.spark_jars import DELTA_SPARK_CONF

__all__ = ["DeltaChaosTarget"]

COLUMNS = ["batch_id", "key", "running_sum", "concat", "n_tokens"]
SPARK_READER_VAR = "EOSINK_CHAOS_SPARK_READER"


class DeltaChaosTarget(MinioSide):
    """Delta on a private MinIO: :class:`~eosink.connectors.delta.DeltaSink`, Spark's Delta writer as the
    baseline, and three engines reading (see the module docstring)."""

    name = "delta"
    jar_groups = ("s3", "delta")
    spark_conf = DELTA_SPARK_CONF

    def __init__(self, root: Path | None = None) -> None:
        super().__init__(root, "eosink-chaos-delta-")
        self.spark_reader = os.environ.get(SPARK_READER_VAR) == "1"
        self._spark: Any = None
        self._reads = ReadsProcess()

    def atomic(self, strategy: str) -> bool:
        return True  # one commit per batch, idempotent too (a MERGE): every Delta reader sees it whole or not

    def _delta(self, table: str) -> Any:
        from eosink.connectors.delta import DeltaConfig

        return DeltaConfig.on_endpoint(f"s3://{BUCKET}/{table}", self.server.endpoint)

    def read_rows(self, names: Names) -> list[Row]:
        return oracle_rows(self._reads.rows(self._delta(names.table), COLUMNS))

    def snapshotter(self, names: Names) -> Callable[[], Snapshot | None]:
        """A poll function: each poll reads the table with the next engine in turn (a pending Spark snapshot
        first), deltalake and DuckDB in the reads' process (:mod:`~eosink.connectors.delta._chaos_reads`); None
        while the server is down (it is restarted on purpose)."""
        from eosink.connectors.delta.readers import SparkReader

        config = self._delta(names.table)
        self._stop_spark()
        if self.spark_reader:
            log = self.root / f"spark-reader-{names.table}.log"
            self._spark = SparkReader(config, names.app_id).start(self.server.endpoint.env(), log)

        def poll() -> Snapshot | None:
            spark = self._spark.latest() if self._spark is not None else None
            if spark is not None:
                return Snapshot(spark.rows_per_batch, spark.bundles, spark.reader)
            snap = self._reads.snapshot(config, names.app_id)
            return None if snap is None else Snapshot(snap.rows_per_batch, snap.bundles, snap.reader)

        return poll

    def _stop_spark(self) -> None:
        if self._spark is not None:
            self._spark.stop()
            self._spark = None

    def leftovers(self, names: Names) -> dict[str, int]:
        """In-doubt work of the schedule left behind: prepared manifests, and files of attempts that died writing."""
        self._stop_spark()
        keys = [
            str(o["Key"])
            for page in self._client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=BUCKET, Prefix=f"{names.table}/_eosink/")
            for o in page.get("Contents", [])
        ]
        return {
            "pending_manifests": sum("/pending/" in k for k in keys),
            "writing_markers": sum("/writing/" in k for k in keys),
        }

    def drop(self, names: Names) -> None:
        self._stop_spark()
        self._reads.forget(self._delta(names.table), names.app_id)
        self.empty(names.table)

    def close(self) -> None:
        self._stop_spark()
        self._reads.close()
        super().close()

    # -- the job's side ----------------------------------------------------------------------

    def job_sink(self, table: str, control_schema: str) -> Any:
        """The eosink sink, reaching the store through the fault proxy (``EOSINK_S3_ENDPOINT``); a cut reply is
        noticed after a short read timeout."""
        from eosink.connectors.delta import DeltaConfig, DeltaSink

        return DeltaSink(DeltaConfig(f"s3://{BUCKET}/{table}", read_timeout_s=10.0))

    def job_frame(self, df: Any) -> Any:
        return df  # DeltaSink reserves no column name

    def job_naive_writer(self, table: str) -> Callable[[Any, int], None]:
        """Spark's Delta writer appending each batch (delta-spark, ``s3a://``; at-least-once without its
        ``txnAppId`` options: what eosink replaces)."""
        from eosink.stores.s3 import S3Connection, s3a_options

        connection = S3Connection.from_env(endpoint_url=os.environ[DIRECT_VAR])
        options = s3a_options(connection)  # as write options: Spark redacts them in plans and logs
        target = f"s3a://{BUCKET}/{table}"

        def write(df: Any, batch_id: int) -> None:
            df.write.format("delta").mode("append").options(**options).save(target)

        return write
