"""The reusable contract test suite for eosink sinks (a pytest plugin).

Its scenarios arrive with the contract-suite work; until then this package only reserves
the name ``eosink.contracts``.
"""

__all__: list[str] = []
