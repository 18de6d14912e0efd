"""Placement meets the real kube-scheduler, on GPU members of the fleet box.

The examples' members run kube-scheduler, the controllers that turn Deployments into pods
and ResourceClaimTemplates into ResourceClaims, and KWOK as the kubelet of nodes made
from the example node pools, whose GPUs are published as DRA ResourceSlices the way the
NVIDIA driver publishes them (hack/fleetbox/gpu.py). What a user relies on:

- every example ModelDeployment's engine pods are bound to nodes of the pool our
  placement chose, with the devices the scheduler allocated through our
  ResourceClaimTemplates, and run;
- our placement's verdict on a device selector is the scheduler's: a table of CEL
  selectors is accepted or rejected alike by both;
- a multi-node replica's pods (a LeaderWorkerSet group) are bound inside one fabric;
- the agent's static room (report_parse + report_core) is the number of replicas the
  scheduler really binds, for seeded random node pools and pod shapes;
- the box's broken-model switch fails pods the way the health agent counts failures.
"""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass

import pytest
import yaml

from fleetbox.gpu import (
    FAIL_ANNOTATION,
    FAIL_CRASH_LOOP,
    FAIL_IMAGE_PULL,
    POOL_LABEL,
    FakeNode,
    add_nodes,
    example_cluster,
    pool_nodes,
    remove_nodes,
)
from fleetbox.wait import is_true, wait_for
from functions.common.contracts import ANNOTATION_DEFINITION_HASH
from functions.compose_model_deployment.cel_env import evaluate
from functions.compose_model_deployment.model import read_cluster
from functions.runtime.agent.health import Counted, count_start_failures
from functions.runtime.agent.parse import (
    device_class_drivers,
    node_devices,
    node_info,
    pod_needs_from_template,
)
from functions.runtime.shared.report import static_room
from tests.e2e import claims
from tests.e2e.conftest import measured

# The example member whose stack (Standard) runs engines as Deployments: the pods the
# box's kube-controller-manager creates. (eu-west-1's Dynamo stack composes Grove
# PodCliqueSets and multi-node replicas are LeaderWorkerSets: no controller of those
# runs in the box; see test_a_multi_node_replica_lands_inside_one_fabric.)
DEPLOYMENT_MEMBER = "us-east-1"
DRIVER = "gpu.nvidia.com"
LABEL_DEPLOYMENT = "modelplane.ai/deployment"
BIND_SECONDS = 180.0


def _json(box, member: str, *args: str) -> dict:
    return json.loads(box.kubectl(member, *args, "-o", "json").stdout)


def _pods(box, member: str, namespace: str, selector: str) -> list[dict]:
    return _json(box, member, "get", "pods", "-n", namespace, "-l", selector)["items"]


def _unschedulable(pod: dict) -> bool:
    """Not bound, and the scheduler said why: no node fits (Unschedulable), or a device
    selector failed to evaluate (SchedulerError: "CEL runtime error", retried but never
    bound: the DRA rule is that an evaluation error selects no device)."""
    return not pod.get("spec", {}).get("nodeName") and any(
        c.get("type") == "PodScheduled"
        and c.get("status") == "False"
        and c.get("reason") in {"Unschedulable", "SchedulerError"}
        for c in pod.get("status", {}).get("conditions") or []
    )


def _allocated(box, member: str, pod: dict) -> list[dict]:
    """The device results of the pod's ResourceClaims (the scheduler's allocation)."""
    results = []
    for ref in pod.get("status", {}).get("resourceClaimStatuses") or []:
        claim = _json(
            box, member, "get", "resourceclaim", ref["resourceClaimName"],
            "-n", pod["metadata"]["namespace"],
        )  # fmt: skip
        allocation = claim.get("status", {}).get("allocation") or {}
        results += (allocation.get("devices") or {}).get("results") or []
    return results


# --- every example's pods, where placement put them ---------------------------------


