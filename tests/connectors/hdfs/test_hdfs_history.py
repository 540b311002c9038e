"""A long history on the real cluster: finding the last bundle lists the target's range directories and the
newest range, not the history, and what the sink keeps stays bounded (see ``tests/connectors/history.py``).

The history is synthetic, as a real run leaves it in the grouped layout: per app the ``app_id`` file and an
epoch file; per batch its range and batch directories; a batch record (the connector's
:class:`~eosink.connectors.hdfs._record.BatchRecord`) in every batch of the newest range (older batches are
empty directories: nothing reads them); the target's ``layout.json`` and ``schema.json``. The directories
are made by a thread pool (hdfs-native's client is thread-safe): 100,000 batches take about a minute.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import hdfs_native
import pytest

from eosink.connectors.hdfs import HdfsConfig, HdfsSink
from eosink.connectors.hdfs import _layout as L
from eosink.connectors.hdfs._files import schema_doc
from eosink.connectors.hdfs._record import BatchRecord
from eosink.contracts.harness import CONTRACT_SCHEMA

from ..history import HISTORY, SHORT, History, measure, report, synthetic_bundle

WORKERS = 16
SLACK = 40
"""Entries a step lists besides the target and the newest range (epochs, pending, staging, the new batch)."""


class NameNodeCounter:
    """Counts the sink's client calls (each one NameNode request or more), the directory entries they list, and
    the sink's ``fetch_last_bundle`` calls (the coordinator makes several at start)."""

    METHODS = ("get_file_info", "list_status", "read", "create", "mkdirs", "rename", "delete")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[str] = Counter()
        for name in self.METHODS:
            monkeypatch.setattr(hdfs_native.Client, name, self._counted(name, getattr(hdfs_native.Client, name)))
        fetch = HdfsSink.fetch_last_bundle

        def fetch_last_bundle(sink: HdfsSink, app_id: str) -> Any:
            self.counts["fetches"] += 1
            return fetch(sink, app_id)

        monkeypatch.setattr(HdfsSink, "fetch_last_bundle", fetch_last_bundle)

    def _counted(self, name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def call(client: Any, *args: Any, **kwargs: Any) -> Any:
            self.counts["calls"] += 1
            result = real(client, *args, **kwargs)
            return self._listing(result) if name == "list_status" else result

        return call

    def _listing(self, entries: Iterator[Any]) -> Iterator[Any]:
        for entry in entries:
            self.counts["listed"] += 1
            yield entry

    def __call__(self) -> Counter[str]:
        return Counter(self.counts)


def write_history(sink: HdfsSink, history: History) -> None:
    """``history``'s committed batches as a real run leaves them (see the module docstring)."""
    app = history.app_id
    sink.fs.create_only(f"{sink._app(app)}/app_id", app.encode())
    sink.fs.create_only(f"{sink._app(app)}/epochs/{1:020d}")
    newest_range = L.GROUPED.first(history.last)
    schema = tuple((str(n), str(t)) for n, t in schema_doc(CONTRACT_SCHEMA))

    def make(batch_id: int) -> None:
        final = sink._final(app, batch_id)
        if batch_id < newest_range:
            sink.fs.mkdirs(final)
            return
        record = BatchRecord(synthetic_bundle(history, batch_id), (), schema)
        writer = sink.fs.create(f"{final}/{L.BUNDLE_FILE}")
        writer.write(record.encode())
        writer.close()

    with ThreadPoolExecutor(WORKERS) as pool:
        list(pool.map(make, range(history.batches)))


def kept(sink: HdfsSink, app: str) -> dict[str, int]:
    """What the sink keeps for ``app`` and the target, counted after the measured commit."""
    ranges = [n for n in sink.fs.names(sink.root) if L.parse_range_dir(n, app) is not None]
    app_dir = sink._app(app)
    return {
        "entries in the target": len(sink.fs.names(sink.root)),
        "most entries in a range": max(len(sink.fs.names(f"{sink.root}/{r}")) for r in ranges),
        "epoch files": len(sink.fs.names(f"{app_dir}/epochs")),
        "pending entries": len(sink.fs.names(sink._pending(app))),
        "staging entries": len(sink.fs.names(sink._staging(app))),
        "entries in _eosink": len(sink.fs.names(f"{sink.root}/{L.OWN_DIR}")),
    }


def ranges_of(batches: int) -> int:
    """Range directories of an app with batches 0 .. ``batches`` (its history and the measured commit)."""
    return batches // L.RANGE + 1


def test_a_long_history_costs_what_a_short_one_costs_and_keeps_a_bounded_state(
    target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """HISTORY batches behind one app_id (2,000 in make test, 100,000 in make test-full), SHORT behind another.

    Pass: fetch_last_bundle, start-up and a commit make as many client calls for the long history as for the
    short one (a few more at most) and list at most RANGE entries more per fetch_last_bundle: the target's
    range directories and the newest range, never the history; afterwards the target holds one range
    directory per RANGE batches of each app (and _eosink), no range more than RANGE batches, two epoch files,
    and nothing in pending/ or staging/."""
    config = HdfsConfig(target)
    setup = HdfsSink(config)
    setup.setup("app_long")
    setup.fs.create_only(
        f"{setup.root}/{L.OWN_DIR}/schema.json", json.dumps({"columns": schema_doc(CONTRACT_SCHEMA)}).encode()
    )
    warm, short, long = History("app_warm", SHORT), History("app_short", SHORT), History("app_long", HISTORY)
    for history in (long, warm, short):
        write_history(setup, history)
    counter = NameNodeCounter(monkeypatch)

    def make() -> HdfsSink:
        return HdfsSink(config)

    measure(make, warm, tmp_path / "warm")  # the process's first client and imports, not measured
    a, b = measure(make, short, tmp_path / "short", counter), measure(make, long, tmp_path / "long", counter)
    monkeypatch.undo()

    in_target = ranges_of(long.batches) + ranges_of(short.batches) + ranges_of(warm.batches) + 1
    for step in ("fetch", "start", "commit"):
        short_work, long_work = a.work[step], b.work[step]
        fetches = long_work["fetches"]
        assert long_work["calls"] <= short_work["calls"] + 4, f"{step}: {dict(short_work)} vs {dict(long_work)}"
        assert long_work["listed"] <= short_work["listed"] + fetches * L.RANGE, f"{step}: {short_work} vs {long_work}"
        bound = fetches * (in_target + L.RANGE) + SLACK
        assert long_work["listed"] <= bound, f"{step} listed {long_work['listed']} entries of {HISTORY} batches"

    found = kept(make(), long.app_id)
    bounds = {
        "entries in the target": in_target,
        "most entries in a range": L.RANGE,
        "epoch files": 2,
        "pending entries": 0,
        "staging entries": 0,
        "entries in _eosink": 3,  # apps/, layout.json, schema.json
    }
    for what, limit in bounds.items():
        assert found[what] <= limit, f"{what}: {found}"
    with capsys.disabled():
        print("\n" + report("hdfs", a, b, found, bounds))
