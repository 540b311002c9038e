"""The PostgreSQL sink's profile: how eosink's tooling finds and drives this connector."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eosink.errors import ConfigurationError
from eosink.profiles import SinkProfile

if TYPE_CHECKING:
    from eosink.admin import SinkAdmin
    from eosink.bench.runs import BenchAdapter
    from eosink.chaos.target import ChaosTarget
    from eosink.contracts.harness import SinkHarness
    from eosink.demo.target import DemoTarget

__all__ = ["PROFILE", "PostgresProfile"]


class PostgresProfile(SinkProfile):
    """PostgreSQL: prepared transactions, ``pg_xact_status``, upserts (:mod:`eosink.connectors.postgres`)."""

    name = "postgres"
    title = "PostgreSQL"
    summary = "rows COPYed from Arrow into a table; prepared transactions (2pc), pg_xact_status (txid-check), upserts"
    extra = "postgres"
    docs = "connectors/postgres.md"
    datasource = ("eosink.connectors.postgres", "PostgresConfig", "PostgresSink")
    services = ("postgres",)
    #: The batch's commit is the bare ``COMMIT`` (a simple-query message: ``COMMIT`` + NUL) that ends the one
    #: transaction moving the staged rows and writing the bundle.
    chaos_topologies = ("single", "replicated")
    commit_request_marker = b"COMMIT\x00"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        source = parser.add_mutually_exclusive_group(required=True)
        source.add_argument("--conninfo", help="libpq URL or keyword string (better without the password)")
        source.add_argument("--conninfo-env", metavar="VAR", help="read the conninfo from environment variable VAR")
        parser.add_argument("--table", required=True, help="the sink's target table, as in PostgresConfig(table=...)")
        parser.add_argument(
            "--control-schema", default="eosink", help="PostgresConfig.control_schema (default: eosink)"
        )

    def admin(self, args: argparse.Namespace) -> SinkAdmin:
        from eosink.connectors.postgres.admin import PostgresAdmin
        from eosink.connectors.postgres.config import PostgresConfig

        if args.conninfo_env is not None:
            conninfo = os.environ.get(args.conninfo_env)
            if not conninfo:
                raise ConfigurationError(
                    f"Environment variable {args.conninfo_env!r} (--conninfo-env) is not set or empty.",
                    "Export the conninfo in that variable, or pass --conninfo.",
                )
        else:
            conninfo = args.conninfo
        return PostgresAdmin(PostgresConfig(conninfo, args.table, control_schema=args.control_schema))

    def secrets_note(self) -> str:
        return (
            "The password need not be on the command line: PGPASSWORD, ~/.pgpass and the other libpq variables "
            "work, or --conninfo-env VAR names an environment variable holding the conninfo. It is never printed."
        )

    def contract_harness(self, **options: Any) -> SinkHarness:
        from eosink.connectors.postgres.testing import PostgresHarness

        return PostgresHarness(**options)

    def chaos_target(self, root: Path | None = None, *, topology: str = "single") -> ChaosTarget:
        from eosink.connectors.postgres._chaos import PostgresChaosTarget, ReplicatedPostgresChaosTarget

        return ReplicatedPostgresChaosTarget(root) if topology == "replicated" else PostgresChaosTarget(root)

    def bench_adapter(self, *, topology: str = "single") -> BenchAdapter:
        from eosink.connectors.postgres._bench import PostgresAdapter

        return PostgresAdapter()

    def demo_target(self) -> DemoTarget:
        from eosink.connectors.postgres._demo import PostgresDemoTarget

        return PostgresDemoTarget()


PROFILE = PostgresProfile()
