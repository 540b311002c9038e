"""Where the service harness keeps downloads, builds, data, logs and state: one cache directory.

``$EOSINK_CACHE`` (``make`` sets it to ``<repo>/.cache``) or ``~/.cache/eosink``::

    <cache>/
      m2/                      Maven's local repository (Kafka, HDFS, Spark jars)
      go/                      Go module and build caches (MinIO)
      services/<name>/         what provisioning produced for one service (jars, binaries)
      run/<name>/              one running instance: data/, <name>.log, state.json (0600)
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cache_root", "provision_dir", "run_dir"]


def cache_root() -> Path:
    """The one cache directory (created on first use)."""
    root = Path(os.environ.get("EOSINK_CACHE") or Path.home() / ".cache" / "eosink").absolute()
    root.mkdir(parents=True, exist_ok=True)
    return root


def provision_dir(name: str) -> Path:
    """Where service ``name`` keeps what it downloaded and built (kept across runs)."""
    path = cache_root() / "services" / name
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_dir(name: str) -> Path:
    """Where a running instance of service ``name`` keeps its data, log and state."""
    path = cache_root() / "run" / name
    path.mkdir(parents=True, exist_ok=True)
    return path
