"""What the on-demand activator does with one request, decided from a ModelDeployment.

The route of an on-demand model leads here while the model has no ready replica on this
member. For each request the activator reads the ModelDeployment on the control plane and
either proxies (a replica is ready), or asks for one placement attempt (sets a new
`modelplane.ai/activate` value) and holds the request only for that attempt's answer:
Unplaceable or Parked is answered at once with why; Placed holds it until the first
replica is ready (at most spec.onDemand.activationTimeout), then proxies.

Everything a client sent is untrusted: the deployment is named by the route's own header
(never by the request body), checked as a Kubernetes name before it reaches an API path,
and every message goes out JSON-encoded.

Pure: plain dicts in, plain values out; the shell (activator.py) does the I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from functions.common import contracts
from functions.common.durations import parse_duration

# RFC 1123 label (namespace) and subdomain (ModelDeployment name).
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")

RESULT_PLACED: Final = contracts.ON_DEMAND_RESULT_PLACED
DEFAULT_ACTIVATION_TIMEOUT: Final = contracts.DEFAULT_ACTIVATION_TIMEOUT_SECONDS

# The `reason` of an answer the activator gives instead of a model's (besides the
# attempt's own Unplaceable and Parked); each has a runbook section.
REASON_NOT_FOUND: Final = "NotFound"
REASON_NOT_ON_DEMAND: Final = "NotOnDemand"
REASON_BAD_ROUTE: Final = "BadRoute"
REASON_NOT_READY: Final = "NotReady"
REASON_ATTEMPT_NOT_ANSWERED: Final = "AttemptNotAnswered"
REASON_ACTIVATION_TIMEOUT: Final = "ActivationTimeout"
REASON_ACTIVATION_FAILED: Final = "ActivationFailed"
REASON_SERVING_ELSEWHERE: Final = "ServingElsewhere"

STATUS_UNAVAILABLE: Final = 503
STATUS_TIMEOUT: Final = 504
STATUS_BAD_REQUEST: Final = 400
STATUS_NOT_FOUND: Final = 404


class BadDeployment(ValueError):
    """The deployment header is missing or not a Kubernetes namespace/name."""


def parse_deployment(header: str | None) -> tuple[str, str]:
    """(namespace, name) from the route's `namespace/name` header."""
    if not header:
        raise BadDeployment("no deployment header: the request did not come through a route")
    namespace, sep, name = header.partition("/")
    if not sep or not _NAMESPACE.match(namespace) or not _NAME.match(name):
        raise BadDeployment("the deployment header is not namespace/name")
    return namespace, name


@dataclass(frozen=True)
class Proxy:
    cluster: str  # where a replica is ready


@dataclass(frozen=True)
class Activate:
    pass


@dataclass(frozen=True)
class Refuse:
    status: int
    reason: str
    message: str


Step = Proxy | Activate | Refuse


def ready_cluster(deployment: Mapping[str, Any], own: str) -> str:
    """A cluster with a ready replica ("" if none): this member's first, then by name."""
    placements = (deployment.get("status") or {}).get("placements") or []
    ready = sorted(
        str(p.get("cluster", ""))
        for p in placements
        if isinstance(p, Mapping) and int(p.get("readyReplicas") or 0) > 0
    )
    if own in ready:
        return own
    return ready[0] if ready else ""


def first_step(deployment: Mapping[str, Any] | None, own: str) -> Step:
    """What a new request gets: proxied, an attempt, or an answer at once."""
    if deployment is None:
        return Refuse(STATUS_NOT_FOUND, REASON_NOT_FOUND, "no such ModelDeployment")
    if not (deployment.get("spec") or {}).get("onDemand"):
        return Refuse(
            STATUS_UNAVAILABLE,
            REASON_NOT_ON_DEMAND,
            "the model is not on-demand and has no ready replica",
        )
    cluster = ready_cluster(deployment, own)
    return Proxy(cluster) if cluster else Activate()


def attempt_answer(deployment: Mapping[str, Any], attempt_id: str) -> Step | None:
    """The answer to attempt `attempt_id` once compose-model-deployment wrote it (None
    while it has not): a refusal with why, or Activate (placed: wait for a ready replica)."""
    attempt = ((deployment.get("status") or {}).get("onDemand") or {}).get("attempt") or {}
    if attempt.get("id") != attempt_id:
        return None
    result = str(attempt.get("result", ""))
    if result == RESULT_PLACED:
        return Activate()
    return Refuse(STATUS_UNAVAILABLE, result or "Unknown", str(attempt.get("reason", "")))


def activation_timeout(deployment: Mapping[str, Any]) -> float:
    raw = ((deployment.get("spec") or {}).get("onDemand") or {}).get("activationTimeout")
    try:
        return parse_duration(raw) if raw else DEFAULT_ACTIVATION_TIMEOUT
    except ValueError:
        return DEFAULT_ACTIVATION_TIMEOUT


def error_body(status: int, reason: str, model: str, message: str) -> bytes:
    """The same JSON shape the route's direct response uses, so clients parse one form."""
    return json.dumps(
        {
            "error": {
                "code": status,
                "type": "model_unavailable",
                "reason": reason,
                "model": model,
                "message": message,
            }
        },
        sort_keys=True,
    ).encode()


def activate_patch(attempt_id: str, annotation: str) -> dict:
    """The activator's only write: one annotation (a merge patch touches nothing else)."""
    return {"metadata": {"annotations": {annotation: attempt_id}}}
