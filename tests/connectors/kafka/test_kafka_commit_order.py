"""The order of a Kafka commit's steps, with the broker's answers stubbed: the bundle is written only once every
participant's rows are readable.

Kafka answers a participant's EndTxn once the commit is decided (``PrepareCommit``) and writes its markers after; a
coordinator that fails over in between finishes them later, in any order. Had the bundle gone out meanwhile, a
``read_committed`` reader would see a batch's bundle before some of its rows (a torn batch: the chaos run on a
cluster found one). No server can hold a decided commit's markers on demand, so the coordinator's answers are
stubbed here; ``make chaos SINK=kafka TOPOLOGY=cluster`` checks the same against real failovers.
"""

from __future__ import annotations

from typing import Any

import pytest

from eosink.connectors.kafka import KafkaConfig, KafkaSink, _commit_side, _wire
from eosink.connectors.kafka._names import TxnName, app_tag
from eosink.connectors.kafka._progress import Marker
from eosink.contract import BatchRef, Bundle, Committable, Fingerprint
from eosink.errors import TransientError

BATCH = BatchRef("app", 7)
EPOCH = 5
PARTICIPANTS = ["app-p0", "app-p1"]


class _View:
    def refresh(self, *args: Any) -> None:
        return None

    def bundle(self, app_id: str, batch_id: int) -> None:
        return None


Answer = tuple[str, int]
"""What the coordinator says of a transactional id: its state and the producer epoch it is about."""


def _sink(monkeypatch: pytest.MonkeyPatch, answers: dict[str, list[Answer]]) -> tuple[KafkaSink, list[str]]:
    """A sink whose coordinator gives ``answers[txid]`` one by one to the questions about a participant's
    transaction (written with producer id 1, epoch 5), then ``CompleteCommit`` for it; the returned list records
    EndTxns, questions and the bundle's write."""
    events: list[str] = []
    sink = KafkaSink(KafkaConfig("127.0.0.1:9", topic="t"))
    monkeypatch.setattr(sink, "_admin", lambda *a: object())
    monkeypatch.setattr(sink, "_view", _View())
    monkeypatch.setattr(sink, "_check_epoch", lambda *a: None)
    monkeypatch.setattr(sink, "_write_bundle", lambda bundle: events.append("bundle"))
    monkeypatch.setattr(sink, "_settle", lambda app_id: None)
    monkeypatch.setattr(_commit_side, "_list_open", lambda admin, prefix: [])

    def end_txn(admin: Any, txid: str, pid: int, epoch: int, commit: bool, timeout_s: float) -> int:
        events.append(f"EndTxn {txid}" if commit else f"abort {txid}")
        return _wire.NONE

    def describe(admin: Any, txid: str) -> _wire.TxnState:
        events.append(f"asked {txid}")
        queue = answers.get(txid, [])
        state, epoch = queue.pop(0) if queue else ("CompleteCommit", EPOCH)
        return _wire.TxnState(state, 1 if txid in PARTICIPANTS else 2, epoch, 60_000, 0, frozenset())

    monkeypatch.setattr(_wire, "end_txn", end_txn)
    monkeypatch.setattr(_wire, "describe", describe)
    return sink, events


def _commit(sink: KafkaSink) -> None:
    committables = [
        Committable(BATCH, 1, i, f"c{i}", payload={"txid": txid, "producer_id": 1, "producer_epoch": EPOCH})
        for i, txid in enumerate(PARTICIPANTS)
    ]
    bundle = Bundle(BATCH, 1, Fingerprint(), tuple(c.id for c in committables))
    sink.commit(BATCH, committables, bundle)


@pytest.mark.parametrize(
    "before",
    [
        pytest.param([("PrepareCommit", EPOCH)] * 3, id="markers-pending"),
        pytest.param([("Ongoing", EPOCH), ("PrepareCommit", EPOCH)], id="stale-ongoing"),
        pytest.param([("CompleteCommit", EPOCH - 1), ("Empty", EPOCH - 1)], id="an-older-transaction"),
    ],
)
def test_the_bundle_is_written_once_every_participants_markers_are(
    monkeypatch: pytest.MonkeyPatch, before: list[Answer]
) -> None:
    """Pass: while the coordinator's answers about the second participant's transaction say its markers are not
    written (still PrepareCommit), or are not about it having completed (Ongoing with its epoch: a coordinator that
    no longer coordinates, resumed from a pause; CompleteCommit or Empty of the id's previous transaction), the
    bundle waits; it goes out only after CompleteCommit of that very transaction."""
    sink, events = _sink(monkeypatch, {"app-p1": list(before)})
    _commit(sink)
    assert events.index("bundle") > max(i for i, e in enumerate(events) if e == "asked app-p1")
    assert events.count("asked app-p1") == len(before) + 1 and events[-1] == "bundle", events


