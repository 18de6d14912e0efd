"""CPU-only pools and deployments, counted in the units placement already counts in.

A CPU-only node pool (a `nodePools[]` entry with `cpu` and `memory` per node and no
`devices`) takes only deployments whose members ask for `cpu` and `memory` instead of
devices, and a GPU pool never takes those. Placement counts room in "devices per node"
(`PoolRoom`); for a CPU deployment a pool's devices are *slots*: one slot is the
deployment's smallest request in each dimension (the least CPU any of its pods asks for,
and the least memory), a node has as many slots as fit in both its CPU and its memory
(at most `MAX_PODS_PER_NODE`), and a pod takes enough slots to cover both its CPU and
its memory. Pods of other CPU deployments on the pool are re-expressed in this
deployment's slots the same way, rounded up. Rounding up never gives away room a node
does not have (for each dimension, the slots taken cover at least what the pods ask),
so a replica counted as fitting fits; it may leave a little unused room beside a pod of
a very different size, which the scheduler uses anyway.

Pure arithmetic on integers (millicores and bytes); nothing here reads the XR.
"""

from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from functions.common.cpu_slots import (
    MAX_PODS_PER_NODE,
    Request,
    bytes_of,
    describe,
    millicores,
    pod_slots,
    slots,
    slots_per_node,
    unit_of,
)

__all__ = [
    "MAX_PODS_PER_NODE",
    "Request",
    "bytes_of",
    "describe",
    "full_reason",
    "in_slots",
    "millicores",
    "pod_slots",
    "slots",
    "slots_per_node",
    "structural_problem",
    "unit_of",
]

if TYPE_CHECKING:
    from functions.compose_model_deployment.model import Cluster, Footprint, Holding, Pool


# A fleet's clusters outlive one reconcile (the shell memoizes them): each keeps its
# translation per slot size, so a fleet is re-expressed once per deployment size, not on
# every placement.
_TRANSLATED: WeakKeyDictionary[Cluster, dict[Request, Cluster]] = WeakKeyDictionary()


def in_slots(
    deployment_requests: tuple[Request, ...],
    clusters: list[Cluster],
    holdings: list[Holding],
) -> tuple[list[Cluster], list[Holding]]:
    """The fleet as a CPU deployment's placement counts it: every CPU-only pool's
    per-node devices are the deployment's slots, and every CPU holding's pods take slots
    of the same size. GPU pools and holdings are left as they are (never candidates)."""
    unit = unit_of(deployment_requests)
    out_clusters = [_cluster_in_slots(cluster, unit) for cluster in clusters]
    out_holdings = [
        replace(h, footprint=_footprint_in_slots(h.footprint, unit)) if h.footprint.requests else h
        for h in holdings
    ]
    return out_clusters, out_holdings


def _cluster_in_slots(cluster: Cluster, unit: Request) -> Cluster:
    if not any(p.cpu_only for p in cluster.pools):
        return cluster
    by_unit = _TRANSLATED.setdefault(cluster, {})
    found = by_unit.get(unit)
    if found is None:
        pools = tuple(
            replace(p, per_node=slots_per_node(p.cpu_milli, p.memory_bytes, unit))
            if p.cpu_only
            else p
            for p in cluster.pools
        )
        found = by_unit[unit] = replace(cluster, pools=pools)
    return found


@lru_cache(maxsize=4096)
def _footprint_in_slots(footprint: Footprint, unit: Request) -> Footprint:
    return replace(footprint, pods=pod_slots(footprint.requests, unit))


def structural_problem(pool: Pool, footprint: Footprint) -> str:
    """Why no replica of a CPU deployment could ever fit this pool, however empty."""
    if not pool.cpu_only:
        return "asks for CPU and memory, and the pool's nodes are counted in devices"
    for request in footprint.requests:
        if request[0] > pool.cpu_milli or request[1] > pool.memory_bytes:
            return (
                f"a pod needs {describe(request)} on one node, a node has "
                f"{describe((pool.cpu_milli, pool.memory_bytes))}"
            )
    return ""


def full_reason(footprint: Footprint, best: tuple[str, str], free_slots: int, unit: Request) -> str:
    """Every CPU pool that could take the deployment is full: what one replica needs,
    and the most room left (in the deployment's slots) where."""
    biggest = max(footprint.requests)
    pods = len(footprint.requests)
    free = describe((free_slots * unit[0], free_slots * unit[1])) if free_slots else "nothing"
    return (
        f"no node pool with {describe(biggest)} free"
        + (f" for each of a replica's {pods} pods" if pods > 1 else "")
        + f"; most free: {best[0]}/{best[1]} {free}"
    )