def _example_deployments() -> list[dict]:
    return [
        yaml.safe_load(p.read_text())
        for p in sorted((claims.EXAMPLES / "modeldeployments").glob("*.yaml"))
    ]


def _requested_devices(document: dict) -> int:
    """Devices one Standalone pod asks for (the Deployment-backed role)."""
    for engine in document["spec"]["template"]["spec"]["engines"]:
        for member in engine["members"]:
            if member.get("role", "Standalone") == "Standalone":
                return sum(d["count"] for d in member["nodeSelector"].get("devices") or [])
    return 0


def _deployment_backed() -> list[dict]:
    # A base that accepts LoRA adapters mounts a ReadWriteMany claim its adapters are
    # staged in; the box has no provisioner to bind it, so its pods stay Pending (issue
    # #42's box e2e, still open, brings one).
    return [
        d
        for d in _example_deployments()
        if _requested_devices(d) and not d["spec"]["template"]["spec"].get("adapters")
    ]


@pytest.mark.parametrize("document", _deployment_backed(), ids=lambda d: d["metadata"]["name"])
def test_example_pods_run_on_the_placed_pool_with_allocated_devices(box, document):
    name, namespace = document["metadata"]["name"], document["metadata"]["namespace"]
    count = _requested_devices(document)

    def placed_here():
        xr = claims.get(box, "modeldeployment", name, namespace) or {}
        here = [
            p for p in xr.get("status", {}).get("placements") or []
            if p["cluster"] == DEPLOYMENT_MEMBER
        ]  # fmt: skip
        return here or None

    placements = wait_for(
        f"{name} placed on {DEPLOYMENT_MEMBER}", placed_here, claims.CONVERGE_SECONDS
    )
    pools = {p["nodePool"] for p in placements}
    replicas = sum(p["replicas"] for p in placements)
    nodes = {
        n["metadata"]["name"]: n for n in _json(box, DEPLOYMENT_MEMBER, "get", "nodes")["items"]
    }

    def running():
        pods = [
            p for p in _pods(box, DEPLOYMENT_MEMBER, namespace, f"{LABEL_DEPLOYMENT}={name}")
            if not p["metadata"].get("deletionTimestamp")
            and p["metadata"].get("labels", {}).get("modelplane.ai/role") == "Standalone"
        ]  # fmt: skip
        ready = [p for p in pods if is_true(p, "Ready")]
        if len(ready) < replicas:
            raise AssertionError(
                f"{len(ready)}/{replicas} Ready: "
                + "; ".join(
                    f"{p['metadata']['name']} {p['status'].get('phase')} on "
                    f"{p['spec'].get('nodeName')}"
                    for p in pods
                )
            )
        return ready

    began = time.monotonic()
    ready = wait_for(f"{name}'s {replicas} pods Ready", running, BIND_SECONDS)
    measured(
        "example pods Ready on the GPU member, from the test's first look", time.monotonic() - began
    )
    for pod in ready:
        node = pod["spec"]["nodeName"]
        labels = nodes[node]["metadata"]["labels"]
        assert labels[POOL_LABEL] in pools, (
            f"{pod['metadata']['name']} bound to {node} of pool "
            f"{labels[POOL_LABEL]}, placement chose {sorted(pools)}"
        )
        results = _allocated(box, DEPLOYMENT_MEMBER, pod)
        assert len(results) == count, f"{pod['metadata']['name']} got {results}"
        # Every device comes from the node the pod runs on (the driver's pool per node).
        assert {(r["driver"], r["pool"]) for r in results} == {(DRIVER, node)}, results
        assert len({r["device"] for r in results}) == count


LWS_LABELS = "leaderworkerset.sigs.k8s.io/"
EXCLUSIVE_TOPOLOGY = "leaderworkerset.sigs.k8s.io/exclusive-topology"


