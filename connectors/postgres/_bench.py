"""The benchmark's PostgreSQL adapter: the harness's server, eosink's PostgresSink, and the baselines.

Baselines: Spark's built-in JDBC writer in foreachBatch (PostgreSQL driver from
:class:`~eosink.services.spark_jars.SparkJars`), default and with ``reWriteBatchedInserts=true``;
and ``psql \\copy`` of the same rows from a CSV file (the server's single-stream ingest limit).

``eosink-at-least-once`` is eosink's data path with the exactly-once bookkeeping taken out: the
same ``mapInArrow`` participants and the same Arrow-to-binary-COPY encoder
(:func:`eosink.connectors.postgres._copy.binary_plan`), the same batch checks, but COPY goes
straight into the target, one transaction per participant, with no staging table, epoch, txns
row, bundle or commit step. A failed task that Spark retries duplicates its rows: at-least-once.
What separates it from the strategies is exactly what exactly-once costs.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from eosink.bench.datasets import COLUMNS, Dataset
from eosink.bench.runs import Baseline, BatchFunction, BenchGoals, RunSpec, datasource_runs, generic_runs
from eosink.errors import ConfigurationError

__all__ = ["PostgresAdapter"]

SCHEMA = "eosink_bench"
URL_ENV = "EOSINK_BENCH_PG_URL"
_COMMIT_MODES = ("atomic", "per-participant")
TRANSACTIONAL = ("2pc", "txid-check")
"""The strategies commit_mode changes (idempotent writes upsert and commit in its tasks either way)."""


def _table(ns: str) -> str:
    return f"t_{ns}"


def _control(ns: str) -> str:
    return f"eosink_bench_ctl_{ns}"


def app_id(ns: str) -> str:
    """The app_id of namespace ``ns``'s eosink writer."""
    return f"bench-{ns}"


class _DirectCopy:
    """``mapInArrow`` function of eosink-at-least-once: binary COPY of the partition straight into the target."""

    def __init__(self, config: Any) -> None:
        self.config = config

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from eosink.connectors.postgres._copy import copy_rows
        from eosink.connectors.postgres._schema import check_batch, reflect
        from eosink.connectors.postgres.sink import _open_connection

        conn = _open_connection(self.config, autocommit=False)
        rows = 0
        try:
            schema, table = self.config.target
            target = reflect(conn, schema, table)
            assert target is not None, "the benchmark creates the target first"
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                check_batch(target, batch, (), "at-least-once")
                columns = [c for name in batch.schema.names if (c := target.column(name)) is not None]
                rows += copy_rows(conn, target.ident, None, 0, batch, columns)
            conn.commit()
        finally:
            conn.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows]})


