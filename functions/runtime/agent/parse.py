"""What a member's report is computed from, read out of plain Kubernetes objects and a
Prometheus answer.

Turns a pod template into the hard constraints a node must meet (`PodNeeds`), a pod into
how the report counts it, a node into its free resources and taints, a Karpenter
NodePool and its NodeClaims into limits, usage and recent launch failures, and an
instant-query body into samples. Kept apart from the maths (`report_core.py`) so that
can be tested on values, and from the shell (`report.py`) so this can be tested on
objects without an API server.
"""

import re

from functions.common.conditions import is_ready
from functions.common.quantity import quantity_float
from functions.common.scheduling import Taint, Toleration
from functions.runtime.shared.policy import parse_time
from functions.runtime.shared.report import (
    LAUNCH_FAILURE_WINDOW_SECONDS,
    NODEPOOL_LABEL,
    NodeInfo,
    NodePoolInfo,
    PodNeeds,
    PodState,
    Requirement,
    SignalResult,
)

# A node's DRA devices and a pod's device requests are counted as one more resource per
# device class ("devices/<class>"), so the same arithmetic fits them as cpu and memory.
DEVICES_PREFIX = "devices/"
# `device.driver == 'gpu.nvidia.com'`: how a DeviceClass names the driver it selects.
_DRIVER_SELECTOR = re.compile(r"""device\.driver\s*==\s*["']([^"']+)["']""")


def parse_resources(mapping: dict | None) -> dict[str, float]:
    return {name: quantity_float(q) for name, q in sorted((mapping or {}).items())}


def claim_template_devices(claim_template: dict) -> dict[str, float]:
    """What one claim from a ResourceClaimTemplate takes: devices per class (ExactCount
    requests, and firstAvailable's first choice: the scheduler tries it first)."""
    counts: dict[str, float] = {}
    spec = ((claim_template.get("spec") or {}).get("spec") or {}).get("devices") or {}
    for request in spec.get("requests") or []:
        exactly = request.get("exactly") or next(iter(request.get("firstAvailable") or []), {})
        if not exactly.get("deviceClassName") or exactly.get("allocationMode") == "All":
            continue
        key = DEVICES_PREFIX + exactly["deviceClassName"]
        counts[key] = counts.get(key, 0.0) + float(exactly.get("count") or 1)
    return counts


def pod_needs_from_template(
    template: dict, pods_per_replica: int = 1, claim_templates: dict[str, dict] | None = None
) -> PodNeeds:
    """`claim_templates` (by name, from the pod's namespace): the pod's DRA claims count
    as devices of their class, which the node's ResourceSlices must still have free."""
    spec = (template or {}).get("spec") or {}
    requests: dict[str, float] = {}
    for claim in spec.get("resourceClaims") or []:
        found = (claim_templates or {}).get(claim.get("resourceClaimTemplateName") or "")
        for name, q in claim_template_devices(found or {}).items():
            requests[name] = requests.get(name, 0.0) + q
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


def device_class_drivers(device_classes: list[dict]) -> dict[str, str]:
    """Each DeviceClass's driver, where one of its selectors names it; a class without
    one is taken to be named after its driver (as the NVIDIA chart's `gpu.nvidia.com`)."""
    drivers = {}
    for device_class in device_classes:
        for selector in (device_class.get("spec") or {}).get("selectors") or []:
            found = _DRIVER_SELECTOR.search((selector.get("cel") or {}).get("expression") or "")
            if found:
                drivers[device_class["metadata"]["name"]] = found.group(1)
    return drivers


def node_devices(
    resource_slices: list[dict], resource_claims: list[dict], drivers: dict[str, str]
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Per node: devices per class its ResourceSlices publish, and how many of them
    allocated ResourceClaims hold. Device selectors are not evaluated: a node pool's
    devices are alike, and placement chose a pool whose devices match them."""
    by_driver: dict[str, dict[str, float]] = {}
    for rs in resource_slices:
        spec = rs.get("spec") or {}
        node = spec.get("nodeName")
        if node:
            per_node = by_driver.setdefault(node, {})
            per_node[spec.get("driver", "")] = per_node.get(spec.get("driver", ""), 0.0) + len(
                spec.get("devices") or []
            )
    used_by_driver: dict[str, dict[str, float]] = {}
    for claim in resource_claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            # A node-local driver's pool is the node (one pool per node, as the NVIDIA
            # driver publishes); the node selector names it too.
            node = _allocated_node(allocation) or result.get("pool", "")
            per_node = used_by_driver.setdefault(node, {})
            per_node[result.get("driver", "")] = per_node.get(result.get("driver", ""), 0.0) + 1

    def per_class(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
        classes = {name: drivers.get(name, name) for name in set(drivers) | _all_drivers(table)}
        return {
            node: {
                DEVICES_PREFIX + cls: counts[driver]
                for cls, driver in classes.items()
                if driver in counts
            }
            for node, counts in table.items()
        }

    return per_class(by_driver), per_class(used_by_driver)


def _all_drivers(table: dict[str, dict[str, float]]) -> set[str]:
    return {driver for counts in table.values() for driver in counts}


def _allocated_node(allocation: dict) -> str:
    for term in (allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("values"):
                return field["values"][0]
    return ""


def node_info(
    node: dict,
    pods_on_node: list[dict],
    devices: dict[str, float] | None = None,
    devices_used: dict[str, float] | None = None,
) -> NodeInfo:
    """`devices`/`devices_used`: from `node_devices` (absent: the node has none)."""
    meta, spec, status = (
        node.get("metadata") or {},
        node.get("spec") or {},
        node.get("status") or {},
    )
    used: dict[str, float] = {"pods": float(len(pods_on_node)), **(devices_used or {})}
    for pod in pods_on_node:
        for name, q in pod_needs_from_template(pod).requests.items():
            used[name] = used.get(name, 0.0) + q
    return NodeInfo(
        name=meta.get("name", ""),
        labels=dict(meta.get("labels") or {}),
        allocatable={**parse_resources(status.get("allocatable")), **(devices or {})},
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
