"""CPU and memory for every container the suite composes on a member, in one place.

Each entry is the container's `resources` (requests and limits for both CPU and memory).
docs/operating.md ("What the runtime costs") states the same figures and how they grow;
tests/render/test_sizing.py holds every composed container to having both.

Engine containers are not here: what an engine needs is the model's (its template and
profile say it), and a GPU engine's memory depends on the model, so the suite composes
exactly what the user wrote and invents no limit for it.
"""

from __future__ import annotations

from typing import Any, Final

from functions.common.contracts import COLLECTOR_MEMORY_LIMIT


def _resources(cpu: str, memory: str, cpu_limit: str, memory_limit: str) -> dict[str, Any]:
    return {
        "requests": {"cpu": cpu, "memory": memory},
        "limits": {"cpu": cpu_limit, "memory": memory_limit},
    }


def resources(component: str) -> dict[str, Any]:
    """A fresh copy of `component`'s resources (callers may merge into it)."""
    return {k: dict(v) for k, v in SIZES[component].items()}


# The runtime (one Python process each). The agent holds every AdaptivePolicy copy, one
# client per peer and the signal windows: it grows with models and peers (operating.md).
AGENT: Final = "agent"
SCALER: Final = "scaler"
ACTIVATOR: Final = "activator"
# Around the engines: the endpoint picker (Gateway API Inference Extension), the
# prefill/decode routing sidecar, the substrate's CRD apply Job, a ModelCache's download.
PICKER: Final = "picker"
ROUTING_SIDECAR: Final = "routing-sidecar"
CRD_APPLY: Final = "crd-apply"
DOWNLOAD: Final = "download"
# The collectors: the memory limit is the one their memory_limiter is set from
# (contracts.COLLECTOR_MEMORY_LIMIT).
COLLECTOR: Final = "collector"

SIZES: Final[dict[str, dict[str, Any]]] = {
    AGENT: _resources("100m", "256Mi", "1", "512Mi"),
    SCALER: _resources("50m", "128Mi", "500m", "256Mi"),
    ACTIVATOR: _resources("50m", "128Mi", "1", "256Mi"),
    PICKER: _resources("100m", "128Mi", "1", "512Mi"),
    ROUTING_SIDECAR: _resources("50m", "64Mi", "1", "256Mi"),
    CRD_APPLY: _resources("50m", "64Mi", "500m", "256Mi"),
    DOWNLOAD: _resources("500m", "512Mi", "2", "2Gi"),
    COLLECTOR: _resources("200m", "256Mi", "1", COLLECTOR_MEMORY_LIMIT),
}
