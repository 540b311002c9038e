"""Writer epochs across a producer epoch roll-over.

The writer epoch is the fence id's producer id and epoch (``1 + (producer id << 16 | epoch)``).
A producer epoch is 16 bits: at 32767 the transaction coordinator gives the id a new producer
id with epoch 0. The fence id gets there first (``format("eosink")`` fences at every batch), so
this drives it there: raw ``InitProducerId`` requests bump it to a few fences short of the
limit, then writers restart batch after batch across the roll-over. Their epochs must keep
rising, a writer from before the roll-over must be fenced after it, and every row must land once.
"""

from __future__ import annotations

import itertools
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eosink.connectors.kafka import KafkaSink, _wire
from eosink.connectors.kafka._names import fence_txid
from eosink.connectors.kafka.testing import KafkaHarness, read_topic
from eosink.contract import BatchRef, TaskRef
from eosink.contracts.harness import Namespace
from eosink.errors import FencedError

from .conftest import HARNESS
from .test_kafka_bad_input import APP, TWO_PC, Driver, batches, expected

pytestmark = pytest.mark.full

EPOCH_LIMIT = 32_767
"""The last producer epoch before the coordinator moves a transactional id to a new producer id."""


@pytest.fixture
def ns(tmp_path: Path) -> Iterator[Namespace]:
    made = Namespace(f"epoch{uuid.uuid4().hex[:8]}", tmp_path / "ns")
    yield made
    HARNESS.cleanup(made)


def _bump(admin: Any, txid: str, times: int) -> tuple[int, int]:
    """Initialise ``txid`` ``times`` times (each bumps its producer epoch); its last producer id and epoch."""
    from kafka.protocol.metadata import CoordinatorType
    from kafka.protocol.producer.transaction import InitProducerIdRequest

    async def run() -> tuple[int, int]:
        node = await admin._find_coordinator_id(txid, key_type=CoordinatorType.TRANSACTION)
        pid = epoch = -1
        for _ in range(times):
            request = InitProducerIdRequest(
                transactional_id=txid, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1, max_version=4
            )
            response = await admin._manager.send(request, node_id=node)
            assert response.error_code == 0, f"InitProducerId of {txid} answered {response.error_code}"
            pid, epoch = int(response.producer_id), int(response.producer_epoch)
        return pid, epoch

    result: tuple[int, int] = admin._manager.run(run)
    return result


def test_writer_epochs_keep_rising_across_a_producer_epoch_roll_over(tmp_path: Path, ns: Namespace) -> None:
    HARNESS.create_topics(ns)
    config = HARNESS.config(ns)
    work = batches(8)
    driver = Driver(tmp_path, TWO_PC, config)
    driver.run(work[:1])
    sink = driver.coordinator.sink
    assert isinstance(sink, KafkaSink)
    txid = fence_txid(config.transactional_id_prefix, APP)
    state = _wire.describe(HARNESS.admin(), txid)
    assert state is not None
    pid, epoch = _bump(HARNESS.admin(), txid, EPOCH_LIMIT - 3 - state.producer_epoch)
    assert (pid, epoch) == (state.producer_id, EPOCH_LIMIT - 3)

    epochs = [sink.current_epoch(APP)]
    ids = [(pid, epoch)]
    zombie: KafkaSink | None = None
    for b in range(1, len(work)):
        driver.restart()  # a new writer: it fences (bumps the fence id) before batch b
        driver.run(work[: b + 1])
        state = _wire.describe(HARNESS.admin(), txid)
        assert state is not None
        ids.append((state.producer_id, state.producer_epoch))
        epochs.append(driver.coordinator.sink.current_epoch(APP))  # type: ignore[attr-defined]
        if zombie is None and state.producer_id == pid:
            zombie = KafkaSink(config)  # holds the epoch of a writer from before the roll-over
            zombie_epoch = epochs[-1]
    assert any(p != pid for p, _ in ids), f"the fence id rolled over to a new producer id: {ids}"
    assert all(e < later for e, later in itertools.pairwise(epochs)), f"writer epochs rise: {epochs}"
    assert zombie is not None
    task = TaskRef(BatchRef(APP, 99), zombie_epoch, 0, "zombie-attempt", None, True, "2pc")
    with pytest.raises(FencedError):
        zombie.begin(task)
    zombie.close()
    driver.close()
    records = read_topic(HARNESS.admin(), HARNESS.topic(ns), KafkaHarness.partitions)
    seen = Counter(json.dumps(json.loads(r.value), sort_keys=True) for r in records if r.value is not None)
    assert seen == expected(work), "every row of every batch once, across the roll-over"
