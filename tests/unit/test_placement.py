"""Placement: where replicas go, what stays, and what is reported when nothing fits."""

import random
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from functions.common import contracts
from functions.compose_model_deployment.model import (
    Footprint,
    Holding,
    read_cluster,
    read_deployment,
)
from functions.compose_model_deployment.placement import PoolRoom, place

REPO = Path(__file__).resolve().parents[2]
H100 = 'device.attributes["gpu.nvidia.com"].productName == "H100"'


def pool(
    name="h100",
    *,
    nodes=2,
    per_node=8,
    product="H100",
    fabrics=None,
    taints=None,
    max_nodes=None,
    memory="80Gi",
):
    raw = {
        "name": name,
        "nodes": nodes,
        "devices": {
            "driver": "gpu.nvidia.com",
            "perNode": per_node,
            "attributes": {"productName": {"string": product}},
            "capacity": {"memory": memory},
        },
    }
    if fabrics is not None:
        raw["fabrics"] = [{"name": n, "nodes": k} for n, k in fabrics]
    if taints:
        raw["taints"] = taints
    if max_nodes is not None:
        raw["maxNodes"] = max_nodes
    return raw


def cluster(name, *pools, labels=None, region="r1"):
    return read_cluster(
        {
            "metadata": {"name": name, "labels": labels or {"tier": "prod"}},
            "spec": {
                "region": region,
                "providerConfigRef": {"name": name},
                "nodePools": list(pools) or [pool()],
            },
        }
    )


def deployment(
    name="m",
    replicas=1,
    *,
    devices=1,
    selector=H100,
    workers=0,
    tolerations=None,
    cluster_selector=None,
    namespace="ns",
    autoscaling=None,
    extra_requests=(),
):
    request = {"name": "gpu", "count": devices, "selectors": [{"cel": selector}]}
    requests = [request, *extra_requests]
    template = {"spec": {"containers": [{"name": "engine", "image": "e"}]}}
    if workers:
        members = [
            {
                "role": "Leader",
                "worker": {"nodes": workers},
                "nodeSelector": {"devices": requests},
                "template": template,
            },
            {"role": "Worker", "nodeSelector": {"devices": requests}, "template": template},
        ]
    else:
        members = [
            {"role": "Standalone", "nodeSelector": {"devices": requests}, "template": template}
        ]
    spec = {
        "clusterSelector": cluster_selector or {},
        "engines": [{"name": "e", "type": "vllm", "members": members}],
    }
    if tolerations:
        spec["tolerations"] = tolerations
    return read_deployment(
        {
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "source": {"uri": "hf://x/y"},
                "template": {"spec": spec},
                **({"autoscaling": autoscaling} if autoscaling else {}),
            },
        }
    )


def holding(
    dep, cluster_name, pool_name, replicas, *, devices=1, workers=0, created="2026-01-01T00:00:00Z"
):
    footprint = Footprint(gangs=(workers + 1,)) if workers else Footprint(pods=(devices,))
    return Holding(
        namespace="ns",
        name=f"{dep}-{cluster_name}",
        deployment=dep,
        cluster=cluster_name,
        pool=pool_name,
        replicas=replicas,
        footprint=footprint,
        order=(created, "ns", f"{dep}-{cluster_name}"),
    )


def placed(plan):
    return {(p.cluster, p.pool): p.replicas for p in plan.placements}


# --- Spreading, keeping, scaling down -----------------------------------------------------


def test_spreads_new_replicas_across_clusters_before_packing():
    plan = place(deployment(replicas=5), [cluster("a"), cluster("b"), cluster("c")], [], 5)
    assert placed(plan) == {("a", "h100"): 2, ("b", "h100"): 2, ("c", "h100"): 1}
    assert plan.unplaceable == 0


def test_keeps_existing_replicas_when_pool_still_fits():
    existing = [holding("m", "c", "h100", 3)]
    plan = place(deployment(replicas=4), [cluster("a"), cluster("c")], existing, 4)
    # c keeps its 3; the new one goes to a, which has the fewest.
    assert placed(plan) == {("a", "h100"): 1, ("c", "h100"): 3}
    assert plan.dropped == ()


