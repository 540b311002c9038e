"""The connector's own Kafka requests ride out the broker's transient answers."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from eosink.connectors.kafka import _wire


class _Manager:
    """Answers each Fetch with the next error code of ``codes`` (0: an empty, healthy partition)."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.sent = 0

    def run(self, _coroutine: Any, *_args: Any) -> Any:
        code = self.codes[min(self.sent, len(self.codes) - 1)]
        self.sent += 1
        part = SimpleNamespace(error_code=code, records=b"", high_watermark=0, last_stable_offset=0)
        return SimpleNamespace(responses=[SimpleNamespace(partitions=[part])])


def _admin(codes: list[int]) -> Any:
    return SimpleNamespace(_manager=_Manager(codes))


@pytest.mark.parametrize("code", [3, 5, 6])
def test_a_fetch_answered_not_leader_or_unknown_is_asked_again(code: int) -> None:
    # Right after the progress topic is created, its leader may not serve it yet (CI saw code 6).
    admin = _admin([code, code, 0])
    found = _wire.read_log(admin, "progress", 0)
    assert found.committed == () and found.high_watermark == 0
    assert admin._manager.sent == 3


def test_a_fetch_error_that_is_not_retriable_raises_at_once() -> None:
    from kafka.errors import TopicAuthorizationFailedError

    admin = _admin([TopicAuthorizationFailedError.errno])
    with pytest.raises(TopicAuthorizationFailedError):
        _wire.read_log(admin, "progress", 0)
    assert admin._manager.sent == 1


def test_a_retriable_fetch_error_that_persists_raises_after_the_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    from kafka.errors import NotLeaderForPartitionError

    monkeypatch.setattr(_wire, "_FETCH_RETRY_S", 0.2)
    admin = _admin([NotLeaderForPartitionError.errno])
    with pytest.raises(NotLeaderForPartitionError):
        _wire.read_log(admin, "progress", 0)
    assert admin._manager.sent > 1


class _Describer:
    """Describes one topic with the next error code of ``codes`` (2 partitions once 0)."""

    def __init__(self, codes: list[int]) -> None:
        self.codes = codes
        self.asked = 0

    def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        code = self.codes[min(self.asked, len(self.codes) - 1)]
        self.asked += 1
        return [{"name": topics[0], "error_code": code, "partitions": [] if code else [{}, {}]}]


def test_a_topic_just_created_is_described_again_until_its_leader_serves_it() -> None:
    from eosink.connectors.kafka import _progress

    admin = _Describer([5, 3, 0])
    assert _progress._partitions(admin, "progress", created=True) == 2
    assert admin.asked == 3
    # Before creating it, "unknown" means it does not exist: no waiting.
    absent = _Describer([3])
    assert _progress._partitions(absent, "progress") is None and absent.asked == 1
