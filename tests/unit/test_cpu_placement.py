"""CPU-only pools: a CPU deployment lands only on them, a GPU deployment never does, room
is counted in CPU and memory both, and what is missing is named."""

import pytest

from functions.compose_model_deployment import cpu
from functions.compose_model_deployment.devices import match_pool
from functions.compose_model_deployment.manifests import model_replica
from functions.compose_model_deployment.model import (
    InputError,
    read_cluster,
    read_deployment,
    read_holding,
)
from functions.compose_model_deployment.placement import place, placeable_pool
from tests.unit.test_placement import cluster, deployment, pool


def cpu_pool(name="cpu", *, nodes=2, cpu_per_node="16", memory="64Gi", cost_rank=None):
    raw = {"name": name, "nodes": nodes, "cpu": cpu_per_node, "memory": memory}
    if cost_rank is not None:
        raw["costRank"] = cost_rank
    return raw


def cpu_deployment(name="c", replicas=1, *, cpu_request="4", memory="8Gi", namespace="ns"):
    template = {"spec": {"containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.32.0"}]}}
    members = [
        {
            "role": "Standalone",
            "nodeSelector": {"cpu": cpu_request, "memory": memory},
            "template": template,
        }
    ]
    return read_deployment(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "source": {"uri": "hf://x/y"},
                "template": {
                    "spec": {"engines": [{"name": "e", "type": "vllm", "members": members}]}
                },
            },
        }
    )


def holding_of(d, c, pool_name, replicas, *, created="2026-01-01T00:00:00Z"):
    manifest = model_replica(d, c, c.pool(pool_name), replicas, autoscaling=None)
    manifest["metadata"].update(namespace=d.namespace, creationTimestamp=created)
    return read_holding(manifest)


def test_a_cpu_deployment_lands_only_on_a_cpu_pool():
    fleet = [cluster("a", pool("h100")), cluster("b", cpu_pool())]
    plan = place(cpu_deployment(replicas=2), fleet, [], 2)
    assert [(p.cluster, p.pool, p.replicas) for p in plan.placements] == [("b", "cpu", 2)]


def test_a_gpu_deployment_never_lands_on_a_cpu_pool():
    plan = place(deployment(replicas=1), [cluster("b", cpu_pool())], [], 1)
    assert plan.unplaceable == 1
    assert "nodeSelector.devices: asks for devices" in plan.reason
    assert "CPU-only" in plan.reason


def test_a_cpu_deployment_with_only_gpu_pools_says_it_needs_a_cpu_pool():
    plan = place(cpu_deployment(), [cluster("a", pool("h100"))], [], 1)
    assert plan.unplaceable == 1
    assert "nodeSelector.cpu: asks for CPU and memory" in plan.reason


@pytest.mark.parametrize(
    ("cpu_request", "memory", "fits"),
    [
        ("4", "8Gi", 8),  # 4 per node by CPU, 8 by memory: CPU decides
        ("1", "32Gi", 4),  # 16 per node by CPU, 2 by memory: memory decides
        ("500m", "1Gi", 64),  # 32 per node by CPU and 64 by memory
    ],
)
def test_room_is_counted_in_cpu_and_memory_both(cpu_request, memory, fits):
    d = cpu_deployment(replicas=100, cpu_request=cpu_request, memory=memory)
    plan = place(d, [cluster("b", cpu_pool(nodes=2, cpu_per_node="16", memory="64Gi"))], [], 100)
    assert plan.placed == fits
    assert plan.unplaceable == 100 - fits


def test_the_unplaceable_reason_names_the_cpu_and_memory_missing():
    d = cpu_deployment(replicas=3, cpu_request="8", memory="16Gi")
    plan = place(d, [cluster("b", cpu_pool(nodes=1))], [], 3)
    assert plan.placed == 2
    assert plan.reason == "no node pool with 8 CPU and 16Gi memory free; most free: b/cpu nothing"


