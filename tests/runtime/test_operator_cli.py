"""`modelplane status | explain | retry` against a real kube-apiserver.

Crossplane is not running here, so the XRDs are served as plain CRDs built from their own
schemas (what Crossplane would generate, minus its own spec fields). The objects are the
render tier's golden outputs — the ModelDeployment statuses and ModelReplicas that the
real compose-model-deployment wrote for a parked, an unplaceable and a freshly placed
model — applied with their statuses, then read back through a kubeconfig by the CLI
exactly as an operator runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes import client

from functions.common.contracts import ANNOTATION_RETRY, API_GROUP, API_VERSION
from tests.conftest import REPO, require_tool
from tests.runtime.cluster import Member, _wait_established

GOLDEN = REPO / "tests" / "render" / "testdata" / "model_deployment"
SCHEMA = json.loads((REPO / "schemas" / "fleet-status.schema.json").read_text())
KINDS = ("inferenceclusters", "modeldeployments", "modelreplicas")
NAMESPACE = "ml-team"
RECORDED_AT = "2026-12-01T10:00:00Z"  # the goldens' <now>
CLI = [sys.executable, "-m", "functions.entrypoint"]


CONDITIONS = {
    "type": "array",
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["type"],
    "items": {
        "type": "object",
        "required": ["type", "status", "reason", "lastTransitionTime"],
        "properties": {
            key: {"type": "string"}
            for key in ("type", "status", "reason", "message", "lastTransitionTime")
        },
    },
}


def crd_from_xrd(path: Path) -> dict:
    """The CRD Crossplane would serve for an XRD, from the XRD's own schema, with the
    status conditions Crossplane adds to every XR."""
    xrd = yaml.safe_load(path.read_text())["spec"]
    for version in xrd["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"].setdefault(
            "status", {"type": "object"}
        )
        status.setdefault("properties", {})["conditions"] = CONDITIONS
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{xrd['names']['plural']}.{xrd['group']}"},
        "spec": {
            "group": xrd["group"],
            "names": {k: v for k, v in xrd["names"].items() if k != "categories"},
            "scope": xrd["scope"],
            "versions": [
                {
                    "name": v["name"],
                    "served": True,
                    "storage": True,
                    "schema": v["schema"],
                    "subresources": {"status": {}},
                }
                for v in xrd["versions"]
            ],
        },
    }


def recorded(name: str) -> list[dict]:
    """The claim as applied (xr.yaml) with the status the function wrote, and its replicas."""
    text = (GOLDEN / name / "expected.yaml").read_text().replace("<now>", f"'{RECORDED_AT}'")
    docs = [d for d in yaml.safe_load_all(text) if d]
    claim = yaml.safe_load((GOLDEN / name / "xr.yaml").read_text())
    found = []
    for doc in docs:
        if doc.get("kind") == "ModelDeployment":
            found.append({**doc, "spec": claim["spec"]})
        elif doc.get("kind") == "ModelReplica":
            found.append(doc)
    return found


def start_control_plane(
    name: str, workdir: Path, adjust: Callable[[dict], dict] = lambda crd: crd
) -> Member:
    """An API server serving the three kinds as Crossplane would (started; close it);
    `adjust` may change each CRD before it is created."""
    member = Member(name, workdir, require_tool("etcd"), require_tool("kube-apiserver"))
    member.start_etcd()
    member.start_apiserver()
    api = member.client()
    try:
        extensions = client.ApiextensionsV1Api(api)
        for kind in KINDS:
            crd = adjust(crd_from_xrd(REPO / "apis" / kind / "definition.yaml"))
            extensions.create_custom_resource_definition(crd)
            _wait_established(extensions, crd["metadata"]["name"])
    finally:
        api.close()
    return member


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory) -> Iterator[Member]:
    member = start_control_plane("control-plane", tmp_path_factory.mktemp("control-plane"))
    try:
        api = member.client()
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        objects = client.CustomObjectsApi(api)
        for cluster in yaml.safe_load_all((GOLDEN / "clusters.yaml").read_text()):
            if not cluster or cluster.get("kind") != "InferenceCluster":
                continue
            created = objects.create_cluster_custom_object(
                API_GROUP, API_VERSION, "inferenceclusters", cluster
            )
            created["status"] = {
                "telemetry": {"mode": "Push"},
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "Available",
                        "lastTransitionTime": RECORDED_AT,
                    }
                ],
            }
            objects.replace_cluster_custom_object_status(
                API_GROUP, API_VERSION, "inferenceclusters", cluster["metadata"]["name"], created
            )
        for golden in ("parked", "unplaceable", "first-placement"):
            for obj in recorded(golden):
                plural = "modeldeployments" if obj["kind"] == "ModelDeployment" else "modelreplicas"
                status = obj.pop("status", None)
                obj["metadata"] = {
                    "name": obj["metadata"]["name"],
                    "namespace": NAMESPACE,
                    "labels": obj["metadata"].get("labels") or {},
                }
                created = objects.create_namespaced_custom_object(
                    API_GROUP, API_VERSION, NAMESPACE, plural, obj
                )
                if status:
                    created["status"] = status
                    objects.replace_namespaced_custom_object_status(
                        API_GROUP, API_VERSION, NAMESPACE, plural, obj["metadata"]["name"], created
                    )
        api.close()
        yield member
    finally:
        member.close()


@pytest.fixture(scope="module")
def kubeconfig(control_plane: Member, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kubeconfig") / "config"
    path.write_text(yaml.safe_dump(control_plane.kubeconfig(namespace=NAMESPACE)))
    return path


def modelplane(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        check=False,
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.tools
def test_status_json_is_the_whole_fleet_and_validates(kubeconfig):
    document = json.loads(modelplane(kubeconfig, "status", "-o", "json").stdout)
    jsonschema.validate(document, SCHEMA)
    states = {m["name"]: m["state"] for m in document["modelList"]}
    assert states == {
        "kev-0-5b": "Parked",
        "deepseek-v3": "Unplaceable",
        "llama-3-1-8b": "Short",
    }
    assert [p["name"] for p in document["parked"]] == ["kev-0-5b"]
    assert document["parked"][0]["failures"] == 5
    assert "unknown model architecture" in document["parked"][0]["lastError"]
    assert [u["name"] for u in document["unplaceable"]] == ["deepseek-v3"]
    assert "largest free block" in document["unplaceable"][0]["reason"]
    assert document["models"] == {"total": 3, "satisfied": 0, "short": 3}
    placed = next(m for m in document["modelList"] if m["name"] == "llama-3-1-8b")
    assert placed["placed"] == placed["desired"] > 0
    assert {p["cluster"] for p in placed["placements"]} == {"us-east-1", "eu-west-1"}
    assert [c["name"] for c in document["clusters"]] == ["dev-1", "eu-west-1", "us-east-1"]


@pytest.mark.tools
def test_status_yaml_and_table_say_the_same(kubeconfig):
    as_yaml = yaml.safe_load(modelplane(kubeconfig, "status", "-o", "yaml").stdout)
    as_json = json.loads(modelplane(kubeconfig, "status", "-o", "json").stdout)
    assert as_yaml == as_json
    table = modelplane(kubeconfig, "status").stdout
    print(table)
    assert "Models:    3 total, 0 satisfied, 3 short" in table
    assert "ml-team/kev-0-5b" in table
    assert "ml-team/deepseek-v3" in table


@pytest.mark.tools
def test_explain_says_why_and_what_next(kubeconfig):
    text = modelplane(kubeconfig, "explain", "deepseek-v3").stdout
    assert "Unplaceable" in text
    assert "largest free block" in text
    assert "ReplicasScheduled=False (Unplaceable)" in text


@pytest.mark.tools
def test_retry_unparks_only_a_parked_model(kubeconfig, control_plane):
    done = modelplane(kubeconfig, "retry", "llama-3-1-8b")
    assert "is not parked" in done.stdout
    done = modelplane(kubeconfig, "retry", "kev-0-5b", "-n", NAMESPACE)
    assert "unparked" in done.stdout
    assert "5 start failures" in done.stdout
    api = control_plane.client()
    try:
        objects = client.CustomObjectsApi(api)
        parked = objects.get_namespaced_custom_object(
            API_GROUP, API_VERSION, NAMESPACE, "modeldeployments", "kev-0-5b"
        )
        placed = objects.get_namespaced_custom_object(
            API_GROUP, API_VERSION, NAMESPACE, "modeldeployments", "llama-3-1-8b"
        )
    finally:
        api.close()
    assert parked["metadata"]["annotations"][ANNOTATION_RETRY]
    assert ANNOTATION_RETRY not in (placed["metadata"].get("annotations") or {})


@pytest.mark.tools
def test_a_missing_model_is_named(kubeconfig):
    done = subprocess.run(
        [*CLI, "retry", "nope"],
        capture_output=True,
        text=True,
        check=False,
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
    )
    assert done.returncode == 1
    assert "no ModelDeployment ml-team/nope" in done.stderr


@pytest.mark.tools
def test_model_health_reads_the_same_statuses_at_scrape_time(control_plane):
    from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: PLC0415
    from opentelemetry.sdk.metrics import MeterProvider  # noqa: PLC0415
    from prometheus_client import CollectorRegistry  # noqa: PLC0415

    from functions.runtime.operator.cli import ControlPlane  # noqa: PLC0415
    from functions.runtime.operator.model_health import ModelHealthMetrics  # noqa: PLC0415
    from tests.unit.test_hub_metrics import scrape  # noqa: PLC0415

    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    api = control_plane.client()
    try:
        plane = ControlPlane(api)
        ModelHealthMetrics(provider.get_meter("test"), lambda: plane.fleet(None))
        got = scrape(registry)
    finally:
        api.close()

    def value(metric, deployment):
        labels = {"namespace": NAMESPACE, "deployment": deployment}
        return next(v for ls, v in got[metric] if ls == labels)

    assert value("modelplane_deployment_parked", "kev-0-5b") == 1
    assert value("modelplane_deployment_consecutive_start_failures", "kev-0-5b") == 5
    assert value("modelplane_deployment_unplaceable_replicas", "deepseek-v3") == 1
    assert value("modelplane_deployment_ready_replicas", "deepseek-v3") == 0
    assert value("modelplane_deployment_desired_replicas", "llama-3-1-8b") == 3
    assert value("modelplane_deployment_parked", "llama-3-1-8b") == 0


CHECKLIST_KNOBS = (
    ("mode",),
    ("minReplicas",),
    ("maxReplicas",),
    ("signals", "demand"),
    ("signals", "pressure"),
    ("signals", "latency"),
    ("capacity", "replicaCapacity"),
    ("latencySLO",),
    ("escalation", "after"),
    ("escalation", "readyTimeout"),
    ("escalation", "cooldown"),
    ("escalation", "calmFor"),
)


@pytest.mark.tools
@pytest.mark.parametrize("model", ["deepseek-v3", "llama-3-1-8b"])
def test_suggest_prints_a_shadow_policy_the_api_server_accepts(kubeconfig, control_plane, model):
    text = modelplane(kubeconfig, "suggest", model).stdout
    patch = yaml.safe_load(text)
    autoscaling = patch["spec"]["autoscaling"]
    assert autoscaling["mode"] == "shadow"
    for path in CHECKLIST_KNOBS:
        value = autoscaling
        for key in path:
            value = value[key]
        # Every knob is preceded by a comment saying what goes wrong when it is off.
        lines = text.splitlines()
        at = next(
            i for i, text_line in enumerate(lines) if text_line.strip().startswith(f"{path[-1]}:")
        )
        assert lines[at - 1].strip().startswith("#"), path
    # Vocabulary signals: scoped to the model by the agent, the same for every engine.
    assert autoscaling["signals"]["demand"] == {
        "metric": "modelplane_requests_total",
        "function": "rate",
    }
    # The patch, applied as `kubectl patch --type merge` would, is valid for the real XRD
    # (schema and CEL rules) as the API server serves it: a server-side dry run.
    api = control_plane.client()
    try:
        objects = client.CustomObjectsApi(api)
        patched = objects.patch_namespaced_custom_object(
            API_GROUP,
            API_VERSION,
            NAMESPACE,
            "modeldeployments",
            model,
            patch,
            dry_run="All",
        )
    finally:
        api.close()
    assert patched["spec"]["autoscaling"]["mode"] == "shadow"
    assert (
        patched["spec"]["autoscaling"]["maxReplicas"]
        >= patched["spec"]["autoscaling"]["minReplicas"]
    )
