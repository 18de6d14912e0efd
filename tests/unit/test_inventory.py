"""The member's fleet inventory (functions/runtime/agent/inventory.py, idle.py), on plain
objects."""

from __future__ import annotations

import pytest

from functions.common.contracts import LABEL_DEPLOYMENT, LABEL_ROLE, LABEL_SERVING
from functions.common.inventory import (
    GPU_DRIVER,
    IDLE_AFTER_SECONDS,
    LABEL_FABRIC,
    FabricLabel,
    fabric_labels_of_pools,
    format_fabric_label,
    node_fabric,
    parse_fabric_label,
)
from functions.runtime.agent.idle import Counters, IdleMemory, counters_from_signals
from functions.runtime.agent.inventory import (
    MemberObjects,
    compute_inventory,
    node_state,
    published_devices,
    replica_state,
)
from functions.runtime.agent.signals import SignalHistory, parse_page

NOW = 1_800_000_000.0


def node(name, *, ready=True, unschedulable=False, fabric=None, taints=()):
    labels = {LABEL_FABRIC: fabric} if fabric else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": unschedulable, "taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def resource_slice(node_name, devices, *, generation=1, product="NVIDIA H100", driver=GPU_DRIVER):
    return {
        "metadata": {"name": f"{node_name}-{driver}-{generation}"},
        "spec": {
            "driver": driver,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": d if isinstance(d, str) else d[0],
                    "attributes": {"productName": {"string": product}},
                    **({} if isinstance(d, str) else {"taints": [d[1]]}),
                }
                for d in devices
            ],
        },
    }


def claim(namespace, name, node_name, devices):
    return {
        "metadata": {"namespace": namespace, "name": name},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"driver": GPU_DRIVER, "pool": node_name, "device": d, "request": "gpu"}
                        for d in devices
                    ]
                }
            }
        },
    }


def pod(name, node_name, *, serving=None, role="Standalone", ready=True, claims=(), **extra):
    labels = {}
    if serving:
        labels = {LABEL_SERVING: serving, LABEL_DEPLOYMENT: "llama", LABEL_ROLE: role}
    meta = {"namespace": "ml", "name": name, "labels": labels}
    meta.update(extra.pop("metadata", {}))
    status = {
        "phase": extra.pop("phase", "Running"),
        "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": c} for c in claims],
    }
    status.update(extra.pop("status", {}))
    return {"metadata": meta, "spec": {"nodeName": node_name}, "status": status}


def inventory(objects, counters=None, memory=None, now=NOW):
    return compute_inventory(objects, counters or Counters(), memory or IdleMemory(), now)


@pytest.mark.parametrize(
    ("case", "obj", "pods", "expected"),
    [
        ("ready_node_is_ready", node("a"), [], "ready"),
        ("not_ready_node_is_unreachable", node("a", ready=False), [], "unreachable"),
        ("cordoned_and_empty_is_cordoned", node("a", unschedulable=True), [], "cordoned"),
        (
            "cordoned_with_pods_is_draining",
            node("a", unschedulable=True),
            [pod("p", "a")],
            "draining",
        ),
        (
            "daemonset_pods_do_not_make_a_node_draining",
            node("a", unschedulable=True),
            [pod("p", "a", metadata={"ownerReferences": [{"kind": "DaemonSet"}]})],
            "cordoned",
        ),
        (
            "karpenter_disruption_taint_is_draining",
            node("a", taints=[{"key": "karpenter.sh/disrupted", "effect": "NoSchedule"}]),
            [pod("p", "a")],
            "draining",
        ),
    ],
)
def test_node_state(case, obj, pods, expected):
    assert node_state(obj, pods) == expected, case