def test_a_pod_bigger_than_a_node_is_named():
    d = cpu_deployment(cpu_request="32", memory="16Gi")
    plan = place(d, [cluster("b", cpu_pool())], [], 1)
    assert plan.reason == (
        "no matching pool is big enough: b/cpu a pod needs 32 CPU and 16Gi memory on one "
        "node, a node has 16 CPU and 64Gi memory"
    )
    assert placeable_pool(d, cluster("b", cpu_pool())) == ""


def test_other_deployments_on_a_cpu_pool_take_their_room_first():
    fleet = [cluster("b", cpu_pool(nodes=1, cpu_per_node="16", memory="64Gi"))]
    older = cpu_deployment("older", cpu_request="6", memory="4Gi")
    held = holding_of(older, fleet[0], "cpu", 2)  # 12 CPU of 16
    plan = place(cpu_deployment(replicas=2, cpu_request="2", memory="8Gi"), fleet, [held], 2)
    # In the new deployment's slots (2 CPU, 8Gi) a 6-CPU pod takes 3: 8 - 6 = 2 left,
    # exactly the 4 CPU that are really left.
    assert plan.placed == 2
    plan = place(cpu_deployment(replicas=3, cpu_request="2", memory="8Gi"), fleet, [held], 3)
    assert plan.placed == 2
    assert plan.unplaceable == 1


def test_spread_and_cost_rank_apply_as_for_gpu_pools():
    fleet = [
        cluster("a", cpu_pool("big", nodes=4, cost_rank=5), cpu_pool("small", nodes=1)),
        cluster("b", cpu_pool("cpu", nodes=2)),
    ]
    plan = place(cpu_deployment(replicas=2), fleet, [], 2)
    # Spread first (one each), and on a the cheaper pool wins over the bigger one.
    assert [(p.cluster, p.pool, p.replicas) for p in plan.placements] == [
        ("a", "small", 1),
        ("b", "cpu", 1),
    ]


def test_best_fit_picks_the_smallest_cpu_pool_that_holds_the_share():
    fleet = [cluster("a", cpu_pool("big", nodes=8), cpu_pool("small", nodes=1))]
    plan = place(cpu_deployment(replicas=2), fleet, [], 2)
    assert [(p.pool, p.replicas) for p in plan.placements] == [("small", 2)]


def test_an_existing_cpu_placement_is_kept():
    fleet = [cluster("a", cpu_pool("one", nodes=2)), cluster("b", cpu_pool("two", nodes=2))]
    d = cpu_deployment(replicas=1)
    held = holding_of(d, fleet[1], "two", 1)
    plan = place(d, fleet, [held], 1)
    assert [(p.cluster, p.pool) for p in plan.placements] == [("b", "two")]


def test_the_replica_carries_the_cpu_request_and_reads_back_alike():
    c = cluster("b", cpu_pool())
    d = cpu_deployment(cpu_request="1500m", memory="3Gi")
    manifest = model_replica(d, c, c.pool("cpu"), 1, autoscaling=None)
    member = manifest["spec"]["engines"][0]["members"][0]
    assert (member["cpu"], member["memory"], member["devices"]) == ("1500m", "3Gi", [])
    assert manifest["spec"]["nodePool"]["driver"] == ""
    manifest["metadata"].update(namespace="ns", creationTimestamp="t")
    assert read_holding(manifest).footprint.requests == ((1500, 3 * 2**30),)


def test_slots_never_give_away_room_a_node_lacks():
    # Per dimension, the slots a pod takes cover what it asks: any set of pods that fits
    # in a node's slots fits in its CPU and memory.
    unit = (1500, 3 * 2**30)
    node = (16000, 40 * 2**30)
    per_node = cpu.slots_per_node(*node, unit)
    for request in [(1500, 2**30), (4000, 3 * 2**30), (1000, 10 * 2**30), (7000, 2**20)]:
        count = per_node // cpu.slots(request, unit)
        assert count * request[0] <= node[0]
        assert count * request[1] <= node[1]