def test_scale_down_takes_from_the_cluster_with_the_most_replicas():
    existing = [holding("m", "a", "h100", 1), holding("m", "b", "h100", 3)]
    plan = place(deployment(replicas=2), [cluster("a"), cluster("b")], existing, 2)
    assert placed(plan) == {("a", "h100"): 1, ("b", "h100"): 1}


def test_scale_down_ties_take_from_the_last_cluster_by_name():
    existing = [holding("m", "a", "h100", 2), holding("m", "b", "h100", 2)]
    plan = place(deployment(replicas=3), [cluster("a"), cluster("b")], existing, 3)
    assert placed(plan) == {("a", "h100"): 2, ("b", "h100"): 1}


def test_scaling_to_zero_composes_no_placement():
    existing = [holding("m", "a", "h100", 2)]
    plan = place(deployment(replicas=0), [cluster("a")], existing, 0)
    assert plan.placements == ()
    assert plan.unplaceable == 0


# --- Capacity -----------------------------------------------------------------------------------


def test_single_node_pods_pack_devices_onto_nodes():
    # 2 nodes x 8 devices; pods of 3 devices: 2 per node (the third does not fit in 2 left).
    plan = place(deployment(replicas=5, devices=3), [cluster("a")], [], 5)
    assert placed(plan) == {("a", "h100"): 4}
    assert plan.unplaceable == 1


def test_counts_what_other_deployments_hold():
    others = [holding("other", "a", "h100", 15)]  # 15 of a's 16 devices
    plan = place(deployment(replicas=2), [cluster("a"), cluster("b", pool(nodes=0))], others, 2)
    assert placed(plan) == {("a", "h100"): 1}
    assert plan.unplaceable == 1


def test_a_parked_deployment_holding_zero_replicas_frees_its_capacity():
    parked = [holding("parked", "a", "h100", 0)]
    plan = place(deployment(replicas=16), [cluster("a")], parked, 16)
    assert placed(plan) == {("a", "h100"): 16}


def test_grows_into_max_nodes_of_a_pool_that_can_grow():
    plan = place(
        deployment(replicas=4, devices=8), [cluster("a", pool(nodes=2, max_nodes=4))], [], 4
    )
    assert placed(plan) == {("a", "h100"): 4}


def test_multi_node_replica_needs_whole_nodes_in_one_fabric():
    # 3 + 3 nodes in two fabrics: a 4-node replica (leader + 3 workers) fits in neither.
    fabric_pool = pool(nodes=6, fabrics=[("ib-a", 3), ("ib-b", 3)])
    plan = place(deployment(replicas=1, devices=8, workers=3), [cluster("a", fabric_pool)], [], 1)
    assert plan.unplaceable == 1
    assert "needs 4 whole nodes on one fabric, largest fabric 3" in plan.reason


def test_multi_node_replicas_fill_fabrics_whole():
    fabric_pool = pool(nodes=6, fabrics=[("ib-a", 3), ("ib-b", 3)])
    plan = place(deployment(replicas=3, devices=8, workers=1), [cluster("a", fabric_pool)], [], 3)
    # One 2-node replica per fabric leaves one node in each: the third cannot span them.
    assert placed(plan) == {("a", "h100"): 2}
    assert plan.reason == (
        "needs 2 free whole nodes (16 H100) on one fabric; largest free block: a/h100 ib-a 1"
    )


def test_single_node_pods_leave_large_fabric_blocks_whole():
    room = PoolRoom(cluster("a", pool(nodes=6, fabrics=[("ib-a", 2), ("ib-b", 4)])).pools[0])
    assert room.take(Footprint(pods=(8,)))
    assert room.largest_block() == (4, "ib-b")  # the pod went to the smaller fabric
    assert room.take(Footprint(gangs=(4,)))


