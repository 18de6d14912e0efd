"""What a model's GPUs cost per hour: the contract between the InferenceCluster's priced
node pools, the member agent that counts the devices each model holds, the cluster
collector that carries the series, and the gateway that rolls it up per model.

Why the agent and not the collector or the control plane: the agent already lists, every
inventory step, each pod's node and the devices its ResourceClaims hold (the facts a cost
is made of), so it multiplies them by the pool's price and exports one gauge per model
and pool. The collector only carries it (it cannot count devices), and the control plane
knows what was placed, not what is held (a pod that is Pending without an allocation
costs nothing; a crash-looping one holding eight GPUs costs eight).

Price is per device-hour of the pool's `devices.driver` (the GPUs; NICs under
`additionalDevices` are free here), a currency-free number: the sum of several pools'
costs is only meaningful when every pool is priced in the same currency, which is the
platform team's to keep. A node-hour price is the same number times `devices.perNode`.

compose-serving-stack passes each priced pool to the agent as one `--pool-price` JSON
argument (`format_pool_price`): JSON, not a delimited string, so no pool name, driver or
node-selector value can change how the argument is read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

# The gauge the agent exports and the gateway rolls up. Labels: the model's namespace and
# ModelDeployment, and the node pool; the cluster comes from the collector's resource.
MODEL_COST_PER_HOUR: Final = "modelplane_model_cost_per_hour"
LABEL_NAMESPACE: Final = "namespace"
LABEL_DEPLOYMENT: Final = "deployment"
LABEL_POOL: Final = "pool"
# The fleet series is per model: pools are named per cluster, so they do not add up.
FLEET_DROPPED_LABELS: Final = (LABEL_POOL,)

# The XRD's bounds for spec.nodePools[].pricePerGPUHour (apis/inferenceclusters).
PRICE_FIELD: Final = "pricePerGPUHour"
MAX_PRICE: Final = 1_000_000


@dataclass(frozen=True)
class PoolPrice:
    """One priced node pool: its name, the driver whose devices are priced, the price of
    one of them for an hour, and the node labels that select the pool's nodes."""

    pool: str
    driver: str
    price_per_device_hour: float
    node_selector: tuple[tuple[str, str], ...] = field(default=())


def price_problem(value: Any) -> str | None:
    """Why a pool's price is unusable (None when it is a usable price)."""
    # bool is an int in Python; true is not a price.
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"must be a number, got {str(value)[:40]!r}"
    if not math.isfinite(value) or value < 0 or value > MAX_PRICE:
        return f"must be between 0 and {MAX_PRICE}, got {value}"
    return None


def pool_prices_of_pools(pools: Sequence[Mapping[str, Any]]) -> tuple[PoolPrice, ...]:
    """The priced pools of an InferenceCluster's spec.nodePools, in pool order (a pool
    without a price is left out: its devices have no cost series, not a cost of 0)."""
    priced = []
    for pool in pools:
        price = pool.get(PRICE_FIELD)
        if price is None:
            continue
        if price_problem(price) is not None:
            raise ValueError(f"{pool.get('name')!r}: {PRICE_FIELD} {price_problem(price)}")
        selector = pool.get("nodeSelector") or {}
        priced.append(
            PoolPrice(
                str(pool.get("name") or ""),
                str((pool.get("devices") or {}).get("driver") or ""),
                float(price),
                tuple(sorted((str(k), str(v)) for k, v in selector.items())),
            )
        )
    return tuple(priced)


def format_pool_price(price: PoolPrice) -> str:
    return json.dumps(
        {
            "pool": price.pool,
            "driver": price.driver,
            "pricePerDeviceHour": price.price_per_device_hour,
            "nodeSelector": dict(price.node_selector),
        },
        sort_keys=True,
        separators=(",", ":"),
    )


def parse_pool_price(text: str) -> PoolPrice:
    """The inverse of `format_pool_price`; ValueError naming the field and the rule."""
    try:
        raw = json.loads(text)
    except ValueError as err:
        raise ValueError(f"{text[:80]!r}: not JSON ({err})") from err
    if not isinstance(raw, dict):
        raise ValueError(f"{text[:80]!r}: expected a JSON object")
    pool, driver = raw.get("pool"), raw.get("driver")
    if not isinstance(pool, str) or not pool:
        raise ValueError(f"{text[:80]!r}: pool must be a non-empty string")
    if not isinstance(driver, str) or not driver:
        raise ValueError(f"{text[:80]!r}: driver must be a non-empty string")
    price = raw.get("pricePerDeviceHour")
    problem = price_problem(price)
    if problem is not None:
        raise ValueError(f"{text[:80]!r}: pricePerDeviceHour {problem}")
    selector = raw.get("nodeSelector", {})
    if not isinstance(selector, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in selector.items()
    ):
        raise ValueError(f"{text[:80]!r}: nodeSelector must map strings to strings")
    return PoolPrice(pool, driver, float(price), tuple(sorted(selector.items())))


def pool_of_node(node_labels: Mapping[str, str], prices: Sequence[PoolPrice]) -> list[PoolPrice]:
    """The priced pools a node belongs to, one per driver: for each driver the first pool
    whose nodeSelector matches the node, pools with a selector before those without (a
    selector-less pool matches every node, so it only takes the nodes no other pool of
    its driver selects)."""
    chosen: dict[str, PoolPrice] = {}
    with_selector = [p for p in prices if p.node_selector]
    without = [p for p in prices if not p.node_selector]
    for price in [*with_selector, *without]:
        if price.driver in chosen:
            continue
        if all(node_labels.get(k) == v for k, v in price.node_selector):
            chosen[price.driver] = price
    return [chosen[d] for d in sorted(chosen)]
