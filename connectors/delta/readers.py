"""Delta tables read as other engines read them: how eosink proves that every reader sees whole batches.

A Delta reader sees one snapshot of the log, so a batch eosink committed is there whole or not at
all, whatever engine reads it. The chaos harness and the tests check that with three engines that
share no code with eosink's writer:

* :class:`DeltaLakeReader`: ``deltalake`` (delta-rs), as pandas and polars users read;
* :class:`DuckDBReader`: DuckDB's ``delta`` extension (delta-kernel), from the ``duckdb-ext-delta``
  wheel (no download at run time);
* :class:`SparkReader`: Spark with ``delta-spark``, in a process of its own
  (``python -m eosink.connectors.delta.readers``) that prints one snapshot a line.

Each read is paired with the batches that have a bundle (:class:`CommittedBatches`): those committed
before the read, and those committed by its end whose rows the read saw. A batch with some of its
rows, with rows but no bundle, or with a bundle before the read but no rows is a partial view.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pyarrow as pa
import pyarrow.compute as pc

from eosink.connectors.delta import _log
from eosink.connectors.delta.config import DeltaConfig
from eosink.errors import ConfigurationError

__all__ = [
    "CommittedBatches",
    "DeltaLakeReader",
    "DuckDBReader",
    "ReadSnapshot",
    "SparkReader",
    "committed_batches",
    "counts_by_batch",
]

BATCH_COLUMN = "batch_id"


@dataclass(frozen=True)
class ReadSnapshot:
    """One read: rows per ``batch_id``, the batches with a bundle, and the engine that read it."""

    rows_per_batch: dict[int, int]
    bundles: frozenset[int]
    reader: str


def counts_by_batch(column: pa.ChunkedArray | pa.Array) -> dict[int, int]:
    """Rows per value of a ``batch_id`` column."""
    counts = pc.value_counts(column)
    values, numbers = counts.field("values").to_pylist(), counts.field("counts").to_pylist()
    return {int(v): int(n) for v, n in zip(values, numbers, strict=True) if v is not None}


@dataclass
class CommittedBatches:
    """The batches of ``app_id`` that have a bundle in the table's log, read incrementally (each version's
    commit info once)."""

    config: DeltaConfig
    app_id: str
    top: int = -1
    batches: set[int] = field(default_factory=set)

    def now(self) -> frozenset[int]:
        table = _log.load(self.config.table, self.config.delta_options())
        if table is None:
            return frozenset()
        version = table.version()
        if version > self.top:
            for info in table.history(version - self.top):
                meta = _log.eosink_meta(info)
                if meta is not None and meta.get("app_id") == self.app_id and "bundle" in meta:
                    self.batches.add(int(meta["batch"]))
            self.top = version
        return frozenset(self.batches)


def committed_batches(config: DeltaConfig, app_id: str) -> list[int]:
    """The batch of every eosink commit of ``app_id`` in the log's retained history, oldest first (a batch
    committed twice would show twice)."""
    table = _log.load(config.table, config.delta_options())
    if table is None:
        return []
    return sorted(int(meta["batch"]) for _, meta in _log.eosink_commits(table, app_id))


def _paired(batches: CommittedBatches, read: Callable[[], dict[int, int]], name: str) -> ReadSnapshot:
    before = batches.now()
    rows = read()
    after = batches.now()
    return ReadSnapshot(rows, before | {b for b in after if b in rows}, name)


class DeltaLakeReader:
    """The table's newest snapshot through ``deltalake`` (delta-rs)."""

    name = "deltalake"

    def __init__(self, config: DeltaConfig) -> None:
        self.config = config

    def table(self, columns: list[str] | None = None) -> pa.Table | None:
        """Every row of the newest snapshot (None: no table yet)."""
        table = _log.load(self.config.table, self.config.delta_options())
        return None if table is None else _log.read_rows(table, columns)

    def counts(self) -> dict[int, int]:
        table = self.table([BATCH_COLUMN])
        return {} if table is None else counts_by_batch(table.column(BATCH_COLUMN))

    def snapshot(self, batches: CommittedBatches) -> ReadSnapshot:
        return _paired(batches, self.counts, self.name)