def test_pods_larger_than_a_node_are_reported():
    plan = place(deployment(replicas=1, devices=12), [cluster("a")], [], 1)
    assert plan.reason == (
        "no matching pool is big enough: a/h100 a pod needs 12 devices on one node, 8 per node"
    )


# --- Pools, taints, tolerations ------------------------------------------------------------


def test_uses_one_pool_per_cluster_per_deployment():
    two_pools = cluster("a", pool("h100-a", nodes=1), pool("h100-b", nodes=1))
    existing = [holding("m", "a", "h100-a", 8)]
    plan = place(deployment(replicas=10), [two_pools], existing, 10)
    # h100-a is full and h100-b is free, but the deployment's pool on a is h100-a.
    assert placed(plan) == {("a", "h100-a"): 8}
    assert plan.unplaceable == 2


def test_first_replica_on_a_cluster_picks_the_smallest_matching_pool_that_holds_them_all():
    c = cluster(
        "a", pool("small", nodes=1), pool("big", nodes=3), pool("l40s", product="L40S", nodes=9)
    )
    # Two 1-GPU replicas: the one-node pool holds both, and the big pool stays whole.
    assert placed(place(deployment(replicas=2), [c], [], 2)) == {("a", "small"): 2}
    # Two 8-GPU replicas: the small pool holds one, so the pool that holds both wins.
    assert placed(place(deployment(replicas=2, devices=8), [c], [], 2)) == {("a", "big"): 2}


def test_a_lower_cost_rank_wins_over_best_fit():
    cheap = {**pool("cheap", nodes=3), "costRank": 1}
    dear = {**pool("dear", nodes=1), "costRank": 5}
    plan = place(deployment(replicas=1), [cluster("a", cheap, dear)], [], 1)
    assert placed(plan) == {("a", "cheap"): 1}


def test_ties_between_clusters_break_by_cost_rank_then_best_fit_not_by_name():
    # "a" sorts first but is dearer; among equals the tighter cluster wins.
    dear = cluster("a", {**pool(nodes=1), "costRank": 9})
    roomy = cluster("b", pool(nodes=4))
    tight = cluster("c", pool(nodes=1))
    plan = place(deployment(replicas=1), [dear, roomy, tight], [], 1)
    assert placed(plan) == {("c", "h100"): 1}
    # Spreading still comes first: the second replica goes to another cluster.
    plan = place(deployment(replicas=2), [dear, roomy, tight], [], 2)
    assert placed(plan) == {("b", "h100"): 1, ("c", "h100"): 1}


def test_no_schedule_taint_keeps_new_replicas_off_but_existing_stay():
    taint = [{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]
    existing = [holding("m", "a", "h100", 1)]
    plan = place(deployment(replicas=3), [cluster("a", pool(taints=taint))], existing, 3)
    assert placed(plan) == {("a", "h100"): 1}
    assert plan.unplaceable == 2


def test_no_execute_taint_moves_existing_replicas():
    taint = [{"key": "gpu", "value": "drain", "effect": "NoExecute"}]
    existing = [holding("m", "a", "h100", 2)]
    plan = place(
        deployment(replicas=2), [cluster("a", pool(taints=taint)), cluster("b")], existing, 2
    )
    assert placed(plan) == {("b", "h100"): 2}
    assert [(d.cluster, d.replicas) for d in plan.dropped] == [("a", 2)]
    assert "gpu=drain:NoExecute" in plan.dropped[0].reason


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "gpu", "operator": "Equal", "value": "busy", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists"},
        {"operator": "Exists"},
    ],
)
def test_tolerations_let_replicas_onto_tainted_pools(toleration):
    taint = [{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]
    plan = place(
        deployment(replicas=1, tolerations=[toleration]), [cluster("a", pool(taints=taint))], [], 1
    )
    assert placed(plan) == {("a", "h100"): 1}


def test_a_toleration_for_another_value_does_not_help():
    taint = [{"key": "gpu", "value": "busy", "effect": "NoSchedule"}]
    tolerate = [{"key": "gpu", "operator": "Equal", "value": "idle"}]
    plan = place(
        deployment(replicas=1, tolerations=tolerate), [cluster("a", pool(taints=taint))], [], 1
    )
    assert plan.reason == (
        "every matching pool has a taint the deployment does not tolerate "
        "(a/h100 gpu=busy:NoSchedule)"
    )


# --- Clusters coming and going ----------------------------------------------------------------


def test_replicas_on_a_cluster_that_went_away_move_elsewhere():
    existing = [holding("m", "gone", "h100", 2), holding("m", "b", "h100", 1)]
    plan = place(deployment(replicas=3), [cluster("a"), cluster("b")], existing, 3)
    assert placed(plan) == {("a", "h100"): 2, ("b", "h100"): 1}
    assert [(d.cluster, d.reason) for d in plan.dropped] == [
        ("gone", "InferenceCluster gone no longer exists")
    ]


def test_cluster_selector_match_expressions_are_applied():
    selector = {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["prod"]}]}
    clusters = [cluster("a", labels={"tier": "dev"}), cluster("b", labels={"tier": "prod"})]
    plan = place(deployment(replicas=2, cluster_selector=selector), clusters, [], 2)
    assert placed(plan) == {("b", "h100"): 2}


