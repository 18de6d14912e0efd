"""Reports, hub decisions, scaler floors and route weights on real API servers (3
members) with a real OpenTelemetry collector per member scraping a vLLM engine page
whose load the test controls. The signals are the vocabulary's, computed by each agent
from its collector's signals page (the config compose-serving-stack renders for a
cluster without a destination); no Prometheus and no prometheusURL anywhere.

No kubelet, scheduler or KEDA runs, so a small "world" thread plays them for each member:
it asks the scaler's own decision (`scaler_core.served_floor`, from the member's policy
copy and hub Lease) for the floor, scales the Deployment to max(own need, floor) through
its scale subresource, creates its Pods bound to the member's one GPU Node while they
fit (unschedulable otherwise), marks them Ready a moment later through the status
subresource, and publishes each member's share of the load — split by the weights on
the real HTTPRoute the hub writes — on an engine page its collector scrapes.

Timings are scaled down (after 3 s, cooldown 2 s, calmFor 6 s, stepPercent 50, reports
every second, hub step every half second, outcome checkpoints at 1/3/8 s); the hub and
the decision log are the production code.
"""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import math
import signal
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from opentelemetry.sdk.metrics import MeterProvider

from functions.common.contracts import ANNOTATION_DEFINITION_HASH, LABEL_DEPLOYMENT, LABEL_SERVING
from functions.common.health import health_record_name
from functions.common.metricmapping import parse_mappings
from functions.compose_serving_stack import collector
from functions.runtime.agent.health import HealthAgent
from functions.runtime.agent.loop import Agent, AgentConfig
from functions.runtime.agent.role import ElectionRole
from functions.runtime.hub.acting import FIELD_MANAGER, Actor, LeaseCopy
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.kube.rest import APPLY_PATCH, kube_request
from functions.runtime.scaler.core import HubLeaseCopy, served_floor
from tests.collector import engines, harness
from tests.conftest import require_tool
from tests.runtime.cluster import free_port
from tests.runtime.conftest import POLICY_NAMESPACE, measured, wait_for

NS = POLICY_NAMESPACE
GPU = "nvidia.com/gpu"
CAPACITY = 10.0  # demand one replica serves
COMPOSITION_MANAGER = "crossplane-kubernetes-provider"  # as the Composition would apply
ROUTE = "llm"
LOAD_SECONDS = 1.0  # a new pod turns ready this long after it is bound

ESCALATION = {
    "step": 2,
    "after": "3s",
    "earlyAfter": "2s",
    "readyTimeout": "60s",
    "calmFor": "6s",
    "cooldown": "2s",
}


def policy(names: list[str], mode: str = "auto") -> dict:
    return {
        "apiVersion": "autoscaling.modelplane.ai/v1alpha1",
        "kind": "AdaptivePolicy",
        "metadata": {"name": "llm", "namespace": NS},
        "spec": {
            "mode": mode,
            "workload": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "llm"},
            "clusters": [
                {"name": n, "maxReplicas": 6, "nodeSelector": {"fleet.example/gpu": "yes"}}
                for n in names
            ],
            "route": {"name": ROUTE},
            "signals": {
                # Two collector points must fall inside the window for a rate; 6 s leaves
                # room for a scrape or a page read delayed by a loaded machine.
                "window": "6s",
                "demand": {"metric": "modelplane_requests_total", "function": "rate"},
                "pressure": {
                    "metric": "modelplane_requests_waiting",
                    "function": "perReadyReplica",
                },
            },
            "capacity": {"replicaCapacity": CAPACITY},
            "escalation": ESCALATION,
            "traffic": {"stepPercent": 50},
        },
    }


def route_object(names: list[str], weights: dict[str, int] | None = None) -> dict:
    refs = []
    for n in names:
        ref = {"name": n, "port": 8000}
        if weights is not None:
            ref["weight"] = weights[n]
        refs.append(ref)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": {"name": ROUTE, "namespace": NS, "labels": {"app": "llm"}},
        "spec": {
            "parentRefs": [{"name": "inference", "namespace": "modelplane-system"}],
            "rules": [{"backendRefs": refs}],
        },
    }


def apply(api: client.ApiClient, path: str, body: dict, manager: str, force: bool = False):
    query = [("fieldManager", manager)] + ([("force", "true")] if force else [])
    return kube_request(api, "PATCH", path, query=query, body=body, content_type=APPLY_PATCH)


def get(api: client.ApiClient, path: str) -> dict:
    return kube_request(api, "GET", path)


ROUTE_PATH = f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/{ROUTE}"
POLICY_PATH = f"/apis/autoscaling.modelplane.ai/v1alpha1/namespaces/{NS}/adaptivepolicies/llm"


