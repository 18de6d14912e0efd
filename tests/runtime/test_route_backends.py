"""Managed traffic on real API servers: the hub's weights land on the backends the suite
composes, on every member's copy of the route, and a deposed hub moves none.

Three members play the three clusters of the managed-traffic render golden
(tests/render/testdata/model_replica/managed-traffic.yaml, what the real `crossplane
render` composed for them). Each member gets its own composed HTTPRoute, applied as
the Composition's provider applies it, and its AdaptivePolicy copy. The agent's real
hub step (`Agent.hub_step`: reads reports and the live route, plans, acts fenced on
each member's real Lease copy) starts from the composed weights (the policy's Steady
weights 50/30/20 on every copy, what the hub's first step assumes); the operator then
changes the Steady weights to 20/40/40 in every copy, and the hub walks every copy of
the route there, at most one stepPercent (20) per cooldown, the same weights on each
copy, summing to 100.

No gateway or MCS controller runs: what is checked is what they would read.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from functions.common.contracts import (
    ANNOTATION_FENCING_TOKEN,
    HUB_LEASE_NAME,
    SYSTEM_NAMESPACE,
)
from functions.runtime.agent.loop import Agent, AgentConfig
from functions.runtime.agent.role import FixedRole
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.metrics import HUB_STEP_ERRORS_TOTAL, HubMetrics
from functions.runtime.shared.policy import Policy
from functions.runtime.shared.report import Report
from tests.runtime.test_hub_integration import COMPOSITION_MANAGER, apply, get, install_crds

GOLDEN = Path(__file__).resolve().parents[1] / "render/testdata/model_replica/managed-traffic.yaml"
HUB = "us-east-1/agent-0"
TERM = "term-7"
NOW = 1_800_000_000.0


def route_path(route: dict) -> str:
    meta = route["metadata"]
    return (
        f"/apis/gateway.networking.k8s.io/v1/namespaces/{meta['namespace']}"
        f"/httproutes/{meta['name']}"
    )


def policy_path(policy: dict) -> str:
    meta = policy["metadata"]
    return (
        f"/apis/autoscaling.modelplane.ai/v1alpha1/namespaces/{meta['namespace']}"
        f"/adaptivepolicies/{meta['name']}"
    )


def write_lease(api: client.ApiClient, holder: str, token: str) -> None:
    leases = client.CoordinationV1Api(api)
    body = {
        "metadata": {
            "name": HUB_LEASE_NAME,
            "namespace": SYSTEM_NAMESPACE,
            "annotations": {ANNOTATION_FENCING_TOKEN: token},
        },
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
    }
    with contextlib.suppress(ApiException):
        leases.delete_namespaced_lease(HUB_LEASE_NAME, SYSTEM_NAMESPACE)
    leases.create_namespaced_lease(SYSTEM_NAMESPACE, body)


def live_weights(api: client.ApiClient, route: dict, backend_of: dict[str, str], own: str):
    """Member -> weight on one member's live route: its own pool is `own`, each
    ServiceImport the member whose backend it is."""
    refs = get(api, route_path(route))["spec"]["rules"][0]["backendRefs"]
    member_of = {b: m for m, b in backend_of.items()}
    out = {}
    for ref in refs:
        member = own if ref["kind"] == "InferencePool" else member_of[ref["name"]]
        out[member] = ref.get("weight", 1)
    return out


@pytest.fixture
def composed(fleet):
    golden = yaml.safe_load(GOLDEN.read_text())
    clusters = sorted(golden)
    apis = {c: m.client() for c, m in zip(clusters, fleet.members, strict=False)}
    for cluster, api in apis.items():
        install_crds(api)
        route = golden[cluster]["route"]
        with contextlib.suppress(ApiException):
            client.CustomObjectsApi(api).delete_namespaced_custom_object(
                "gateway.networking.k8s.io",
                "v1",
                route["metadata"]["namespace"],
                "httproutes",
                route["metadata"]["name"],
            )
        apply(api, route_path(route), route, COMPOSITION_MANAGER)
        apply(
            api,
            policy_path(golden[cluster]["adaptivepolicy"]),
            golden[cluster]["adaptivepolicy"],
            COMPOSITION_MANAGER,
        )
        write_lease(api, HUB, TERM)
    yield golden, apis
    for api in apis.values():
        api.close()


def report_everyone(golden: dict, apis: dict, now: float) -> None:
    """Every member fresh and healthy, computed from its own copy (its spec hash)."""
    policy = Policy.from_object(golden[sorted(golden)[0]]["adaptivepolicy"])
    for member, api in apis.items():
        report = Report(
            time=now,
            spec_hash=policy.spec.member_hash(member),
            ready=1,
            desired=1,
            scheduled=1,
            needed=0,
            static_room=0,
            node_pool_headroom=0,
            pressure=0.1,
            latency=0.5,
        )
        body = {"status": {"report": report.to_status()}}
        client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
            "autoscaling.modelplane.ai",
            "v1alpha1",
            policy.namespace,
            "adaptivepolicies",
            policy.name,
            body,
        )


def set_steady_weights(golden: dict, apis: dict, weights: dict[str, int]) -> None:
    """The operator changes clusters[].weight in every copy (a field only the hub reads)."""
    for cluster, api in apis.items():
        copy = golden[cluster]["adaptivepolicy"]
        for entry in copy["spec"]["clusters"]:
            entry["weight"] = weights[entry["name"]]
        apply(api, policy_path(copy), copy, COMPOSITION_MANAGER)


def test_the_hubs_weights_land_on_every_composed_backend_and_sum_to_100(composed):
    golden, apis = composed
    policy = Policy.from_object(golden["us-east-1"]["adaptivepolicy"])
    backend_of = {c.name: c.backend_name for c in policy.spec.clusters}
    steady = {c.name: c.weight for c in policy.spec.clusters}
    assert steady == {"dev-1": 20, "eu-west-1": 30, "us-east-1": 50}
    reader = InMemoryMetricReader()
    agent = Agent(
        AgentConfig(cluster="us-east-1", signals_url=None),
        apis,
        FixedRole(HUB, True, TERM),
        HubMetrics(MeterProvider(metric_readers=[reader]).get_meter("test")),
        DecisionLog(io.StringIO()),
        clock=lambda: NOW,
    )
    # As composed, every copy carries the Steady weights; the hub reads the same.
    routes = {c: golden[c]["route"] for c in apis}
    for member, api in apis.items():
        assert live_weights(api, routes[member], backend_of, member) == steady
    assert agent.hub.reader.route_weights(policy) == steady

    report_everyone(golden, apis, NOW)
    agent.hub_step(NOW)  # the hub's memory: the weights the routes carry
    assert agent.hub.reader.route_weights(policy) == steady
    target = {"dev-1": 40, "eu-west-1": 40, "us-east-1": 20}
    set_steady_weights(golden, apis, target)

    seen = [steady]
    now = NOW
    for _ in range(4):
        now += 61  # one cooldown
        report_everyone(golden, apis, now)
        agent.hub_step(now)
        on_routes = {
            member: live_weights(api, routes[member], backend_of, member)
            for member, api in apis.items()
        }
        # Every member's copy carries a weight on each of its backends (its own pool and
        # a ServiceImport per other member), the same weights everywhere, summing to 100.
        for member, weights in on_routes.items():
            assert sorted(weights) == sorted(apis), member
            assert sum(weights.values()) == 100, (member, weights)
        assert all(w == on_routes["us-east-1"] for w in on_routes.values()), on_routes
        seen.append(on_routes["us-east-1"])
    assert seen[-1] == target, seen
    assert len({tuple(sorted(w.items())) for w in seen}) >= 3, seen  # 30 to move, 20 a step
    for before, after in itertools.pairwise(seen):
        assert sum(abs(after[m] - before[m]) for m in after) <= 2 * 20, (before, after)
    assert agent.hub.reader.route_weights(policy) == target


def test_a_member_whose_lease_names_another_hub_keeps_its_route_untouched(composed):
    golden, apis = composed
    policy = Policy.from_object(golden["us-east-1"]["adaptivepolicy"])
    backend_of = {c.name: c.backend_name for c in policy.spec.clusters}
    reader, log = InMemoryMetricReader(), io.StringIO()
    agent = Agent(
        AgentConfig(cluster="us-east-1", signals_url=None),
        apis,
        FixedRole(HUB, True, TERM),
        HubMetrics(MeterProvider(metric_readers=[reader]).get_meter("test")),
        DecisionLog(log),
        clock=lambda: NOW,
    )
    report_everyone(golden, apis, NOW)
    agent.hub_step(NOW)
    set_steady_weights(golden, apis, {"dev-1": 40, "eu-west-1": 40, "us-east-1": 20})
    # eu-west-1's copy of the hub Lease now names a newer hub: this one is deposed there.
    write_lease(apis["eu-west-1"], "dev-1/agent-1", "term-8")
    eu_route = golden["eu-west-1"]["route"]
    before = get(apis["eu-west-1"], route_path(eu_route))
    report_everyone(golden, apis, NOW + 61)
    agent.hub_step(NOW + 61)

    after = get(apis["eu-west-1"], route_path(eu_route))
    assert after["spec"]["rules"] == before["spec"]["rules"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    # The copies that still name this hub were written (the decision moved 20).
    moved = live_weights(apis["us-east-1"], golden["us-east-1"]["route"], backend_of, "us-east-1")
    assert moved == {"dev-1": 40, "eu-west-1": 30, "us-east-1": 30}
    errors = [
        p.value
        for m in reader.get_metrics_data().resource_metrics[0].scope_metrics[0].metrics
        if m.name == HUB_STEP_ERRORS_TOTAL
        for p in m.data.data_points
    ]
    assert sum(errors) >= 1
    decision = next(json.loads(x) for x in log.getvalue().splitlines() if '"ShiftTraffic"' in x)
    assert decision["applied"] is False
    assert "eu-west-1: does not hold the hub lease" in decision["error"]