def _group_pods(lws: dict) -> list[dict]:
    """Group 0's pods as the LeaderWorkerSet controller and its pod webhook make them:
    the leader from leaderTemplate (workerTemplate without one), `size - 1` workers, the
    group labels, and, with the exclusive-topology annotation, the pod affinity that
    keeps a group inside one topology domain and other groups out of it."""
    meta, spec = lws["metadata"], lws["spec"]["leaderWorkerTemplate"]
    name, size = meta["name"], int(spec.get("size") or 1)
    key = f"{name}-0"
    topology = (meta.get("annotations") or {}).get(EXCLUSIVE_TOPOLOGY)
    pods = []
    for index in range(size):
        template = spec.get("leaderTemplate") if index == 0 else None
        template = json.loads(json.dumps(template or spec["workerTemplate"]))
        labels = {
            **(template.get("metadata", {}).get("labels") or {}),
            f"{LWS_LABELS}name": name,
            f"{LWS_LABELS}group-index": "0",
            f"{LWS_LABELS}worker-index": str(index),
            f"{LWS_LABELS}group-key": key,
        }
        pod_spec = template["spec"]
        if topology:
            affinity = pod_spec.setdefault("affinity", {})
            term = {
                "labelSelector": {"matchLabels": {f"{LWS_LABELS}group-key": key}},
                "topologyKey": topology,
            }
            affinity.setdefault("podAffinity", {})[
                "requiredDuringSchedulingIgnoredDuringExecution"
            ] = [term]
        pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": key if index == 0 else f"{key}-{index}",
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": template.get("metadata", {}).get("annotations") or {},
            },
            "spec": pod_spec,
        })  # fmt: skip
    return pods


def _fabric_pinned(pods: list[dict], label: str) -> bool:
    """Whether the pods carry a constraint on the fabric label (a node selector, node
    affinity or a group affinity on it)."""
    text = json.dumps([p["spec"].get("affinity") or {} for p in pods])
    text += json.dumps([p["spec"].get("nodeSelector") or {} for p in pods])
    return label in text


def test_a_multi_node_replica_lands_inside_one_fabric(box):
    """The example multi-node replica is a LeaderWorkerSet; its controller does not run
    in the box, so the test makes group 0's pods from the LeaderWorkerSet's own
    templates as the controller would, and the real scheduler binds them."""
    document = yaml.safe_load(
        (claims.EXAMPLES / "modeldeployments/deepseek-multinode.yaml").read_text()
    )
    name, namespace = document["metadata"]["name"], document["metadata"]["namespace"]

    def composed():
        found = box.get(DEPLOYMENT_MEMBER, "leaderworkersets", namespace)
        return [w for w in found if w["metadata"]["name"] == name]

    (lws,) = wait_for(
        f"{name}'s LeaderWorkerSet on {DEPLOYMENT_MEMBER}", composed, claims.CONVERGE_SECONDS
    )
    pods = _group_pods(lws)
    (pool,) = [
        p for p in example_cluster(DEPLOYMENT_MEMBER)["spec"]["nodePools"]
        if p["name"] == "h100"
    ]  # fmt: skip
    label = pool["fabricNodeLabel"]
    # Without a constraint on the fabric label the scheduler may split the group across
    # fabrics that placement counted as one (what the box found before #16 pinned it).
    assert _fabric_pinned(pods, label), f"{name}'s group is not pinned to a fabric: {pods}"
    box.kubectl(DEPLOYMENT_MEMBER, "apply", "-f", "-", stdin=yaml.safe_dump_all(pods))
    try:

        def bound():
            live = [
                _json(box, DEPLOYMENT_MEMBER, "get", "pod", p["metadata"]["name"], "-n", namespace)
                for p in pods
            ]
            assert all(p["spec"].get("nodeName") for p in live), [
                (p["metadata"]["name"], p["status"].get("conditions")) for p in live
            ]
            return live

        live = wait_for(f"{name}'s group bound", bound, BIND_SECONDS)
        nodes = {
            n["metadata"]["name"]: n["metadata"]["labels"]
            for n in _json(box, DEPLOYMENT_MEMBER, "get", "nodes")["items"]
        }
        fabrics = {nodes[p["spec"]["nodeName"]].get(label) for p in live}
        assert None not in fabrics, f"{name}'s group is bound outside any fabric: {fabrics}"
        assert len(fabrics) == 1, f"{name}'s group spans fabrics {fabrics}"
    finally:
        box.kubectl(
            DEPLOYMENT_MEMBER,
            "delete",
            "pod",
            "-n",
            namespace,
            "--wait=false",
            *[p["metadata"]["name"] for p in pods],
        )


