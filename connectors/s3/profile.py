"""The S3 sink's profile: how eosink's tooling finds and drives this connector."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eosink.connectors.s3._markers import FORMAT
from eosink.profiles import SinkProfile

if TYPE_CHECKING:
    from eosink.admin import SinkAdmin
    from eosink.bench.runs import BenchAdapter
    from eosink.chaos.target import ChaosTarget
    from eosink.contracts.harness import SinkHarness
    from eosink.demo.target import DemoTarget

__all__ = ["PROFILE", "S3Profile"]


class S3Profile(SinkProfile):
    """S3-compatible stores: multipart uploads (2pc), create-only commit markers (:mod:`eosink.connectors.s3`)."""

    name = "s3"
    title = "S3"
    summary = (
        "Parquet or JSON-lines objects by multipart upload; completed after Spark's commit log (2pc) or inline "
        "(txid-check), a create-only commit marker per batch"
    )
    extra = "s3"
    docs = "connectors/s3.md"
    datasource = ("eosink.connectors.s3", "S3Config", "S3Sink")
    services = ("minio",)
    chaos_topologies = ("single", "cluster")
    bench_topologies = ("single", "cluster")
    #: The batch's commit is the commit marker's PUT, the one request of a commit with ``If-None-Match: *``.
    commit_request_marker = FORMAT.encode()

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--bucket", required=True, help="the sink's bucket, as in S3Config(bucket=...)")
        parser.add_argument("--prefix", default="", help="the sink's prefix in the bucket (default: the bucket's root)")
        parser.add_argument("--endpoint-url", help="an S3-compatible store's URL (default: AWS, or EOSINK_S3_ENDPOINT)")
        parser.add_argument("--region", help="the bucket's region")
        parser.add_argument(
            "--path-style", action="store_true", default=None, help="path-style addressing (default for --endpoint-url)"
        )
        parser.add_argument(
            "--ca-bundle", help="the CA (PEM) that signed an https:// store's certificate (default: $AWS_CA_BUNDLE)"
        )

    def admin(self, args: argparse.Namespace) -> SinkAdmin:
        from eosink.connectors.s3.admin import S3Admin
        from eosink.connectors.s3.config import S3Config

        options: dict[str, Any] = {}
        for name in ("endpoint_url", "region", "path_style", "ca_bundle"):
            value = getattr(args, name, None)
            if value is not None:
                options[name] = value
        return S3Admin(S3Config.from_env(args.bucket, args.prefix, **options))

    def secrets_note(self) -> str:
        return (
            "Credentials never go on the command line: boto3's chain applies (AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY, AWS_PROFILE, instance and container roles), or the EOSINK_S3_ENDPOINT, "
            "EOSINK_S3_ACCESS_KEY and EOSINK_S3_SECRET_KEY variables (`eosink services env minio`). They are never "
            "printed."
        )

    def contract_harness(self, **options: Any) -> SinkHarness:
        from eosink.connectors.s3.testing import S3Harness

        return S3Harness(**options)

    def chaos_target(self, root: Path | None = None, *, topology: str = "single") -> ChaosTarget:
        if topology == "cluster":
            from eosink.connectors.s3._chaos_cluster import S3ClusterChaosTarget

            return S3ClusterChaosTarget(root)
        from eosink.connectors.s3._chaos import S3ChaosTarget

        return S3ChaosTarget(root)

    def bench_adapter(self, *, topology: str = "single") -> BenchAdapter:
        from eosink.connectors.s3._bench import S3Adapter

        return S3Adapter(topology=topology)

    def demo_target(self) -> DemoTarget:
        from eosink.connectors.s3._demo import S3DemoTarget

        return S3DemoTarget()


PROFILE = S3Profile()