def test_the_older_holder_keeps_contested_capacity():
    # Both deployments think they hold a's only node; the older one keeps it.
    clusters = [cluster("a", pool(nodes=1))]
    mine = holding("m", "a", "h100", 1, devices=8, created="2026-01-02T00:00:00Z")
    theirs = holding("other", "a", "h100", 1, devices=8, created="2026-01-01T00:00:00Z")
    plan = place(deployment(replicas=1, devices=8), clusters, [mine, theirs], 1)
    assert plan.placements == ()
    assert [d.reason for d in plan.dropped] == ["no longer fits beside older holders"]


def test_the_younger_holder_does_not_displace_an_older_one():
    clusters = [cluster("a", pool(nodes=1))]
    mine = holding("m", "a", "h100", 1, devices=8, created="2026-01-01T00:00:00Z")
    theirs = holding("other", "a", "h100", 1, devices=8, created="2026-01-02T00:00:00Z")
    plan = place(deployment(replicas=1, devices=8), clusters, [mine, theirs], 1)
    assert placed(plan) == {("a", "h100"): 1}


# --- Unplaceable reasons -------------------------------------------------------------------------


def test_reason_names_the_missing_devices_and_the_most_free_pool():
    others = [holding("other", "a", "h100", 14), holding("other", "b", "h100", 15)]
    plan = place(deployment(replicas=1, devices=4), [cluster("a"), cluster("b")], others, 1)
    assert plan.reason == "needs 4 free H100 per replica; most free: a/h100 2"
    assert plan.nearest == ("a", "h100")


def test_reason_when_no_cluster_matches_the_selector():
    plan = place(
        deployment(cluster_selector={"matchLabels": {"tier": "gpu"}}), [cluster("a")], [], 1
    )
    assert plan.reason == "no InferenceCluster matches spec.template.spec.clusterSelector (1 exist)"


def test_reason_names_a_misspelt_attribute_with_the_known_ones():
    selector = 'device.attributes["gpu.nvidia.com"].prodcutName == "H100"'
    plan = place(deployment(selector=selector), [cluster("a"), cluster("b")], [], 1)
    assert plan.reason == (
        "no node pool on the 2 selected clusters has matching devices: "
        "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel: "
        "no such attribute 'prodcutName' on any selected pool's devices "
        "(known attributes: gpu.nvidia.com/productName; capacity: gpu.nvidia.com/memory)"
    )


def test_reason_when_devices_do_not_satisfy_the_selector():
    plan = place(deployment(selector=H100.replace("H100", "B200")), [cluster("a")], [], 1)
    assert plan.reason.endswith(
        "selectors[0].cel: no selected pool's devices satisfy "
        '\'device.attributes["gpu.nvidia.com"].productName == "B200"\''
    )


# --- Properties ----------------------------------------------------------------------------

