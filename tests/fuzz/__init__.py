"""Mutation fuzzing of the .pte/.ptd readers and the command line.

``python -m tests.fuzz --cases 20000`` runs the full suite (see
``docs/robustness.md``); ``tests/fuzz/test_fuzz.py`` runs a bounded part of it
in the default test run.  Every case is derived from ``(seed, index)`` alone,
so any failure can be replayed with ``--only INDEX``.
"""