def install_crds(api: client.ApiClient) -> None:
    crds = require_tool("schemas") / "crds"
    extensions = client.ApiextensionsV1Api(api)
    for name in ("gateway.networking.k8s.io_httproutes.yaml", "keda.sh_scaledobjects.yaml"):
        crd = yaml.safe_load((crds / name).read_text())
        with contextlib.suppress(ApiException):
            extensions.create_custom_resource_definition(crd)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got = extensions.read_custom_resource_definition(crd["metadata"]["name"])
            if any(
                c.type == "Established" and c.status == "True"
                for c in (got.status.conditions or [])
            ):
                break
            time.sleep(0.05)


# --- the test's stand-ins for kubelet, KEDA and the load --------------------------------


class EnginePage(http.server.ThreadingHTTPServer):
    """One member's engines as vLLM serves them: requests finish at `demand` per second
    (the counter integrates it between scrapes) and `demand` requests wait, so waiting
    requests per ready replica is the member's load per replica."""

    def __init__(self):
        self.demand = 0.0
        self.ready = 0
        self.finished = 0.0
        self.gone = False  # the engine stopped serving: every scrape gets a 404
        self._last = time.monotonic()

        page = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if page.gone:
                    self.send_response(404)
                    self.end_headers()
                    return
                now = time.monotonic()
                page.finished += page.demand * (now - page._last)
                page._last = now
                body = engines.vllm_serving_page(
                    int(page.finished), page.demand, [0] * (len(engines.VLLM_TTFT_BUCKETS) + 1)
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def port(self) -> int:
        return self.server_address[1]


@contextlib.contextmanager
def member_collector(member: str, page: EnginePage, folder: Path):
    """The real collector on the config a member without a destination gets, scraping
    the member's engine page as the pod of deployment `llm`; yields its signals URL."""
    otelcol = require_tool("otelcol")
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster(member),
        builtin_mapping_resources_parsed(),
        None,
        signals=True,
        scrape_interval_seconds=1,
    )
    pod = engines.Pod(f"llm-{member}", f"uid-{member}", NS, "vllm", "llm", f"llm-{member}", "")
    pod.port = page.port
    folder.mkdir(parents=True, exist_ok=True)
    overlay = harness.live_overlay(config, [pod], folder, "http://unused")
    with harness.running_collector(otelcol, overlay, folder):
        yield harness.signals_url(overlay)


def builtin_mapping_resources_parsed():
    paths = sorted(
        Path(__file__).resolve().parents[2].glob("functions/common/builtin_mappings/*.yaml")
    )
    return parse_mappings([yaml.safe_load(p.read_text()) for p in paths]).accepted


