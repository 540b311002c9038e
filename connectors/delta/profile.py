"""The Delta sink's profile: how eosink's tooling finds and drives this connector."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eosink.profiles import SinkProfile

if TYPE_CHECKING:
    from eosink.admin import SinkAdmin
    from eosink.bench.runs import BenchAdapter
    from eosink.chaos.target import ChaosTarget
    from eosink.contracts.harness import SinkHarness
    from eosink.demo.target import DemoTarget

__all__ = ["PROFILE", "DeltaProfile"]


class DeltaProfile(SinkProfile):
    """Delta Lake: Parquet files from Arrow, a batch visible by one Delta commit (:mod:`eosink.connectors.delta`)."""

    name = "delta"
    title = "Delta Lake"
    summary = "Parquet files written from Arrow into a Delta table; a batch becomes visible by one Delta commit"
    extra = "delta"
    docs = "connectors/delta.md"
    datasource = ("eosink.connectors.delta", "DeltaConfig", "DeltaSink")
    services = ("minio",)
    chaos_topologies = ("single", "cluster")
    #: The batch's commit on S3: the PUT of the log's next entry (``If-None-Match: *``); the chaos target's store.
    commit_request_marker = re.compile(rb"PUT /[^ ]*/_delta_log/\d{20}\.json ")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--table", required=True, help="the table: s3://bucket/path, hdfs://nn:port/path or a dir")
        parser.add_argument("--endpoint-url", help="an S3-compatible store's endpoint (default: $EOSINK_S3_* / AWS_*)")
        parser.add_argument("--region", help="an s3:// table's region")
        parser.add_argument(
            "--path-style", action="store_true", default=None, help="path-style addressing (default for --endpoint-url)"
        )
        parser.add_argument(
            "--ca-bundle", help="the CA (PEM) that signed an https:// store's certificate (default: $AWS_CA_BUNDLE)"
        )

    def admin(self, args: argparse.Namespace) -> SinkAdmin:
        from eosink.connectors.delta.admin import DeltaAdmin
        from eosink.connectors.delta.config import DeltaConfig

        options: dict[str, Any] = {}
        for name in ("endpoint_url", "region", "path_style", "ca_bundle"):
            value = getattr(args, name, None)
            if value is not None:
                options[name] = value
        if "ca_bundle" not in options and os.environ.get("AWS_CA_BUNDLE"):
            options["ca_bundle"] = os.environ["AWS_CA_BUNDLE"]
        return DeltaAdmin(DeltaConfig.from_env(args.table, **options))

    def secrets_note(self) -> str:
        return (
            "S3 credentials come from EOSINK_S3_* or the AWS chain (environment, profile, role) and are never printed; "
            "storage options whose names look secret are hidden in every message."
        )

    def contract_harness(self, **options: Any) -> SinkHarness:
        from eosink.connectors.delta.testing import DeltaHarness

        return DeltaHarness(**options)

    def chaos_target(self, root: Path | None = None, *, topology: str = "single") -> ChaosTarget:
        if topology == "cluster":
            from eosink.connectors.delta._chaos_cluster import DeltaClusterChaosTarget

            return DeltaClusterChaosTarget(root)
        from eosink.connectors.delta._chaos import DeltaChaosTarget

        return DeltaChaosTarget(root)

    def bench_adapter(self, *, topology: str = "single") -> BenchAdapter:
        from eosink.connectors.delta._bench import DeltaAdapter

        return DeltaAdapter()

    def demo_target(self) -> DemoTarget:
        from eosink.connectors.delta._demo import DeltaDemoTarget

        return DeltaDemoTarget()


PROFILE = DeltaProfile()
