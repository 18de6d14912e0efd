"""What a member's report is computed from, read out of plain Kubernetes objects and a
Prometheus answer.

Turns a pod template into the hard constraints a node must meet (`PodNeeds`), a pod into
how the report counts it, a node into its free resources and taints, a Karpenter
NodePool and its NodeClaims into limits, usage and recent launch failures, and an
instant-query body into samples. Kept apart from the maths (`report_core.py`) so that
can be tested on values, and from the shell (`report.py`) so this can be tested on
objects without an API server.
"""

from functions.common.conditions import is_ready
from functions.common.quantity import quantity_float
from functions.common.scheduling import Taint, Toleration
from functions.runtime.policy import parse_time
from functions.runtime.report_core import (
    LAUNCH_FAILURE_WINDOW_SECONDS,
    NODEPOOL_LABEL,
    NodeInfo,
    NodePoolInfo,
    PodNeeds,
    PodState,
    Requirement,
    SignalResult,
)


def parse_resources(mapping: dict | None) -> dict[str, float]:
    return {name: quantity_float(q) for name, q in sorted((mapping or {}).items())}


def pod_needs_from_template(template: dict, pods_per_replica: int = 1) -> PodNeeds:
    spec = (template or {}).get("spec") or {}
    requests: dict[str, float] = {}
    for container in spec.get("containers") or []:
        for name, q in parse_resources((container.get("resources") or {}).get("requests")).items():
            requests[name] = requests.get(name, 0.0) + q
    for container in spec.get("initContainers") or []:
        for name, q in parse_resources((container.get("resources") or {}).get("requests")).items():
            requests[name] = max(requests.get(name, 0.0), q)
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = tuple(
        tuple(
            Requirement(e["key"], e["operator"], tuple(e.get("values") or ()))
            for e in term.get("matchExpressions") or []
        )
        for term in affinity.get("nodeSelectorTerms") or []
    )
    tolerations = tuple(
        Toleration(
            t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", "")
        )
        for t in spec.get("tolerations") or []
    )
    return PodNeeds(
        requests=requests,
        node_selector=dict(spec.get("nodeSelector") or {}),
        affinity_terms=terms,
        tolerations=tolerations,
        pods_per_replica=pods_per_replica,
    )


def pod_state(pod: dict) -> PodState:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    scheduled = conditions.get("PodScheduled") or {}
    return PodState(
        name=meta.get("name", ""),
        node=spec.get("nodeName") or None,
        ready=is_ready(pod),
        unschedulable=scheduled.get("status") == "False"
        and scheduled.get("reason") == "Unschedulable",
        terminating=bool(meta.get("deletionTimestamp"))
        or status.get("phase") in {"Succeeded", "Failed"},
    )


def node_info(node: dict, pods_on_node: list[dict]) -> NodeInfo:
    meta, spec, status = (
        node.get("metadata") or {},
        node.get("spec") or {},
        node.get("status") or {},
    )
    used: dict[str, float] = {"pods": float(len(pods_on_node))}
    for pod in pods_on_node:
        for name, q in pod_needs_from_template(pod).requests.items():
            used[name] = used.get(name, 0.0) + q
    return NodeInfo(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        allocatable=parse_resources(status.get("allocatable")),
        used=used,
        taints=tuple(
            Taint(t.get("key", ""), t.get("value", ""), t.get("effect", ""))
            for t in spec.get("taints") or []
        ),
        ready=is_ready(node),
        unschedulable=bool(spec.get("unschedulable")),
    )


def node_pool_info(pool: dict, node_claims: list[dict], now: float) -> NodePoolInfo:
    """A Karpenter NodePool; launch failures are its NodeClaims whose Launched is False."""
    name = (pool.get("metadata") or {}).get("name", "")
    failures = 0
    for claim in node_claims:
        if ((claim.get("metadata") or {}).get("labels") or {}).get(NODEPOOL_LABEL) != name:
            continue
        for c in (claim.get("status") or {}).get("conditions") or []:
            if c.get("type") != "Launched" or c.get("status") != "False":
                continue
            when = c.get("lastTransitionTime")
            if when and now - parse_time(when) <= LAUNCH_FAILURE_WINDOW_SECONDS:
                failures += 1
    return NodePoolInfo(
        name=name,
        limits=parse_resources((pool.get("spec") or {}).get("limits")),
        usage=parse_resources((pool.get("status") or {}).get("resources")),
        recent_launch_failures=failures,
    )


def prometheus_result(body: dict) -> SignalResult:
    """An instant query's JSON answer: every sample's value, or why it has none."""
    if body.get("status") != "success":
        return SignalResult(error=f"query failed: {body.get('error', 'unknown error')}")
    data = body.get("data") or {}
    if data.get("resultType") == "scalar":
        return SignalResult((float(data["result"][1]),))
    if data.get("resultType") != "vector":
        return SignalResult(error=f"returned a {data.get('resultType')}, need one sample")
    return SignalResult(tuple(float(s["value"][1]) for s in data.get("result") or []))
