"""Condition types the functions and the runtime set, and their reasons.

Crossplane owns `Ready` and `Synced` on an XR; everything else a person reads in
`kubectl describe` is one of these.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

# compose-serving-stack
STACK_READY: Final = "StackReady"
COLLECTOR_READY: Final = "CollectorReady"

# compose-model-deployment
REPLICAS_SCHEDULED: Final = "ReplicasScheduled"
REPLICAS_READY: Final = "ReplicasReady"
PARKED: Final = "Parked"

# compose-model-replica
WORKLOAD_READY: Final = "WorkloadReady"
SERVING: Final = "Serving"

# compose-telemetry
CONFLICT: Final = "Conflict"
GATEWAY_READY: Final = "GatewayReady"
MAPPING_VALID: Final = "MappingValid"

# Every function: what it was given and whether it could act on it.
COMPOSED: Final = "Composed"

REASON_NOT_IMPLEMENTED: Final = "NotImplemented"
REASON_INVALID_INPUT: Final = "InvalidInput"

# compose-serving-stack: whether every MetricMapping made it into the collector.
MAPPINGS_ACCEPTED: Final = "MappingsAccepted"


# --- The one encoding -------------------------------------------------------------------

TRUE: Final = "True"
FALSE: Final = "False"
UNKNOWN: Final = "Unknown"
READY: Final = "Ready"  # Crossplane's and Kubernetes' own: read, never set, by us


def truth(value: bool | None) -> str:
    """A condition status as Kubernetes writes it: None (not known yet) is Unknown."""
    return UNKNOWN if value is None else (TRUE if value else FALSE)


@dataclass(frozen=True)
class Condition:
    """A condition as pure code decides it; the shell writes it (sdk.set_conditions)."""

    type: str
    status: str  # TRUE, FALSE or UNKNOWN
    reason: str
    message: str


@dataclass(frozen=True)
class Event:
    """A result a person reads in `kubectl describe`, as pure code decides it: a warning
    or a normal event; the shell emits it (sdk.emit)."""

    warning: bool
    message: str


def condition_status(obj: Mapping[str, Any] | None, condition_type: str) -> str | None:
    """The status of an object's first condition of this type; None when it has none."""
    for condition in ((obj or {}).get("status") or {}).get("conditions") or []:
        if condition.get("type") == condition_type:
            return condition.get("status")
    return None


def is_ready(obj: Mapping[str, Any] | None) -> bool:
    """Whether an object (a composed resource, a pod, a node) says Ready=True."""
    return condition_status(obj, READY) == TRUE
