"""The inventory record: list the member's nodes, ResourceSlices, ResourceClaims and
pods, compute the inventory (inventory.py) and write it to the record ConfigMap
(`functions/common/inventory.py` names it) with server-side apply under its own field
manager; compose-serving-stack copies it into the InferenceCluster's status.inventory.

The same listing prices each model's devices (cost.py), handed to `on_costs` so the
cost gauges follow the inventory's cadence without a second listing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Final

from kubernetes.client.exceptions import ApiException

from functions.common.cost import PoolPrice
from functions.common.inventory import (
    IDLE_AFTER_SECONDS,
    INVENTORY_RECORD_API_VERSION,
    INVENTORY_RECORD_KIND,
    INVENTORY_RECORD_NAME,
    INVENTORY_RECORD_NAMESPACE,
    KEY_INVENTORY,
    CpuPool,
    FabricLabel,
)
from functions.runtime.agent.cost import CostKey, model_costs
from functions.runtime.agent.idle import ANNOTATION_IDLE_MEMORY, Counters, IdleMemory
from functions.runtime.agent.inventory import (
    MemberObjects,
    _pod_claims,
    allocated_devices,
    compute_inventory,
)
from functions.runtime.kube.rest import APPLY_PATCH, kube_request

RESOURCE_API: Final = "/apis/resource.k8s.io/v1"


def _list(api, path: str, query=None) -> list[dict[str, Any]]:
    return list(kube_request(api, "GET", path, query=query).get("items") or [])


def record_path() -> str:
    return f"/api/v1/namespaces/{INVENTORY_RECORD_NAMESPACE}/configmaps/{INVENTORY_RECORD_NAME}"


class InventoryAgent:
    """Lists the member's nodes, ResourceSlices, ResourceClaims and pods, and writes the
    record (server-side apply, its own field manager)."""

    def __init__(
        self,
        api,
        counters: Callable[[], Counters],
        fabric_labels: Sequence[FabricLabel] = (),
        idle_after: float = IDLE_AFTER_SECONDS,
        *,
        pool_prices: Sequence[PoolPrice] = (),
        on_costs: Callable[[dict[CostKey, float]], None] | None = None,
        cpu_pools: Sequence[CpuPool] = (),
    ):
        self.api = api
        self.counters = counters
        self.fabric_labels = tuple(fabric_labels)
        # Priced pools: each sync also hands what each model's devices cost to `on_costs`.
        self.pool_prices = tuple(pool_prices)
        self.on_costs = on_costs
        self.idle_after = idle_after
        self.cpu_pools = tuple(cpu_pools)

    def _memory(self) -> IdleMemory:
        try:
            record = kube_request(self.api, "GET", record_path())
        except ApiException as err:
            if err.status == 404:
                return IdleMemory()
            raise
        annotations = (record.get("metadata") or {}).get("annotations") or {}
        return IdleMemory.from_annotation(annotations.get(ANNOTATION_IDLE_MEMORY))

    def sync(self, now: float) -> dict[str, Any]:
        nodes = _list(self.api, "/api/v1/nodes")
        try:
            slices = _list(self.api, f"{RESOURCE_API}/resourceslices")
            claims = _list(self.api, f"{RESOURCE_API}/resourceclaims")
        except ApiException as err:
            if err.status != 404:
                raise
            slices, claims = [], []  # DRA not served: no devices published
        pods = _list(self.api, "/api/v1/pods", [("fieldSelector", "status.phase!=Succeeded")])
        document, memory = compute_inventory(
            MemberObjects(nodes, slices, claims, pods),
            self.counters(),
            self._memory(),
            now,
            fabric_labels=self.fabric_labels,
            idle_after=self.idle_after,
            cpu_pools=self.cpu_pools,
        )
        if self.on_costs is not None:
            self.on_costs(
                model_costs(nodes, pods, allocated_devices(claims), _pod_claims, self.pool_prices)
            )
        kube_request(
            self.api,
            "PATCH",
            record_path(),
            query=[("fieldManager", "modelplane-inventory"), ("force", "true")],
            body={
                "apiVersion": INVENTORY_RECORD_API_VERSION,
                "kind": INVENTORY_RECORD_KIND,
                "metadata": {
                    "name": INVENTORY_RECORD_NAME,
                    "namespace": INVENTORY_RECORD_NAMESPACE,
                    "annotations": {ANNOTATION_IDLE_MEMORY: memory.to_annotation()},
                },
                "data": {KEY_INVENTORY: json.dumps(document, sort_keys=True)},
            },
            content_type=APPLY_PATCH,
        )
        return document