class World:
    """Kubelet, KEDA and the users, for every member, every 0.2 s."""

    def __init__(self, members, gpus: dict[str, int], pages: dict[str, EnginePage]):
        self.members = members
        self.apis = {m.name: m.client() for m in members}
        self.core = {n: client.CoreV1Api(a) for n, a in self.apis.items()}
        self.apps = {n: client.AppsV1Api(a) for n, a in self.apis.items()}
        self.gpus = gpus
        self.pages = pages
        self.total_demand = 0.0
        self.served: dict[str, list[tuple[float, int]]] = {n: [] for n in self.apis}
        self._bound_at: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._serial = 0

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(5)

    def weights(self) -> dict[str, int]:
        home = self.members[0].name
        route = get(self.apis[home], ROUTE_PATH)
        refs = route["spec"]["rules"][0]["backendRefs"]
        return {r["name"]: int(r.get("weight", 1)) for r in refs}

    def _run(self):
        while not self._stop.is_set():
            try:
                self.tick()
            except Exception as err:  # keep playing; the assertions will tell
                print("world tick failed:", err)
            self._stop.wait(0.2)

    def tick(self):
        weights = self.weights()
        total_weight = sum(weights.values()) or 1
        now = datetime.now(UTC)
        for name, api in self.apis.items():
            demand = self.total_demand * weights.get(name, 0) / total_weight
            copy = get(api, POLICY_PATH)
            try:
                lease = client.CoordinationV1Api(api).read_namespaced_lease(
                    "modelplane-hub", "modelplane-system"
                )
                holder = HubLeaseCopy(
                    lease.spec.holder_identity or "",
                    (lease.metadata.annotations or {}).get("modelplane.ai/fencing-token", ""),
                )
            except ApiException:
                holder = None
            floor = served_floor(copy, holder, name, now).floor
            self.served[name].append((time.monotonic(), floor))
            # Its own autoscaler: what the load needs, on the GPUs it has (at least one
            # replica where there is a GPU at all).
            own = min(max(math.ceil(demand / CAPACITY - 1e-9), 1), self.gpus[name])
            desired = max(own, floor)
            self.apps[name].patch_namespaced_deployment_scale(
                "llm", NS, {"spec": {"replicas": desired}}
            )
            self._pods(name, desired)
            ready = self._ready_pods(name)
            self.pages[name].demand = demand
            self.pages[name].ready = ready

    def _pods(self, name: str, desired: int):
        core = self.core[name]
        pods = sorted(
            core.list_namespaced_pod(NS, label_selector="app=llm").items,
            key=lambda p: p.metadata.name,
        )
        bound = sum(1 for p in pods if p.spec.node_name)
        for pod in pods[desired:]:
            core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
        for _ in range(len(pods), desired):
            self._serial += 1
            fits = bound < self.gpus[name]
            body = {
                "metadata": {"name": f"llm-{self._serial:05d}", "labels": {"app": "llm"}},
                "spec": {
                    "automountServiceAccountToken": False,
                    "containers": [
                        {
                            "name": "engine",
                            "image": "engine:test",
                            "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}},
                        }
                    ],
                    "nodeSelector": {"fleet.example/gpu": "yes"},
                },
            }
            if fits:
                body["spec"]["nodeName"] = f"{name}-gpu"
                bound += 1
            created = core.create_namespaced_pod(NS, body)
            if fits:
                self._bound_at[f"{name}/{created.metadata.name}"] = time.monotonic()
            else:
                core.patch_namespaced_pod_status(
                    created.metadata.name,
                    NS,
                    {
                        "status": {
                            "phase": "Pending",
                            "conditions": [
                                {
                                    "type": "PodScheduled",
                                    "status": "False",
                                    "reason": "Unschedulable",
                                    "message": "0/1 nodes are available: 1 Insufficient GPU.",
                                }
                            ],
                        }
                    },
                )

    def _ready_pods(self, name: str) -> int:
        core = self.core[name]
        ready = 0
        for pod in core.list_namespaced_pod(NS, label_selector="app=llm").items:
            is_ready = any(
                c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or [])
            )
            bound = self._bound_at.get(f"{name}/{pod.metadata.name}")
            if not is_ready and bound is not None and time.monotonic() - bound >= LOAD_SECONDS:
                core.patch_namespaced_pod_status(
                    pod.metadata.name,
                    NS,
                    {
                        "status": {
                            "phase": "Running",
                            "conditions": [
                                {"type": "PodScheduled", "status": "True"},
                                {"type": "Ready", "status": "True"},
                            ],
                        }
                    },
                )
                is_ready = True
            ready += int(is_ready)
        return ready


def setup_member(
    api: client.ApiClient, name: str, names: list[str], gpus: int, mode: str = "auto"
) -> None:
    install_crds(api)
    core = client.CoreV1Api(api)
    with contextlib.suppress(ApiException):
        core.create_namespaced_service_account(NS, {"metadata": {"name": "default"}})
    for pod in core.list_namespaced_pod(NS).items:
        core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
    node = f"{name}-gpu"
    with contextlib.suppress(ApiException):
        core.delete_node(node)
    core.create_node({"metadata": {"name": node, "labels": {"fleet.example/gpu": "yes"}}})
    # Admission taints a new Node not-ready; the node lifecycle controller (absent here)
    # lifts it once the kubelet reports Ready.
    core.patch_node(node, {"spec": {"taints": None}})
    core.patch_node_status(
        node,
        {
            "status": {
                "allocatable": {GPU: str(gpus), "cpu": "64", "pods": "110"},
                "capacity": {GPU: str(gpus), "cpu": "64", "pods": "110"},
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            }
        },
    )
    apps = client.AppsV1Api(api)
    with contextlib.suppress(ApiException):
        apps.delete_namespaced_deployment("llm", NS)
    apps.create_namespaced_deployment(
        NS,
        {
            "metadata": {"name": "llm"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "llm"}},
                "template": {
                    # The deployment label scopes the agent's signals, as on composed pods.
                    "metadata": {"labels": {"app": "llm", LABEL_DEPLOYMENT: "llm"}},
                    "spec": {
                        "containers": [
                            {
                                "name": "engine",
                                "image": "engine:test",
                                "resources": {"requests": {GPU: "1"}, "limits": {GPU: "1"}},
                            }
                        ],
                        "nodeSelector": {"fleet.example/gpu": "yes"},
                    },
                },
            },
        },
    )
    custom = client.CustomObjectsApi(api)
    with contextlib.suppress(ApiException):
        custom.delete_namespaced_custom_object("keda.sh", "v1alpha1", NS, "scaledobjects", "llm")
    custom.create_namespaced_custom_object(
        "keda.sh",
        "v1alpha1",
        NS,
        "scaledobjects",
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "llm"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
                "triggers": [{"type": "external-push", "metadata": {"scalerAddress": "x:1"}}],
            },
        },
    )
    with contextlib.suppress(ApiException):
        custom.delete_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", NS, "httproutes", ROUTE
        )
    weights = {n: (100 if i == 0 else 0) for i, n in enumerate(names)}
    apply(api, ROUTE_PATH, route_object(names, weights), COMPOSITION_MANAGER)
    custom.create_namespaced_custom_object(
        "autoscaling.modelplane.ai", "v1alpha1", NS, "adaptivepolicies", policy(names, mode)
    )


