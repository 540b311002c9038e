"""A long history against the real MinIO: old commit markers are folded into segments, so what the sink keeps
stays bounded, and a new process finds its last bundle with one listing page (see ``tests/connectors/history.py``).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.s3 import S3Config, S3Sink, committed_markers
from eosink.connectors.s3._layout import Layout
from eosink.stores.s3 import client as s3_client

from ..history import HISTORY, SHORT, History, measure, report
from ._synthetic import folded_until, write_history
from .conftest import HARNESS

STEPS = ("fetch", "start", "commit")


class RequestCounter:
    """Counts the S3 requests of the sink's clients by operation, and the keys their listings return (botocore's
    ``before-call`` and ``after-call`` events on the clients ``eosink.stores.s3.client`` makes for the
    configuration)."""

    def __init__(self, config: S3Config) -> None:
        self.counts: Counter[str] = Counter()
        conn = config.connection()
        self.clients = [s3_client(conn, retrying=flavour) for flavour in (True, False)]
        for n, c in enumerate(self.clients):
            c.meta.events.register("before-call.s3", self._before, unique_id=f"eosink-history-before-{n}")
            c.meta.events.register("after-call.s3", self._after, unique_id=f"eosink-history-after-{n}")

    def _before(self, model: Any, **kwargs: Any) -> None:
        self.counts[model.name] += 1

    def _after(self, model: Any, parsed: Any = None, **kwargs: Any) -> None:
        if model.name == "ListObjectsV2" and isinstance(parsed, dict):
            self.counts["keys listed"] += len(parsed.get("Contents", []))

    def close(self) -> None:
        for n, c in enumerate(self.clients):
            c.meta.events.unregister("before-call.s3", unique_id=f"eosink-history-before-{n}")
            c.meta.events.unregister("after-call.s3", unique_id=f"eosink-history-after-{n}")

    def __call__(self) -> Counter[str]:
        return Counter(self.counts)


def kept(config: S3Config, app_id: str) -> dict[str, int]:
    """What eosink keeps under the app_id's folder: marker objects, segments, anything else."""
    s3 = HARNESS.client()
    layout = Layout(config.prefix)
    found: Counter[str] = Counter()
    control = layout.control(app_id)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=config.bucket, Prefix=control):
        for obj in page.get("Contents", []):
            key = str(obj["Key"])
            if key.startswith(layout.markers(app_id)) and Layout.marker_batch(key) is not None:
                found["markers"] += 1
            elif key.startswith(layout.segments(app_id)) and Layout.segment_range(key) is not None:
                found["segments"] += 1
            elif key == layout.epoch_key(app_id):
                found["epoch objects"] += 1
            else:
                found["other"] += 1
    return {what: found[what] for what in ("markers", "segments", "epoch objects", "other")}


def test_a_long_history_costs_what_a_short_one_costs_and_keeps_a_bounded_state(
    prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """100,000 batches behind an app_id (EOSINK_HISTORY_BATCHES; 2,000 in make test), as the sink leaves them:
    a segment per folded range of 100 batches, the newest 100 to 150 as marker objects. A new process finds the
    last bundle with one listing page and one GET, as with 10 batches; start-up and a commit send the same
    requests as with 10 batches (a commit that makes a range foldable: one fold more); the app_id keeps at most
    1.5 x 100 + 1 markers, one segment per folded range, and its epoch object."""
    config = HARNESS.config(prefix)
    span = config.segment_batches
    warm, short, long = History("app_warm", SHORT), History("app_short", SHORT), History("app_long", HISTORY)
    started = time.perf_counter()
    for history in (long, warm, short):
        write_history(config, history)
    written_s = time.perf_counter() - started

    def make() -> S3Sink:
        return S3Sink(config)

    measure(make, warm, tmp_path / "warm")  # the process's first clients, imports and probe: not measured
    counter = RequestCounter(config)
    try:
        a = measure(make, short, tmp_path / "short", counter)
        b = measure(make, long, tmp_path / "long", counter)
    finally:
        counter.close()

    folds = folded_until(long.batches + 1, span) > folded_until(long.batches, span)  # the commit's own fold
    fold_cost = Counter({"GetObject": span, "PutObject": 1, "DeleteObjects": 1, "ListObjectsV2": 1})
    for step in STEPS:
        short_work, long_work = a.work[step], b.work[step]
        allowance = fold_cost if (step == "commit" and folds) else Counter()
        for operation, n in long_work.items():
            if operation == "keys listed":
                assert n <= 2 * span, f"{step} listed {n} keys of {HISTORY} batches: {long_work}"
            else:
                assert n <= short_work[operation] + allowance[operation], f"{step}: {short_work} vs {long_work}"
        requests = sum(n for op, n in long_work.items() if op != "keys listed")
        assert requests <= 20 + sum(allowance.values()), f"{step} sent {requests} requests: {long_work}"

    state = kept(config, long.app_id)
    bounds = {
        "markers": span + span // 2 + 1,
        "segments": folded_until(long.batches + 1, span) // span,
        "epoch objects": 1,
        "other": 0,
    }
    assert state["markers"] <= bounds["markers"], state
    assert state["segments"] == bounds["segments"], state
    assert state["epoch objects"] == 1 and state["other"] == 0, state
    tail = committed_markers(config, long.app_id, after_batch=long.batches - 2 * span)
    assert [m.batch_id for m in tail] == list(range(long.batches - 2 * span + 1, long.batches + 1))
    with capsys.disabled():
        print(f"\ns3: synthetic history of {HISTORY} + 2 x {SHORT} batches written in {written_s:.1f} s")
        print(report("s3", a, b, state, bounds))
