"""Performance benchmarks of issue 5 (scripts, not tests): ``python -m bench``; results in bench/RESULTS.md."""
