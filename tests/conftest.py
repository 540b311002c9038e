"""What every test tree here shares: ``--shard=K/N``.

make runs a long selection as N pytest processes at the same time (``scripts/together.py``), each
given ``--shard=K/N`` for K in 0..N-1: process K keeps every N-th test of the selection, starting
at the K-th. Tests are dealt in collection order after ``-m``/``-k``, so each process gets a like mix
of files and strategies, and together they run every selected test once.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--shard",
        default=None,
        metavar="K/N",
        help="run only every N-th selected test, from the K-th (0-based): one of N processes run together",
    )


def parse_shard(spec: str) -> tuple[int, int]:
    """``"K/N"`` as ``(K, N)``; a usage error names what is wrong."""
    try:
        k_text, n_text = spec.split("/")
        k, n = int(k_text), int(n_text)
    except ValueError:
        raise pytest.UsageError(f"--shard takes K/N, such as 0/2, not {spec!r}") from None
    if not 0 <= k < n:
        raise pytest.UsageError(f"--shard {spec}: K must be at least 0 and below N")
    return k, n


@pytest.hookimpl(trylast=True)  # after -m and -k have deselected theirs, so that the shards are alike
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spec = config.getoption("--shard")
    if spec is None:
        return
    k, n = parse_shard(spec)
    kept = items[k::n]
    config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % n != k])
    items[:] = kept
