"""Prepared transactions the broker keeps (KIP-939): a 2pc batch outlives the transaction timeout.

Two private brokers with ``transaction.max.timeout.ms`` of 5 s, one allowing two-phase commit
(``transaction.two.phase.commit.enable`` and, on Kafka 4.3, the unstable ``InitProducerId`` v6 it
needs) and one not. The driver stops after Spark's commit log holds batch 1 and before it
commits batch 1's transactions, and stays down for three times the brokers' longest transaction.
Where two-phase commit is allowed the transactions are still open at the end, and the restarted
driver commits the batch: every row once. Where it is not, the broker aborted them, and the
restart stops with ``PreparedWorkLostError`` (what two-phase commit removes).
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosink._waiting import wait_until
from eosink.connectors.kafka import KafkaConfig, _wire
from eosink.connectors.kafka.admin import KafkaAdmin
from eosink.connectors.kafka.testing import read_topic
from eosink.errors import PreparedWorkLostError
from eosink.services.kafka import KafkaServer

from .test_kafka_bad_input import APP, TWO_PC, Driver, batches, expected

pytestmark = pytest.mark.full

MAX_TIMEOUT_MS = 5_000
TWO_PHASE = {"transaction.two.phase.commit.enable": "true", "unstable.api.versions.enable": "true"}


@pytest.fixture(params=["two-phase", "classic"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    settings = {"transaction.max.timeout.ms": str(MAX_TIMEOUT_MS)}
    if request.param == "two-phase":
        settings |= TWO_PHASE
    server = KafkaServer(tmp_path / "kafka", settings=settings)
    try:
        yield request.param, server.start().bootstrap_servers
    finally:
        server.close()


def test_a_prepared_batch_outlives_the_transaction_timeout_where_the_broker_keeps_it(
    tmp_path: Path, broker: tuple[str, str]
) -> None:
    mode, bootstrap = broker
    topic = f"kip939_{uuid.uuid4().hex[:6]}"
    config = KafkaConfig(
        bootstrap, topic=topic, value_format="json", create_topic=True, topic_partitions=2,
        transaction_timeout_ms=MAX_TIMEOUT_MS,
    )  # fmt: skip
    work = batches(3)
    driver = Driver(tmp_path, TWO_PC, config)
    driver.run(work[:1])
    driver.ckpt.write_offsets(1)
    driver.coordinator.process(1, work[1])
    driver.ckpt.write_commit(1)  # Spark's commit log holds batch 1; the driver dies before committing it
    driver.restart()
    admin = driver.coordinator.sink._admin()  # type: ignore[attr-defined]
    open_txids = [t.transactional_id for ts in admin.list_transactions().values() for t in ts]
    prepared = [i for i in open_txids if ".p" in i and (s := _wire.describe(admin, i)) and s.state == "Ongoing"]
    assert len(prepared) == 2, f"batch 1's two participants' transactions are open: {open_txids}"

    # The driver stays down for 3x the longest transaction the brokers allow (the time is what is tested):
    # the transactions' states are watched meanwhile; an abort ends the watch early.
    aborted = {"PrepareAbort", "CompleteAbort"}
    states: dict[str, str | None] = {}

    def ended() -> bool:
        states.update({i: getattr(_wire.describe(admin, i), "state", None) for i in prepared})
        assert set(states.values()) <= {"Ongoing"} | aborted, states
        return set(states.values()) <= aborted

    wait_until(ended, 3 * MAX_TIMEOUT_MS / 1000 + 2, max_interval_s=0.5)
    notes = KafkaAdmin(config).status(APP).notes
    if mode == "classic":
        assert set(states.values()) <= {"PrepareAbort", "CompleteAbort"}, states
        assert "aborted by the brokers" in notes[0]
        with pytest.raises(PreparedWorkLostError):
            driver.run(work)
        return
    assert set(states.values()) == {"Ongoing"}, f"the brokers kept batch 1's transactions open: {states}"
    assert "kept by the brokers until committed" in notes[0]
    driver.run(work)
    driver.close()
    records = read_topic(admin, topic, 2)
    seen = Counter(json.dumps(json.loads(r.value), sort_keys=True) for r in records if r.value is not None)
    assert seen == expected(work), "every row of the three batches once"