# --- CEL selectors: our placement and the scheduler agree -----------------------------

CEL_CLUSTER = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "InferenceCluster",
    "metadata": {"name": "cel-table"},
    "spec": {
        "stack": "Standard",
        "region": "us-east-1",
        "providerConfigRef": {"name": DEPLOYMENT_MEMBER},
        "nodePools": [{
            "name": "celh100",
            "nodes": 3,
            "nodeSelector": {"fleetbox.modelplane.ai/test": "cel-table"},
            "devices": {
                "driver": DRIVER,
                "perNode": 8,
                "attributes": {
                    "productName": {"string": "NVIDIA H100 80GB HBM3"},
                    "architecture": {"string": "Hopper"},
                    "cudaComputeCapability": {"version": "9.0.0"},
                    "driverVersion": {"version": "570.124.6"},
                    "numaNodes": {"int": 2},
                    "mig": {"bool": False},
                },
                "capacity": {"memory": "80Gi"},
            },
            "taints": [{"key": "fleetbox.modelplane.ai/test", "value": "cel-table",
                        "effect": "NoSchedule"}],
        }],
    },
}  # fmt: skip


def _example_selectors() -> list[str]:
    found = []
    for document in _example_deployments():
        for engine in document["spec"]["template"]["spec"]["engines"]:
            for member in engine["members"]:
                for device in member.get("nodeSelector", {}).get("devices") or []:
                    found += [s["cel"] for s in device.get("selectors") or []]
    return sorted(set(found))


ATTR = f'device.attributes["{DRIVER}"]'
CAP = f'device.capacity["{DRIVER}"]'
# Written from the DRA documentation (Kubernetes "Dynamic Resource Allocation" and the
# CEL library it names): attributes of every type, capacity with quantity/compareTo,
# semver, missing attributes and domains.
SELECTORS = [
    *_example_selectors(),
    f"device.driver == '{DRIVER}'",
    f'{ATTR}.architecture == "Hopper" && {ATTR}.productName.startsWith("NVIDIA H")',
    f'{ATTR}.productName in ["NVIDIA H100 80GB HBM3", "NVIDIA H200"]',
    f"{ATTR}.numaNodes >= 2",
    f"{ATTR}.numaNodes > 2",
    f"!{ATTR}.mig",
    f'{CAP}.memory.compareTo(quantity("80Gi")) == 0',
    f'{CAP}.memory.compareTo(quantity("81Gi")) >= 0',
    f'{CAP}.memory.isGreaterThan(quantity("79Gi"))',
    f'{CAP}.memory.isLessThan(quantity("80Gi"))',
    f'{ATTR}.cudaComputeCapability.isGreaterThan(semver("8.9.0"))',
    f'{ATTR}.cudaComputeCapability.isGreaterThan(semver("9.0.0"))',
    f'{ATTR}.driverVersion.compareTo(semver("570.0.0")) >= 0',
    f"{ATTR}.driverVersion.major() == 570",
    f'{ATTR}.cudaComputeCapability == "9.0.0"',  # a version is not a string: false
    f'{ATTR}.memoryBandwidth == "3.35TB/s"',  # a missing attribute: an error, no device
    'device.attributes["amd.com"].productName == "MI300X"',  # unknown domain: error
    f'{CAP}.memory.compareTo(quantity("80Gi")) >= 0 && {ATTR}.architecture == "Blackwell"',
]


@dataclass
class Verdict:
    selector: str
    ours: bool
    scheduler: bool | None = None
    reason: str = ""


