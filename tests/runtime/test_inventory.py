"""The fleet inventory against a real kube-apiserver: the agent's inventory step lists
Nodes, ResourceSlices (resource.k8s.io/v1, driver gpu.nvidia.com), ResourceClaims and
pods as the API server serves them, writes its record, and the record — copied into an
InferenceCluster's status.inventory the way compose-serving-stack copies it (the render
tier proves that copy) — is accepted by the API server under the real XRD's schema and
read back by `modelplane status` as an operator runs it.

One API server plays both the member (the objects the agent reads) and the control plane
(the InferenceCluster the CLI reads): the two never share a kind.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator

import jsonschema
import pytest
import yaml
from kubernetes import client

from functions.common.contracts import (
    API_GROUP,
    API_VERSION,
    LABEL_DEPLOYMENT,
    LABEL_ROLE,
    LABEL_SERVING,
    SYSTEM_NAMESPACE,
)
from functions.common.inventory import (
    GPU_DRIVER,
    IDLE_AFTER_SECONDS,
    INVENTORY_RECORD_NAME,
    LABEL_FABRIC,
    fabric_labels_of_pools,
    format_fabric_label,
    inventory_from_record,
)
from functions.runtime.agent.idle import ANNOTATION_IDLE_MEMORY, Counters
from functions.runtime.agent.inventory_record import InventoryAgent
from functions.runtime.cli import parse_fabric_labels
from functions.runtime.kube.rest import kube_request
from tests.conftest import REPO
from tests.runtime.cluster import Member
from tests.runtime.test_operator_cli import SCHEMA, start_control_plane

NAMESPACE = "ml-team"
NOW = 1_800_000_000.0
RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture(scope="module")
def member(tmp_path_factory) -> Iterator[Member]:
    member = start_control_plane("us-east-1", tmp_path_factory.mktemp("inventory"))
    try:
        api = member.client()
        core = client.CoreV1Api(api)
        for namespace in (NAMESPACE, SYSTEM_NAMESPACE):
            core.create_namespace({"metadata": {"name": namespace}})
            # No controller manager: the default ServiceAccount pods need is made by hand.
            core.create_namespaced_service_account(namespace, {"metadata": {"name": "default"}})
        _populate(api)
        api.close()
        yield member
    finally:
        member.close()


def _node(api, name: str, fabric: str, *, ready: bool = True, cordoned: bool = False) -> None:
    core = client.CoreV1Api(api)
    core.create_node(
        {
            "metadata": {"name": name, "labels": {LABEL_FABRIC: fabric}},
            "spec": {"unschedulable": cordoned},
        }
    )
    node = core.read_node(name)
    node.status = client.V1NodeStatus(
        conditions=[
            client.V1NodeCondition(
                type="Ready", status="True" if ready else "Unknown", reason="Test"
            )
        ]
    )
    core.replace_node_status(name, node)


def _slice(api, node: str, devices: int) -> None:
    kube_request(
        api,
        "POST",
        f"{RESOURCE}/resourceslices",
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu"},
            "spec": {
                "driver": GPU_DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": f"gpu-{i}",
                        "attributes": {
                            "productName": {"string": "NVIDIA H100 80GB HBM3"},
                            "architecture": {"string": "Hopper"},
                        },
                        "capacity": {"memory": {"value": "80Gi"}},
                    }
                    for i in range(devices)
                ],
            },
        },
    )


def _claim(api, name: str, node: str, devices: list[str]) -> None:
    path = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
    created = kube_request(
        api,
        "POST",
        path,
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": GPU_DRIVER, "count": len(devices)},
                        }
                    ]
                }
            },
        },
    )
    created["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": GPU_DRIVER, "pool": node, "device": d}
                    for d in devices
                ]
            },
        }
    }
    kube_request(api, "PUT", f"{path}/{name}/status", body=created)


def _pod(api, name: str, node: str, serving: str, claim: str, *, ready: bool) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {
                "name": name,
                "labels": {
                    LABEL_SERVING: serving,
                    LABEL_DEPLOYMENT: serving.removesuffix("-us-east-1"),
                    LABEL_ROLE: "Standalone",
                },
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            },
        },
    )
    pod = core.read_namespaced_pod(name, NAMESPACE)
    pod.status = client.V1PodStatus(
        phase="Running",
        conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
    )
    core.replace_namespaced_pod_status(name, NAMESPACE, pod)


def _populate(api) -> None:
    """Four 8-GPU nodes in two fabrics: one unreachable, one running a ready replica on
    all its cards, one running a starting replica on two; plus a cordoned empty node."""
    _node(api, "gpu-a1", "nvl-a")
    _node(api, "gpu-a2", "nvl-a")
    _node(api, "gpu-a3", "nvl-a", ready=False)
    _node(api, "gpu-b1", "nvl-b")
    _node(api, "gpu-b2", "nvl-b", cordoned=True)
    for node in ("gpu-a1", "gpu-a2", "gpu-a3", "gpu-b1", "gpu-b2"):
        _slice(api, node, 8)
    _claim(api, "llama-70b-0-gpu", "gpu-a1", [f"gpu-{i}" for i in range(8)])
    _claim(api, "qwen-8b-0-gpu", "gpu-b1", ["gpu-0", "gpu-1"])
    _pod(api, "llama-70b-0", "gpu-a1", "llama-70b-us-east-1", "llama-70b-0-gpu", ready=True)
    _pod(api, "qwen-8b-0", "gpu-b1", "qwen-8b-us-east-1", "qwen-8b-0-gpu", ready=False)


def _record(api) -> dict:
    return client.CoreV1Api(api).read_namespaced_config_map(INVENTORY_RECORD_NAME, SYSTEM_NAMESPACE)


@pytest.mark.tools
def test_the_agent_reports_the_members_inventory_and_modelplane_status_shows_it(member, tmp_path):
    api = member.client()
    counters = Counters({(NAMESPACE, "llama-70b-us-east-1"): 120.0})
    InventoryAgent(api, lambda: counters).sync(NOW)
    # A different agent (the standby after a failover) continues the idle clock from the
    # record: ten minutes later, with the counter unmoved, the replica is idle.
    standby = member.client()
    InventoryAgent(standby, lambda: counters).sync(NOW + IDLE_AFTER_SECONDS)
    record = _record(api)
    assert ANNOTATION_IDLE_MEMORY in record.metadata.annotations
    document = inventory_from_record(record.data)
    assert document["nodes"] == {
        "total": 5,
        "ready": 3,
        "cordoned": 1,
        "draining": 0,
        "unreachable": 1,
    }
    assert document["gpus"] == [
        {"deviceClass": "NVIDIA H100 80GB HBM3", "total": 40, "used": 10, "unhealthy": 8}
    ]
    # nvl-a: a1 full, a3 unreachable, a2 free. nvl-b: b1 partly used, b2 cordoned.
    assert document["fabrics"] == [
        {"name": "nvl-a", "nodes": 3, "largestFreeBlock": 1},
        {"name": "nvl-b", "nodes": 2, "largestFreeBlock": 0},
    ]
    assert document["replicas"] == {"ready": 1, "starting": 1, "draining": 0, "failed": 0}
    assert document["idleReplicas"] == [
        {
            "namespace": NAMESPACE,
            "name": "llama-70b-us-east-1",
            "deployment": "llama-70b",
            "idleSeconds": IDLE_AFTER_SECONDS,
            "gpus": 8,
        }
    ]

    # The InferenceCluster's status carries it; the API server checks it against the XRD.
    objects = client.CustomObjectsApi(api)
    cluster = objects.create_cluster_custom_object(
        API_GROUP,
        API_VERSION,
        "inferenceclusters",
        yaml.safe_load((REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml").read_text()),
    )
    cluster["status"] = {"inventory": document}
    objects.replace_cluster_custom_object_status(
        API_GROUP, API_VERSION, "inferenceclusters", cluster["metadata"]["name"], cluster
    )
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(yaml.safe_dump(member.kubeconfig(namespace=NAMESPACE)))

    def modelplane(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "functions.entrypoint", *args],
            capture_output=True,
            text=True,
            check=False,
            env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
            cwd=REPO,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    status = json.loads(modelplane("status", "-o", "json"))
    jsonschema.validate(status, SCHEMA)
    inventory = status["inventory"]
    assert inventory["missing"] == []
    assert [r["cluster"] for r in inventory["reports"]] == ["us-east-1"]
    assert inventory["gpus"][0]["free"] == 40 - 10 - 8
    assert inventory["idleReplicas"][0]["cluster"] == "us-east-1"
    assert inventory["idleReplicas"][0]["gpus"] == 8
    table = modelplane("status")
    assert "NVIDIA H100 80GB HBM3  40     10    8          22" in table
    assert "ml-team/llama-70b-us-east-1  us-east-1  llama-70b  10m   8" in table


@pytest.mark.tools
def test_a_pool_that_declares_its_fabric_label_is_counted_by_it(member):
    """Two nodes of a pool whose InferenceCluster entry says `fabricNodeLabel:
    network.example.com/fabric` (nodeSelector karpenter.sh/nodepool: h200), as the agent
    is told by compose-serving-stack's `--fabric-label`: they count under their fabric,
    not as unlabelled, and the other pool's nodes keep the default label."""
    api = member.client()
    core = client.CoreV1Api(api)
    pool = {"karpenter.sh/nodepool": "h200"}
    declared = [
        {"name": "h200", "nodeSelector": pool, "fabricNodeLabel": "network.example.com/fabric"},
        {"name": "h100"},
    ]
    added = ("ib-1", "ib-2")
    try:
        for name in added:
            core.create_node(
                {
                    "metadata": {
                        "name": name,
                        "labels": {**pool, "network.example.com/fabric": "ib-x"},
                    }
                }
            )
            node = core.read_node(name)
            node.status = client.V1NodeStatus(
                conditions=[client.V1NodeCondition(type="Ready", status="True", reason="Test")]
            )
            core.replace_node_status(name, node)
            _slice(api, name, 8)
        labels = parse_fabric_labels(
            None, None, tuple(format_fabric_label(f) for f in fabric_labels_of_pools(declared))
        )
        document = InventoryAgent(api, lambda: Counters({}), labels).sync(NOW)
        assert document["fabrics"] == [
            {"name": "ib-x", "nodes": 2, "largestFreeBlock": 2},
            {"name": "nvl-a", "nodes": 3, "largestFreeBlock": 1},
            {"name": "nvl-b", "nodes": 2, "largestFreeBlock": 0},
        ]
        # An agent told nothing reads only modelplane.ai/fabric: the pool is unlabelled.
        document = InventoryAgent(api, lambda: Counters({})).sync(NOW)
        assert {"name": "unlabelled", "nodes": 2, "largestFreeBlock": 2} in document["fabrics"]
    finally:
        for name in added:
            kube_request(api, "DELETE", f"{RESOURCE}/resourceslices/{name}-gpu")
            core.delete_node(name)
        InventoryAgent(api, lambda: Counters({})).sync(NOW)
        api.close()
