"""The HDFS sink's profile: how eosink's tooling finds and drives this connector."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eosink.connectors.hdfs._layout import COMMIT_REQUEST_MARKER
from eosink.profiles import SinkProfile

if TYPE_CHECKING:
    from eosink.admin import SinkAdmin
    from eosink.bench.runs import BenchAdapter
    from eosink.chaos.target import ChaosTarget
    from eosink.contracts.harness import SinkHarness
    from eosink.demo.target import DemoTarget

__all__ = ["PROFILE", "HdfsProfile"]


class HdfsProfile(SinkProfile):
    """HDFS: Parquet or JSON-lines files, a batch visible by one directory rename (:mod:`eosink.connectors.hdfs`)."""

    name = "hdfs"
    title = "HDFS"
    summary = "Parquet or JSON-lines files written from Arrow; a batch becomes visible by one atomic directory rename"
    extra = "hdfs"
    docs = "connectors/hdfs.md"
    datasource = ("eosink.connectors.hdfs", "HdfsConfig", "HdfsSink")
    services = ("hdfs",)
    chaos_topologies = ("single", "ha")
    bench_topologies = ("single", "ha")
    #: The rename that makes a batch visible (see :data:`eosink.connectors.hdfs.testing.COMMIT_REQUEST_MARKER`).
    commit_request_marker = COMMIT_REQUEST_MARKER

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--url", required=True, help="the target directory, hdfs://namenode:8020/path")
        parser.add_argument("--hadoop-conf-dir", help="a Hadoop configuration directory (default: $HADOOP_CONF_DIR)")
        parser.add_argument("--kerberos-principal", help="Kerberos principal (the keytab or ticket cache from env)")

    def admin(self, args: argparse.Namespace) -> SinkAdmin:
        from eosink.connectors.hdfs.admin import HdfsAdmin
        from eosink.connectors.hdfs.config import HdfsConfig

        return HdfsAdmin(
            HdfsConfig(args.url, hadoop_conf_dir=args.hadoop_conf_dir, kerberos_principal=args.kerberos_principal)
        )

    def secrets_note(self) -> str:
        return (
            "HDFS takes no password: Kerberos credentials come from the ticket cache (kinit) or KRB5CCNAME, and "
            "HADOOP_CONF_DIR names the cluster's configuration. Keytab paths and token settings are never printed."
        )

    def contract_harness(self, **options: Any) -> SinkHarness:
        from eosink.connectors.hdfs.testing import HdfsHarness

        return HdfsHarness(**options)

    def chaos_target(self, root: Path | None = None, *, topology: str = "single") -> ChaosTarget:
        if topology == "ha":
            from eosink.connectors.hdfs._chaos_ha import HdfsHaChaosTarget

            return HdfsHaChaosTarget(root)
        from eosink.connectors.hdfs._chaos import HdfsChaosTarget

        return HdfsChaosTarget(root)

    def demo_target(self) -> DemoTarget:
        from eosink.connectors.hdfs._demo import HdfsDemoTarget

        return HdfsDemoTarget()

    def bench_adapter(self, *, topology: str = "single") -> BenchAdapter:
        from eosink.connectors.hdfs._bench import HdfsAdapter

        return HdfsAdapter(topology=topology)


PROFILE = HdfsProfile()