def managers(obj: dict) -> dict[str, str]:
    """Field manager -> the fields it owns under spec, as one JSON string (for `in`)."""
    return {
        m["manager"]: json.dumps(m.get("fieldsV1", {}).get("f:spec", {}))
        for m in obj["metadata"]["managedFields"]
    }


def test_route_weights_are_owned_by_the_hub_and_the_rest_by_the_composition(fleet):
    member = fleet.members[0]
    api = member.client()
    install_crds(api)
    names = ["member-0", "member-1"]
    with contextlib.suppress(ApiException):
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "gateway.networking.k8s.io", "v1", NS, "httproutes", ROUTE
        )
    apply(api, ROUTE_PATH, route_object(names), COMPOSITION_MANAGER)

    # Fencing is test_fencing's; here this member's Lease copy names the hub.
    actor = Actor(
        {member.name: api},
        member.name,
        "member-0/agent-0",
        lambda: "t",
        lease_reader=lambda _: LeaseCopy("member-0/agent-0", "t"),
    )
    assert actor.write_route_weights(member.name, NS, ROUTE, {"member-0": 70, "member-1": 30})
    route = get(api, ROUTE_PATH)
    assert [r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]] == [70, 30]
    owners = managers(route)
    assert "f:rules" in owners[FIELD_MANAGER]
    assert "f:parentRefs" not in owners[FIELD_MANAGER]
    assert "f:parentRefs" in owners[COMPOSITION_MANAGER]
    assert "f:rules" not in owners[COMPOSITION_MANAGER]

    # The Composition keeps applying what it owns (here a new parentRef and label): the
    # weights stay, and the hub keeps the rules.
    desired = route_object(names)
    desired["metadata"]["labels"]["tier"] = "gold"
    desired["spec"]["parentRefs"].append({"name": "internal", "namespace": "modelplane-system"})
    del desired["spec"]["rules"]
    apply(api, ROUTE_PATH, desired, COMPOSITION_MANAGER)
    route = get(api, ROUTE_PATH)
    assert [r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]] == [70, 30]
    assert len(route["spec"]["parentRefs"]) == 2

    # Re-applying the same weights changes nothing (no new resourceVersion: no churn).
    version = route["metadata"]["resourceVersion"]
    actor.write_route_weights(member.name, NS, ROUTE, {"member-0": 70, "member-1": 30})
    assert get(api, ROUTE_PATH)["metadata"]["resourceVersion"] == version

    # A Composition that re-applies the rules (without force) is told who owns them,
    # instead of silently flipping the weights back.
    with pytest.raises(ApiException) as conflict:
        apply(api, ROUTE_PATH, route_object(names), COMPOSITION_MANAGER)
    assert conflict.value.status == 409
    assert FIELD_MANAGER in conflict.value.body
    api.close()


def outcome_complete(lines: list[dict], decision_id: str) -> bool:
    outs = [x for x in lines if x["kind"] == "outcome" and x["decisionId"] == decision_id]
    return [o["afterSeconds"] for o in outs] == [1, 3, 8]


@dataclass
class Running:
    members: list
    names: list[str]
    world: World
    elections: object
    logs: dict[str, io.StringIO]
    loops: dict[str, threading.Event]

    def crash(self, member: str) -> None:
        """The member's agent dies: its loop stops and its Leases are left to expire."""
        self.loops[member].set()
        election = next(a for a in self.elections.running if a.cluster == member)
        election.stop(release=False)

    def lines(self) -> list[dict]:
        return [
            json.loads(x)
            for log in self.logs.values()
            for x in log.getvalue().splitlines()
            if x.strip()
        ]

    def summary(self) -> str:
        """The decisions, one line each, for an assertion message."""
        decisions = [
            f"{x['time']} {x['hub']} {x['action']} applied={x['applied']} {x['message']}"
            f" error={x['error']}"
            for x in self.lines()
            if x["kind"] == "decision"
        ]
        reports = [f"{n}: {json.dumps(self.status(n).get('report'))}" for n in self.names]
        reports += [
            f"{n} fleet: {json.dumps(self.status(n).get('fleet'))}"
            for n in self.names
            if self.status(n).get("fleet")
        ]
        return "\n".join(decisions + reports)

    def status(self, member: str) -> dict:
        return get(self.world.apis[member], POLICY_PATH).get("status") or {}


