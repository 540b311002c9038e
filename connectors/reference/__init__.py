"""The reference connector: the whole sink contract on one SQLite file."""

from eosink.connectors.reference.sink import ReferenceSink

__all__ = ["ReferenceSink"]
