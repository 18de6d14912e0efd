"""The member's fleet inventory: how full it is, what is broken, and what is holding GPUs
it is not using — the member's half of `modelplane status`.

Read from what the member's API server says and nothing else:
- nodes by the state that needs a different response: ready, cordoned (unschedulable,
  nothing left on it), draining (unschedulable, still running pods), unreachable (Ready
  is not True);
- GPUs per device class from the ResourceSlices the DRA driver publishes (only the
  newest generation of each pool), used when a ResourceClaim's allocation names the
  device, unhealthy when its node is unreachable or the device carries a NoSchedule or
  NoExecute taint. An unhealthy device is never also counted as used, so free = total -
  used - unhealthy cannot go below zero;
- per fabric (the node label each InferenceCluster pool declares, `fabricNodeLabel`,
  `modelplane.ai/fabric` by default; see `node_fabric`) its GPU nodes and the largest block
  of entirely free ones — ready nodes whose every device is healthy and unallocated, the
  number that decides whether a multi-node replica can land there;
- per CPU-only pool (`--cpu-pool`; cpu_pools.py) its nodes' allocatable CPU and memory
  and what the pods on them request;
- replicas by state, one per replica's head pod (Standalone, Leader or Decode role);
- idle replicas: serving, and their request counter has not moved for `idle_after`
  seconds (IDLE_AFTER_SECONDS unless the agent's `--idle-after` says otherwise; the
  document names the threshold it used, so a reader never assumes the default), with the
  GPUs their pods' claims hold. What the counter was and since when it has not moved
  travels with the record (an annotation), so an agent restart or a failover to the
  standby agent does not reset the clock.

`compute_inventory` is pure (objects and `now` in, the document out); which replicas are
idle is idle.py's, and inventory_record.py is the shell that lists the objects and
writes the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from functions.common.conditions import is_ready
from functions.common.contracts import (
    LABEL_DEPLOYMENT,
    LABEL_ROLE,
    LABEL_SERVING,
    ROLE_DECODE,
    ROLE_LEADER,
    ROLE_STANDALONE,
)
from functions.common.inventory import (
    COUNTERS_AVAILABLE,
    COUNTERS_UNAVAILABLE,
    GPU_DRIVER,
    IDLE_AFTER_SECONDS,
    CpuPool,
    FabricLabel,
    device_class,
    node_fabric,
)
from functions.runtime.agent.cpu_pools import cpu_pool_use
from functions.runtime.agent.idle import Counters, IdleMemory, ReplicaKey, idle_replicas
from functions.runtime.shared.policy import rfc3339

NODE_READY: Final = "ready"
NODE_CORDONED: Final = "cordoned"
NODE_DRAINING: Final = "draining"
NODE_UNREACHABLE: Final = "unreachable"

REPLICA_READY: Final = "ready"
REPLICA_STARTING: Final = "starting"
REPLICA_DRAINING: Final = "draining"
REPLICA_FAILED: Final = "failed"

# The pod of a replica that stands for it: one per replica on every stack.
HEAD_ROLES: Final = frozenset({ROLE_STANDALONE, ROLE_LEADER, ROLE_DECODE})
# Taints that say a node is being emptied (kubectl cordon; Karpenter's disruption).
DRAIN_TAINTS: Final = frozenset({"node.kubernetes.io/unschedulable", "karpenter.sh/disrupted"})
UNHEALTHY_EFFECTS: Final = frozenset({"NoSchedule", "NoExecute"})
_FAILED_WAITING: Final = frozenset(
    {"CrashLoopBackOff", "ErrImagePull", "ImagePullBackOff", "InvalidImageName"}
)

DeviceKey = tuple[str, str, str]  # (driver, pool, device)


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _daemon(pod: Mapping[str, Any]) -> bool:
    return any(
        o.get("kind") == "DaemonSet"
        for o in (pod.get("metadata") or {}).get("ownerReferences") or []
    )


def node_state(node: Mapping[str, Any], pods_on_node: Iterable[Mapping[str, Any]]) -> str:
    if not is_ready(node):
        return NODE_UNREACHABLE
    spec = node.get("spec") or {}
    emptied = bool(spec.get("unschedulable")) or any(
        t.get("key") in DRAIN_TAINTS for t in spec.get("taints") or []
    )
    if not emptied:
        return NODE_READY
    # Cordoned and still running workload pods: someone is (or should be) draining it.
    busy = any(not _terminal(p) and not _daemon(p) for p in pods_on_node)
    return NODE_DRAINING if busy else NODE_CORDONED


def replica_state(pod: Mapping[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if metadata.get("deletionTimestamp"):
        return REPLICA_DRAINING
    if status.get("phase") == "Failed":
        return REPLICA_FAILED
    if is_ready(pod):
        return REPLICA_READY
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _FAILED_WAITING:
            return REPLICA_FAILED
    return REPLICA_STARTING


@dataclass(frozen=True)
class Device:
    key: DeviceKey
    node: str
    device_class: str
    tainted: bool


def published_devices(
    slices: Iterable[Mapping[str, Any]], driver: str = GPU_DRIVER
) -> list[Device]:
    """The driver's devices, from the newest generation of each pool only (a pool being
    republished has slices of two generations for a moment)."""
    slices = [s for s in slices if (s.get("spec") or {}).get("driver") == driver]
    newest: dict[str, int] = {}
    for s in slices:
        pool = (s.get("spec") or {}).get("pool") or {}
        name = str(pool.get("name", ""))
        newest[name] = max(newest.get(name, 0), int(pool.get("generation") or 0))
    devices = []
    for s in slices:
        spec = s.get("spec") or {}
        pool = spec.get("pool") or {}
        if int(pool.get("generation") or 0) != newest[str(pool.get("name", ""))]:
            continue
        for device in spec.get("devices") or []:
            devices.append(
                Device(
                    key=(driver, str(pool.get("name", "")), str(device.get("name", ""))),
                    node=str(spec.get("nodeName") or ""),
                    device_class=device_class(device.get("attributes"), driver),
                    tainted=any(
                        t.get("effect") in UNHEALTHY_EFFECTS for t in device.get("taints") or []
                    ),
                )
            )
    return sorted(devices, key=lambda d: d.key)


def allocated_devices(claims: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], set[DeviceKey]]:
    """(namespace, claim) -> the devices its allocation holds."""
    held: dict[tuple[str, str], set[DeviceKey]] = {}
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        keys = {
            (str(r.get("driver", "")), str(r.get("pool", "")), str(r.get("device", "")))
            for r in results
        }
        if keys:
            meta = claim.get("metadata") or {}
            held[(str(meta.get("namespace", "")), str(meta.get("name", "")))] = keys
    return held


def _pod_claims(pod: Mapping[str, Any]) -> list[str]:
    """The ResourceClaims a pod's claims resolved to (generated from templates, or named)."""
    names = [
        str(s["resourceClaimName"])
        for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if s.get("resourceClaimName")
    ]
    names += [
        str(c["resourceClaimName"])
        for c in (pod.get("spec") or {}).get("resourceClaims") or []
        if c.get("resourceClaimName")
    ]
    return sorted(set(names))


