"""Benchmarks: scripts that print tables (bench_*.py is never collected by pytest)."""
