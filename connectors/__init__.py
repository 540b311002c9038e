"""Connectors: implementations of the eosink sink contract, one folder each."""

__all__: list[str] = []