@dataclass(frozen=True)
class MemberObjects:
    """What the inventory is computed from, as the member's API server lists them."""

    nodes: list[Mapping[str, Any]]
    slices: list[Mapping[str, Any]]
    claims: list[Mapping[str, Any]]
    pods: list[Mapping[str, Any]]


def _node_states(objects: MemberObjects) -> dict[str, str]:
    pods_by_node: dict[str, list[Mapping[str, Any]]] = {}
    for pod in objects.pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            pods_by_node.setdefault(str(node_name), []).append(pod)
    return {
        _name(n): node_state(n, pods_by_node.get(_name(n), []))
        for n in sorted(objects.nodes, key=_name)
    }


def _gpus_and_fabrics(
    objects: MemberObjects,
    states: Mapping[str, str],
    held: Mapping[Any, set[DeviceKey]],
    driver: str,
    fabric_labels: Sequence[FabricLabel] = (),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    devices = published_devices(objects.slices, driver)
    used_keys = set().union(*held.values()) if held else set()
    by_class: dict[str, dict[str, int]] = {}
    busy_nodes: set[str] = set()
    for device in devices:
        totals = by_class.setdefault(device.device_class, {"total": 0, "used": 0, "unhealthy": 0})
        totals["total"] += 1
        unhealthy = device.tainted or states.get(device.node) == NODE_UNREACHABLE
        if unhealthy:
            totals["unhealthy"] += 1
        elif device.key in used_keys:
            totals["used"] += 1
        if unhealthy or device.key in used_keys:
            busy_nodes.add(device.node)

    labels_by_node = {_name(n): _labels(n) for n in objects.nodes}
    fabrics: dict[str, dict[str, int]] = {}
    for node_name in sorted({d.node for d in devices if d.node}):
        fabric = node_fabric(labels_by_node.get(node_name, {}), fabric_labels)
        entry = fabrics.setdefault(fabric, {"nodes": 0, "largestFreeBlock": 0})
        entry["nodes"] += 1
        if states.get(node_name) == NODE_READY and node_name not in busy_nodes:
            entry["largestFreeBlock"] += 1
    return (
        [{"deviceClass": c} | t for c, t in sorted(by_class.items())],
        [{"name": f} | t for f, t in sorted(fabrics.items())],
    )


@dataclass
class _Replicas:
    by_state: dict[str, int]
    serving: set[ReplicaKey]  # replicas with a ready head pod
    gpus_held: dict[ReplicaKey, int]
    deployment_of: dict[ReplicaKey, str]


def _replicas(pods: Iterable[Mapping[str, Any]], held: Mapping[Any, set[DeviceKey]]) -> _Replicas:
    out = _Replicas(
        {REPLICA_READY: 0, REPLICA_STARTING: 0, REPLICA_DRAINING: 0, REPLICA_FAILED: 0},
        set(),
        {},
        {},
    )
    for pod in pods:
        labels = _labels(pod)
        serving = labels.get(LABEL_SERVING)
        if not serving or (pod.get("status") or {}).get("phase") == "Succeeded":
            continue
        namespace = str((pod.get("metadata") or {}).get("namespace", ""))
        key = (namespace, serving)
        out.deployment_of[key] = labels.get(LABEL_DEPLOYMENT, "")
        out.gpus_held[key] = out.gpus_held.get(key, 0) + sum(
            len(held.get((namespace, c), ())) for c in _pod_claims(pod)
        )
        if labels.get(LABEL_ROLE, ROLE_STANDALONE) in HEAD_ROLES:
            state = replica_state(pod)
            out.by_state[state] += 1
            if state == REPLICA_READY:
                out.serving.add(key)
    return out


def compute_inventory(
    objects: MemberObjects,
    counters: Counters,
    memory: IdleMemory,
    now: float,
    *,
    driver: str = GPU_DRIVER,
    fabric_labels: Sequence[FabricLabel] = (),
    idle_after: float = IDLE_AFTER_SECONDS,
    cpu_pools: Sequence[CpuPool] = (),
) -> tuple[dict[str, Any], IdleMemory]:
    """The inventory document (status.inventory's shape) and the idle memory to keep."""
    states = _node_states(objects)
    held = allocated_devices(objects.claims)
    gpus, fabrics = _gpus_and_fabrics(objects, states, held, driver, fabric_labels)
    replicas = _replicas(objects.pods, held)
    idle, kept = idle_replicas(
        replicas.serving,
        counters,
        memory,
        now,
        idle_after,
        deployment_of=replicas.deployment_of,
        gpus_held=replicas.gpus_held,
    )
    document: dict[str, Any] = {
        "observedAt": rfc3339(now),
        "nodes": {"total": len(states)}
        | {
            s: sum(1 for v in states.values() if v == s)
            for s in (NODE_READY, NODE_CORDONED, NODE_DRAINING, NODE_UNREACHABLE)
        },
        "gpus": gpus,
        "fabrics": fabrics,
        "replicas": replicas.by_state,
        "idleReplicas": idle,
        "idleAfterSeconds": int(idle_after),
        "requestCounters": (
            COUNTERS_AVAILABLE
            if not counters.error
            else f"{COUNTERS_UNAVAILABLE}: {counters.error}"
        ),
    }
    if cpu_pools:
        # CPU-only pools: their CPU and memory, and what pods on them request.
        document["cpuPools"] = cpu_pool_use(objects.nodes, objects.pods, cpu_pools)
    return document, kept
