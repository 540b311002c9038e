"""A long history against a real broker: transactional ids stay a bounded pool, and finding the last
bundle reads the tail of the progress topic, not its history (see ``tests/connectors/history.py``).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.kafka import KafkaSink, _wire
from eosink.connectors.kafka._names import app_tag
from eosink.connectors.kafka._progress import BUNDLES, MARKERS, TAIL, WINDOW, bundle_record
from eosink.connectors.kafka.admin import KafkaAdmin
from eosink.contract import BatchRef, Bundle, Fingerprint, TaskRef
from eosink.contracts.harness import Namespace
from eosink.errors import FencedError

from ..history import HISTORY, SHORT, History, measure, report, synthetic_bundle
from .conftest import HARNESS


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Namespace]:
    made = Namespace(f"hist{uuid.uuid4().hex[:8]}", tmp_path / "ns")
    HARNESS.create_topics(made)
    yield made
    HARNESS.cleanup(made)


def transactional_ids(sink: KafkaSink, app_id: str) -> list[str]:
    """Every transactional id of ``app_id`` the transaction coordinators remember, in any state."""
    return KafkaAdmin(sink.config).transactional_ids(app_id)


def live_keys(topic: str, partition: int, prefix: bytes) -> set[bytes]:
    """The keys starting with ``prefix`` whose last committed record is not a tombstone: what compaction keeps."""
    last: dict[bytes, bytes | None] = {}
    for record in _wire.read_log(HARNESS.admin(), topic, partition).committed:
        if record.key is not None and record.key.startswith(prefix):
            last[record.key] = record.value
    return {key for key, value in last.items() if value is not None}


def write_history(ns: Namespace, history: History) -> None:
    """Bundles of batches 0 .. last into the progress topic, each with the tombstone of the one WINDOW back,
    as the sink's bundle transactions write them (here without transactions, in bulk: the same records)."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=HARNESS.bootstrap(), linger_ms=20, batch_size=1 << 20, acks=1)
    try:
        topic = HARNESS.config(ns).progress_topic
        for batch_id in range(history.batches):
            key, value = bundle_record(synthetic_bundle(history, batch_id))
            producer.send(topic, key=key, value=value, partition=BUNDLES)
            if batch_id >= WINDOW:
                old, _ = bundle_record(synthetic_bundle(history, batch_id - WINDOW))
                producer.send(topic, key=old, value=None, partition=BUNDLES)
        producer.flush(timeout=120)
    finally:
        producer.close(timeout=10)


