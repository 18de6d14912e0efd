"""What each model's GPUs cost per hour on this member, from what its pods hold.

A pod's devices are the ones its ResourceClaims' allocations name; the pod's node says
which priced pool they are in (functions/common/cost.py `pool_of_node`), and only devices
of that pool's own driver are priced (a NIC claimed beside the GPUs is not a GPU). Every
pod that still holds devices counts, ready or not: a crash-looping replica holding eight
GPUs costs eight GPUs, which is what a cost series is for. A device two pods share is
counted once per model.

`model_costs` is pure (the listed objects in, costs out); `CostMetrics` exports them as
`modelplane_model_cost_per_hour{namespace, deployment, pool}`, only while this agent is
its member's active replica (the agent Lease), so the two replicas never export the same
model twice and a failover hands the same series over instead of adding a second one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.metrics import CallbackOptions, Meter, Observation

from functions.common.contracts import LABEL_DEPLOYMENT, LABEL_SERVING
from functions.common.cost import (
    LABEL_DEPLOYMENT as COST_LABEL_DEPLOYMENT,
)
from functions.common.cost import (
    LABEL_NAMESPACE,
    LABEL_POOL,
    MODEL_COST_PER_HOUR,
    PoolPrice,
    pool_of_node,
)

# (namespace, ModelDeployment, pool)
CostKey = tuple[str, str, str]


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def model_costs(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    held: Mapping[tuple[str, str], set[tuple[str, str, str]]],
    claims_of: Callable[[Mapping[str, Any]], list[str]],
    prices: Sequence[PoolPrice],
) -> dict[CostKey, float]:
    """Per (namespace, deployment, pool): devices held x the pool's price per device-hour.

    `held` is (namespace, claim) -> the (driver, pool, device) keys its allocation names
    (inventory.allocated_devices); `claims_of` a pod's claims (inventory._pod_claims).
    """
    if not prices:
        return {}
    labels_by_node = {str(_meta(n).get("name", "")): _meta(n).get("labels") or {} for n in nodes}
    devices: dict[CostKey, set[tuple[str, str, str]]] = {}
    price_of: dict[CostKey, float] = {}
    for pod in pods:
        labels = _meta(pod).get("labels") or {}
        if not labels.get(LABEL_SERVING):
            continue
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # a finished pod's claims are released
        node = str((pod.get("spec") or {}).get("nodeName") or "")
        if not node:
            continue
        namespace = str(_meta(pod).get("namespace", ""))
        deployment = str(labels.get(LABEL_DEPLOYMENT, ""))
        for pool in pool_of_node(labels_by_node.get(node, {}), prices):
            key = (namespace, deployment, pool.pool)
            for claim in claims_of(pod):
                for device in held.get((namespace, claim), ()):
                    if device[0] == pool.driver:
                        devices.setdefault(key, set()).add(device)
                        price_of[key] = pool.price_per_device_hour
    return {key: len(devices[key]) * price_of[key] for key in sorted(devices)}


class CostMetrics:
    """The cost gauge: the latest costs, observed at each scrape while `active()`."""

    def __init__(self, meter: Meter, active: Callable[[], bool] = lambda: True):
        self._costs: dict[CostKey, float] = {}
        self._active = active
        meter.create_observable_gauge(
            MODEL_COST_PER_HOUR,
            [self._observe],
            description="What a model's devices on this cluster cost per hour: devices"
            " held x the node pool's pricePerGPUHour (active agent replica only)",
        )

    def _observe(self, _options: CallbackOptions) -> Iterable[Observation]:
        if not self._active():
            return []
        return [
            Observation(
                value,
                {LABEL_NAMESPACE: ns, COST_LABEL_DEPLOYMENT: deployment, LABEL_POOL: pool},
            )
            for (ns, deployment, pool), value in sorted(self._costs.items())
        ]

    def update(self, costs: Mapping[CostKey, float]) -> None:
        """Replace every cost (a model that holds nothing any more stops exporting)."""
        self._costs.clear()
        self._costs.update(costs)
