"""The ``mme`` command: the server, the demo, the benchmarks and the models they use.

``emulator`` is the server alone; this package depends on it (and on ``ensembles`` and
``harness``), never the other way round.
"""
