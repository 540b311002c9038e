"""The Kafka sink on a three-node cluster (:class:`~eosink.services.kafka_cluster.KafkaCluster`): requests delayed
past their timeout, arriving after the sink moved on.

KAFKA-17754's shape: under the classic transaction protocol (EndTxn <= v3, what eosink sends) a producer keeps
its id and epoch across transactions, so an EndTxn delayed in the network can end a *later* transaction of the
same producer. eosink's answer (docs/design.md): a data transaction's id is initialised again (a new epoch)
at every ``begin``, and the bundle producer is replaced after any EndTxn whose reply did not come; a stale
EndTxn then carries an old epoch and is refused. These tests hold the commit's EndTxn at the coordinator's
proxy for longer than the client waits, let the batches go on, and check every batch once when it lands.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from eosink.connectors.kafka import KafkaConfig, _wire
from eosink.connectors.kafka._names import COMMIT_REQUEST
from eosink.connectors.kafka.admin import KafkaAdmin
from eosink.connectors.kafka.testing import read_topic
from eosink.contracts._mini import VARIANTS
from eosink.errors import EosinkError
from eosink.services.kafka_cluster import KafkaCluster, kafka_request
from eosink.services.proxy import RequestMatch

from .test_kafka_bad_input import APP, Driver, batches, expected

pytestmark = [pytest.mark.full, pytest.mark.timeout(600)]

HOLD_S = 12.0
REQUEST_TIMEOUT_MS = 4000
"""The sink's clients give up on a request after 4 s: a held EndTxn is past its timeout for 8 s more."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    with KafkaCluster(Path(tmp_path_factory.mktemp("kafka-cluster")), txn_state_partitions=1) as c:
        yield c


def _visible(cluster: KafkaCluster, topic: str) -> Counter[str]:
    import json

    admin = cluster.admin()
    try:
        records = read_topic(admin, topic, 2)
    finally:
        admin.close()
    return Counter(json.dumps(json.loads(r.value), sort_keys=True) for r in records if r.value is not None)


@pytest.mark.parametrize("variant", [v for v in VARIANTS if v.id in ("2pc", "txid-check")], ids=lambda v: v.id)
@pytest.mark.parametrize(
    ("held", "match"),
    [("bundle EndTxn", COMMIT_REQUEST), ("first EndTxn", kafka_request("EndTxn"))],
    ids=["bundle", "participant"],
)
def test_an_end_txn_delayed_past_its_timeout_cannot_end_a_later_transaction(
    tmp_path: Path, cluster: KafkaCluster, variant: object, held: str, match: RequestMatch
) -> None:
    """Batch 1's commit has its EndTxn (the bundle's, or the first participant's) held at the coordinator for 12 s;
    the client gives up after 4 s, the query retries (restarting if it stopped), and batches 2 to 4 go on, reusing
    the same transactional ids. Pass: every batch was done while the request was still held, and it was delivered
    after; every
    row is visible once, each batch's bundle once, and no transaction of the app is left open."""
    topic = f"kc_{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions=2)
    config = KafkaConfig(
        cluster.bootstrap_servers,
        topic=topic,
        value_format="json",
        progress_topic=f"{topic}_progress",
        transactional_id_prefix=topic,
        producer_options={"request_timeout_ms": REQUEST_TIMEOUT_MS},
    )
    proxy = cluster.proxy(cluster.coordinator())
    work = batches(5)
    driver = Driver(tmp_path, variant, config)  # type: ignore[arg-type]
    try:
        driver.run(work[:1])  # the fence and a first batch, on a cluster that just made the topic
        proxy.hold_request(match, HOLD_S)
        for _ in range(3):  # a stopped query is started again, as Spark's restart would
            try:
                driver.run(work)
                break
            except EosinkError:
                driver.restart()
        else:
            pytest.fail("the query did not get past the held EndTxn in 3 starts")
        assert proxy.stats.holding == 1, "every batch waited for the held EndTxn: nothing went on past it"
        assert proxy.wait_for_held(HOLD_S + 30), f"the {held} was never delivered"
        driver.run(work)  # after the late EndTxn: nothing left to do, nothing changed
    finally:
        proxy.passthrough()
        driver.close()
    assert _visible(cluster, topic) == expected(work)
    kafka_admin = KafkaAdmin(config)
    bundles = [b.batch.batch_id for b in kafka_admin.bundles(APP)]
    assert bundles == [0, 1, 2, 3, 4]
    admin = cluster.admin()
    try:
        open_txns = [
            t.transactional_id
            for ts in admin.list_transactions().values()
            for t in ts
            if t.transactional_id.startswith(topic)
            and getattr(_wire.describe(admin, t.transactional_id), "state", None) in ("Ongoing", "PrepareCommit")
        ]
    finally:
        admin.close()
    assert not open_txns, f"transactions left open: {open_txns}"
