"""``eosink chaos``: the end-to-end chaos harness, real Spark jobs under seeded faults, checked against an oracle.

* :mod:`eosink.chaos.cli`: ``eosink chaos`` (``make chaos``);
* :mod:`eosink.chaos.schedule`: the seeded schedules of faults;
* :mod:`eosink.chaos.job`: the Spark job the harness runs, kills and restarts;
* :mod:`eosink.chaos.runner`: running the schedules (a pool of workers, each against a private server);
* :mod:`eosink.chaos.oracle`, :mod:`eosink.chaos.reader`: what the sink must hold, and a concurrent reader;
* :mod:`eosink.chaos.target`: what a sink offers the harness (its profile's ``chaos_target``);
* :mod:`eosink.chaos.results`, :mod:`eosink.chaos.journal`, :mod:`eosink.chaos.report`: each schedule's
  result, the journal a run resumes from, the report (``results/chaos-<sink>.json``) and its table.
"""
