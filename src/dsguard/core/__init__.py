"""The pure core: failure kinds, the classifier, rungs, the ladder, remedies, config rendering,
preflight, the ledger and its transitions.

Nothing here touches processes, files, clocks or the network, so every decision can be tested
with plain values and replayed from ``events.jsonl``. It imports only :mod:`dsguard.job`, the
pure leaves (``errors``), the standard library and ``msgspec`` (typed records, no I/O);
effectful units import the core, never the reverse (``tests/test_architecture.py``).
"""
