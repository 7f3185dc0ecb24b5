"""Speed and memory measurements (never timing assertions in tests): ``python -m benchmarks``."""
