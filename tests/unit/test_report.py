"""A member's report from plain cluster state: needed, static room on registered nodes
only, NodePool headroom, signals that must be one sample, safePressure, conditions and
the spec hash."""

import pytest

from functions.common.quantity import quantity_float as parse_quantity
from functions.common.scheduling import Taint
from functions.runtime.agent.parse import (
    node_info,
    node_pool_info,
    pod_needs_from_template,
    pod_state,
)
from functions.runtime.shared.policy import (
    PolicySpec,
    format_duration,
    parse_duration,
    rfc3339,
    spec_hash,
)
from functions.runtime.shared.report import (
    NODEPOOL_LABEL,
    REASON_NOT_A_MEMBER,
    REASON_OBSERVATION_FAILED,
    REASON_OBSERVED,
    MemberInputs,
    NodeInfo,
    NodePoolInfo,
    PodState,
    Report,
    SignalResult,
    compute_report,
)

NOW = 1_800_000_000.0
GPU = "nvidia.com/gpu"


def spec(**overrides) -> PolicySpec:
    raw = {
        "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
        "clusters": [
            {
                "name": "east",
                "maxReplicas": 8,
                "nodePools": ["h100"],
                "nodeSelector": {"pool": "static"},
            },
            {"name": "west", "maxReplicas": 4},
        ],
    }
    raw.update(overrides)
    return PolicySpec.model_validate(raw)


TEMPLATE = {
    "spec": {
        "containers": [{"name": "engine", "resources": {"requests": {GPU: "1", "cpu": "4"}}}],
        "nodeSelector": {"gpu": "h100"},
        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
    }
}
NEEDS = pod_needs_from_template(TEMPLATE)


def gpu_node(name, pool="h100", free_gpus=2, **kw):
    labels = {"gpu": "h100"}
    if pool:
        labels[NODEPOOL_LABEL] = pool
    labels.update(kw.pop("labels", {}))
    return NodeInfo(
        name,
        labels,
        {GPU: 8.0, "cpu": 96.0, "pods": 110.0},
        {GPU: 8.0 - free_gpus, "cpu": 8.0, "pods": 3.0},
        **kw,
    )


def inputs(**kw) -> MemberInputs:
    base = {
        "desired": 2,
        "pods": (PodState("a", "n1", True), PodState("b", "n1", True)),
        "needs": NEEDS,
        "nodes": (),
    }
    base.update(kw)
    return MemberInputs(**base)


def test_needed_counts_unschedulable_replicas():
    pods = (
        PodState("a", "n1", True),
        PodState("b", None, False, unschedulable=True),
        PodState("c", None, False, unschedulable=True),
    )
    report = compute_report(inputs(desired=3, pods=pods), spec(), "east", None, NOW).report
    assert (report.ready, report.scheduled, report.needed) == (1, 1, 2)


def test_needed_follows_the_load_when_demand_and_replica_capacity_are_set():
    policy = spec(signals={"demand": "sum(x)"}, capacity={"replicaCapacity": 10})
    signals = {"demand": SignalResult((61.0,))}
    report = compute_report(inputs(signals=signals), policy, "east", None, NOW).report
    assert report.needed == 5  # ceil(61 / 10) = 7, minus the 2 on nodes
    assert report.demand == 61.0


def test_static_room_counts_only_registered_nodes_that_admit_the_pod():
    nodes = (
        gpu_node("pool-node", free_gpus=3),  # registered NodePool: 3
        gpu_node("other-pool", pool="a100", free_gpus=8),  # unregistered pool
        gpu_node("static", pool=None, free_gpus=2, labels={"pool": "static"}),  # selector: 2
        gpu_node("stray", pool=None, free_gpus=8),  # unmanaged, not selected
        gpu_node("cordoned", free_gpus=8, unschedulable=True),
        gpu_node("not-ready", free_gpus=8, ready=False),
        NodeInfo("cpu-only", {NODEPOOL_LABEL: "h100"}, {"cpu": 64.0}, {}),  # wrong nodeSelector
    )
    result = compute_report(inputs(nodes=nodes), spec(), "east", None, NOW)
    assert result.report.static_room == 5
    assert result.static.registered_nodes == 5
    assert result.static.filtered_nodes == 5


def test_a_taint_the_template_does_not_tolerate_keeps_a_node_out():
    nodes = (gpu_node("busy", free_gpus=4, taints=(Taint("dedicated", "other", "NoSchedule"),)),)
    assert compute_report(inputs(nodes=nodes), spec(), "east", None, NOW).report.static_room == 0


