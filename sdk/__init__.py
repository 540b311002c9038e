"""eosink: end-to-end exactly-once writes from Spark Structured Streaming.

Usage::

    import eosink
    from eosink.connectors.reference import ReferenceSink

    writer = eosink.foreach_batch(ReferenceSink("ledger.db"), app_id="payments",
                                  strategy="2pc", checkpoint_location="/chk/payments")
    query = writer.start(df.writeStream)  # sets checkpointLocation, foreachBatch

The sink contract is :class:`eosink.Sink` (module :mod:`eosink.contract`); errors live in
:mod:`eosink.errors`.
"""

from eosink import errors, faults
from eosink.contract import (
    BatchRef,
    Bundle,
    Capabilities,
    CommitStatus,
    Committable,
    Fingerprint,
    Sink,
    TaskRef,
)
from eosink.coordinator import CommitPolicy, Coordinator, Stats
from eosink.fanout import FanOut
from eosink.spark import BatchWriter, FanOutWriter, foreach_batch
from eosink.strategies import Idempotent, Strategy, TwoPhaseCommit, TxidCheck

__version__ = "0.1.0"

__all__ = [
    "BatchRef",
    "BatchWriter",
    "Bundle",
    "Capabilities",
    "CommitPolicy",
    "CommitStatus",
    "Committable",
    "Coordinator",
    "FanOut",
    "FanOutWriter",
    "Fingerprint",
    "Idempotent",
    "Sink",
    "Stats",
    "Strategy",
    "TaskRef",
    "TwoPhaseCommit",
    "TxidCheck",
    "__version__",
    "errors",
    "faults",
    "foreach_batch",
]