_pools = st.builds(
    lambda nodes, per_node, fabric_split, product: pool(
        f"p-{product.lower()}",
        nodes=nodes,
        per_node=per_node,
        product=product,
        fabrics=[("f1", fabric_split), ("f2", nodes - fabric_split)] if fabric_split else None,
    ),
    st.integers(min_value=0, max_value=6),
    st.sampled_from([1, 2, 4, 8]),
    st.integers(min_value=0, max_value=3),
    st.sampled_from(["H100", "L40S"]),
).filter(lambda p: not p.get("fabrics") or p["fabrics"][1]["nodes"] >= 0)

_fleets = st.lists(
    st.lists(_pools, min_size=1, max_size=2, unique_by=lambda p: p["name"]), min_size=1, max_size=4
)


@st.composite
def scenarios(draw):
    fleet = [cluster(f"c{i}", *pools) for i, pools in enumerate(draw(_fleets))]
    devices = draw(st.sampled_from([1, 2, 4, 8]))
    workers = draw(st.sampled_from([0, 0, 1, 2]))
    replicas = draw(st.integers(min_value=0, max_value=12))
    holdings = []
    for i, c in enumerate(fleet):
        for p in c.pools:
            n = draw(st.integers(min_value=0, max_value=3))
            if n:
                holdings.append(
                    holding(
                        f"other{i}", c.name, p.name, n, devices=draw(st.sampled_from([1, 2, 8]))
                    )
                )
        if draw(st.booleans()):
            holdings.append(
                holding(
                    "m",
                    c.name,
                    c.pools[0].name,
                    draw(st.integers(0, 4)),
                    devices=devices,
                    workers=workers,
                )
            )
    selector = H100 if draw(st.booleans()) else "true"
    return (
        deployment(replicas=replicas, devices=devices, workers=workers, selector=selector),
        fleet,
        holdings,
    )