def test_required_node_affinity_is_a_hard_constraint():
    template = {
        "spec": {
            **TEMPLATE["spec"],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "zone", "operator": "In", "values": ["a"]}
                                ]
                            }
                        ]
                    }
                }
            },
        }
    }
    needs = pod_needs_from_template(template)
    nodes = (
        gpu_node("zone-a", free_gpus=1, labels={"zone": "a"}),
        gpu_node("zone-b", free_gpus=4, labels={"zone": "b"}),
    )
    report = compute_report(inputs(nodes=nodes, needs=needs), spec(), "east", None, NOW).report
    assert report.static_room == 1


def test_nodepool_headroom_is_limits_minus_usage_in_replicas():
    pools = (
        NodePoolInfo("h100", {GPU: 16.0, "cpu": 1000.0}, {GPU: 13.0, "cpu": 100.0}),
        NodePoolInfo("a100", {GPU: 64.0}, {}),  # not registered on this member
    )
    report = compute_report(inputs(node_pools=pools), spec(), "east", None, NOW).report
    assert report.node_pool_headroom == 3


def test_recurring_launch_failures_void_a_nodepools_headroom():
    pools = (NodePoolInfo("h100", {GPU: 16.0}, {}, recent_launch_failures=2),)
    assert (
        compute_report(
            inputs(node_pools=pools), spec(), "east", None, NOW
        ).report.node_pool_headroom
        == 0
    )


def test_a_nodepool_without_limits_is_bounded_by_max_replicas():
    pools = (NodePoolInfo("h100", {}, {}),)
    assert (
        compute_report(
            inputs(node_pools=pools), spec(), "east", None, NOW
        ).report.node_pool_headroom
        == 8
    )


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (SignalResult(()), "returned 0 samples, need exactly 1"),
        (SignalResult((1.0, 2.0)), "returned 2 samples, need exactly 1"),
        (SignalResult(error="connection refused"), "connection refused"),
        (SignalResult((float("nan"),)), "returned nan"),
    ],
    ids=["no-sample", "two-samples", "unreachable", "nan"],
)
def test_a_signal_that_is_not_exactly_one_sample_is_ignored_and_named(answer, why):
    policy = spec(signals={"pressure": "p", "latency": "l"})
    signals = {"pressure": answer, "latency": SignalResult((0.2,))}
    result = compute_report(inputs(signals=signals), policy, "east", None, NOW)
    assert result.report.pressure is None
    assert result.report.latency == 0.2
    assert result.condition.status == "False"
    assert result.condition.reason == REASON_OBSERVATION_FAILED
    assert result.condition.message == f"signals.pressure: {why} (ignored in this report)"


def test_a_saturated_members_pressure_is_not_certified_safe():
    policy = spec(signals={"pressure": "p"})
    pods = (PodState("a", "n1", True), PodState("b", None, False, unschedulable=True))
    signals = {"pressure": SignalResult((30.0,))}
    report = compute_report(inputs(pods=pods, signals=signals), policy, "east", 8.0, NOW).report
    assert report.safe_pressure == 8.0


def test_the_region_is_the_entrys_or_the_one_its_nodes_carry():
    labelled = (gpu_node("n", labels={"topology.kubernetes.io/region": "us-east-2"}),)
    assert compute_report(inputs(nodes=labelled), spec(), "east", None, NOW).report.region == (
        "us-east-2"
    )
    entry = spec(
        clusters=[{"name": "east", "maxReplicas": 8, "region": "eu-west-1"}],
    )
    assert compute_report(inputs(nodes=labelled), entry, "east", None, NOW).report.region == (
        "eu-west-1"
    )


DEFAULT_ANSWERS = {
    "demand": SignalResult((4.0,)),
    "pressure": SignalResult((1.5,)),
    "latency": SignalResult((0.2,)),
}


def test_a_good_report_is_observed():
    result = compute_report(inputs(signals=DEFAULT_ANSWERS), spec(), "east", None, NOW)
    assert (result.condition.status, result.condition.reason) == ("True", REASON_OBSERVED)
    assert (result.report.demand, result.report.pressure, result.report.latency) == (4.0, 1.5, 0.2)


def test_a_policy_naming_no_signal_reports_the_default_signals_and_names_a_missing_one():
    answers = {**DEFAULT_ANSWERS, "latency": SignalResult(error="no observations")}
    result = compute_report(inputs(signals=answers), spec(), "east", None, NOW)
    assert result.condition.status == "False"
    assert result.condition.message == "signals.latency: no observations (ignored in this report)"
    # Ignored, not read as zero; the report says which and why.
    assert result.report.latency is None
    assert result.report.demand == 4.0
    status = result.report.to_status()
    assert "latency" not in status
    assert status["unobservedSignals"] == ["latency: no observations"]