@pytest.mark.parametrize(
    ("case", "obj", "expected"),
    [
        ("ready_pod_is_ready", pod("p", "a", serving="r"), "ready"),
        ("unready_pod_is_starting", pod("p", "a", serving="r", ready=False), "starting"),
        (
            "terminating_pod_is_draining",
            pod("p", "a", serving="r", metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"}),
            "draining",
        ),
        (
            "crash_looping_pod_is_failed",
            pod(
                "p",
                "a",
                serving="r",
                ready=False,
                status={
                    "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
                },
            ),
            "failed",
        ),
    ],
)
def test_replica_state(case, obj, expected):
    assert replica_state(obj) == expected, case


def test_counts_gpus_free_as_total_minus_used_minus_unhealthy():
    objects = MemberObjects(
        nodes=[node("a", fabric="nvl-1"), node("b", fabric="nvl-1"), node("c", ready=False)],
        slices=[
            resource_slice("a", ["gpu-0", "gpu-1"]),
            resource_slice("b", ["gpu-0", ("gpu-1", {"key": "xid", "effect": "NoSchedule"})]),
            resource_slice("c", ["gpu-0", "gpu-1"]),
            resource_slice("a", ["nic-0"], driver="net.example.com"),
        ],
        claims=[claim("ml", "c1", "a", ["gpu-0"])],
        pods=[pod("p", "a", serving="r", claims=["c1"])],
    )
    document, _ = inventory(objects)
    assert document["gpus"] == [
        {"deviceClass": "NVIDIA H100", "total": 6, "used": 1, "unhealthy": 3}
    ]
    assert document["nodes"] == {
        "total": 3,
        "ready": 2,
        "cordoned": 0,
        "draining": 0,
        "unreachable": 1,
    }
    # a holds a claim and b a tainted device: no node is entirely free in nvl-1.
    assert document["fabrics"] == [
        {"name": "nvl-1", "nodes": 2, "largestFreeBlock": 0},
        {"name": "unlabelled", "nodes": 1, "largestFreeBlock": 0},
    ]


def test_an_allocated_device_on_an_unreachable_node_is_unhealthy_not_used():
    objects = MemberObjects(
        nodes=[node("a", ready=False)],
        slices=[resource_slice("a", ["gpu-0"])],
        claims=[claim("ml", "c1", "a", ["gpu-0"])],
        pods=[],
    )
    (gpus,) = inventory(objects)[0]["gpus"]
    assert (gpus["used"], gpus["unhealthy"]) == (0, 1)


def test_only_the_newest_generation_of_a_pool_counts():
    devices = published_devices(
        [resource_slice("a", ["gpu-0", "gpu-1"]), resource_slice("a", ["gpu-0"], generation=2)]
    )
    assert [d.key[2] for d in devices] == ["gpu-0"]


def test_largest_free_block_counts_entirely_free_ready_nodes_per_fabric():
    objects = MemberObjects(
        nodes=[
            node("a", fabric="f1"),
            node("b", fabric="f1"),
            node("c", fabric="f1", unschedulable=True),
            node("d", fabric="f2"),
        ],
        slices=[resource_slice(n, ["gpu-0", "gpu-1"]) for n in "abcd"],
        claims=[claim("ml", "c1", "d", ["gpu-1"])],
        pods=[],
    )
    fabrics = inventory(objects)[0]["fabrics"]
    assert fabrics == [
        {"name": "f1", "nodes": 3, "largestFreeBlock": 2},
        {"name": "f2", "nodes": 1, "largestFreeBlock": 0},
    ]


# Two pools as an InferenceCluster declares them: h100 names its fabric in the
# network.example.com/fabric label on its nodes (selected by karpenter.sh/nodepool),
# a100 declares no label (the default, modelplane.ai/fabric).
POOLS = [
    {
        "name": "h100",
        "nodeSelector": {"karpenter.sh/nodepool": "h100"},
        "fabricNodeLabel": "network.example.com/fabric",
    },
    {"name": "a100", "nodeSelector": {"karpenter.sh/nodepool": "a100"}},
]


def labelled(name, labels):
    n = node(name)
    n["metadata"]["labels"] = labels
    return n


def test_fabrics_are_read_from_the_label_each_pool_declares():
    objects = MemberObjects(
        nodes=[
            labelled("a", {"karpenter.sh/nodepool": "h100", "network.example.com/fabric": "ib-a"}),
            labelled("b", {"karpenter.sh/nodepool": "h100", "network.example.com/fabric": "ib-b"}),
            # An h100 node carrying the default label too: its pool's label wins.
            labelled(
                "c",
                {
                    "karpenter.sh/nodepool": "h100",
                    "network.example.com/fabric": "ib-a",
                    LABEL_FABRIC: "stale",
                },
            ),
            labelled("d", {"karpenter.sh/nodepool": "a100", LABEL_FABRIC: "nvl-1"}),
            # The a100 pool's nodes are not read through h100's label.
            labelled("e", {"karpenter.sh/nodepool": "a100", "network.example.com/fabric": "ib-a"}),
        ],
        slices=[resource_slice(n, ["gpu-0"]) for n in "abcde"],
        claims=[],
        pods=[],
    )
    fabrics = compute_inventory(
        objects, Counters({}), IdleMemory(), NOW, fabric_labels=fabric_labels_of_pools(POOLS)
    )[0]["fabrics"]
    assert fabrics == [
        {"name": "ib-a", "nodes": 2, "largestFreeBlock": 2},
        {"name": "ib-b", "nodes": 1, "largestFreeBlock": 1},
        {"name": "nvl-1", "nodes": 1, "largestFreeBlock": 1},
        {"name": "unlabelled", "nodes": 1, "largestFreeBlock": 1},
    ]
    # Without the pools' labels (an agent given none), the default label only.
    default = inventory(objects)[0]["fabrics"]
    assert [f["name"] for f in default] == ["nvl-1", "stale", "unlabelled"]


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"x/fab": "f1"}, "f1"),
        ({LABEL_FABRIC: "f2"}, "f2"),
        ({"x/fab": "f1", LABEL_FABRIC: "f2"}, "f1"),
        ({}, "unlabelled"),
    ],
    ids=["declared_label", "default_label", "declared_before_default", "neither"],
)
def test_a_selectorless_pool_label_is_read_on_any_node(labels, expected):
    assert node_fabric(labels, [FabricLabel("x/fab")]) == expected


