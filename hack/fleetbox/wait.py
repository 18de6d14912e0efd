"""Waiting for the box's parts, and reading what a resource's conditions say.

Every wait polls a check until it returns something truthy and, when time runs out,
raises FleetBoxError with the check's last answer or error: that is what says why.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from functions.common.conditions import TRUE, condition_status

WAIT_SECONDS = 120.0
POLL_SECONDS = 0.25


class FleetBoxError(RuntimeError):
    """The box could not start a part, or a part did not become ready in time."""


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_SECONDS) -> Any:
    """Poll `check` until it returns something truthy; the last error says why not."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except Exception as error:
            last = error
        else:
            if result:
                return result
            last = result
        time.sleep(POLL_SECONDS)
    raise FleetBoxError(f"{what}: not within {timeout:.0f}s (last: {last!r})")


def conditions(resource: dict) -> dict[str, dict]:
    return {c["type"]: c for c in resource.get("status", {}).get("conditions", [])}


def is_true(resource: dict, condition: str) -> bool:
    return condition_status(resource, condition) == TRUE


__all__ = ["FleetBoxError", "conditions", "is_true", "wait_for"]
