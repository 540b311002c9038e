"""The cache lock: parallel workers on a cold cache build each thing once, one at a time.

A chaos run with two workers once crashed on a cold cache: both fetched Spark's s3 jars into
the same directory at once (``FileExistsError``). Everything that builds into the cache goes
through :func:`eosink.services._layout.cache_lock`.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from eosink._waiting import wait_until
from eosink.services import _layout
from eosink.services._layout import cache_lock


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EOSINK_CACHE", str(tmp_path / "cache"))


def test_threads_take_turns_and_other_names_do_not_wait() -> None:
    """Pass: of 4 threads building the same thing, never 2 at once; a different name is not held up."""
    inside, most, started, lock = 0, 0, 0, threading.Lock()

    def build() -> None:
        nonlocal inside, most, started
        with lock:
            started += 1
        with cache_lock("jars-spark/s3"):
            with lock:
                inside += 1
                most = max(most, inside)
            # hold the lock until every thread is on its way to it, so that they collide
            assert wait_until(lambda: started == 4, 10.0)
            with lock:
                inside -= 1

    threads = [threading.Thread(target=build) for _ in range(4)]
    for t in threads:
        t.start()
    with cache_lock("something-else"):
        assert inside <= 1
    for t in threads:
        t.join(timeout=30)
    assert most == 1


def test_a_holder_that_dies_releases_the_lock(tmp_path: Path) -> None:
    """A SIGKILLed build must not leave the cache locked for ever.

    Pass: a child process takes the lock and is killed; the lock is then free at once.
    """
    code = (
        "import signal\n"
        "from eosink.services._layout import cache_lock\n"
        "with cache_lock('provision-minio'):\n"
        "    print('held', flush=True)\n"
        "    signal.pause()  # holds the lock until killed\n"
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        got = threading.Event()

        def take() -> None:
            with cache_lock("provision-minio"):
                got.set()

        waiter = threading.Thread(target=take)
        waiter.start()
        assert not got.wait(0.3), "the lock was not exclusive across processes"
        child.kill()
        assert got.wait(10), "the dead holder's lock was not released"
        waiter.join(timeout=10)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert sorted(p.name for p in (_layout.cache_root() / "locks").iterdir()) == ["provision-minio.lock"]