class ReadCounter:
    """Counts what the sink reads of the progress topic (records returned by ``_wire.read_log``, Fetches)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.counts: Counter[str] = Counter()
        real = _wire.read_log

        def counted(admin: Any, topic: str, partition: int, start: int = 0, max_wait_s: float = 30.0) -> Any:
            part = real(admin, topic, partition, start, max_wait_s)
            self.counts[f"reads p{partition}"] += 1
            self.counts[f"records p{partition}"] += len(part.committed) + sum(len(r) for r in part.open.values())
            return part

        monkeypatch.setattr(_wire, "read_log", counted)

    def __call__(self) -> Counter[str]:
        return Counter(self.counts)


def test_a_long_history_costs_what_a_short_one_costs_and_keeps_a_bounded_state(
    ns: Namespace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """100,000 batches behind an app_id (EOSINK_HISTORY_BATCHES in make test): a new process finds its last
    bundle reading a tail of the progress topic, as with 10 batches; start-up and a commit read no more."""
    warm, short, long = History("app_warm", SHORT), History("app_short", SHORT), History("app_long", HISTORY)
    write_history(ns, long)
    for history in (warm, short):  # written last: the long app_id's bundles are not at the very end
        write_history(ns, history)
    counter = ReadCounter(monkeypatch)

    def make() -> KafkaSink:
        return KafkaSink(HARNESS.config(ns))

    measure(make, warm, tmp_path / "warm")  # the process's first clients and imports, not measured
    a, b = measure(make, short, tmp_path / "short", counter), measure(make, long, tmp_path / "long", counter)
    for step in ("fetch", "start", "commit"):
        records = b.work[step]["records p0"]
        assert records <= 2 * TAIL + 3 * SHORT, f"{step} read {records} bundle records of {HISTORY} batches"
        assert records <= 2 * max(a.work[step]["records p0"], TAIL), f"{step}: {a.work[step]} vs {b.work[step]}"

    sink = make()
    try:
        ids = transactional_ids(sink, long.app_id)
    finally:
        sink.close()
    progress = HARNESS.config(ns).progress_topic
    kept = {
        "bundle keys": len(live_keys(progress, BUNDLES, f"{app_tag(long.app_id)}|bundle|".encode())),
        "transactional ids": len(ids),
    }
    bounds = {"bundle keys": WINDOW, "transactional ids": 2 + 2 * 1}  # fence, bundles, 2 participants x 1 slot
    for what, bound in bounds.items():
        assert kept[what] <= bound, f"{what}: {kept}"
    with capsys.disabled():
        print("\n" + report("kafka", a, b, kept, bounds))


def test_every_writer_epoch_writes_with_the_same_pool_of_transactional_ids(ns: Namespace) -> None:
    """Twelve writers one after the other (format("eosink") fences at every batch), two participants each,
    each a batch: the app_id ends with 2 participants x 1 slot + 2 ids (fence, bundles), not 2 x 12 + 2; the
    progress topic keeps one marker per id."""
    app = "app_pool"
    for n in range(12):
        sink = KafkaSink(HARNESS.config(ns))
        try:
            sink.setup(app)
            epoch = sink.fence(app)
            batch = BatchRef(app, n)
            txns = [sink.begin(TaskRef(batch, epoch, p, f"{n}x{p}", strategy="txid-check")) for p in range(2)]
            committables = [sink.pre_commit(t) for t in txns]
            sink.commit(batch, committables, Bundle(batch, epoch, Fingerprint(), tuple(c.id for c in committables)))
        finally:
            sink.close()
    sink = KafkaSink(HARNESS.config(ns))
    try:
        ids = transactional_ids(sink, app)
        assert len(ids) == 2 + 2 * 1, sorted(ids)
    finally:
        sink.close()
    markers = live_keys(HARNESS.config(ns).progress_topic, MARKERS, b"txn|")
    assert len(markers) == 2 * 1, sorted(markers)


def test_a_writer_fenced_while_it_initialised_a_shared_id_stops_before_it_writes(
    ns: Namespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A zombie participant that passed its epoch check just before a newer writer fenced initialises the pool
    id it shares with the newer writer; its second check, after the initialisation, stops it (FencedError)
    before it begins a transaction, and the newer writer's batch on the same id commits."""
    app = "app_zombie"
    old, new = KafkaSink(HARNESS.config(ns)), KafkaSink(HARNESS.config(ns))
    try:
        old.setup(app)
        zombie_epoch = old.fence(app)
        newer_epoch = new.fence(app)
        assert newer_epoch > zombie_epoch
        checks = {"n": 0}
        real = KafkaSink._check_epoch

        def first_check_passes(self: KafkaSink, app_id: str, epoch: int, what: str) -> None:
            checks["n"] += 1
            if checks["n"] > 1:  # the check before the initialisation happened "before the fence"
                real(self, app_id, epoch, what)

        monkeypatch.setattr(KafkaSink, "_check_epoch", first_check_passes)
        with pytest.raises(FencedError):
            old.begin(TaskRef(BatchRef(app, 0), zombie_epoch, 0, "zombie", strategy="txid-check"))
        assert checks["n"] == 2
        monkeypatch.setattr(KafkaSink, "_check_epoch", real)
        batch = BatchRef(app, 0)
        txn = new.begin(TaskRef(batch, newer_epoch, 0, "zombie", strategy="txid-check"))
        committable = new.pre_commit(txn)
        new.commit(batch, [committable], Bundle(batch, newer_epoch, Fingerprint(), (committable.id,)))
        assert new.fetch_last_bundle(app) is not None
    finally:
        old.close()
        new.close()
