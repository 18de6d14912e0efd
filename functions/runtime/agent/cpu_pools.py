"""The inventory's CPU-only pools: per pool (the nodes its nodeSelector matches), the
CPU and memory its nodes can give pods (their allocatable) and what the pods placed on
them request. What `status.inventory.gpus` says for device pools (total and used), in
the units a CPU pool is counted in. Pure: nodes and pods in, the list out.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from functions.common.inventory import CpuPool
from functions.common.quantity import format_bytes, format_millicores, parse_quantity


def _amount(value: Any, scale: int) -> int:
    """A quantity in millicores (scale 1000) or bytes (1); 0 if it is not one."""
    try:
        return max(0, math.ceil(parse_quantity(str(value)) * scale))
    except ValueError:
        return 0


def pod_requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """A pod's CPU (millicores) and memory (bytes) requests, as the scheduler counts
    them: its containers' sum, or its largest init container if that is more."""
    spec = pod.get("spec") or {}

    def requests(container: Mapping[str, Any]) -> tuple[int, int]:
        asked = (container.get("resources") or {}).get("requests") or {}
        return _amount(asked.get("cpu", 0), 1000), _amount(asked.get("memory", 0), 1)

    running = [requests(c) for c in spec.get("containers") or []]
    init = [requests(c) for c in spec.get("initContainers") or []]
    return (
        max(sum(r[0] for r in running), max((r[0] for r in init), default=0)),
        max(sum(r[1] for r in running), max((r[1] for r in init), default=0)),
    )


def cpu_pool_use(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    pools: Sequence[CpuPool],
) -> list[dict[str, Any]]:
    """Per CPU pool: its nodes, their allocatable CPU and memory, and what the pods on
    them (not finished) request; the status.inventory.cpuPools shape."""
    nodes = list(nodes)
    by_node: dict[str, tuple[int, int]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if node:
            cpu, memory = pod_requests(pod)
            held = by_node.get(node, (0, 0))
            by_node[node] = (held[0] + cpu, held[1] + memory)
    out = []
    for pool in pools:
        members = [
            n
            for n in nodes
            if all(
                ((n.get("metadata") or {}).get("labels") or {}).get(k) == v
                for k, v in pool.node_selector
            )
        ]
        names = [str((n.get("metadata") or {}).get("name", "")) for n in members]
        allocatable = [(n.get("status") or {}).get("allocatable") or {} for n in members]
        cpu = sum(_amount(a.get("cpu", 0), 1000) for a in allocatable)
        memory = sum(_amount(a.get("memory", 0), 1) for a in allocatable)
        cpu_held = sum(by_node.get(name, (0, 0))[0] for name in names)
        memory_held = sum(by_node.get(name, (0, 0))[1] for name in names)
        out.append(
            {
                "pool": pool.name,
                "nodes": len(members),
                "cpu": format_millicores(cpu),
                "cpuRequested": format_millicores(cpu_held),
                "memory": format_bytes(memory),
                "memoryRequested": format_bytes(memory_held),
            }
        )
    return out