@pytest.fixture(scope="module")
def cel_nodes(box):
    pool = CEL_CLUSTER["spec"]["nodePools"][0]
    nodes = pool_nodes(CEL_CLUSTER, pool, prefix="cel-")
    add_nodes(box, DEPLOYMENT_MEMBER, nodes)
    box.kubectl(DEPLOYMENT_MEMBER, "create", "namespace", "e2e-cel")
    try:
        yield pool
    finally:
        box.kubectl(DEPLOYMENT_MEMBER, "delete", "namespace", "e2e-cel", "--wait=false")
        remove_nodes(box, DEPLOYMENT_MEMBER, nodes)


def _claim_and_pod(index: int, selector: str, pool: dict) -> list[dict]:
    name = f"cel-{index}"
    claim = {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "e2e-cel"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1,
            "selectors": [{"cel": {"expression": selector}}],
        }}]}},
    }  # fmt: skip
    pod = {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "e2e-cel"},
        "spec": {
            "nodeSelector": pool["nodeSelector"],
            "tolerations": [{"key": "fleetbox.modelplane.ai/test", "operator": "Exists"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
            "containers": [{"name": "engine", "image": "engine:test",
                            "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }  # fmt: skip
    return [claim, pod]


def test_device_selectors_get_the_same_verdict_from_placement_and_scheduler(box, cel_nodes):
    profile = read_cluster(CEL_CLUSTER).pools[0].profile
    verdicts = [Verdict(s, evaluate(s, profile).matched) for s in SELECTORS]
    documents = [
        d for i, v in enumerate(verdicts) for d in _claim_and_pod(i, v.selector, cel_nodes)
    ]
    box.kubectl(DEPLOYMENT_MEMBER, "apply", "-f", "-", stdin=yaml.safe_dump_all(documents))

    def decided():
        pods = {
            p["metadata"]["name"]: p
            for p in _json(box, DEPLOYMENT_MEMBER, "get", "pods", "-n", "e2e-cel")["items"]
        }
        pending = []
        for i, verdict in enumerate(verdicts):
            pod = pods.get(f"cel-{i}", {})
            if pod.get("spec", {}).get("nodeName"):
                verdict.scheduler = True
            elif _unschedulable(pod):
                verdict.scheduler = False
                verdict.reason = next(
                    c.get("message", "") for c in pod["status"]["conditions"]
                    if c["type"] == "PodScheduled"
                )  # fmt: skip
            else:
                pending.append(verdict.selector)
        assert not pending, f"no verdict yet for {pending}"
        return True

    wait_for("the scheduler's verdict on every selector", decided, BIND_SECONDS)
    disagreements = [v for v in verdicts if v.ours != v.scheduler]
    assert not disagreements, "\n".join(
        f"{v.selector!r}: placement {'accepts' if v.ours else 'rejects'}, the scheduler "
        f"{'binds' if v.scheduler else 'does not'} ({v.reason[:200]})"
        for v in disagreements
    )
    # The table has both outcomes, so agreeing is not agreeing on one answer.
    assert {v.ours for v in verdicts} == {True, False}


# --- static room: the agent's count is the scheduler's ---------------------------------

# Seeds 1-5 as drawn, plus 6 and 8 (no devices; taints the pod does not tolerate), 11
# (cpu binds before devices) and 18 (devices on tainted nodes, no toleration).
ROUNDS = [1, 2, 3, 4, 5, 6, 8, 11, 18]
ROUND_LABEL = "fleetbox.modelplane.ai/round"
ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass
class Shape:
    nodes: list[FakeNode]
    template: dict
    claim_template: dict | None


def _random_shape(seed: int) -> Shape:
    rng = random.Random(seed)
    round_name = f"room-{seed}"
    per_node_devices = rng.choice([0, 2, 4, 8])
    tainted = rng.random() < 0.5
    nodes = []
    for index in range(rng.randint(1, 4)):
        name = f"{round_name}-{index}"
        cpu = rng.choice([8, 16, 32])
        nodes.append(
            FakeNode(
                name=name,
                labels={
                    "kubernetes.io/hostname": name,
                    ROUND_LABEL: round_name,
                    ZONE_LABEL: rng.choice(["a", "b"]),
                },
                taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]
                if tainted and rng.random() < 0.7 else [],
                driver=DRIVER,
                per_node=rng.choice([per_node_devices, per_node_devices // 2]),
                attributes={"productName": {"string": "NVIDIA H100 80GB HBM3"}},
                capacity={"memory": "80Gi"},
                resources={"cpu": str(cpu), "memory": f"{cpu * 8}Gi", "pods": "110"},
            )
        )  # fmt: skip
    devices = rng.choice([0, 1, 2, 4])
    spec: dict = {
        "nodeSelector": {ROUND_LABEL: round_name},
        "containers": [{
            "name": "engine", "image": "engine:test",
            "resources": {"requests": {"cpu": str(rng.choice([1, 2, 4, 8])),
                                       "memory": f"{rng.choice([4, 16, 32])}Gi"}},
        }],
    }  # fmt: skip
    if rng.random() < 0.4:
        spec["nodeSelector"][ZONE_LABEL] = "a"
    if rng.random() < 0.5:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                "effect": "NoSchedule"}]  # fmt: skip
    claim_template = None
    if devices:
        spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": "gpus"}]
        spec["containers"][0]["resources"]["claims"] = [{"name": "gpus"}]
        claim_template = {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": "gpus"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                "deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": devices,
            }}]}}},
        }  # fmt: skip
    template = {"metadata": {"labels": {"app": round_name}}, "spec": spec}
    return Shape(nodes, template, claim_template)