@pytest.fixture
def running(request, fleet, agents, tmp_path):
    """3 members with a workload, a route, a policy (mode: the test's param, auto by
    default), a collector each, the world, and agents."""
    mode = getattr(request, "param", "auto")
    members = fleet.members[:3]
    names = [m.name for m in members]
    gpus = {"member-0": 3, "member-1": 8, "member-2": 0}
    for m in members:
        api = m.client()
        setup_member(api, m.name, names, gpus[m.name], mode)
        api.close()
    pages = {n: EnginePage() for n in names}
    collectors = contextlib.ExitStack()
    urls = {
        n: collectors.enter_context(member_collector(n, pages[n], tmp_path / f"collector-{n}"))
        for n in names
    }
    world = World(members, gpus, pages)
    world.total_demand = 20.0
    elections = agents(3)
    threads, stops, logs, loops = [], [], {}, {}
    try:
        world.start()
        for election in elections.start_all():
            member = next(m for m in members if m.name == election.cluster)
            logs[member.name] = io.StringIO()
            agent = Agent(
                AgentConfig(
                    cluster=member.name,
                    prometheus_url=None,
                    signals_url=urls[member.name],
                    signal_interval=0.5,
                    collector_interval=1.0,
                    report_interval=1.0,
                    hub_interval=0.5,
                    health_interval=3600,
                ),
                {m.name: m.client() for m in members},
                ElectionRole(election),
                HubMetrics(MeterProvider().get_meter("test")),
                DecisionLog(logs[member.name], checkpoints=(1, 3, 8)),
            )
            stop = threading.Event()
            loops[member.name] = stop
            thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
            thread.start()
            threads.append(thread)
            stops.append(stop)
        yield Running(members, names, world, elections, logs, loops)
    finally:
        for stop in stops:
            stop.set()
        for thread in threads:
            thread.join(5)
        world.stop()
        collectors.close()
        for page in pages.values():
            page.shutdown()


def test_a_burst_borrows_capacity_and_traffic_and_calm_returns_them(running):
    world, names, lines = running.world, running.names, running.lines
    why = running.summary

    # Settle: a hub, and every member reporting.
    assert wait_for(running.elections.hubs, 15), "no hub"
    assert wait_for(lambda: all(running.status(n).get("report") for n in names), 15), (
        "members do not report"
    )
    time.sleep(2)

    # The burst: home (member-0, 3 GPUs) now needs 7 replicas.
    burst_at = time.monotonic()
    world.total_demand = 70.0

    def helper_served_at() -> float | None:
        return next((t for t, f in world.served["member-1"] if t > burst_at and f > 0), None)

    assert wait_for(helper_served_at, 30), why()
    raised_after = measured(
        "burst to the helper's scaler serving a floor", helper_served_at() - burst_at
    )
    # Within after + cooldown, plus a report, a hub step and a world tick (5 s), plus
    # the signal's own lag: the collector's scrape and batch (1 s each) and the 6 s
    # window over which the demand's rate climbs to the new load.
    assert raised_after <= 3 + 2 + 5 + 8, why()
    assert not any(f > 0 for t, f in world.served["member-2"] if t > burst_at)  # no room

    assert wait_for(lambda: world.weights()["member-1"] > 0, 30), why()
    measured("burst to the first traffic shift", time.monotonic() - burst_at)

    # The decision is an Event on the hub's copy of the policy.
    def add_events() -> list:
        found = []
        for n in names:
            for event in world.core[n].list_namespaced_event(NS).items:
                if event.involved_object.kind == "AdaptivePolicy" and "AddCapacity" in (
                    event.reason or ""
                ):
                    found.append(event)
        return found

    events = wait_for(add_events, 10)
    assert events, why()
    assert events[0].type == "Normal"
    assert "+2 on member-1 (static room) for member-0" in events[0].message

    # Calm: the burst ends; traffic returns and the floors go, in that order.
    calm_at = time.monotonic()
    world.total_demand = 20.0
    home_weights = {"member-0": 100, "member-1": 0, "member-2": 0}
    assert wait_for(lambda: world.weights() == home_weights, 60), why()
    assert wait_for(
        lambda: (running.status("member-1").get("intent") or {}).get("floor") == 0, 30
    ), why()
    assert wait_for(
        lambda: any((running.status(n).get("fleet") or {}).get("phase") == "Steady" for n in names),
        30,
    ), why()
    measured("calm to traffic home and floors released", time.monotonic() - calm_at)

    decided = [x for x in lines() if x["kind"] == "decision"]
    actions = [(x["action"], x["message"]) for x in decided]
    assert any("AddCapacity" in a for a, _ in actions), why()
    returns = [i for i, (_, m) in enumerate(actions) if "back home" in m]
    releases = [i for i, (a, _) in enumerate(actions) if "ReleaseCapacity" in a]
    assert returns, why()
    assert releases, why()
    # Traffic goes home before the floor does (the last return and the release may share
    # a step: the floor goes once the share is back).
    assert returns[0] <= releases[0], why()
    if returns[-1] == releases[0]:
        message = actions[releases[0]][1]
        assert message.index("back home") < message.index("on member-1"), message
    assert all(x["applied"] for x in decided if "AddCapacity" in x["action"]), decided

    # The decision log: outcome lines at every checkpoint, and how long the raised
    # floor took to be ready.
    add = next(x for x in decided if "AddCapacity" in x["action"])  # asserted above
    assert wait_for(lambda: outcome_complete(lines(), add["decisionId"]), 15), why()
    final = next(
        x
        for x in lines()
        if x["kind"] == "outcome" and x["decisionId"] == add["decisionId"] and x["final"]
    )
    assert "member-1" in final["readyAfterSeconds"], final
    assert set(final["clusters"]) == set(names)
    assert final["followedBy"]