def test_a_cluster_not_in_the_policy_is_not_a_member():
    result = compute_report(inputs(), spec(), "north", None, NOW)
    assert result.report is None
    assert result.condition.reason == REASON_NOT_A_MEMBER
    assert "north" in result.condition.message


@pytest.mark.parametrize(
    ("previous", "pressure", "latency", "expected"),
    [
        (None, 4.0, 0.5, 4.0),  # within the SLO: certified
        (5.0, 4.0, 0.5, 5.0),  # never lowered
        (3.0, 6.0, 0.5, 6.0),  # raised
        (3.0, 6.0, 2.0, 3.0),  # over the latency SLO: not safe
        (3.0, 6.0, None, 3.0),  # latency unknown: not certified
    ],
)
def test_safe_pressure_is_the_highest_pressure_served_within_the_slos(
    previous, pressure, latency, expected
):
    policy = spec(signals={"pressure": "p", "latency": "l"}, latencySLO=1.0)
    signals = {"pressure": SignalResult((pressure,))}
    if latency is not None:
        signals["latency"] = SignalResult((latency,))
    report = compute_report(inputs(signals=signals), policy, "east", previous, NOW).report
    assert report.safe_pressure == expected


def test_spec_hash_covers_workload_signals_capacity_and_the_own_cluster_entry_only():
    base = spec()
    same = {
        "mode": "auto",
        "latencySLO": 2.0,
        "escalation": {"after": "5m"},
        "traffic": {"stepPercent": 20},
        "route": {"name": "r"},
    }
    for field, value in same.items():
        assert spec_hash(spec(**{field: value}), "east") == spec_hash(base, "east"), field
    other_entry = [
        dict(base.model_dump(by_alias=True)["clusters"][0]),
        {"name": "west", "maxReplicas": 9},
    ]
    assert spec_hash(spec(clusters=other_entry), "east") == spec_hash(base, "east")
    assert spec_hash(spec(clusters=other_entry), "west") != spec_hash(base, "west")
    differs = {
        "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "other"},
        "signals": {"demand": "sum(y)"},
        "capacity": {"replicaCapacity": 3},
    }
    for field, value in differs.items():
        assert spec_hash(spec(**{field: value}), "east") != spec_hash(base, "east"), field
    assert spec_hash(spec(capacity={}), "east") == spec_hash(base, "east")


def test_report_round_trips_through_status():
    policy = spec(signals={"pressure": "p"})
    report = compute_report(
        inputs(signals={"pressure": SignalResult((3.5,))}), policy, "east", 4.0, NOW
    ).report
    assert Report.from_status(report.to_status()) == report


@pytest.mark.parametrize(
    ("text", "value"),
    [("500m", 0.5), ("80Gi", 80 * 2**30), ("4", 4.0), ("1e3", 1000.0), ("2k", 2000.0)],
)
def test_quantities_parse_as_kubernetes_writes_them(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("2m", 120), ("1h30m", 5400), ("500ms", 0.5)]
)
def test_durations_parse_and_print_back(text, seconds):
    assert parse_duration(text) == seconds
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("text", ["", "10", "1d", "-1m", "m5"])
def test_bad_durations_are_rejected(text):
    with pytest.raises(ValueError, match=r"expected e\.g\."):
        parse_duration(text)


def test_pods_nodes_and_nodepools_read_from_kubernetes_objects():
    p = pod_state(
        {
            "metadata": {"name": "a"},
            "spec": {},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            },
        }
    )
    assert p == PodState("a", None, False, unschedulable=True)
    n = node_info(
        {
            "metadata": {"name": "n", "labels": {"x": "y"}},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "allocatable": {GPU: "8", "cpu": "96"},
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        },
        [TEMPLATE],
    )
    assert n.free()[GPU] == 7.0
    assert n.ready
    pool = node_pool_info(
        {
            "metadata": {"name": "h100"},
            "spec": {"limits": {GPU: "16"}},
            "status": {"resources": {GPU: "8"}},
        },
        [
            {
                "metadata": {"labels": {NODEPOOL_LABEL: "h100"}},
                "status": {
                    "conditions": [
                        {
                            "type": "Launched",
                            "status": "False",
                            "lastTransitionTime": rfc3339(NOW - 60),
                        }
                    ]
                },
            },
            {
                "metadata": {"labels": {NODEPOOL_LABEL: "h100"}},
                "status": {  # long ago: not recurring any more
                    "conditions": [
                        {
                            "type": "Launched",
                            "status": "False",
                            "lastTransitionTime": rfc3339(NOW - 7200),
                        }
                    ]
                },
            },
        ],
        NOW,
    )
    assert (pool.limits[GPU], pool.usage[GPU]) == (16.0, 8.0)
    assert pool.recent_launch_failures == 1