class PostgresAdapter:
    """:class:`~eosink.bench.runs.BenchAdapter` for PostgreSQL."""

    name = "postgres"
    worker_modules = ("eosink.connectors.postgres", "psycopg")

    fanout_member = True
    """Its target can be checked when written as a fan-out's sink (its rows are counted whatever the app_id)."""

    all_modes: tuple[str, ...] = _COMMIT_MODES

    def __init__(self, modes: tuple[str, ...] = ("atomic",)) -> None:
        self.modes = modes
        self._started = False
        self._url: str | None = os.environ.get(URL_ENV)
        self._poll: psycopg.Connection[Any] | None = None

    # -- parent side ------------------------------------------------------------------------------

    def start(self) -> dict[str, Any]:
        from eosink.services import get_service
        from eosink.services._maven import fetch_jars
        from eosink.services.spark_jars import SparkJars

        service = get_service("postgres")
        if service.external() is None and service.pid() is None:
            service.up()
            self._started = True
        endpoint: Any = service.endpoint()
        self._url = str(endpoint.url)
        self._endpoint = endpoint
        jars = SparkJars()
        fetch_jars(jars.artifacts("jdbc"), jars.directory("jdbc"), what="Spark's PostgreSQL JDBC driver")
        with self._connect() as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(SCHEMA)))
            settings = dict(
                conn.execute(
                    "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
                    (["shared_buffers", "synchronous_commit", "fsync", "max_wal_size", "max_prepared_transactions"],),
                ).fetchall()
            )
            version = conn.execute("SHOW server_version").fetchone()
        return {
            "server_version": version[0] if version else "?",
            "settings": settings,
            "started_by_bench": self._started,
        }

    def stop(self) -> None:
        if self._started:
            from eosink.services import get_service

            get_service("postgres").down()
            self._started = False

    def child_env(self) -> dict[str, str]:
        return {URL_ENV: self._require_url()}

    def goals(self) -> BenchGoals:
        """Spark's JDBC writer (best exactly-once >= 1.3x the batched one, >= 2.5x the default) and raw COPY."""
        return BenchGoals(
            baselines=(
                Baseline("spark-jdbc-default", "jdbc-default", 2.5),
                Baseline("spark-jdbc-rewrite-batched", "jdbc-rewrite", 1.3),
                Baseline("raw-copy", "raw-copy"),  # the server's single-stream ingest limit, shown only
            )
        )

    def runs(self) -> list[RunSpec]:
        return [
            *generic_runs(self.modes, TRANSACTIONAL),
            *datasource_runs(),
            RunSpec("spark-jdbc-default", "spark", options={"rewrite": False}),
            RunSpec("spark-jdbc-rewrite-batched", "spark", options={"rewrite": True}),
            RunSpec("raw-copy", "external"),
        ]

    def prepare(self, ns: str, *, keyed: bool = False) -> None:
        cols: list[sql.Composable] = [sql.SQL("{} {}").format(sql.Identifier(n), sql.SQL(t)) for n, t in COLUMNS]
        if keyed:
            cols.append(sql.SQL("PRIMARY KEY (id)"))
        with self._connect() as conn:
            conn.execute(
                sql.SQL("CREATE TABLE {} ({})").format(sql.Identifier(SCHEMA, _table(ns)), sql.SQL(", ").join(cols))
            )

    def verify(self, ns: str) -> int:
        with self._connect() as conn:
            row = conn.execute(sql.SQL("SELECT count(*) FROM {}").format(sql.Identifier(SCHEMA, _table(ns)))).fetchone()
        return int(row[0]) if row else 0

    def drop(self, ns: str) -> None:
        from eosink.connectors.postgres._control import gid_prefix

        prefix = gid_prefix(_control(ns))
        with self._connect() as conn:
            gids = conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() AND left(gid, %s) = %s",
                (len(prefix), prefix),
            ).fetchall()
            for (gid,) in gids:
                conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(SCHEMA, _table(ns))))
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(_control(ns))))

    def run_external(self, spec: RunSpec, ns: str, dataset: Dataset) -> float:
        if spec.name != "raw-copy":
            raise ConfigurationError(f"No external run {spec.name!r} for PostgreSQL.", "Use raw-copy.")
        from eosink.services.postgres import postgres_bindir

        ep: Any = self._endpoint
        names = ", ".join(n for n, _ in COLUMNS)
        command = f"\\copy {SCHEMA}.{_table(ns)} ({names}) FROM '{dataset.csv}' WITH (FORMAT csv)"
        env = dict(os.environ, PGPASSWORD=ep.password, PGCONNECT_TIMEOUT="10")
        argv = [str(postgres_bindir() / "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1"]
        argv += ["-h", ep.host, "-p", str(ep.port), "-U", ep.user, "-d", ep.dbname, "-c", command]
        started = time.monotonic()
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False, timeout=3600)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            raise RuntimeError(f"psql \\copy failed: {done.stderr.strip()[:500]}")
        return seconds

    # -- in the Spark job ---------------------------------------------------------------------------

    def spark_conf(self) -> dict[str, str]:
        from eosink.services.spark_jars import SparkJars

        return SparkJars().spark_conf("jdbc")

    def config(self, ns: str, commit_mode: str = "atomic") -> Any:
        from eosink.connectors.postgres import PostgresConfig

        if commit_mode not in _COMMIT_MODES:
            raise ConfigurationError(f"Unknown commit_mode {commit_mode!r}.", f"Use one of {_COMMIT_MODES}.")
        mode: Any = commit_mode
        return PostgresConfig(self._require_url(), (SCHEMA, _table(ns)), control_schema=_control(ns), commit_mode=mode)

    def eosink_sink(self, spec: RunSpec, ns: str) -> Any:
        from eosink.connectors.postgres import PostgresSink

        return PostgresSink(self.config(ns, str(spec.options.get("commit_mode", "atomic"))))

    def batch_function(self, spec: RunSpec, ns: str, checkpoint: str, participants: int) -> BatchFunction:
        from eosink.bench.session import arrow_task_function, eosink_function

        if spec.kind == "eosink":
            return eosink_function(self.eosink_sink(spec, ns), spec.strategy, app_id(ns), checkpoint, participants)
        if spec.kind == "datasource":
            from eosink.bench.session import datasource_write

            return datasource_write(spec, "postgres", self.config(ns), app_id(ns), from_env={"conninfo": URL_ENV})
        if spec.kind == "at-least-once":
            direct = _DirectCopy(self.config(ns))
            return arrow_task_function(lambda batch_id: direct, participants)
        if spec.kind == "spark":
            from eosink.services.postgres import PostgresEndpoint

            ep = PostgresEndpoint.from_url(self._require_url())
            url = ep.jdbc_url() + ("?reWriteBatchedInserts=true" if spec.options.get("rewrite") else "")
            password = ep.password
            table = f"{SCHEMA}.{_table(ns)}"

            def jdbc(df: Any, batch_id: int) -> None:
                (
                    df.write.format("jdbc")
                    .option("url", url)
                    .option("dbtable", table)
                    .option("user", ep.user)
                    .option("password", password)
                    .option("driver", "org.postgresql.Driver")
                    .mode("append")
                    .save()
                )

            return jdbc
        if spec.kind == "floor":
            from eosink.bench.runner import floor_function

            return floor_function(participants)
        raise ConfigurationError(f"Run {spec.name!r} ({spec.kind}) is not a Spark run.", "Run it with run_external.")

    def poll_visible(self, ns: str, after_id: int, warm_from_us: int) -> tuple[list[tuple[int, int]], int, int | None]:
        if self._poll is None or self._poll.closed:
            self._poll = self._connect()
        conn = self._poll
        rows = conn.execute(
            sql.SQL(
                "SELECT CASE WHEN at < to_timestamp(%(w)s / 1e6) THEN -1 "
                "ELSE (extract(epoch FROM statement_timestamp() - at) * 1000)::int END, count(*), max(id) "
                "FROM {} WHERE id > %(after)s GROUP BY 1"
            ).format(sql.Identifier(SCHEMA, _table(ns))),
            {"w": warm_from_us, "after": after_id},
        ).fetchall()
        batch: int | None = None
        bundles = conn.execute("SELECT to_regclass(%s)", (f"{_control(ns)}.bundles",)).fetchone()
        if bundles and bundles[0] is not None:
            found = conn.execute(
                sql.SQL("SELECT max(batch_id) FROM {} WHERE app_id = %s").format(
                    sql.Identifier(_control(ns), "bundles")
                ),
                (app_id(ns),),
            ).fetchone()
            batch = None if found is None or found[0] is None else int(found[0])
        hi = max([after_id, *(int(r[2]) for r in rows)])
        return [(int(r[0]), int(r[1])) for r in rows], hi, batch

    def scrub(self, text: str) -> str:
        """``text`` without the server's password."""
        if not self._url:
            return text
        from eosink.services.postgres import PostgresEndpoint

        password = PostgresEndpoint.from_url(self._url).password
        return text.replace(password, "***") if password else text

    def close(self) -> None:
        if self._poll is not None:
            self._poll.close()
            self._poll = None

    # -- helpers --------------------------------------------------------------------------------------

    def _require_url(self) -> str:
        if not self._url:
            raise ConfigurationError("The benchmark has no PostgreSQL server yet.", "Call start() first.")
        return self._url

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self._require_url(), autocommit=True, connect_timeout=10)