def _own_footprint(dep):
    first = dep.engines[0].members[0]
    if dep.engines[0].multi_node:
        return Footprint(gangs=(first.worker_nodes + 1,))
    return Footprint(pods=(first.devices_per_pod,))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_never_places_more_than_capacity(scenario):
    dep, fleet, holdings = scenario
    mine = [h for h in holdings if h.deployment == "m"]
    plan = place(dep, fleet, mine, dep.replicas)
    by_name = {c.name: c for c in fleet}
    footprint = _own_footprint(dep)
    for p in plan.placements:
        pool_ = by_name[p.cluster].pool(p.pool)
        if footprint.gangs:
            # whole nodes, each replica inside one fabric
            fabrics = [f.nodes for f in pool_.fabrics] or [pool_.nodes]
            assert p.replicas <= sum(n // footprint.gangs[0] for n in fabrics)
        else:
            assert p.replicas <= pool_.nodes * (pool_.per_node // footprint.pods[0])
    assert plan.placed + plan.unplaceable == dep.replicas


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=0, max_value=6),
    st.integers(min_value=0, max_value=8),
    st.sampled_from([1, 2, 3, 4, 8]),
    st.integers(min_value=0, max_value=40),
)
def test_never_places_into_capacity_older_holders_use(nodes, held_nodes, devices, replicas):
    # An older deployment holds whole nodes (pods of 8 on 8-device nodes).
    fleet = [cluster("a", pool(nodes=nodes))]
    older = [holding("old", "a", "h100", held_nodes, devices=8, created="2025-01-01T00:00:00Z")]
    plan = place(deployment(replicas=replicas, devices=devices), fleet, older, replicas)
    free_nodes = max(0, nodes - held_nodes)
    assert plan.placed <= free_nodes * (8 // devices)
    assert plan.placed == min(replicas, free_nodes * (8 // devices))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_never_uses_two_pools_on_one_cluster(scenario):
    dep, fleet, holdings = scenario
    plan = place(dep, fleet, holdings, dep.replicas)
    clusters = [p.cluster for p in plan.placements]
    assert len(clusters) == len(set(clusters))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.randoms(use_true_random=False))
def test_same_input_gives_the_same_plan_in_any_order(scenario, rnd):
    dep, fleet, holdings = scenario
    first = place(dep, fleet, holdings, dep.replicas)
    shuffled_fleet, shuffled_holdings = list(fleet), list(holdings)
    rnd.shuffle(shuffled_fleet)
    rnd.shuffle(shuffled_holdings)
    assert place(dep, shuffled_fleet, shuffled_holdings, dep.replicas) == first


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_existing_placements_are_kept_when_they_fit(scenario):
    dep, fleet, holdings = scenario
    by_name = {c.name: c for c in fleet}
    mine = [h for h in holdings if h.deployment == "m" and h.replicas]
    for h in mine:
        pool_ = by_name[h.cluster].pool(h.pool)
        assume(dep.cluster_selector.matches(by_name[h.cluster].labels))
        assume(
            pool_.profile.attributes[0][2] == "H100"
            or "true" in dep.engines[0].members[0].devices[0].selectors
        )
        room = PoolRoom(pool_)
        assume(all(room.take(_own_footprint(dep)) for _ in range(h.replicas)))
    desired = sum(h.replicas for h in mine)
    # Alone or beside younger holders, placements that fit stay exactly where they are.
    younger = [h for h in holdings if h.deployment != "m"]
    younger = [Holding(**{**h.__dict__, "order": ("2027", *h.order[1:])}) for h in younger]
    plan = place(dep, fleet, mine + younger, desired)
    assert placed(plan) == {(h.cluster, h.pool): h.replicas for h in mine}
    assert plan.dropped == ()


def test_room_never_goes_negative_under_random_takes():
    rnd = random.Random(7)
    room = PoolRoom(cluster("a", pool(nodes=5, fabrics=[("x", 2), ("y", 3)], max_nodes=7)).pools[0])
    for _ in range(200):
        footprint = rnd.choice(
            [Footprint(pods=(rnd.choice([1, 3, 8]),)), Footprint(gangs=(rnd.choice([1, 2, 3]),))]
        )
        room.take(footprint)
        assert room.loose >= 0
        assert all(v >= 0 for v in room.fabric_free.values())
        assert all(v >= 0 for v in room.partial)
        used_nodes = 7 - room.loose - sum(room.fabric_free.values())
        assert sum(room.partial[1:-1]) <= used_nodes


def test_new_replicas_prefer_a_cluster_the_deployment_is_already_on_when_counts_tie():
    # Held at 0 (it was parked): placed again there, not on the first cluster by name.
    existing = [holding("m", "b", "h100", 0)]
    plan = place(deployment(replicas=1), [cluster("a"), cluster("b")], existing, 1)
    assert placed(plan) == {("b", "h100"): 1}


AUTOSCALING = {"minReplicas": 1, "maxReplicas": 4}


def test_an_autoscaled_deployment_uses_at_most_the_adaptive_policys_member_limit():
    limit = contracts.ADAPTIVE_POLICY_MAX_CLUSTERS
    fleet = [cluster(f"c{i:03d}") for i in range(limit + 20)]
    plan = place(deployment(replicas=limit + 20, autoscaling=AUTOSCALING), fleet, [], limit + 20)
    assert len(plan.placements) == limit
    assert plan.placed == limit + 20  # the rest pack onto clusters already used


def test_an_autoscaled_deployment_over_the_limit_gives_up_its_smallest_clusters():
    limit = contracts.ADAPTIVE_POLICY_MAX_CLUSTERS
    fleet = [cluster(f"c{i:03d}") for i in range(limit + 1)]
    existing = [holding("m", c.name, "h100", 2 if i else 1) for i, c in enumerate(fleet)]
    plan = place(
        deployment(replicas=2 * limit + 1, autoscaling=AUTOSCALING), fleet, existing, 2 * limit + 1
    )
    assert len(plan.placements) == limit
    assert [(d.cluster, d.replicas) for d in plan.dropped] == [("c000", 1)]


def test_the_member_limit_is_the_adaptive_policys_schema_limit():
    crd = yaml.safe_load((REPO / "apis" / "adaptivepolicies" / "definition.yaml").read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["properties"]["clusters"]["maxItems"] == contracts.ADAPTIVE_POLICY_MAX_CLUSTERS


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.builds(lambda k: Footprint(pods=(k,)), st.sampled_from([1, 3, 4, 8, 9])),
            st.builds(lambda n: Footprint(gangs=(n,)), st.integers(1, 5)),
            st.builds(lambda k: Footprint(pods=(k, k)), st.sampled_from([2, 4])),
        ),
        max_size=30,
    )
)
def test_a_replica_that_does_not_fit_takes_nothing(footprints):
    room = PoolRoom(cluster("a", pool(nodes=5, fabrics=[("x", 2), ("y", 2)], max_nodes=6)).pools[0])
    for footprint in footprints:
        before = (dict(room.fabric_free), room.loose, list(room.partial))
        free = room.free_devices()
        if room.take(footprint):
            assert room.free_devices() == free - _devices(footprint, room.per_node)
        else:
            assert (dict(room.fabric_free), room.loose, list(room.partial)) == before


