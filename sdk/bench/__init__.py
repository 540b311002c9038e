"""``eosink bench``: eosink's strategies against Spark's built-in writers on the same data, one report.

* :mod:`eosink.bench.cli`: ``eosink bench`` (``make bench``), the order of the runs;
* :mod:`eosink.bench.runs`: what is run and measured, and the sink adapter protocol a connector implements;
* :mod:`eosink.bench.datasets`: the seeded data sets (Parquet, cached);
* :mod:`eosink.bench.job`, :mod:`eosink.bench.runner`: one run, one fresh driver process;
* :mod:`eosink.bench.session`, :mod:`eosink.bench.stream`: the driver's Spark side, throughput and latency;
* :mod:`eosink.bench.report`: ratios, targets, ``results/bench-<sink>.*`` and ``docs/benchmarks.md``.
"""