@pytest.mark.parametrize("pool", POOLS, ids=lambda p: p["name"])
def test_the_fabric_label_argument_round_trips(pool):
    (fabric,) = fabric_labels_of_pools([pool])
    assert parse_fabric_label(format_fabric_label(fabric)) == fabric


@pytest.mark.parametrize("text", ["", ":a=b", "x/fab:nodepool"], ids=["empty", "no_label", "no_eq"])
def test_a_malformed_fabric_label_argument_names_what_is_wrong(text):
    with pytest.raises(ValueError, match=r"expected LABEL|is not key=value"):
        parse_fabric_label(text)


def _serving(counter_value=None, error=""):
    objects = MemberObjects(
        nodes=[node("a")],
        slices=[resource_slice("a", ["gpu-0", "gpu-1"])],
        claims=[claim("ml", "c1", "a", ["gpu-0", "gpu-1"])],
        pods=[
            pod("leader", "a", serving="llama-x", role="Leader", claims=["c1"]),
            pod("worker", "a", serving="llama-x", role="Worker"),
        ],
    )
    counts = {} if counter_value is None else {("ml", "llama-x"): counter_value}
    return objects, Counters(counts, error)


def test_a_replica_whose_counter_has_not_moved_for_ten_minutes_is_idle_with_its_gpus():
    objects, counters = _serving(42.0)
    document, memory = inventory(objects, counters)
    assert document["idleReplicas"] == []
    assert document["replicas"] == {"ready": 1, "starting": 0, "draining": 0, "failed": 0}
    later = NOW + IDLE_AFTER_SECONDS
    document, _ = inventory(
        objects, counters, IdleMemory.from_annotation(memory.to_annotation()), later
    )
    assert document["idleReplicas"] == [
        {
            "namespace": "ml",
            "name": "llama-x",
            "deployment": "llama",
            "idleSeconds": IDLE_AFTER_SECONDS,
            "gpus": 2,
        }
    ]


def test_a_counter_that_moved_restarts_the_idle_clock():
    objects, counters = _serving(42.0)
    _, memory = inventory(objects, counters)
    objects, moved = _serving(43.0)
    document, memory = inventory(objects, moved, memory, NOW + IDLE_AFTER_SECONDS)
    assert document["idleReplicas"] == []
    assert memory.counters[("ml", "llama-x")] == (43.0, NOW + IDLE_AFTER_SECONDS)


def test_without_counters_nobody_is_idle_and_the_clock_is_kept():
    objects, counters = _serving(42.0)
    _, memory = inventory(objects, counters)
    objects, missing = _serving(error="no source")
    document, kept = inventory(objects, missing, memory, NOW + 2 * IDLE_AFTER_SECONDS)
    assert document["idleReplicas"] == []
    assert document["requestCounters"] == "Unavailable: no source"
    assert kept.counters == memory.counters