def test_borrowed_floors_survive_a_hub_change(running):
    world, names = running.world, running.names
    assert wait_for(running.elections.hubs, 15), "no hub"
    assert wait_for(lambda: all(running.status(n).get("report") for n in names), 15)
    time.sleep(2)
    world.total_demand = 70.0
    served = wait_for(
        lambda: (
            (world.served["member-1"] or [(0, 0)])[-1][1] > 0
            and (running.status("member-1").get("intent") or {}).get("hub")
        ),
        30,
    )
    assert served, running.summary()
    old_hub = served.split("/")[0]

    crashed_at = time.monotonic()
    running.crash(old_hub)

    def served_by_new_hub() -> str | None:
        intent = running.status("member-1").get("intent") or {}
        floor = (world.served["member-1"] or [(0, 0)])[-1][1]
        hub = intent.get("hub", "")
        return hub if floor > 0 and hub and not hub.startswith(old_hub + "/") else None

    new_hub = wait_for(served_by_new_hub, 30)
    assert new_hub, running.summary()
    took = measured(
        "hub crash to the helper's floor served under the new hub", time.monotonic() - crashed_at
    )
    # FAST lease duration (4 s) + retry, then the new hub's first step renews every intent.
    assert took <= 4 + 0.5 + 5, running.summary()
    floor = running.status("member-1")["intent"]["floor"]
    assert floor >= 3  # the floor the old hub raised, carried on from its status.fleet


def test_a_new_hub_completes_the_outcome_lines_of_its_predecessors_decision(running):
    """A failover mid-decision: the old hub decides (AddCapacity), writes its first
    outcome line at most, and crashes; the new hub continues from status.fleet and
    writes the rest — every checkpoint once, none twice."""
    world, names = running.world, running.names
    assert wait_for(running.elections.hubs, 15), "no hub"
    assert wait_for(lambda: all(running.status(n).get("report") for n in names), 15)
    time.sleep(2)
    world.total_demand = 70.0

    def added() -> dict | None:
        return next(
            (
                x
                for x in running.lines()
                if x["kind"] == "decision" and "AddCapacity" in x["action"] and x["applied"]
            ),
            None,
        )

    decision = wait_for(added, 30)
    assert decision, running.summary()
    old_hub = decision["hub"].split("/")[0]
    running.crash(old_hub)
    decided_at = time.monotonic()

    # The intent says which decision added the floor.
    intent = running.status("member-1").get("intent") or {}
    assert intent.get("decisionId") == decision["decisionId"], (intent, decision)

    def outcomes() -> list[tuple[str, int]]:
        return sorted(
            (member, x["afterSeconds"])
            for member, log in running.logs.items()
            for x in map(json.loads, filter(str.strip, log.getvalue().splitlines()))
            if x["kind"] == "outcome" and x["decisionId"] == decision["decisionId"]
        )

    complete = wait_for(lambda: sorted(a for _, a in outcomes()) == [1, 3, 8], 30)
    assert complete, (outcomes(), running.summary())
    measured("crash to the predecessor's last outcome line", time.monotonic() - decided_at)
    by_new_hub = [a for member, a in outcomes() if member != old_hub]
    assert 8 in by_new_hub, outcomes()  # the final line came from the new hub
    final = next(
        x
        for x in running.lines()
        if x["kind"] == "outcome" and x["decisionId"] == decision["decisionId"] and x["final"]
    )
    assert set(final["clusters"]) == set(names)
    # The new hub's memory names the decisions it follows and the recent ones.
    fleet = next(
        f for n in names if (f := running.status(n).get("fleet")) and f["hub"] != decision["hub"]
    )
    assert decision["decisionId"] in [r["decisionId"] for r in fleet["recent"]]


