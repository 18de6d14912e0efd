"""What a model's GPUs cost per hour: the priced pools' contract (functions/common/cost.py)
and the agent's count of what each model holds (functions/runtime/agent/cost.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from functions.common.contracts import LABEL_DEPLOYMENT, LABEL_SERVING
from functions.common.cost import (
    MODEL_COST_PER_HOUR,
    PoolPrice,
    format_pool_price,
    parse_pool_price,
    pool_of_node,
    pool_prices_of_pools,
)
from functions.runtime.agent.cost import CostMetrics, model_costs
from functions.runtime.agent.inventory import _pod_claims, allocated_devices

GPU = "gpu.nvidia.com"
NIC = "dra.net"
H100 = PoolPrice("h100", GPU, 4.0, (("pool", "h100"),))
L40S = PoolPrice("l40s", GPU, 1.5, (("pool", "l40s"),))


def node(name, **labels):
    return {"metadata": {"name": name, "labels": labels}}


def claim(namespace, name, devices):
    return {
        "metadata": {"namespace": namespace, "name": name},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": driver, "pool": pool, "device": device}
                        for driver, pool, device in devices
                    ]
                }
            }
        },
    }


def pod(name, node_name, claims, *, deployment="llama", namespace="ml", phase="Running"):
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": {LABEL_SERVING: f"{deployment}-c1", LABEL_DEPLOYMENT: deployment},
        },
        "spec": {"nodeName": node_name},
        "status": {
            "phase": phase,
            "resourceClaimStatuses": [{"name": "g", "resourceClaimName": c} for c in claims],
        },
    }


NODES = [node("h-0", pool="h100"), node("h-1", pool="h100"), node("l-0", pool="l40s")]


def costs(pods, claims, prices=(H100, L40S), nodes=NODES):
    return model_costs(nodes, pods, allocated_devices(claims), _pod_claims, prices)


def test_a_model_costs_its_devices_times_its_pools_price():
    claims = [claim("ml", "c0", [(GPU, "h-0", f"gpu-{i}") for i in range(8)])]
    assert costs([pod("p0", "h-0", ["c0"])], claims) == {("ml", "llama", "h100"): 32.0}


def test_a_multi_node_replica_counts_every_nodes_devices():
    claims = [
        claim("ml", "c0", [(GPU, "h-0", f"gpu-{i}") for i in range(8)]),
        claim("ml", "c1", [(GPU, "h-1", f"gpu-{i}") for i in range(8)]),
    ]
    pods = [pod("leader", "h-0", ["c0"]), pod("worker", "h-1", ["c1"])]
    assert costs(pods, claims) == {("ml", "llama", "h100"): 64.0}


def test_nics_claimed_beside_the_gpus_are_not_priced_as_gpus():
    claims = [claim("ml", "c0", [(GPU, "h-0", "gpu-0"), (NIC, "h-0", "nic-0")])]
    assert costs([pod("p0", "h-0", ["c0"])], claims) == {("ml", "llama", "h100"): 4.0}


def test_a_device_two_pods_share_is_counted_once():
    claims = [claim("ml", "shared", [(GPU, "h-0", "gpu-0")])]
    pods = [pod("a", "h-0", ["shared"]), pod("b", "h-0", ["shared"])]
    assert costs(pods, claims) == {("ml", "llama", "h100"): 4.0}


def test_a_crash_looping_pod_still_costs_what_it_holds_and_a_finished_one_nothing():
    claims = [
        claim("ml", "c0", [(GPU, "h-0", "gpu-0")]),
        claim("ml", "c1", [(GPU, "h-0", "gpu-1")]),
    ]
    crashing = pod("crash", "h-0", ["c0"])
    crashing["status"]["containerStatuses"] = [
        {"state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    ]
    failed = pod("done", "h-0", ["c1"], phase="Failed")
    assert costs([crashing, failed], claims) == {("ml", "llama", "h100"): 4.0}


def test_models_on_two_pools_get_one_series_per_pool():
    claims = [
        claim("ml", "c0", [(GPU, "h-0", "gpu-0")]),
        claim("ml", "c1", [(GPU, "l-0", "gpu-0")]),
    ]
    pods = [pod("a", "h-0", ["c0"]), pod("b", "l-0", ["c1"], deployment="qwen")]
    assert costs(pods, claims) == {("ml", "llama", "h100"): 4.0, ("ml", "qwen", "l40s"): 1.5}


def test_an_unpriced_pool_has_no_cost_series_rather_than_a_cost_of_zero():
    claims = [claim("ml", "c0", [(GPU, "l-0", "gpu-0")])]
    assert costs([pod("a", "l-0", ["c0"])], claims, prices=(H100,)) == {}


def test_pending_pods_and_pods_that_are_not_models_cost_nothing():
    claims = [claim("ml", "c0", [(GPU, "h-0", "gpu-0")])]
    pending = pod("pending", "", ["c0"])
    other = pod("other", "h-0", ["c0"])
    other["metadata"]["labels"] = {}
    assert costs([pending, other], claims) == {}


def test_a_selector_less_pool_takes_only_the_nodes_no_other_pool_of_its_driver_selects():
    spare = PoolPrice("spare", GPU, 1.0)
    assert pool_of_node({"pool": "h100"}, (spare, H100)) == [H100]
    assert pool_of_node({"pool": "other"}, (spare, H100)) == [spare]
    assert pool_of_node({"pool": "other"}, (H100,)) == []


def test_the_priced_pools_of_a_cluster_keep_pool_order_and_skip_unpriced_ones():
    pools = [
        {"name": "a", "devices": {"driver": GPU}, "nodeSelector": {"k": "v"}},
        {"name": "b", "devices": {"driver": GPU}, "pricePerGPUHour": 2},
    ]
    assert pool_prices_of_pools(pools) == (PoolPrice("b", GPU, 2.0),)


@given(
    st.text(min_size=1, max_size=20),
    st.text(min_size=1, max_size=20),
    st.floats(min_value=0, max_value=1_000_000, allow_nan=False),
    st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=4),
)
def test_a_pool_price_survives_its_argument_whatever_its_names_hold(pool, driver, price, selector):
    price_given = PoolPrice(pool, driver, price, tuple(sorted(selector.items())))
    assert parse_pool_price(format_pool_price(price_given)) == price_given


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("h100=3", "not JSON"),
        ("[]", "a JSON object"),
        ('{"driver": "d", "pricePerDeviceHour": 1}', "pool"),
        ('{"pool": "p", "pricePerDeviceHour": 1}', "driver"),
        ('{"pool": "p", "driver": "d", "pricePerDeviceHour": -1}', "pricePerDeviceHour"),
        ('{"pool": "p", "driver": "d", "pricePerDeviceHour": "1"}', "pricePerDeviceHour"),
        (
            '{"pool": "p", "driver": "d", "pricePerDeviceHour": 1, "nodeSelector": []}',
            "nodeSelector",
        ),
    ],
)
def test_an_unusable_pool_price_argument_names_what_is_wrong(text, names):
    with pytest.raises(ValueError, match=names):
        parse_pool_price(text)


def _exported(reader: InMemoryMetricReader) -> dict[tuple, float]:
    data = reader.get_metrics_data()
    points = {}
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == MODEL_COST_PER_HOUR:
                    for point in metric.data.data_points:
                        points[tuple(sorted(point.attributes.items()))] = point.value
    return points


def test_only_the_active_agent_replica_exports_the_cost():
    reader = InMemoryMetricReader()
    active = {"now": False}
    metrics = CostMetrics(MeterProvider([reader]).get_meter("t"), lambda: active["now"])
    metrics.update({("ml", "llama", "h100"): 32.0})
    assert _exported(reader) == {}
    active["now"] = True
    assert _exported(reader) == {
        (("deployment", "llama"), ("namespace", "ml"), ("pool", "h100")): 32.0
    }
    # A model that holds nothing any more stops exporting.
    metrics.update({})
    assert _exported(reader) == {}
