"""``eosink status`` and ``eosink recover`` as the least-privileged writer, the same walk for every sink.

A 2pc batch is left prepared by a dead driver (in Spark's commit log, not committed); ``status``
must show it in doubt (exit 1), ``recover --yes`` must commit it (exit 0), then ``status`` is clean
(exit 0). No run prints a secret.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from eosink.contracts._mini import MemoryBatch, SparkOrderDriver
from eosink.contracts.secrets import assert_secret_free
from eosink.services.proxy import FaultProxy

__all__ = ["leave_in_doubt", "other_host_name", "status_and_recover"]


def leave_in_doubt(driver: SparkOrderDriver[Any], batch: MemoryBatch) -> None:
    """Batch 0 prepared and in Spark's commit log; then the driver dies before its 2pc commit."""
    driver.ckpt.write_offsets(0)
    driver.coordinator.process(0, batch)
    driver.ckpt.write_commit(0)
    driver.close()


def status_and_recover(
    where: Sequence[str], env: Mapping[str, str], checkpoint: str, app_id: str, secrets: Sequence[str]
) -> None:
    """Run status, recover and status again with the sink options ``where`` in ``env``; check exit codes and
    that no output holds one of ``secrets``."""

    def cli(command: str, *extra: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "eosink.cli", command, *where, "--app-id", app_id, *extra]
        return subprocess.run(argv, capture_output=True, text=True, env=dict(env), timeout=180, check=False)

    status = cli("status")
    assert status.returncode == 1, status.stdout + status.stderr
    recover = cli("recover", "--checkpoint", checkpoint, "--yes")
    assert recover.returncode == 0, recover.stdout + recover.stderr
    after = cli("status")
    assert after.returncode == 0, after.stdout + after.stderr
    for run in (status, recover, after):
        assert_secret_free(run.stdout + run.stderr, list(secrets))


def other_host_name(endpoint_url: str, proxies: list[FaultProxy]) -> str:
    """``endpoint_url`` (``https://127.0.0.1:port``) reached by another loopback address, through a proxy
    added to ``proxies`` (the caller closes them): the server's certificate names 127.0.0.1 and localhost
    only, so the handshake must fail on the host name."""
    host, _, port = endpoint_url.removeprefix("https://").rpartition(":")
    proxy = FaultProxy(host, int(port), listen_host="127.0.0.2").start()
    proxies.append(proxy)
    return f"https://127.0.0.2:{proxy.port}"
