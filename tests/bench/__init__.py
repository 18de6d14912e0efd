"""Benchmarks: scripts that print tables (bench_*.py is never collected by pytest)."""

from __future__ import annotations

import signal


def unwind_on_sigterm() -> None:
    """A bench's SIGTERM (`timeout`, a cancelled CI job) unwinds like an exception, so
    the context managers and `finally` blocks that stop what it started still run. The
    collectors and function servers the benches start run in sessions of their own,
    which a signal to the bench does not reach: without this they outlive it and load
    every later measurement. Call first thing in a bench's main()."""

    def unwind(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, unwind)
