"""A burst on one member of the fleet box and what the runtime does about it, through
the real parts: each member's engine page (a vLLM page whose load the scenario sets) is
scraped by a real collector on the config compose-serving-stack renders, the member's
agent (a process of the box, `hack/fleetbox/runtime.py`) reads the collector's signals
page at its in-cluster address, the hub raises a floor on a helper member, our scaler
serves it to the real KEDA, the HPA (kube-controller-manager) scales the helper's
Deployment, the real kube-scheduler binds the pods to KWOK nodes and KWOK runs them. The
users are a thread that splits the total demand between the members' engine pages by
the weights the hub writes on the home route.

Used by tests/e2e/test_floors_live.py (assertions) and tests/bench/bench_burst_floor.py
(figures); the objects are written as compose-model-replica and compose-serving-stack
write them, reduced to what the runtime reads.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import yaml
from kubernetes import config
from kubernetes.client.exceptions import ApiException

from fleetbox.members import DEFAULT_MEMBERS
from fleetbox.runtime import COLLECTOR_INTERVAL
from functions.common.contracts import (
    AUTOSCALING_GROUP_VERSION,
    COLLECTOR_SIGNALS_URL,
    HUB_LEASE_NAME,
    LABEL_DEPLOYMENT,
    SCALED_OBJECT_API_VERSION,
    SYSTEM_NAMESPACE,
)
from functions.compose_serving_stack import collector
from functions.runtime.kube.rest import kube_request
from functions.runtime.scaler.server import METRIC_NAME
from tests.collector import engines, harness
from tests.conftest import require_tool
from tests.e2e.test_runtime_live import scaled_object
from tests.runtime.test_hub_integration import EnginePage, builtin_mapping_resources_parsed

HOME, HELPER = DEFAULT_MEMBERS  # us-east-1 bursts; eu-west-1 helps
MEMBERS = (HOME, HELPER)
NAMESPACE = "burst-live"
NAME = "llm"  # the Deployment, AdaptivePolicy, ScaledObject and route on every member
CAPACITY = 10.0  # requests per second one replica serves (replicaCapacity)
CALM, BURST = 8.0, 30.0  # total demand: one replica's worth, then three replicas'
POOLS = {HOME: "h100", HELPER: "b200"}  # each member's example GPU pool
KEDA_METRIC = f"s0-{METRIC_NAME}"
ESCALATION = {
    "step": 2,
    "after": "4s",
    "earlyAfter": "2s",
    "readyTimeout": "120s",
    "calmFor": "10s",
    "cooldown": "4s",
}
# The collector page's address as the agent dials it (`host:port`).
COLLECTOR_ADDRESS = COLLECTOR_SIGNALS_URL.split("//", 1)[1].split("/", 1)[0]


def objects(member: str, namespace: str = NAMESPACE) -> list[dict]:
    labels = {"app": NAME, LABEL_DEPLOYMENT: NAME}
    # Home serves everything while steady (the configured weights); the helper only
    # what the hub shifts to it.
    policy_clusters = [
        {"name": m, "maxReplicas": 6, "nodePools": [POOLS[m]], "weight": 100 if m == HOME else 0}
        for m in MEMBERS
    ]
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": NAME, "namespace": namespace},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": NAME}},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"karpenter.sh/nodepool": POOLS[member]},
                        "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}],
                    },
                },
            },
        },
        {
            "apiVersion": AUTOSCALING_GROUP_VERSION, "kind": "AdaptivePolicy",
            "metadata": {"name": NAME, "namespace": namespace},
            "spec": {
                "mode": "auto",
                "workload": {
                    "apiVersion": SCALED_OBJECT_API_VERSION, "kind": "ScaledObject", "name": NAME,
                },
                "clusters": policy_clusters,
                "route": {"name": NAME},
                "signals": {
                    # Five collector points in the window: a rate's two survive a slow scrape.
                    "window": "10s",
                    "demand": {"metric": "modelplane_requests_total", "function": "rate"},
                    "pressure": {
                        "metric": "modelplane_requests_waiting", "function": "perReadyReplica",
                    },
                },
                "capacity": {"replicaCapacity": CAPACITY},
                "escalation": ESCALATION,
                "traffic": {"stepPercent": 50},
            },
        },
        scaled_object(NAME, namespace),
        {
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": NAME, "namespace": namespace},
            "spec": {
                "parentRefs": [{"name": "inference", "namespace": SYSTEM_NAMESPACE}],
                "rules": [{"backendRefs": [
                    {"name": m, "port": 8000, "weight": 100 if m == HOME else 0}
                    for m in MEMBERS
                ]}],
            },
        },
    ]  # fmt: skip


class Burst:
    """The scenario's objects on both members, a collector and an engine page each, and
    the users; `close` removes all of it (the runtime stays)."""

    def __init__(self, box, runtime, folder: Path, namespace: str = NAMESPACE) -> None:
        self.box, self.runtime, self.folder = box, runtime, folder
        self.namespace = namespace
        self.apis = {m: config.new_client_from_config(str(box.kubeconfigs[m])) for m in MEMBERS}
        self.pages = {m: EnginePage() for m in MEMBERS}
        self.total = CALM
        self.weights_seen: list[tuple[float, dict[str, int]]] = []
        self._collectors = contextlib.ExitStack()
        self._stop = threading.Event()
        self._users = threading.Thread(target=self._run, daemon=True)

    # --- setting up and tearing down -------------------------------------------------

    def start(self) -> Burst:
        otelcol = require_tool("otelcol")
        for member in MEMBERS:
            self.box.kubectl(
                member,
                "apply",
                "-f",
                "-",
                stdin=yaml.safe_dump_all(objects(member, self.namespace)),
            )
            url = self._collectors.enter_context(self._collector(otelcol, member))
            self.runtime.route(member, COLLECTOR_ADDRESS, url.split("//", 1)[1].split("/", 1)[0])
        self._users.start()
        return self

    @contextlib.contextmanager
    def _collector(self, otelcol: Path, member: str):
        rendered = collector.render_cluster_collector_config(
            collector.CollectorCluster(member),
            builtin_mapping_resources_parsed(),
            None,
            signals=True,
            scrape_interval_seconds=COLLECTOR_INTERVAL,
        )
        pod = engines.Pod(f"{NAME}-0", f"uid-{member}", self.namespace, "vllm", NAME, NAME, "")
        pod.port = self.pages[member].port
        folder = self.folder / f"collector-{member}"
        folder.mkdir(parents=True, exist_ok=True)
        overlay = harness.live_overlay(rendered, [pod], folder, "http://unused")
        with harness.running_collector(otelcol, overlay, folder):
            yield harness.signals_url(overlay)

    def close(self) -> None:
        self._stop.set()
        self._users.join(5)
        for member in MEMBERS:
            self.runtime.route(member, COLLECTOR_ADDRESS, None)
            self.box.kubectl(
                member, "delete", "namespace", self.namespace, "--wait=false", check=False
            )
        self._collectors.close()
        for page in self.pages.values():
            page.shutdown()
        for api in self.apis.values():
            api.close()

    # --- the users ------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                weights = self.weights()
                self.weights_seen.append((time.monotonic(), weights))
                total_weight = sum(weights.values()) or 1
                for member in MEMBERS:
                    self.pages[member].demand = self.total * weights.get(member, 0) / total_weight
            except Exception as error:  # keep playing; the assertions will tell
                print("burst users:", error)
            self._stop.wait(0.5)

    # --- what a user sees -----------------------------------------------------------

    def _get(self, member: str, path: str) -> dict | None:
        try:
            return kube_request(self.apis[member], "GET", path, timeout=20)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def weights(self) -> dict[str, int]:
        route = self._get(
            HOME,
            f"/apis/gateway.networking.k8s.io/v1/namespaces/{self.namespace}/httproutes/{NAME}",
        )
        refs = route["spec"]["rules"][0]["backendRefs"]
        return {r["name"]: int(r.get("weight", 1)) for r in refs}

    def status(self, member: str) -> dict:
        policy = self._get(
            member,
            f"/apis/{AUTOSCALING_GROUP_VERSION}/namespaces/{self.namespace}/adaptivepolicies/{NAME}",
        )
        return (policy or {}).get("status") or {}

    def floor(self, member: str) -> int:
        return int((self.status(member).get("intent") or {}).get("floor") or 0)

    def replicas(self, member: str) -> tuple[int, int]:
        """The helper's Deployment: (spec.replicas, ready replicas)."""
        found = self._get(member, f"/apis/apps/v1/namespaces/{self.namespace}/deployments/{NAME}")
        return found["spec"]["replicas"], (found.get("status") or {}).get("readyReplicas") or 0

    def keda_floor(self, member: str) -> float | None:
        """The floor as KEDA serves it to the HPA (external.metrics.k8s.io through the
        member's aggregation layer, the KEDA adapter, the operator, our scaler)."""
        path = (
            f"/apis/external.metrics.k8s.io/v1beta1/namespaces/{self.namespace}/{KEDA_METRIC}"
            f"?labelSelector=scaledobject.keda.sh/name%3D{NAME}"
        )
        result = self.box.kubectl(member, "get", "--raw", path, check=False)
        if result.returncode != 0:
            return None
        items = json.loads(result.stdout)["items"]
        value = items[0]["value"]
        return float(value.rstrip("m")) / (1000 if value.endswith("m") else 1)

    def hub(self) -> str:
        """The hub Lease's holder on the home member (`<member>/<pod>`)."""
        lease = self._get(
            HOME,
            f"/apis/coordination.k8s.io/v1/namespaces/{SYSTEM_NAMESPACE}/leases/{HUB_LEASE_NAME}",
        )
        return ((lease or {}).get("spec") or {}).get("holderIdentity") or ""

    def decisions(self) -> list[dict]:
        """Every hub decision line any agent logged (their decision logs)."""
        found = []
        for member in MEMBERS:
            path = self.box.members[member].workdir / "decisions.jsonl"
            if not path.exists():
                continue
            for line in path.read_text().splitlines():
                with contextlib.suppress(ValueError):
                    entry = json.loads(line)
                    if entry.get("kind") == "decision" and self.namespace in json.dumps(entry):
                        found.append(entry)
        return found

    def summary(self) -> str:
        lines = [
            f"{d['time']} {d['hub']} {d['action']} applied={d['applied']} {d['message']}"
            for d in self.decisions()
        ]
        lines += [f"{m}: {json.dumps(self.status(m))}" for m in MEMBERS]
        return "\n".join(lines)

    def settle(self, timeout: float = 180.0) -> None:
        """Until KEDA's HPA reads our scaler on both members and both agents report."""

        def ready():
            for member in MEMBERS:
                assert self.keda_floor(member) is not None, f"{member}: KEDA serves no floor yet"
                report = self.status(member).get("report")
                assert (report or {}).get("demand") is not None, (
                    f"{member}: no demand reported yet: {json.dumps(self.status(member))}"
                )
            return True

        self.runtime.wait_for("the burst scenario settled", ready, timeout)
