"""How many examples each fuzz test runs, and the settings they share.

The CI default stays fast (30 per test). A longer run — the benchmark-like job the
issue asks for — sets MODELPLANE_FUZZ_EXAMPLES (`make fuzz-long` sets 200); the older
FUZZ_EXAMPLES is read too. Runs are derandomized: the same count finds the same inputs.
"""

from __future__ import annotations

import os
from typing import Final

from hypothesis import HealthCheck, settings

DEFAULT_EXAMPLES: Final = 30


def examples_per_test() -> int:
    value = os.environ.get("MODELPLANE_FUZZ_EXAMPLES") or os.environ.get("FUZZ_EXAMPLES")
    return int(value) if value else DEFAULT_EXAMPLES


EXAMPLES_PER_TEST: Final = examples_per_test()
FUZZ: Final = settings(
    max_examples=EXAMPLES_PER_TEST,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
