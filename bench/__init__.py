"""Benchmarks, one command each (`python -m bench.store`); results go to `docs/benchmarks.md`."""