def _devices(footprint, per_node):
    return sum(footprint.pods) + sum(footprint.gangs) * per_node


# --- Pools with more than one device driver (GPUs and NICs) ------------------------------

RDMA = 'device.attributes["dra.net"].rdma'


def with_nics(raw, *, per_node=8, rdma=True):
    return {
        **raw,
        "additionalDevices": [
            {"driver": "dra.net", "perNode": per_node, "attributes": {"rdma": {"bool": rdma}}}
        ],
    }


def nic_request(count=1, selector=RDMA):
    return {
        "name": "rdma",
        "count": count,
        "deviceClassName": "dra.net",
        "selectors": [{"cel": selector}],
    }


def test_a_request_for_nics_goes_to_the_pool_that_has_them():
    plain, nics = pool("a-plain", nodes=4), with_nics(pool("b-nics", nodes=1))
    dep = deployment(replicas=1, devices=8, extra_requests=[nic_request(8)])
    assert placed(place(dep, [cluster("a", plain, nics)], [], 1)) == {("a", "b-nics"): 1}


def test_nics_do_not_count_against_the_gpus_on_a_node():
    # 8 GPUs + 8 NICs per pod on an 8-GPU node: one node per replica, not two.
    nics = with_nics(pool(nodes=2))
    dep = deployment(replicas=2, devices=8, extra_requests=[nic_request(8)])
    plan = place(dep, [cluster("a", nics)], [], 2)
    assert placed(plan) == {("a", "h100"): 2}
    assert plan.unplaceable == 0


def test_the_reason_names_the_request_that_blocks_on_the_closest_pool():
    # The H100 pool matches the GPU request but has no NICs; the L40S pool matches
    # nothing. The NIC request blocks, not the GPU selector the L40S pool fails first.
    h100, l40s = pool("h100"), pool("l40s", product="L40S")
    dep = deployment(replicas=1, extra_requests=[nic_request()])
    plan = place(dep, [cluster("a", h100, l40s)], [], 1)
    assert plan.unplaceable == 1
    assert "members[0].nodeSelector.devices[1]: the closest pool has no dra.net devices" in (
        plan.reason
    ), plan.reason


def test_a_nic_selector_that_fails_is_named_with_its_path():
    dep = deployment(replicas=1, extra_requests=[nic_request()])
    plan = place(dep, [cluster("a", with_nics(pool(), rdma=False))], [], 1)
    assert plan.reason.endswith(
        "devices[1].selectors[0].cel: no selected pool's devices satisfy "
        "'device.attributes[\"dra.net\"].rdma'"
    ), plan.reason


def test_more_nics_per_pod_than_a_node_has_is_named_by_count():
    dep = deployment(replicas=1, extra_requests=[nic_request(4)])
    plan = place(dep, [cluster("a", with_nics(pool(), per_node=2))], [], 1)
    assert "devices[1].count: more dra.net devices than the closest pool has on one node (2)" in (
        plan.reason
    ), plan.reason
