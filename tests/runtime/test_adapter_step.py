"""The agent's adapter step against a real kube-apiserver: it reads the loader ConfigMaps
and the gated engine pods as the API server serves them, patches each pod's
`modelplane.ai/adapters-loaded` condition into its status (beside the kubelet's own
conditions, which it must not disturb), and applies the per-base loaded record that
each ModelAdapter observes. The engines are reached through the loader's `Engine` with
a transport that records the calls (the real engine is tests/engines/test_lora_real.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from kubernetes import client

from functions.common import adapters as contract
from functions.common.contracts import LABEL_DEPLOYMENT, LABEL_ENGINE, PORT_NAME_HTTP
from functions.runtime.agent import adapters as loader
from tests.runtime.cluster import Member
from tests.runtime.test_operator_cli import start_control_plane
from tests.unit.test_adapter_loading import _Recorded

NAMESPACE = "ml-team"
BASE = "llama"
NOW = "2026-12-07T00:00:00Z"


@pytest.fixture(scope="module")
def member(tmp_path_factory) -> Iterator[Member]:
    member = start_control_plane("us-east-1", tmp_path_factory.mktemp("adapters"))
    try:
        api = member.client()
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})
        api.close()
        yield member
    finally:
        member.close()


def _engine_pod(api, name: str, ip: str, *, running: bool) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {
                "name": name,
                "labels": {LABEL_DEPLOYMENT: BASE, LABEL_ENGINE: "vllm"},
            },
            "spec": {
                "nodeName": "node-1",
                "readinessGates": [{"conditionType": contract.ADAPTERS_GATE}],
                "containers": [
                    {
                        "name": "engine",
                        "image": "vllm/vllm-openai:v0.32.0",
                        "ports": [{"name": PORT_NAME_HTTP, "containerPort": 8000}],
                    }
                ],
            },
        },
    )
    pod = core.read_namespaced_pod(name, NAMESPACE)
    pod.status = client.V1PodStatus(
        phase="Running",
        pod_ip=ip,
        conditions=[
            client.V1PodCondition(type="ContainersReady", status="True" if running else "False"),
            client.V1PodCondition(type="Ready", status="False", reason="ReadinessGatesNotReady"),
        ],
        container_statuses=[
            client.V1ContainerStatus(
                name="engine",
                ready=running,
                restart_count=0,
                image="vllm/vllm-openai:v0.32.0",
                image_id="",
            )
        ],
    )
    core.replace_namespaced_pod_status(name, NAMESPACE, pod)


def _loader_config(api, adapter: str, served: str) -> None:
    client.CoreV1Api(api).create_namespaced_config_map(
        NAMESPACE,
        {
            "metadata": {
                "name": f"lora-{BASE}-{adapter}",
                "labels": {contract.LABEL_ADAPTER: adapter, LABEL_DEPLOYMENT: BASE},
            },
            "data": {"servedName": served, "path": f"/adapters/{adapter}", "rank": "8"},
        },
    )


def _gate(api, name: str) -> dict | None:
    pod = client.CoreV1Api(api).read_namespaced_pod(name, NAMESPACE).to_dict()
    found = [c for c in pod["status"]["conditions"] or [] if c["type"] == contract.ADAPTERS_GATE]
    return found[0] if found else None


def test_the_step_loads_staged_adapters_gates_pods_and_reports_per_base(member):
    api = member.client()
    engines: dict[str, _Recorded] = {}

    def engine_for(url: str, engine_type: str) -> loader.Engine:
        transport = engines.setdefault(url, _Recorded(set()))
        return loader.Engine(url, engine_type, transport.get, transport.post)

    try:
        _engine_pod(api, "llama-0", "10.0.0.1", running=True)
        _engine_pod(api, "llama-1", "10.0.0.2", running=False)  # still starting
        _loader_config(api, "sql", "text-to-sql")
        step = loader.AdapterStep(api, engine_for=engine_for)
        step.step(NOW)

        assert engines["http://10.0.0.1:8000"].held == {"text-to-sql"}
        assert "http://10.0.0.2:8000" not in engines  # not asked before it answers
        gate = _gate(api, "llama-0")
        assert (gate["status"], gate["message"]) == ("True", "loaded 1 of 1 adapters")
        assert _gate(api, "llama-1") is None  # its readiness waits
        kinds = [
            c.type
            for c in client.CoreV1Api(api)
            .read_namespaced_pod("llama-0", NAMESPACE)
            .status.conditions
        ]
        assert {"ContainersReady", "Ready", contract.ADAPTERS_GATE} <= set(kinds)

        record = client.CoreV1Api(api).read_namespaced_config_map(
            contract.loaded_record_name(BASE), NAMESPACE
        )
        assert json.loads(record.data["text-to-sql"]) == {
            "loaded": 1,
            "replicas": 2,
            "error": "",
        }

        # The adapter is deleted (its ModelAdapter removed the ConfigMap): unloaded.
        client.CoreV1Api(api).delete_namespaced_config_map(f"lora-{BASE}-sql", NAMESPACE)
        step.step(NOW)
        assert engines["http://10.0.0.1:8000"].held == set()
        record = client.CoreV1Api(api).read_namespaced_config_map(
            contract.loaded_record_name(BASE), NAMESPACE
        )
        assert record.data is None or "text-to-sql" not in record.data
        assert _gate(api, "llama-0")["message"] == "loaded 0 of 0 adapters"
    finally:
        api.close()
