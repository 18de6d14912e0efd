"""Go-style durations (`1m30s`, `500ms`, `2h`) as the CRDs' patterns accept them.

Shared because a ModelDeployment's onDemand times are read by compose-model-deployment
and the on-demand activator, and the AdaptivePolicy's by the runtime.
"""

from __future__ import annotations

import re
from typing import Final

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ms|s|m|h)")
_DURATION_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go-style duration (`1m30s`, `500ms`, `2h`); the CRD's pattern, no sign."""
    if not isinstance(text, str) or not text:
        raise ValueError(f"duration {text!r}: expected e.g. 30s, 2m, 1h30m")
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(text):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if position != len(text):
        raise ValueError(f"duration {text!r}: expected e.g. 30s, 2m, 1h30m")
    return total
