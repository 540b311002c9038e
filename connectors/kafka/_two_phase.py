"""Prepared transactions the broker keeps until they are ended (KIP-939), where the brokers allow them.

A transaction of a producer initialised with ``InitProducerId`` v6 and ``Enable2Pc`` is exempt
from ``transaction.timeout.ms``: the broker keeps it open until an ``EndTxn`` (or a new
initialisation of its id) ends it. Under two-phase commit that removes the one way a prepared
batch can be lost: a driver down for longer than the timeout.

The brokers allow it when they advertise ``InitProducerId`` v6 (Kafka 4.3 lists the version as
unstable: only brokers with ``unstable.api.versions.enable=true`` advertise it) and have
``transaction.two.phase.commit.enable=true``; with ACLs on, the writer also needs the
``TWO_PHASE_COMMIT`` operation on its transactional ids. :func:`keeps_prepared` asks the brokers
(once per process and cluster); participants of two-phase commit then initialise their producers
with ``Enable2Pc``, and everything else is as before. A broker that refuses it anyway (a missing
ACL) is logged and the producer initialised the usual way. ``KeepPreparedTxn`` is never used:
the coordinator ends transactions with ``EndTxn`` by producer id and epoch.

kafka-python 3.0 builds ``InitProducerId`` inside its transaction manager; :func:`initialise`
swaps in the v6 request for the one producer that asks for it.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from eosink.connectors.kafka import _wire

__all__ = ["initialise", "keeps_prepared"]

log = logging.getLogger("eosink.kafka")

_LOCK = threading.Lock()
_KNOWN: dict[str, bool] = {}
"""Per bootstrap servers: whether the brokers keep prepared transactions."""
_SETTING = "transaction.two.phase.commit.enable"


def keeps_prepared(admin: Any, bootstrap: object, *, refresh: bool = False) -> bool:
    """Whether the brokers at ``bootstrap`` keep a prepared transaction past its timeout (KIP-939)."""
    key = str(bootstrap)
    with _LOCK:
        if not refresh and key in _KNOWN:
            return _KNOWN[key]
    found = _ask(admin)
    with _LOCK:
        _KNOWN[key] = found
    return found


def _ask(admin: Any) -> bool:
    from kafka.protocol.api_key import ApiKey

    try:
        versions = admin.api_versions().get(ApiKey.InitProducerId)
        if versions is None or versions[1] < 6:
            return False
        answers = [(value or "").lower() for value in _wire.broker_settings(admin, _SETTING)]
        return bool(answers) and all(value == "true" for value in answers)
    except Exception as exc:  # not allowed to ask (no DescribeConfigs ACL), an old broker: the usual way
        log.debug("eosink: asking the brokers about two-phase commit: %s", exc)
        return False


def initialise(producer: Any, two_phase: bool) -> bool:
    """``producer.init_transactions()``, with ``Enable2Pc`` when ``two_phase``; whether the broker took it.

    A refusal of ``Enable2Pc`` (the writer lacks the ``TWO_PHASE_COMMIT`` ACL) leaves ``producer``
    unusable: the caller opens another and initialises it the usual way.
    """
    if not two_phase:
        producer.init_transactions()
        return False
    _install()
    manager = producer._transaction_manager
    with _LOCK:
        _TWO_PHASE.add(id(manager))
    try:
        producer.init_transactions()
    finally:
        with _LOCK:
            _TWO_PHASE.discard(id(manager))
    return True


_TWO_PHASE: set[int] = set()
"""Transaction managers (by id) whose next InitProducerId asks for two-phase commit."""
_INSTALLED = False


def _install() -> None:
    """Make kafka-python's InitProducerId handler send v6 with Enable2Pc for the managers in ``_TWO_PHASE``."""
    global _INSTALLED
    with _LOCK:
        if _INSTALLED:
            return
        from kafka.producer import transaction_manager as tm
        from kafka.protocol.producer.transaction import InitProducerIdRequest

        original = tm.InitProducerIdHandler.__init__

        def init(self: Any, transaction_manager: Any, transaction_timeout_ms: int, is_epoch_bump: bool = False) -> None:
            original(self, transaction_manager, transaction_timeout_ms, is_epoch_bump)
            if not is_epoch_bump and id(transaction_manager) in _TWO_PHASE:
                self.request = InitProducerIdRequest(
                    transactional_id=self.request.transactional_id,
                    transaction_timeout_ms=transaction_timeout_ms,
                    producer_id=-1,
                    producer_epoch=-1,
                    enable2_pc=True,
                    keep_prepared_txn=False,
                    min_version=6,
                    max_version=6,
                )

        tm.InitProducerIdHandler.__init__ = init
        _INSTALLED = True