@pytest.mark.parametrize(
    ("node_selector", "path", "rule"),
    [
        (
            {"cpu": "4", "memory": "8Gi", "devices": [{"name": "gpu", "count": 1}]},
            "spec.template.spec.engines[0].members[0].nodeSelector",
            "takes devices or cpu and memory, not both",
        ),
        (
            {"cpu": "4"},
            "spec.template.spec.engines[0].members[0].nodeSelector",
            "cpu and memory are set together",
        ),
        (
            {"cpu": "four", "memory": "8Gi"},
            "spec.template.spec.engines[0].members[0].nodeSelector.cpu",
            "is not a resource quantity",
        ),
        (
            {"cpu": "0", "memory": "8Gi"},
            "spec.template.spec.engines[0].members[0].nodeSelector.cpu",
            "must be more than 0",
        ),
        (
            {},
            "spec.template.spec.engines[0].members[0].nodeSelector",
            "needs devices (an accelerator pool) or cpu and memory",
        ),
    ],
)
def test_a_bad_cpu_request_names_the_field_and_the_rule(node_selector, path, rule):
    xr = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "source": {"uri": "hf://x/y"},
            "template": {
                "spec": {
                    "engines": [
                        {
                            "name": "e",
                            "type": "vllm",
                            "members": [
                                {
                                    "role": "Standalone",
                                    "nodeSelector": node_selector,
                                    "template": {},
                                }
                            ],
                        }
                    ]
                }
            },
        },
    }
    with pytest.raises(InputError) as err:
        read_deployment(xr)
    assert err.value.path == path
    assert rule in err.value.rule


def test_a_mix_of_cpu_and_device_members_is_refused():
    member = {"nodeSelector": {"cpu": "4", "memory": "8Gi"}, "template": {}}
    gpu = {"nodeSelector": {"devices": [{"name": "gpu", "count": 1}]}, "template": {}}
    xr = {
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {
            "source": {"uri": "hf://x/y"},
            "serving": {"mode": "PrefillDecode"},
            "template": {
                "spec": {
                    "serving": {"mode": "PrefillDecode"},
                    "engines": [
                        {
                            "name": "e",
                            "type": "vllm",
                            "members": [{"role": "Prefill", **member}, {"role": "Decode", **gpu}],
                        }
                    ],
                }
            },
        },
    }
    with pytest.raises(InputError) as err:
        read_deployment(xr)
    assert err.value.path == "spec.template.spec.engines"
    assert "every member asks for cpu and memory, or every member for devices" in err.value.rule


@pytest.mark.parametrize(
    ("raw", "path", "rule"),
    [
        ({"name": "p", "nodes": 1}, "spec.nodePools[0]", "needs devices (an accelerator pool)"),
        ({"name": "p", "nodes": 1, "cpu": "16"}, "spec.nodePools[0]", "both cpu and memory"),
        (
            {"name": "p", "nodes": 1, "cpu": "16", "memory": "1Gi", "devices": {"driver": "d"}},
            "spec.nodePools[0].cpu",
            "set them without devices",
        ),
        (
            {"name": "p", "nodes": 1, "cpu": "16", "memory": "lots"},
            "spec.nodePools[0].memory",
            "is not a resource quantity",
        ),
    ],
)
def test_a_bad_cpu_pool_names_the_field_and_the_rule(raw, path, rule):
    with pytest.raises(InputError) as err:
        read_cluster(
            {
                "metadata": {"name": "b"},
                "spec": {"region": "r", "providerConfigRef": {"name": "b"}, "nodePools": [raw]},
            }
        )
    assert err.value.path == f"InferenceCluster b: {path}"
    assert rule in err.value.rule


def test_cpu_pools_match_alike_and_never_a_gpu_request():
    c = cluster("b", cpu_pool(), pool("h100"))
    assert match_pool(cpu_deployment(), c.pool("cpu")).matched
    assert not match_pool(cpu_deployment(), c.pool("h100")).matched
    assert not match_pool(deployment(), c.pool("cpu")).matched