@pytest.mark.parametrize("running", ["shadow"], indirect=True)
def test_shadow_simulates_the_plan_in_status_fleet_and_writes_nothing_else(running):
    world, names = running.world, running.names
    assert wait_for(running.elections.hubs, 15), "no hub"
    assert wait_for(lambda: all(running.status(n).get("report") for n in names), 15)
    time.sleep(2)
    burst_at = time.monotonic()
    world.total_demand = 70.0

    def simulated() -> dict | None:
        for n in names:
            fleet = running.status(n).get("fleet") or {}
            helper = next((c for c in fleet.get("clusters", []) if c["name"] == "member-1"), {})
            if helper.get("floor", 0) > 0 and (helper.get("weight") or 0) > 0:
                return fleet
        return None

    fleet = wait_for(simulated, 30)
    assert fleet, running.summary()
    assert fleet["phase"] == "Escalated"
    # Nothing acted: no intent anywhere, no floor served, the route as it was.
    assert all("intent" not in running.status(n) for n in names)
    assert all(f == 0 for n in names for t, f in world.served[n] if t > burst_at)
    assert world.weights() == {"member-0": 100, "member-1": 0, "member-2": 0}
    decided = [x for x in running.lines() if x["kind"] == "decision"]
    assert decided, running.summary()
    assert all(x["mode"] == "shadow" and x["applied"] is False for x in decided)
    assert any("AddCapacity" in x["action"] for x in decided)


def test_a_signal_whose_source_disappears_turns_ready_false_and_is_not_used(running):
    world, names = running.world, running.names
    member = "member-2"

    def reported_with_signals() -> bool:
        report = running.status(member).get("report") or {}
        return "demand" in report and "pressure" in report

    assert wait_for(reported_with_signals, 30), running.status(member)
    world.pages[member].gone = True

    def ready() -> dict:
        conditions = running.status(member).get("conditions") or []
        return next((c for c in conditions if c["type"] == "Ready"), {})

    assert wait_for(lambda: ready().get("status") == "False", 30), running.status(member)
    assert ready()["reason"] == "ObservationFailed"

    # Pressure (the newest point) fails at once; demand (a rate over the window) once the
    # points it had leave the window: the condition then names both.
    def both_named() -> dict | None:
        condition = ready()
        message = condition.get("message", "")
        named = "signals.demand:" in message and "signals.pressure:" in message
        return condition if named and condition.get("status") == "False" else None

    condition = wait_for(both_named, 30)
    assert condition, running.status(member)
    assert condition["reason"] == "ObservationFailed"
    assert f"{NS}/llm" in condition["message"]
    assert condition["message"].endswith("(ignored in this report)")

    # Not used: the report carries neither signal (never a zero).
    def unused() -> dict | None:
        report = running.status(member)["report"]
        return None if "demand" in report or "pressure" in report else report

    report = wait_for(unused, 10)
    assert report, running.status(member)
    assert sorted(u.split(":")[0] for u in report["unobservedSignals"]) == ["demand", "pressure"]
    # The other members keep theirs (a loaded machine may miss one of their reports).
    others = [n for n in names if n != member]
    assert wait_for(lambda: all("demand" in running.status(n)["report"] for n in others), 20)


def test_the_health_record_counts_start_failures_from_real_pods(fleet):
    member = fleet.members[2]
    api = member.client()
    core = client.CoreV1Api(api)
    with contextlib.suppress(ApiException):
        core.create_namespaced_service_account(NS, {"metadata": {"name": "default"}})
    for pod in core.list_namespaced_pod(NS).items:
        core.delete_namespaced_pod(pod.metadata.name, NS, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        core.delete_namespaced_config_map(health_record_name("kev-east"), NS)
    core.create_namespaced_pod(
        NS,
        {
            "metadata": {
                "name": "kev-0",
                "labels": {LABEL_SERVING: "kev-east"},
                "annotations": {ANNOTATION_DEFINITION_HASH: "d1"},
            },
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [{"name": "engine", "image": "engine:test"}],
            },
        },
    )
    crash = {"exitCode": 1, "reason": "Error", "message": "unknown model architecture"}

    def crashed(restarts: int) -> None:
        core.patch_namespaced_pod_status(
            "kev-0",
            NS,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "False"}],
                    "containerStatuses": [
                        {
                            "name": "engine",
                            "image": "engine:test",
                            "imageID": "",
                            "ready": False,
                            "restartCount": restarts,
                            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                            "lastState": {"terminated": crash},
                        }
                    ],
                }
            },
        )

    agent = HealthAgent(core, NS)
    crashed(2)
    agent.sync(time.time())
    agent.sync(time.time())  # a second poll counts nothing new
    record = core.read_namespaced_config_map(health_record_name("kev-east"), NS)
    assert record.data == {
        "definitionHash": "d1",
        "consecutiveStartFailures": "2",
        "lastError": "container engine exited 1 (Error) before ready: unknown model architecture",
        "observedAt": record.data["observedAt"],
    }
    crashed(3)
    agent.sync(time.time())
    record = core.read_namespaced_config_map(health_record_name("kev-east"), NS)
    assert record.data["consecutiveStartFailures"] == "3"
    owners = {m.manager for m in record.metadata.managed_fields}
    assert owners == {HealthAgent.FIELD_MANAGER}
    api.close()