def _duckdb_extension(name: str) -> Path:
    spec = importlib.util.find_spec("duckdb_ext")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigurationError(
            "DuckDB's extensions are not installed.", "pip install 'eosink[dev]' (duckdb-ext-delta, duckdb-ext-httpfs)."
        )
    base = Path(next(iter(spec.submodule_search_locations)))
    found = sorted(base.rglob(f"{name}.duckdb_extension"))
    if not found:
        raise ConfigurationError(f"DuckDB's {name} extension is not installed.", f"pip install duckdb-ext-{name}.")
    return found[-1]


class DuckDBReader:
    """The table's newest snapshot through DuckDB's ``delta_scan`` (the delta extension, delta-kernel).

    Local and ``s3://`` tables; DuckDB has no HDFS filesystem."""

    name = "duckdb"

    def __init__(self, config: DeltaConfig) -> None:
        if config.scheme == "hdfs":
            raise ConfigurationError("DuckDB cannot read hdfs:// tables.", "Read them with deltalake or Spark.")
        self.config = config
        self._con: Any = None
        self._found = False

    def _connect(self) -> Any:
        import duckdb

        con = duckdb.connect(
            config={"allow_unsigned_extensions": "true", "autoinstall_known_extensions": "false"},
        )
        for name in ("httpfs", "delta") if self.config.scheme == "s3" else ("delta",):
            con.execute(f"LOAD '{_duckdb_extension(name)}'")
        s3 = self.config.s3
        if s3 is not None:
            settings = {"TYPE": "s3", "URL_STYLE": "path" if s3.uses_path_style else "vhost"}
            if s3.access_key_id and s3.secret_access_key:
                settings.update(KEY_ID=s3.access_key_id, SECRET=s3.secret_access_key)
            if s3.region:
                settings["REGION"] = s3.region
            if s3.endpoint_url:
                scheme, _, host = s3.endpoint_url.partition("://")
                settings.update(ENDPOINT=host.rstrip("/"), USE_SSL=str(scheme == "https").lower())
            body = ", ".join(f"{k} {v if k in ('TYPE', 'USE_SSL') else _literal(v)}" for k, v in settings.items())
            con.execute(f"CREATE OR REPLACE SECRET eosink_reader ({body})")
        return con

    def table(self, columns: list[str] | None = None) -> pa.Table | None:
        """Every row of the newest snapshot, ``columns`` only when given (None: no table yet). Once a table was
        found, only DuckDB reads it (a reader polling in a loop asks delta-rs nothing more)."""
        if self._con is None:
            self._con = self._connect()
        if not self._found:
            if _log.load(self.config.table, self.config.delta_options()) is None:
                return None
            self._found = True
        found: pa.Table = self._con.execute("SELECT * FROM delta_scan(?)", [self.config.table]).fetch_arrow_table()
        return found if columns is None else found.select(columns)

    def counts(self) -> dict[int, int]:
        if self._con is None:
            self._con = self._connect()
        if _log.load(self.config.table, self.config.delta_options()) is None:
            return {}
        found = self._con.execute("SELECT batch_id, count(*) FROM delta_scan(?) GROUP BY 1", [self.config.table])
        found = found.fetchall()
        return {int(b): int(n) for b, n in found}

    def snapshot(self, batches: CommittedBatches) -> ReadSnapshot:
        return _paired(batches, self.counts, self.name)

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class SparkReader:
    """Spark with delta-spark, polling the table in a process of its own; :meth:`latest` hands out each
    snapshot it printed once. The S3 connection reaches it through ``EOSINK_S3_*`` (never argv)."""

    name = "spark"

    def __init__(self, config: DeltaConfig, app_id: str, *, interval_s: float = 1.0) -> None:
        self.config, self.app_id, self.interval_s = config, app_id, interval_s
        self._proc: subprocess.Popen[str] | None = None
        self._log = Path(os.devnull)
        self._pending: list[ReadSnapshot] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.read = 0

    def start(self, env: Mapping[str, str], log: Path) -> SparkReader:
        """Start polling; the process's own messages go to ``log`` (the S3 secret scrubbed by the caller)."""
        from eosink.services.spark_jars import DELTA_SPARK_CONF, SparkJars, class_path_submit_args

        jars = SparkJars().spark_conf("s3", "delta")["spark.jars"]
        submit = class_path_submit_args(jars, DELTA_SPARK_CONF)
        cmd = [sys.executable, "-m", "eosink.connectors.delta.readers", "--table", self.config.table]
        cmd += ["--app-id", self.app_id, "--interval", str(self.interval_s)]
        full = {**os.environ, **env, "PYSPARK_SUBMIT_ARGS": submit}
        self._log = log
        with open(log, "ab") as err:
            self._proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=full, start_new_session=True
            )
        self._thread = threading.Thread(target=self._drain, args=(self._proc.stdout,), daemon=True)
        self._thread.start()
        return self

    def _drain(self, out: IO[str] | None) -> None:
        assert out is not None
        for line in out:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            snap = ReadSnapshot({int(k): int(v) for k, v in doc["rows"].items()}, frozenset(doc["bundles"]), self.name)
            with self._lock:
                self._pending.append(snap)
                self.read += 1

    def latest(self) -> ReadSnapshot | None:
        """The oldest snapshot not handed out yet; raises if the reader died."""
        with self._lock:
            if self._pending:
                return self._pending.pop(0)
        if self._proc is not None and self._proc.poll() not in (None, 0):
            tail = self._log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"the Spark reader exited with {self._proc.returncode} ({self._log}): {tail}")
        return None

    def stop(self) -> None:
        """Stop the process (its whole group: the JVM too)."""
        if self._proc is None:
            return
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, 9)
        self._proc.wait(30)
        self._proc = None


