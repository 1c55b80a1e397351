"""Child processes of the benchmark: each module does one measured job, run as ``python -m bench.children.NAME``.

A section starts them in their own process so that the wall time and peak RSS it reports are theirs alone
(bench/common.py ``run_child``).  Each module's functions are importable and typed, so
tests/test_bench_smoke.py runs them in-process at tiny size; ``main(argv)`` is the command line.
"""
