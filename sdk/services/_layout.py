"""Where the service harness keeps downloads, builds, data, logs and state: one cache directory.

``$EOSINK_CACHE`` (``make`` sets it to ``<repo>/.cache``) or ``~/.cache/eosink``::

    <cache>/
      m2/                      Maven's local repository (Kafka, HDFS, Spark jars)
      go/                      Go module and build caches (MinIO)
      services/<name>/         what provisioning produced for one service (jars, binaries)
      run/<name>/              one running instance: data/, <name>.log, state.json (0600)
      locks/                   one lock file per thing built into the cache (see cache_lock)
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["cache_lock", "cache_root", "provision_dir", "run_dir"]

log = logging.getLogger("eosink.services")


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


@contextmanager
def cache_lock(name: str) -> Iterator[None]:
    """Build ``name`` into the cache alone: an exclusive lock across processes and threads.

    Parallel workers (``eosink chaos --jobs 2``, two ``make`` targets) on a cold cache would
    otherwise download or build the same thing into the same directory at once. The lock is
    an ``flock`` on its own open file, so the kernel drops it when a holder dies.
    """
    locks = cache_root() / "locks"
    locks.mkdir(exist_ok=True)
    path = locks / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', name)}.lock"
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another process that is preparing %s", name)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