def test_an_id_that_moved_on_counts_as_completed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass: a newer epoch of the id (a later transaction began, which Kafka allows only once this one ended) is
    enough: the bundle goes out at the first answer."""
    sink, events = _sink(monkeypatch, {"app-p1": [("Ongoing", EPOCH + 1)]})
    _commit(sink)
    assert events.count("asked app-p1") == 1 and events[-1] == "bundle", events


def test_markers_still_pending_after_the_bound_are_a_transient_error_and_no_bundle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pass: markers that stay unwritten past the bound make the commit a TransientError naming the transaction
    (the coordinator retries it), and no bundle was written."""
    monkeypatch.setattr(_commit_side, "_SETTLE_S", 0.3)
    sink, events = _sink(monkeypatch, {"app-p0": [("PrepareCommit", EPOCH)] * 10**5})
    with pytest.raises(TransientError, match="app-p0"):
        _commit(sink)
    assert "bundle" not in events


LEFTOVER = TxnName(app_tag(BATCH.app_id), 0, "a0").txid(KafkaConfig("127.0.0.1:9").transactional_id_prefix)


def _leftover(monkeypatch: pytest.MonkeyPatch, sink: KafkaSink, batch_id: int, epoch: int, state: str = "begun") -> str:
    """An open data transaction of the app_id besides the batch's own: attempt a0 of participant 0, begun in
    ``batch_id`` under writer ``epoch`` (producer id 2, epoch 0)."""
    txid = LEFTOVER
    marker = Marker(txid, BATCH.app_id, batch_id, epoch, 0, "0", state, 0, 2, 0)
    state = _wire.TxnState("Ongoing", 2, 0, 60_000, 0, frozenset())
    monkeypatch.setattr(_commit_side, "_list_open", lambda admin, prefix: [PARTICIPANTS[0], txid])
    monkeypatch.setattr(sink, "_open_work", lambda app_id: [(marker, state)])
    return txid


def test_an_older_attempts_open_transaction_is_aborted_and_ended_before_the_bundle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pass: a failed attempt's transaction still open in the batch's partitions (it would hold back their last
    stable offset, and with it the batch's rows, until the broker's timeout) is aborted after the participants
    commit, and the bundle waits until its abort is complete."""
    sink, events = _sink(monkeypatch, {LEFTOVER: [("PrepareAbort", 0)] * 2 + [("CompleteAbort", 0)]})
    txid = _leftover(monkeypatch, sink, BATCH.batch_id, 1)
    _commit(sink)
    assert events.index(f"abort {txid}") > events.index(f"EndTxn {PARTICIPANTS[1]}"), events
    assert events.count(f"asked {txid}") == 3 and events[-1] == "bundle", events


@pytest.mark.parametrize("later", ["batch", "epoch"])
def test_a_later_batchs_or_newer_writers_open_transaction_is_left_alone(
    monkeypatch: pytest.MonkeyPatch, later: str
) -> None:
    """Pass: an open transaction that a later batch or a newer writer began is not this commit's to end."""
    sink, events = _sink(monkeypatch, {})
    txid = _leftover(monkeypatch, sink, BATCH.batch_id + (later == "batch"), 1 + (later == "epoch"))
    _commit(sink)
    assert f"abort {txid}" not in events and f"asked {txid}" not in events and events[-1] == "bundle", events


def test_a_prepared_attempt_is_left_to_the_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pass: a prepared attempt of the batch that is not among the committables (a straggler) stays prepared: the
    contract has the coordinator abort it through ``recover``, and a commit publishes exactly what it is given."""
    sink, events = _sink(monkeypatch, {})
    txid = _leftover(monkeypatch, sink, BATCH.batch_id, 1, state="prepared")
    _commit(sink)
    assert f"abort {txid}" not in events and f"asked {txid}" not in events and events[-1] == "bundle", events
