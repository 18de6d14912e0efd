"""What a ModelDeployment's status says: counts, placements, unplaceable, parked, conditions.

A model is counted against what it should have now (`spec.replicas`, its desired count),
never against a minimum: a model that was asked for and fits nowhere is short, and a
parked model is never satisfied.

`replicas` and `labelSelector` back the scale subresource (`kubectl scale`, an HPA or a
KEDA ScaledObject targeting the ModelDeployment). `replicas` is the replicas placed, as a
Deployment's `status.replicas` counts the pods it created whether or not they are ready:
it follows `spec.replicas` once placement has made room, and stays below it while some
fit nowhere, the model is parked, or an on-demand model is idle. Floors the fleet hub
raises through KEDA inside a cluster's autoscaling bounds are not placements and are not
counted: `spec.replicas` is the fleet total placement works from.

The unplaceable warning is rate limited with state kept in the status itself (the reason
last warned about and when), so it is emitted when the reason changes or every ten
minutes, not on every reconcile; `now` comes from the shell.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final

from functions.common import conditions
from functions.common.conditions import Condition, Event
from functions.common.naming import deployment_pod_selector
from functions.compose_model_deployment import ondemand
from functions.compose_model_deployment.model import Holding
from functions.compose_model_deployment.modelcache import CacheView
from functions.compose_model_deployment.parking import Baseline, Decision, Parked
from functions.compose_model_deployment.placement import PlacementPlan

WARN_EVERY: Final = timedelta(minutes=10)

# Reasons of the conditions this function owns.
REASON_SCHEDULED: Final = "Scheduled"
REASON_UNPLACEABLE: Final = "Unplaceable"
REASON_PARKED: Final = "Parked"
REASON_WAITING: Final = "WaitingForInputs"
REASON_NONE_DESIRED: Final = "NoneDesired"
REASON_READY: Final = "Ready"
REASON_SHORT: Final = "Short"
REASON_REPEATED_FAILURES: Final = "RepeatedStartFailures"
REASON_NOT_PARKED: Final = "NotParked"


def _parse(timestamp: str) -> datetime | None:
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None


def format_time(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class UnplaceableReport:
    status: dict | None  # status.unplaceable, None when every replica is placed
    warn: bool  # emit the warning result on this reconcile


def report_unplaceable(
    previous: dict | None, plan: PlacementPlan, now: datetime
) -> UnplaceableReport:
    if not plan.unplaceable:
        return UnplaceableReport(None, False)
    previous = previous or {}
    stamp = format_time(now)
    same = previous.get("reason") == plan.reason
    since = previous.get("since") if same and previous.get("since") else stamp
    warned_at = _parse(str(previous.get("warnedAt", "")))
    warn = not same or warned_at is None or now - warned_at >= WARN_EVERY
    return UnplaceableReport(
        {
            "replicas": plan.unplaceable,
            "reason": plan.reason,
            "since": since,
            "warnedAt": stamp if warn else previous["warnedAt"],
        },
        warn,
    )


def read_parked(status: dict) -> Parked | None:
    raw = status.get("parked")
    if not raw or not raw.get("definitionHash"):
        return None
    return Parked(
        since=str(raw.get("since", "")),
        failures=int(raw.get("failures") or 0),
        last_error=str(raw.get("lastError", "")),
        definition_hash=str(raw.get("definitionHash", "")),
        retry=str(raw.get("retry", "")),
    )


def read_baseline(status: dict) -> Baseline | None:
    raw = status.get("retried")
    if not raw or not raw.get("definitionHash"):
        return None
    return Baseline(
        definition_hash=str(raw["definitionHash"]),
        retry=str(raw.get("annotation", "")),
        failures=int(raw.get("failures") or 0),
        since=str(raw.get("since", "")),
    )


def parked_message(parked: Parked) -> str:
    error = parked.last_error or "no error was reported"
    return (
        f"parked after {parked.failures} consecutive start failures of definition "
        f"{parked.definition_hash}: {error}; change source, profile or engines, or set "
        f"the modelplane.ai/retry annotation to a new value"
    )


def build_status(
    *,
    desired: int,
    label_selector: str,
    plan: PlacementPlan,
    ready_by_cluster: dict[str, int],
    unplaceable: UnplaceableReport,
    parking: Decision,
    cache: CacheView | None = None,
) -> dict:
    placements = [
        {
            "cluster": p.cluster,
            "nodePool": p.pool,
            "replicas": p.replicas,
            "readyReplicas": ready_by_cluster.get(p.cluster, 0),
            **({"modelCache": cache.phase(p.cluster)} if cache is not None else {}),
        }
        for p in plan.placements
    ]
    status: dict = {
        "desiredReplicas": desired,
        "placedReplicas": plan.placed,
        "readyReplicas": sum(ready_by_cluster.values()),
        "replicas": plan.placed,
        "labelSelector": label_selector,
        "placements": placements,
    }
    if cache is not None:
        status["modelCache"] = {
            "name": cache.name,
            "readyClusters": sorted(cache.ready),
            "message": cache_message(cache, plan),
        }
    if unplaceable.status:
        status["unplaceable"] = unplaceable.status
    if parking.parked:
        status["parked"] = {
            "since": parking.parked.since,
            "failures": parking.parked.failures,
            "lastError": parking.parked.last_error,
            "definitionHash": parking.parked.definition_hash,
            "retry": parking.parked.retry,
        }
    if parking.baseline:
        status["retried"] = {
            "annotation": parking.baseline.retry,
            "definitionHash": parking.baseline.definition_hash,
            "failures": parking.baseline.failures,
        }
        if parking.baseline.since:
            status["retried"]["since"] = parking.baseline.since
    return status


@dataclass(frozen=True)
class Outcome:
    """The status a reconcile writes, and what its conditions and events are built from."""

    status: dict
    ready: int  # ready replicas on the clusters used
    unplaceable: UnplaceableReport


def deployment_status(
    *,
    name: str,
    plan: PlacementPlan,
    own: Iterable[Holding],
    previous: dict,
    desired: int,
    decision: Decision,
    cache: CacheView | None,
    activity: ondemand.Activity | None,
    now: datetime,
) -> Outcome:
    """The deployment's status from this placement; `name` is the deployment's (its pod
    selector), `previous` the status as observed."""
    used = {p.cluster for p in plan.placements}
    ready_by_cluster = {h.cluster: h.ready_replicas for h in own if h.cluster in used}
    # A fresh attempt is decided afresh: the earlier unplaceable record is not reused.
    unplaceable = report_unplaceable(
        None if activity and activity.fresh_attempt else previous.get("unplaceable"), plan, now
    )
    built = build_status(
        desired=desired,
        label_selector=deployment_pod_selector(name),
        plan=plan,
        ready_by_cluster=ready_by_cluster,
        unplaceable=unplaceable,
        parking=decision,
        cache=cache,
    )
    if activity is not None:
        result = ondemand.attempt_result(
            parked_message=parked_message(decision.parked) if decision.parked else "",
            unplaceable=plan.unplaceable,
            reason=plan.reason,
        )
        built["onDemand"] = ondemand.status(activity, result=result, stamp=format_time(now))
    return Outcome(built, sum(ready_by_cluster.values()), unplaceable)


def events(
    composite: str, plan: PlacementPlan, decision: Decision, unplaceable: UnplaceableReport
) -> list[Event]:
    """Moves, parking transitions, and (rate limited) what fits nowhere; `composite` is
    the XR as messages name it."""
    found = [
        Event(True, f"moving {m.replicas} replicas off {m.cluster}/{m.pool}: {m.reason}")
        for m in plan.dropped
    ]
    if decision.transition == "parked" and decision.parked:
        found.append(Event(True, f"{composite} {parked_message(decision.parked)}"))
    elif decision.transition == "unparked":
        found.append(Event(False, f"{composite} unparked: {decision.why_unparked}"))
    if unplaceable.warn:
        found.append(
            Event(True, f"{composite}: {plan.unplaceable} replicas fit nowhere: {plan.reason}")
        )
    return found


def cache_message(cache: CacheView, plan: PlacementPlan) -> str:
    """How the referenced cache shaped placement, in one line."""
    if not cache.exists:
        return f"ModelCache {cache.name} does not exist; nothing is placed until it does"
    ready = sorted(cache.ready)
    waiting = [
        f"{p.cluster} ({cache.phase(p.cluster)})"
        for p in plan.placements
        if p.cluster not in cache.ready
    ]
    head = (
        f"placed only where ModelCache {cache.name}'s clusterSelector allows; clusters where "
        f"it is Ready come first ({', '.join(ready) if ready else 'none yet'})"
    )
    if not plan.placements:
        return head
    if waiting:
        return f"{head}; placed where it is not Ready yet: {', '.join(waiting)}"
    return f"{head}; every replica is on a cluster where it is Ready"


def derive_conditions(
    *, desired: int, plan: PlacementPlan, ready: int, parking: Decision, parking_enabled: bool
) -> list[Condition]:
    if parking.parked:
        message = parked_message(parking.parked)
        return [
            Condition(conditions.REPLICAS_SCHEDULED, "False", REASON_PARKED, message),
            Condition(conditions.REPLICAS_READY, "False", REASON_PARKED, message),
            Condition(conditions.PARKED, "True", REASON_REPEATED_FAILURES, message),
        ]
    if plan.unplaceable:
        scheduled = Condition(
            conditions.REPLICAS_SCHEDULED,
            "False",
            REASON_UNPLACEABLE,
            f"{plan.unplaceable} of {desired} replicas fit nowhere: {plan.reason}",
        )
    else:
        clusters = len(plan.placements)
        scheduled = Condition(
            conditions.REPLICAS_SCHEDULED,
            "True",
            REASON_SCHEDULED,
            f"{plan.placed} of {desired} replicas placed on {clusters} "
            f"cluster{'s' if clusters != 1 else ''}",
        )
    if desired == 0:
        readiness = Condition(conditions.REPLICAS_READY, "True", REASON_NONE_DESIRED, "0 desired")
    elif ready >= desired:
        readiness = Condition(
            conditions.REPLICAS_READY, "True", REASON_READY, f"{ready} of {desired} ready"
        )
    else:
        readiness = Condition(
            conditions.REPLICAS_READY, "False", REASON_SHORT, f"{ready} of {desired} ready"
        )
    counted = (
        f"{parking.failures} consecutive start failures of the current definition"
        if parking_enabled
        else "parking is disabled (spec.parking.enabled: false)"
    )
    parked = Condition(conditions.PARKED, "False", REASON_NOT_PARKED, counted)
    return [scheduled, readiness, parked]


def waiting_conditions(message: str) -> list[Condition]:
    """Inputs not fetched yet: nothing new is decided, and the conditions say so."""
    return [
        Condition(conditions.REPLICAS_SCHEDULED, "Unknown", REASON_WAITING, message),
        Condition(conditions.REPLICAS_READY, "Unknown", REASON_WAITING, message),
        Condition(conditions.PARKED, "Unknown", REASON_WAITING, message),
    ]