def _agent_room(box, shape: Shape) -> int:
    """The agent's static room, computed by its own parse and core code from the
    member's live objects (nodes, slices, claims, classes) for this pod template."""
    member = DEPLOYMENT_MEMBER
    round_name = shape.template["metadata"]["labels"]["app"]
    nodes = _json(box, member, "get", "nodes", "-l", f"{ROUND_LABEL}={round_name}")["items"]
    total, used = node_devices(
        _json(box, member, "get", "resourceslices")["items"],
        _json(box, member, "get", "resourceclaims", "-A")["items"],
        device_class_drivers(_json(box, member, "get", "deviceclasses")["items"]),
    )
    infos = tuple(
        node_info(n, [], total.get(n["metadata"]["name"]), used.get(n["metadata"]["name"]))
        for n in nodes
    )
    templates = {"gpus": shape.claim_template} if shape.claim_template else {}
    needs = pod_needs_from_template(shape.template, claim_templates=templates)
    room, _ = static_room(infos, needs, (), {ROUND_LABEL: round_name})
    return room


@pytest.mark.parametrize("seed", ROUNDS)
def test_static_room_is_what_the_scheduler_binds(box, seed):
    shape = _random_shape(seed)
    member, namespace = DEPLOYMENT_MEMBER, f"e2e-room-{seed}"
    add_nodes(box, member, shape.nodes)
    box.kubectl(member, "create", "namespace", namespace)
    try:
        room = _agent_room(box, shape)
        replicas = room + 2  # more than fit: the scheduler must leave some pending
        labels = shape.template["metadata"]["labels"]
        documents = [{
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "engine", "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": shape.template},
        }]  # fmt: skip
        if shape.claim_template:
            documents.insert(
                0, {**shape.claim_template, "metadata": {"name": "gpus", "namespace": namespace}}
            )
        box.kubectl(member, "apply", "-f", "-", stdin=yaml.safe_dump_all(documents))

        def settled():
            pods = _pods(
                box, member, namespace, f"app={shape.template['metadata']['labels']['app']}"
            )
            bound = [p for p in pods if p["spec"].get("nodeName")]
            waiting = [p for p in pods if _unschedulable(p)]
            counts = f"{len(pods)} pods, {len(bound)} bound, {len(waiting)} unschedulable"
            assert len(pods) == replicas, counts
            assert len(bound) + len(waiting) == replicas, counts
            return (len(bound),)  # a tuple: wait_for wants something truthy, 0 may be the answer

        wait_for(f"round {seed} settled", settled, BIND_SECONDS)
        time.sleep(3)  # nothing more binds: the scheduler retries unschedulable pods
        (bound,) = settled()
        nodes = [
            (n.name, n.resources["cpu"], n.per_node, n.labels.get(ZONE_LABEL), bool(n.taints))
            for n in shape.nodes
        ]
        assert room == bound, (
            f"round {seed}: the agent's static room is {room}, the scheduler bound {bound} "
            f"(nodes (name, cpu, gpus, zone, tainted) {nodes}, pod "
            f"{json.dumps(shape.template['spec'])}, claim {json.dumps(shape.claim_template)})"
        )
    finally:
        box.kubectl(member, "delete", "namespace", namespace, "--wait=false")
        remove_nodes(box, member, shape.nodes)


