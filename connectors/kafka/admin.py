"""The Kafka sink's admin (:class:`~eosink.admin.SinkAdmin`): what ``eosink status`` and ``eosink recover`` read.

Everything comes from the brokers, read-only: the app_ids are those with a bundle or a
participant marker in the progress topic; an app_id's epoch is its fence producer's (asked of the
transaction coordinator); its in-doubt work is every open data transaction of its
transactional-id prefix (ListTransactions), with the broker's own clock: its age since the
transaction began and how long until the broker aborts it (``transaction_timeout_ms``).
"""

from __future__ import annotations

import time
from typing import Any

from eosink.admin import AppStatus, InDoubtWork, SinkAdmin, SinkStatus
from eosink.connectors.kafka._progress import read_markers
from eosink.connectors.kafka.config import KafkaConfig
from eosink.connectors.kafka.sink import KafkaSink
from eosink.contract import Bundle

__all__ = ["KafkaAdmin"]


class KafkaAdmin(SinkAdmin):
    """One Kafka sink configuration (brokers, topic, progress topic, transactional-id prefix)."""

    def __init__(self, config: KafkaConfig) -> None:
        self.config = config

    def __repr__(self) -> str:
        return f"KafkaAdmin({self.config!r})"

    def describe(self) -> str:
        return (
            f"progress topic {self.config.progress_topic!r}, transactional ids {self.config.transactional_id_prefix}.*"
            f" on {self.config.bootstrap_servers}"
        )

    def make_sink(self) -> KafkaSink:
        return KafkaSink(self.config)

    def status(self, app_id: str | None = None) -> SinkStatus:
        sink = self.make_sink()
        try:
            return self._status(sink, app_id)
        finally:
            sink.close()

    def _status(self, sink: KafkaSink, app_id: str | None) -> SinkStatus:
        where = f"progress topic {self.config.progress_topic!r}"
        with sink._errors("reading the sink's status"):
            admin = sink._admin()
            if self.config.progress_topic not in set(admin.list_topics()):
                if app_id is not None:
                    raise _unknown(app_id)
                return SinkStatus("kafka", where, False)
            sink._view.refresh(admin)
            open_markers, done_markers = read_markers(admin, self.config.progress_topic)
            known = set(sink._view.app_ids())
            known.update(m.app_id for m in done_markers)
            known.update(m.app_id for ms in open_markers.values() for m in ms)
            if app_id is not None:
                if app_id not in known and sink.current_epoch(app_id) == 0:  # never fenced either
                    raise _unknown(app_id)
                known = {app_id}
            apps = tuple(_app(sink, a) for a in sorted(known))
            return SinkStatus("kafka", where, True, apps, notes=(self._prepared_note(admin),))

    def _prepared_note(self, admin: Any) -> str:
        """How long the brokers keep a prepared batch (two-phase commit) waiting for its commit."""
        from eosink.connectors.kafka._two_phase import keeps_prepared

        if keeps_prepared(admin, self.config.bootstrap_servers, refresh=True):
            return "prepared batches: kept by the brokers until committed (two-phase commit, KIP-939)"
        timeout = self.config.transaction_timeout_ms
        return f"prepared batches: aborted by the brokers after transaction_timeout_ms={timeout} (no KIP-939 there)"

    def bundles(self, app_id: str) -> list[Bundle]:
        """The app_id's bundles kept in the progress topic (the newest 1000), oldest batch first."""
        sink = self.make_sink()
        try:
            with sink._errors("reading the app's bundles"):
                admin = sink._admin()
                if self.config.progress_topic not in set(admin.list_topics()):
                    return []
                sink._view.refresh(admin)
                return sink._view.bundles(app_id)
        finally:
            sink.close()

    def transactional_ids(self, app_id: str) -> list[str]:
        """Every transactional id of ``app_id`` the brokers' transaction coordinators remember, in any state:
        its fence and bundles ids and its participants' pool (at most participants x attempt slots + 2)."""
        import re

        from eosink.connectors.kafka._names import app_txid_prefix

        prefix = app_txid_prefix(self.config.transactional_id_prefix, app_id)
        sink = self.make_sink()
        try:
            with sink._errors("listing the app's transactional ids"):
                listed = sink._admin().list_transactions(transactional_id_pattern=re.escape(prefix) + ".*")
        finally:
            sink.close()
        found = {t.transactional_id for ts in listed.values() for t in ts}
        return sorted(i for i in found if i.startswith(prefix))

    def drop_app(self, app_id: str) -> None:
        """Abort the app_id's in-doubt transactions (its bundles and data stay in the topics' logs)."""
        sink = self.make_sink()
        try:
            sink.abort(sink.recover(app_id))
        finally:
            sink.close()

    def scrub(self, text: str) -> str:
        return self.config.scrub(text)


def _unknown(app_id: str) -> Exception:
    from eosink.errors import ConfigurationError

    return ConfigurationError(
        f"The sink knows no app_id {app_id!r}: it was never fenced, and has no bundle in the progress topic.",
        "Check --app-id, --progress-topic and --bootstrap-servers; `eosink status --sink kafka` lists the app_ids.",
    )


def _app(sink: KafkaSink, app_id: str) -> AppStatus:
    last = sink._view.last(app_id)
    now_ms = time.time() * 1000
    work: list[InDoubtWork] = []
    for marker, state in sink._open_work(app_id):
        age_s = max(0.0, (now_ms - state.start_ms) / 1000) if state.start_ms > 0 else 0.0
        expires = max(0.0, state.timeout_ms / 1000 - age_s) if state.start_ms > 0 else None
        details: dict[str, Any] = {"state": state.state, "producer": f"{state.producer_id}.{state.producer_epoch}"}
        work.append(
            InDoubtWork(
                "prepared" if marker is not None and marker.state == "prepared" else "open",
                _txid(marker, state),
                None if marker is None else marker.batch_id,
                None if marker is None else marker.participant,
                None if marker is None else marker.epoch,
                age_s,
                None if marker is None else marker.rows,
                expires,
                {k: str(v) for k, v in details.items()},
            )
        )
    return AppStatus(
        app_id,
        sink.current_epoch(app_id),
        None if last is None else last.batch.batch_id,
        None if last is None else last.fingerprint.rows,
        None,
        None if last is None else last.strategy,
        None if last is None else last.checkpoint_id,
        tuple(work),
    )


def _txid(marker: Any, state: Any) -> str:
    return str(marker.txid) if marker is not None else f"producer {state.producer_id}.{state.producer_epoch}"
