"""Whether an on-demand model should run now, and the answer to a placement attempt.

An on-demand model (spec.onDemand) runs `replicas` while it is asked for and nothing while
it is idle. Two facts move it, both already on the control plane:

- **asked for**: a member's activator found no ready replica for a request and set a new
  `modelplane.ai/activate` value. A value not answered yet is a *fresh placement attempt*:
  the model becomes Active, placement runs with the full count, and the earlier
  unplaceable record is dropped (its `since` restarts), so the attempt is never answered
  from a stale result; the answer (Placed, Unplaceable or Parked) is written for exactly
  that value, which is what the activator waits for.
- **idle**: every cluster where the model has ready replicas names it idle in its
  inventory (`status.inventory.idleReplicas`, from the request counters) for at least
  idleAfter, and the last activation is at least idleAfter old. An activation that placed
  nothing (fits nowhere, parked) lapses after idleAfter too: nothing can be idle then, and
  each further request makes a fresh attempt of its own.

Scale to zero is the replica count (desired 0), not a KEDA floor: at zero the model holds
no placement at all, which is what makes the next request's placement a real attempt.

Pure: plain values in, plain values out; the shell reads the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from functions.common import contracts

STATE_IDLE: Final = "Idle"
STATE_ACTIVE: Final = "Active"
RESULT_PLACED: Final = contracts.ON_DEMAND_RESULT_PLACED
RESULT_UNPLACEABLE: Final = "Unplaceable"
RESULT_PARKED: Final = "Parked"
DEFAULT_IDLE_AFTER: Final = 600.0
DEFAULT_ACTIVATION_TIMEOUT: Final = contracts.DEFAULT_ACTIVATION_TIMEOUT_SECONDS


@dataclass(frozen=True)
class OnDemand:
    idle_after: float  # seconds
    activation_timeout: float  # seconds


@dataclass(frozen=True)
class Activity:
    """What the model should run now and why."""

    state: str  # STATE_IDLE | STATE_ACTIVE
    activated_at: str  # RFC 3339, "" if never
    fresh_attempt: str  # the activate value to answer on this reconcile, "" if none
    previous_attempt: dict | None  # status.onDemand.attempt as it was

    def desired(self, replicas: int) -> int:
        return replicas if self.state == STATE_ACTIVE else 0


def _parse(timestamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None


def idle_seconds_by_cluster(
    clusters: Iterable[Mapping[str, Any]], namespace: str, deployment: str
) -> dict[str, int]:
    """Per cluster, how long the deployment's serving replicas there have been idle (the
    least idle one), from each InferenceCluster's status.inventory; absent = not idle."""
    out: dict[str, int] = {}
    for cluster in clusters:
        name = str((cluster.get("metadata") or {}).get("name", ""))
        inventory = (cluster.get("status") or {}).get("inventory") or {}
        for entry in inventory.get("idleReplicas") or []:
            if not isinstance(entry, Mapping):
                continue
            if entry.get("namespace") != namespace or entry.get("deployment") != deployment:
                continue
            seconds = entry.get("idleSeconds")
            if isinstance(seconds, int | float) and not isinstance(seconds, bool):
                out[name] = min(out.get(name, int(seconds)), int(seconds))
    return out


def decide(
    *,
    policy: OnDemand,
    activate: str,
    previous: Mapping[str, Any],
    ready_by_cluster: Mapping[str, int],
    idle_by_cluster: Mapping[str, int],
    now: datetime,
    stamp: str,
) -> Activity:
    """The model's activity from the activate annotation, what status said before, where
    it is ready, and how long each cluster has seen it idle."""
    attempt = previous.get("attempt") if isinstance(previous.get("attempt"), Mapping) else None
    answered = str((attempt or {}).get("id", ""))
    if activate and activate != answered:
        return Activity(STATE_ACTIVE, stamp, activate, dict(attempt) if attempt else None)
    activated_at = str(previous.get("activatedAt", ""))
    if previous.get("state") != STATE_ACTIVE:
        return Activity(STATE_IDLE, activated_at, "", dict(attempt) if attempt else None)
    since = _parse(activated_at)
    window = timedelta(seconds=policy.idle_after)
    recent = since is not None and now - since < window
    serving = [c for c, ready in ready_by_cluster.items() if ready > 0]
    idle_everywhere = all(idle_by_cluster.get(c, -1) >= policy.idle_after for c in serving)
    state = STATE_ACTIVE if recent or not idle_everywhere else STATE_IDLE
    return Activity(state, activated_at, "", dict(attempt) if attempt else None)


def attempt_result(*, parked_message: str, unplaceable: int, reason: str) -> tuple[str, str]:
    """(result, reason) of a fresh placement attempt: parked wins, then fits nowhere."""
    if parked_message:
        return RESULT_PARKED, parked_message
    if unplaceable:
        return RESULT_UNPLACEABLE, reason
    return RESULT_PLACED, ""


def status(activity: Activity, *, result: tuple[str, str] | None, stamp: str) -> dict:
    """status.onDemand: the state, the last activation and the attempt answered last."""
    out: dict[str, Any] = {"state": activity.state}
    if activity.activated_at:
        out["activatedAt"] = activity.activated_at
    if activity.fresh_attempt and result is not None:
        out["attempt"] = {
            "id": activity.fresh_attempt,
            "result": result[0],
            "reason": result[1],
            "at": stamp,
        }
    elif activity.previous_attempt:
        out["attempt"] = activity.previous_attempt
    return out