def test_idle_memory_survives_a_malformed_annotation():
    assert IdleMemory.from_annotation("{not json").counters == {}
    assert IdleMemory.from_annotation('{"ml/x": [1, 2]}').counters == {("ml", "x"): (1.0, 2.0)}


@pytest.mark.parametrize(
    ("case", "still_for", "idle"),
    [
        ("counter_still_for_the_threshold_is_idle", 30.0, True),
        ("counter_still_for_less_is_not_idle_yet", 29.0, False),
    ],
)
def test_the_idle_threshold_is_the_agents_setting_and_the_document_names_it(case, still_for, idle):
    objects, counters = _serving(42.0)
    document, memory = compute_inventory(objects, counters, IdleMemory(), NOW, idle_after=30)
    assert document["idleAfterSeconds"] == 30
    document, _ = compute_inventory(objects, counters, memory, NOW + still_for, idle_after=30)
    assert [r["name"] for r in document["idleReplicas"]] == (["llama-x"] if idle else [])
    assert document["idleAfterSeconds"] == 30


def test_without_a_setting_the_threshold_is_ten_minutes():
    objects, counters = _serving(42.0)
    document, memory = inventory(objects, counters)
    assert document["idleAfterSeconds"] == IDLE_AFTER_SECONDS == 600
    document, _ = inventory(objects, counters, memory, NOW + IDLE_AFTER_SECONDS - 1)
    assert document["idleReplicas"] == []


def test_a_replica_the_counters_do_not_cover_is_never_idle_and_keeps_its_clock():
    """Unknown is not idle: a page without the replica's deployment (its engine is not
    scraped, or exports no request counter) says nothing about whether it is asked."""
    objects, counters = _serving(42.0)
    _, memory = inventory(objects, counters)
    uncovered = Counters(by_deployment={("ml", "another-model"): 7.0})
    document, kept = inventory(objects, uncovered, memory, NOW + 2 * IDLE_AFTER_SECONDS)
    assert document["idleReplicas"] == []
    assert document["requestCounters"] == "Available"
    assert kept.counters == memory.counters


def _history(page: str) -> SignalHistory:
    history = SignalHistory(60.0)
    history.add(parse_page(page, NOW))
    return history


def test_the_signals_page_counts_requests_per_deployment_and_only_where_it_has_the_counter():
    page = (
        "# TYPE modelplane_requests_total counter\n"
        'modelplane_requests_total{k8s_namespace_name="ml",modelplane_deployment="llama",'
        'finish_reason="stop"} 40\n'
        'modelplane_requests_total{k8s_namespace_name="ml",modelplane_deployment="llama",'
        'finish_reason="length"} 2\n'
        "# TYPE modelplane_requests_running gauge\n"
        'modelplane_requests_running{k8s_namespace_name="ml",modelplane_deployment="qwen"} 3\n'
    )
    counters = counters_from_signals(_history(page))
    assert counters.error == ""
    assert counters.of(("ml", "llama-us-east-1"), "llama") == 42.0
    # qwen's engine is on the page with a gauge only: its counter is unknown, not zero.
    assert counters.of(("ml", "qwen-us-east-1"), "qwen") is None


def test_an_unread_signals_page_gives_no_counters_and_says_why():
    history = SignalHistory(60.0)
    assert "no signals page read yet" in counters_from_signals(history).error
    history.failed("connection refused")
    assert "connection refused" in counters_from_signals(history).error


def test_every_field_the_agent_writes_is_declared_in_the_xrd():
    """The API server prunes status fields the InferenceCluster XRD does not declare: one
    the agent writes but the XRD lacks would never reach `modelplane status`."""
    import yaml  # noqa: PLC0415

    from tests.conftest import REPO  # noqa: PLC0415

    xrd = yaml.safe_load((REPO / "apis" / "inferenceclusters" / "definition.yaml").read_text())
    status = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    declared = status["properties"]["inventory"]["properties"]
    objects, counters = _serving(42.0)
    _, memory = inventory(objects, counters)
    document, _ = inventory(objects, counters, memory, NOW + IDLE_AFTER_SECONDS)
    assert set(document) <= set(declared), set(document) - set(declared)
    (idle,) = document["idleReplicas"]
    assert set(idle) <= set(declared["idleReplicas"]["items"]["properties"])
