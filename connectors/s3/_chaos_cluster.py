"""The chaos harness's S3 target on a four-node MinIO (``eosink chaos --sink s3 --topology cluster``).

The sink writes through the balancer in front of the cluster's nodes (:class:`~eosink.chaos.minio.MinioClusterSide`);
a node is SIGKILLed at a moment of the run and the runner's fault proxy cuts a commit marker's reply. The judge is
:class:`~eosink.connectors.s3.audit.StoreReader` (pyarrow's S3 client, while the sink writes with boto3): rows
through the commit markers, per batch, for the harness's reader; markers whose objects are not all there at their
size, or a batch with two markers, once the schedule is over, counted among its leftovers (``torn_batches``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from eosink.chaos.minio import BUCKET, MinioClusterSide
from eosink.chaos.schedule import ClusterFaults
from eosink.chaos.target import Names
from eosink.connectors.s3._chaos import S3ChaosTarget

__all__ = ["S3ClusterChaosTarget"]


class S3ClusterChaosTarget(MinioClusterSide, S3ChaosTarget):
    """S3 on a private four-node MinIO (see the module docstring)."""

    reader = "pyarrow"
    cluster_faults = ClusterFaults(("storage",), pause=False, loses_prepared=True)
    """A node killed as it applies a ``CompleteMultipartUpload`` can make MinIO lose that upload (see ``s3.md``)."""

    def __init__(self, root: Any = None) -> None:
        super().__init__(root, "eosink-chaos-s3-cluster-")

    def _reader(self, names: Names) -> Any:
        from eosink.connectors.s3.audit import StoreReader

        ep = self.server.endpoint
        return StoreReader(ep.endpoint_url, ep.access_key, ep.secret_key, BUCKET, names.table, region=ep.region)

    def _tables(self, names: Names) -> tuple[list[dict[str, Any]], frozenset[int] | None]:
        """The rows the markers name, read with pyarrow, and the batches with a marker."""
        committed, _ = self._reader(names).read()
        rows = [json.loads(row) for row in committed.elements()]
        return rows, frozenset(int(r["batch_id"]) for r in rows)

    def recover_args(self, names: Names) -> list[str]:
        """The sink's bucket and prefix, for the rewind after a node killed mid-complete lost prepared work."""
        return ["--sink", "s3", "--bucket", BUCKET, "--prefix", names.table]

    def leftovers(self, names: Names) -> dict[str, int]:
        """Incomplete uploads, as every node lists them, and markers the pyarrow reader finds torn once the schedule
        is over (while it runs, a partial batch is the harness's reader's finding)."""
        reader = self._reader(names)
        reader.read()
        torn = set(reader.torn)
        for text in sorted(torn):
            print(f"    torn batch in {names.table}: {text}", file=sys.stderr, flush=True)
        uploads = self.server.incomplete_uploads(BUCKET, names.table)
        return {"incomplete_uploads": len(uploads), "torn_batches": len(torn)}