# --- the broken-model switch: what the health agent counts ------------------------------


def test_a_broken_model_fails_to_start_the_way_the_health_agent_counts(box):
    """Pods annotated `fleetbox.modelplane.ai/fail` (the switch the runtime's parking
    scenarios set) are bound by the scheduler and then fail like a kubelet shows it: a
    crash loop whose restarts the agent counts one by one, an image pull it counts once
    per pod. The agent's own counting (`count_start_failures`) reads the live pods."""
    member, namespace = DEPLOYMENT_MEMBER, "e2e-broken"
    definition = "broken-definition"
    box.kubectl(member, "create", "namespace", namespace)
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {"app": "broken"},
                "annotations": {
                    FAIL_ANNOTATION: failure,
                    ANNOTATION_DEFINITION_HASH: definition,
                },
            },
            "spec": {
                "nodeSelector": {POOL_LABEL: "h100"},
                "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}],
            },
        }
        for name, failure in (
            ("crash", FAIL_CRASH_LOOP),
            ("pull", FAIL_IMAGE_PULL),
        )
    ]
    box.kubectl(member, "apply", "-f", "-", stdin=yaml.safe_dump_all(pods))
    try:

        def failing():
            live = {p["metadata"]["name"]: p for p in _pods(box, member, namespace, "app=broken")}
            crash = live["crash"]["status"].get("containerStatuses") or [{}]
            pull = live["pull"]["status"].get("containerStatuses") or [{}]
            assert crash[0].get("restartCount", 0) >= 3, crash
            assert (pull[0].get("state") or {}).get("waiting", {}).get("reason") == "ErrImagePull"
            return live

        live = wait_for("the broken pods failing", failing, BIND_SECONDS)
        crash, pull = live["crash"], live["pull"]
        assert crash["status"]["phase"] == "Running"
        assert not is_true(crash, "Ready")
        waiting = crash["status"]["containerStatuses"][0]["state"]["waiting"]
        assert waiting["reason"] == "CrashLoopBackOff"
        assert pull["status"]["phase"] == "Pending"
        tally = count_start_failures(None, Counted(), list(live.values()), definition, time.time())
        restarts = crash["status"]["containerStatuses"][0]["restartCount"]
        assert tally.record.consecutive_start_failures == restarts + 1  # + the pull, once
        assert tally.record.last_error
        # Counted again a little later: the crash loop climbs, the pull is not recounted.
        time.sleep(5)
        later = {p["metadata"]["name"]: p for p in _pods(box, member, namespace, "app=broken")}
        again = count_start_failures(
            tally.record, tally.counted, list(later.values()), definition, time.time()
        )
        climbed = later["crash"]["status"]["containerStatuses"][0]["restartCount"] - restarts
        assert climbed > 0
        assert again.new_failures == climbed
    finally:
        box.kubectl(member, "delete", "namespace", namespace, "--wait=false")