def _spark_main(argv: list[str] | None = None) -> int:
    """The Spark reader's process: poll the table until killed, one JSON snapshot a line."""
    ap = argparse.ArgumentParser(prog="python -m eosink.connectors.delta.readers")
    ap.add_argument("--table", required=True)
    ap.add_argument("--app-id", required=True)
    ap.add_argument("--interval", type=float, default=1.0)
    args = ap.parse_args(argv)
    from pyspark.sql import SparkSession

    config = DeltaConfig(args.table)
    builder = (
        SparkSession.builder.master("local[1]")
        .appName("eosink-delta-reader")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    )
    path = config.table
    if config.scheme == "s3" and config.s3 is not None:
        from eosink.stores.s3 import s3a_options

        for key, value in s3a_options(config.s3, builder=True).items():
            builder = builder.config(key, value)
        path = "s3a://" + path[len("s3://") :]
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    batches = CommittedBatches(config, args.app_id)

    def read() -> dict[int, int]:
        if _log.load(config.table, config.delta_options()) is None:
            return {}
        found = spark.read.format("delta").load(path).groupBy(BATCH_COLUMN).count().collect()
        return {int(r[0]): int(r[1]) for r in found}

    while True:
        try:
            snap = _paired(batches, read, "spark")
        except Exception as exc:  # the store restarts on purpose in a chaos run: try again
            print(f"read failed: {type(exc).__name__}: {config.scrub(str(exc))[:500]}", file=sys.stderr, flush=True)
        else:
            doc = {"rows": {str(k): v for k, v in snap.rows_per_batch.items()}, "bundles": sorted(snap.bundles)}
            print(json.dumps(doc), flush=True)
        time.sleep(args.interval)  # the pace of polling, not synchronisation


if __name__ == "__main__":
    sys.exit(_spark_main())