def test_the_shipped_agent_command_reports_and_logs_decisions(fleet, tmp_path):
    """`modelplane runtime agent` as a process: a one-member fleet whose workload has an
    unschedulable replica and no collector page to read."""
    from tests.runtime.test_cli import ENTRYPOINT, TIMING_FLAGS, _kubeconfig  # noqa: PLC0415

    member = fleet.members[3]
    api = member.client()
    setup_member(api, member.name, [member.name], gpus=0)
    client.CoreV1Api(api).create_namespaced_pod(
        NS,
        {
            "metadata": {"name": "llm-pending", "labels": {"app": "llm"}},
            "spec": {
                "automountServiceAccountToken": False,
                "containers": [{"name": "engine", "image": "engine:test"}],
            },
        },
    )
    client.CoreV1Api(api).patch_namespaced_pod_status(
        "llm-pending",
        NS,
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            }
        },
    )
    decisions = tmp_path / "decisions.jsonl"
    metrics_port = free_port()
    process = subprocess.Popen(
        [
            *ENTRYPOINT,
            "agent",
            f"--cluster={member.name}",
            "--pod=agent-0",
            f"--member={member.name}={_kubeconfig(member, tmp_path)}",
            *TIMING_FLAGS,
            f"--metrics-port={metrics_port}",
            f"--decision-log={decisions}",
        ],
        stderr=subprocess.DEVNULL,
    )
    try:
        report = wait_for(lambda: (get(api, POLICY_PATH).get("status") or {}).get("report"), 20)
        assert report, "no report"
        assert (report["needed"], report["ready"], report["staticRoom"]) == (1, 0, 0)
        ready = next(
            c for c in get(api, POLICY_PATH)["status"]["conditions"] if c["type"] == "Ready"
        )
        assert (ready["status"], ready["reason"]) == ("False", "ObservationFailed")
        # Its collector page is the in-cluster default, which this test has not got.
        assert "signals.demand: the collector's page could not be read" in ready["message"]

        def logged() -> list[dict]:
            if not decisions.exists():
                return []
            return [json.loads(x) for x in decisions.read_text().splitlines() if x.strip()]

        # Short past earlyAfter (no NodePools) with no other member: escalated, said why.
        assert wait_for(logged, 20), "no decision line"
        line = logged()[0]
        assert (line["action"], line["message"]) == (
            "Escalate",
            "1 replicas short and no other cluster has room",
        )
        assert line["hub"] == f"{member.name}/agent-0"

        # Its metrics, on the runtime's /metrics beside the election's.
        def scraped() -> str:
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{metrics_port}/metrics"
                with urllib.request.urlopen(url, timeout=2) as answer:
                    return answer.read().decode()
            return ""

        policy_label = f'policy="{NS}/llm"'

        def exported() -> str | None:
            text = scraped()
            return text if "plumb_hub_decisions_total{" in text else None

        text = wait_for(exported, 10)
        assert text, scraped()
        samples = {
            line.split("{")[0]: line
            for line in text.splitlines()
            if policy_label in line and not line.startswith("#")
        }
        assert samples["plumb_member_needed_replicas"].endswith(" 1.0")
        assert samples["plumb_member_static_room_replicas"].endswith(" 0.0")
        assert samples["plumb_fleet_escalated"].endswith(" 1.0")
        assert samples["plumb_fleet_members_out_of_sync"].endswith(" 0.0")
        assert samples["plumb_hub_step_errors_total"].endswith(" 0.0")
        assert 'action="Escalate"' in samples["plumb_hub_decisions_total"]

        # The probes the composed Deployment uses, beside /metrics.
        for path in ("/healthz", "/readyz"):
            url = f"http://127.0.0.1:{metrics_port}{path}"
            with urllib.request.urlopen(url, timeout=2) as answer:
                assert (answer.status, answer.read()) == (200, b"ok\n"), path
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(15)
        api.close()
