"""compose-model-replica under the real `crossplane render`.

One ModelReplica (testdata/modelreplica.yaml, the one the schema tests validate) is
rendered against what the member cluster shows: nothing yet, a serving workload, and a
workload whose pods keep failing to start (testdata/model_replica/observed-*.yaml, the
provider-kubernetes Objects as the control plane would hold them). What a user relies
on: every Object is composed, status and conditions say what is going on and what to do,
and the ModelReplica is Ready only when its replicas are.
"""

import copy
import json
import os
import tempfile
from pathlib import Path

import pytest
import yaml

import render
from functions.common import answers, conditions, contracts
from functions.common.contracts import MULTINODE_ENV, OBJECT_API_VERSION, OBJECT_KIND
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse
from functions.runtime.activator import core as activator_core

TESTDATA = render.REPO / "tests" / "render" / "testdata"
RESOURCE_NAME = "crossplane.io/composition-resource-name"
XR = TESTDATA / "modelreplica.yaml"
# Its InferenceCluster, which compose-model-replica reads (the provider config, the pod policy).
CLUSTER = render.REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml"
OBSERVED = TESTDATA / "model_replica"
# Every serving shape, as the unit goldens compose them.
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
SHAPES = sorted((render.REPO / "tests/unit/testdata/model_replica/inputs").glob("*.yaml"))


def _cluster_of(xr: Path) -> Path:
    """The InferenceCluster a replica names: the example's for XR; for a shape's input, one
    of its name reaching its members through the provider config the replica names."""
    if xr == XR:
        return CLUSTER
    spec = yaml.safe_load(xr.read_text())["spec"]["cluster"]
    cluster = yaml.safe_load(CLUSTER.read_text())
    cluster["metadata"]["name"] = spec["name"]
    cluster["spec"]["providerConfigRef"] = spec["providerConfigRef"]
    path = Path(_CLUSTERS.name) / f"{xr.stem}.yaml"
    path.write_text(yaml.safe_dump(cluster))
    return path


# Removed when the module's tests are done (at interpreter exit).
_CLUSTERS = tempfile.TemporaryDirectory(prefix="modelplane-replica-clusters-")


def _render(function_servers, xr: Path = XR, observed: Path | None = None):
    result = render.render(function_servers, xr, observed=observed, required=_cluster_of(xr))
    assert result.returncode == 0, result.stderr
    composite = result.documents[0]
    composed = [d for d in result.documents[1:] if d["kind"] != "Result"]
    return composite, composed


def _condition(composite: dict, typ: str) -> dict:
    return next(c for c in composite["status"]["conditions"] if c["type"] == typ)


def test_composes_every_object_before_the_cluster_shows_anything(function_servers):
    composite, composed = _render(function_servers)
    assert {(d["apiVersion"], d["kind"]) for d in composed} == {(OBJECT_API_VERSION, OBJECT_KIND)}
    kinds = sorted(d["spec"]["forProvider"]["manifest"]["kind"] for d in composed)
    assert kinds == sorted(
        [
            "ClusterRoleBinding",  # the picker may review its scrapers' tokens
            "ConfigMap",  # the health record, observed only
            "Deployment",  # the engine
            "Deployment",  # the endpoint picker
            "HTTPRoute",
            "InferencePool",
            "Namespace",
            "ResourceClaimTemplate",
            "Role",
            "RoleBinding",
            "Service",  # the model's endpoint
            "Service",  # the endpoint picker's
            "ServiceAccount",
        ]
    )
    provider_configs = {d["spec"]["providerConfigRef"]["name"] for d in composed}
    assert provider_configs == {"us-east-1"}

    workload = _condition(composite, conditions.WORKLOAD_READY)
    assert (workload["status"], workload["reason"]) == ("False", "Creating")
    serving = _condition(composite, conditions.SERVING)
    assert (serving["status"], serving["reason"]) == ("False", "NoReadyReplicas")
    assert _condition(composite, "Ready")["status"] == "False"
    assert composite["status"]["readyReplicas"] == 0
    assert "health" not in composite["status"]


def test_ready_when_every_desired_replica_is_ready(function_servers):
    composite, composed = _render(function_servers, observed=OBSERVED / "observed-ready.yaml")
    assert composite["status"]["readyReplicas"] == 2
    assert composite["status"]["health"]["consecutiveStartFailures"] == 0
    workload = _condition(composite, conditions.WORKLOAD_READY)
    assert (workload["status"], workload["reason"]) == ("True", "Available")
    assert "2 of 2" in workload["message"]
    assert _condition(composite, conditions.SERVING)["status"] == "True"
    assert _condition(composite, "Ready")["status"] == "True"
    # Observing never drops or changes what is composed.
    _, before = _render(function_servers)
    assert [d["metadata"]["name"] for d in composed] == [d["metadata"]["name"] for d in before]


def test_failing_workload_says_why_from_the_health_record(function_servers):
    composite, _ = _render(function_servers, observed=OBSERVED / "observed-failing.yaml")
    assert composite["status"]["readyReplicas"] == 0
    health = composite["status"]["health"]
    assert health["consecutiveStartFailures"] == 3
    assert health["definitionHash"] == "3f2a9c1d0b"
    workload = _condition(composite, conditions.WORKLOAD_READY)
    assert (workload["status"], workload["reason"]) == ("False", "StartFailing")
    assert "3 consecutive start failures" in workload["message"]
    assert 'unknown architecture "kev"' in workload["message"]
    assert _condition(composite, "Ready")["status"] == "False"


def test_parked_model_answers_with_503_instead_of_routing(function_servers, tmp_path):
    xr = yaml.safe_load(XR.read_text())
    xr["spec"]["replicas"] = 0
    xr["spec"]["unavailable"] = {"reason": "Parked", "message": "parked after 5 start failures"}
    parked = tmp_path / "parked.yaml"
    parked.write_text(yaml.safe_dump(xr))
    composite, composed = _render(function_servers, xr=parked)
    manifests = {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d for d in composed
    }
    route = manifests["route"]["spec"]["forProvider"]["manifest"]
    assert "backendRefs" not in route["spec"]["rules"][0]
    response = manifests["route-unavailable"]["spec"]["forProvider"]["manifest"]
    assert response["spec"]["directResponse"]["statusCode"] == 503
    workload = manifests["workload"]["spec"]["forProvider"]["manifest"]
    assert workload["spec"]["replicas"] == 0
    serving = _condition(composite, conditions.SERVING)
    assert (serving["status"], serving["reason"]) == ("False", "Parked")
    assert "parked after 5 start failures" in serving["message"]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (
            lambda spec: spec["engines"][0]["members"][0].update(role="Prefill"),
            "spec.engines[0].members",
        ),
        (
            lambda spec: spec["engines"][0]["members"][0]["template"]["spec"]["containers"].append(
                {"name": "proxy", "image": "envoy", "ports": [{"name": "http", "containerPort": 9}]}
            ),
            "spec.engines[0].members[0].template.spec.containers[1].ports[0].name",
        ),
        (
            lambda spec: spec["engines"][0]["members"][0]["template"]["spec"]["containers"][
                0
            ].update(args=["m", "--tensor-parallel-size", "64"]),
            "spec.engines[0].members[0].template.spec.containers[0].args: the parallel layout "
            "written (--tensor-parallel-size 64) needs 64 accelerators",
        ),
    ],
    ids=[
        "unified_with_a_prefill_member",
        "sidecar_claims_the_engine_port_name",
        "a_layout_larger_than_the_claim_cannot_start",
    ],
)
def test_bad_input_is_fatal_and_names_the_field(function_servers, tmp_path, change, named):
    xr = yaml.safe_load(XR.read_text())
    change(xr["spec"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(xr))
    result = render.render(function_servers, bad, required=CLUSTER)
    assert result.returncode != 0
    assert named in result.stderr


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_every_shape_renders_what_the_planner_composes(function_servers, xr_path):
    # The goldens are the planner's output; this proves the shell writes exactly that.
    planned = compose(parse(yaml.safe_load(xr_path.read_text()))).composed
    _, composed = _render(function_servers, xr=xr_path)
    by_key = {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d for d in composed
    }
    assert sorted(by_key) == [c.key for c in planned]
    for c in planned:
        assert by_key[c.key]["spec"] == c.object["spec"], c.key


def test_removing_a_composed_object_is_said_not_silent(function_servers):
    result = render.render(
        function_servers, XR, observed=OBSERVED / "observed-was-parked.yaml", required=CLUSTER
    )
    assert result.returncode == 0, result.stderr
    names = [d["metadata"]["name"] for d in result.documents[1:] if d["kind"] != "Result"]
    assert "llama-3-1-8b-us-east-1-route-unavailable" not in names
    messages = [d.get("message", "") for d in result.documents if d["kind"] == "Result"]
    assert any("removing route-unavailable" in m for m in messages), messages


# One ModelDeployment, the same replica on each stack: (Standard input, Dynamo input).
LAUNCH_TWINS = {
    "vllm": ("leader-worker", "grove-leader-worker-vllm"),
    "sglang": ("leader-worker-sglang", "grove-leader-worker"),
}
LAUNCH_GOLDEN = OBSERVED / "launch-contract.yaml"


def _rendered_launch(function_servers, shape: str) -> dict[str, dict]:
    """Per pod template (LWS leader/worker, Grove clique): the engine's env and args, as
    the real `crossplane render` wrote them."""
    _, composed = _render(function_servers, xr=SHAPES[0].parent / f"{shape}.yaml")
    workload = next(
        d["spec"]["forProvider"]["manifest"]
        for d in composed
        if d["metadata"]["annotations"]["crossplane.io/composition-resource-name"] == "workload"
    )
    if workload["kind"] == "LeaderWorkerSet":
        lwt = workload["spec"]["leaderWorkerTemplate"]
        pods = {"leader": lwt["leaderTemplate"]["spec"], "worker": lwt["workerTemplate"]["spec"]}
    else:
        pods = {c["name"]: c["spec"]["podSpec"] for c in workload["spec"]["template"]["cliques"]}
    launched = {}
    for name, pod in pods.items():
        engine = pod["containers"][0]
        env = {
            e["name"]: e.get("value", e.get("valueFrom"))
            for e in engine["env"]
            if e["name"] in MULTINODE_ENV
        }
        launched[name] = {"env": env, "args": engine["args"]}
    return {"kind": workload["kind"], "pods": launched}


def test_leader_and_workers_launch_with_identical_flags_on_both_stacks(function_servers):
    rendered = {}
    for engine_type, (standard, dynamo) in LAUNCH_TWINS.items():
        lws = _rendered_launch(function_servers, standard)
        grove = _rendered_launch(function_servers, dynamo)
        rendered[engine_type] = {"Standard": lws, "Dynamo": grove}
        assert lws["pods"]["leader"]["args"] == grove["pods"]["leader"]["args"], engine_type
        grove_workers = [p for n, p in grove["pods"].items() if n.startswith("worker-")]
        assert grove_workers, engine_type
        for worker in grove_workers:
            assert worker["args"] == lws["pods"]["worker"]["args"], engine_type
        # The contract's names are on every pod of both stacks.
        for pods in (lws["pods"], grove["pods"]):
            assert all(set(p["env"]) == set(MULTINODE_ENV) for p in pods.values())
    text = (
        "# The multi-node launch contract as `crossplane render` composes it: per engine\n"
        "# type, the same replica on each stack. Regenerate with UPDATE_GOLDEN=1 .venv/bin/\n"
        "# pytest tests/render/test_compose_model_replica.py and review the diff.\n"
        + yaml.safe_dump(rendered, sort_keys=False, width=100)
    )
    if UPDATE:
        LAUNCH_GOLDEN.write_text(text)
    assert LAUNCH_GOLDEN.exists(), "no golden: run with UPDATE_GOLDEN=1"
    assert text == LAUNCH_GOLDEN.read_text(), "regenerate with UPDATE_GOLDEN=1 if intended"


def _engine_pods(composed) -> list[dict]:
    workload = next(
        d["spec"]["forProvider"]["manifest"]
        for d in composed
        if d["metadata"]["annotations"]["crossplane.io/composition-resource-name"] == "workload"
    )
    if workload["kind"] == "LeaderWorkerSet":
        lwt = workload["spec"]["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"]["spec"], lwt["workerTemplate"]["spec"]]
    return [c["spec"]["podSpec"] for c in workload["spec"]["template"]["cliques"]]


def test_engine_pods_mount_the_model_cache_read_only_on_both_stacks(function_servers):
    launched = {}
    for shape in ("model-cache", "grove-model-cache"):
        _, composed = _render(function_servers, xr=SHAPES[0].parent / f"{shape}.yaml")
        pods = _engine_pods(composed)
        assert len(pods) >= 2, shape  # a leader and its worker(s): every rank loads weights
        for pod in pods:
            (volume,) = [v for v in pod["volumes"] if "persistentVolumeClaim" in v]
            assert volume["persistentVolumeClaim"] == {
                "claimName": "modelcache-deepseek-v3-weights",
                "readOnly": True,
            }
            engine = pod["containers"][0]
            (mount,) = [m for m in engine["volumeMounts"] if m["name"] == volume["name"]]
            assert mount == {
                "name": volume["name"],
                "mountPath": "/models/deepseek-v3-weights",
                "readOnly": True,
            }
            # The engine's model is the cache (positionally, first: `vllm serve MODEL`),
            # and a script finds it in the environment.
            assert engine["args"][0] == "/models/deepseek-v3-weights"
            env = {e["name"]: e.get("value") for e in engine["env"]}
            assert env["MODELPLANE_MODEL_PATH"] == "/models/deepseek-v3-weights"
        launched[shape] = [p["containers"][0]["args"] for p in pods]
    # One deployment never launches differently on two stacks.
    assert launched["model-cache"][0] == launched["grove-model-cache"][0]
    assert all(a == launched["model-cache"][1] for a in launched["grove-model-cache"][1:])


# The three ModelReplicas compose-model-deployment composed for a managed-traffic model
# (its render golden), each rendered as its cluster's ModelReplica.
MANAGED = TESTDATA / "model_deployment" / "managed-traffic" / "expected.yaml"
MANAGED_GOLDEN = OBSERVED / "managed-traffic.yaml"
MANAGED_KEYS = ("route", "backend-service", "backend-export", "adaptivepolicy")


def _managed_replicas() -> list[dict]:
    replicas = []
    for doc in yaml.safe_load_all(MANAGED.read_text()):
        if doc["kind"] == "ModelReplica":
            meta = doc["metadata"]
            doc["metadata"] = {k: meta[k] for k in ("name", "namespace", "labels")}
            replicas.append(doc)
    return sorted(replicas, key=lambda r: r["spec"]["cluster"]["name"])


def test_managed_traffic_routes_carry_the_backend_the_hub_weights_for_every_cluster(
    function_servers, tmp_path
):
    rendered: dict[str, dict[str, dict]] = {}
    for replica in _managed_replicas():
        cluster = replica["spec"]["cluster"]["name"]
        xr = tmp_path / f"{cluster}.yaml"
        xr.write_text(yaml.safe_dump(replica))
        _, composed = _render(function_servers, xr=xr)
        by_key = {
            d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d["spec"][
                "forProvider"
            ]["manifest"]
            for d in composed
        }
        rendered[cluster] = {k: by_key[k] for k in MANAGED_KEYS}
    text = yaml.safe_dump(rendered, sort_keys=True, width=100)
    if UPDATE:
        MANAGED_GOLDEN.write_text(text)
    assert rendered == yaml.safe_load(MANAGED_GOLDEN.read_text()), (
        f"regenerate {MANAGED_GOLDEN.name} with UPDATE_GOLDEN=1 if the change is intended"
    )

    clusters = sorted(rendered)
    assert clusters == ["dev-1", "eu-west-1", "us-east-1"]
    policy = rendered[clusters[0]]["adaptivepolicy"]["spec"]
    assert all(rendered[c]["adaptivepolicy"]["spec"] == policy for c in clusters)
    backend_of = {c["name"]: c["backendRef"] for c in policy["clusters"]}
    steady = {c["name"]: c["weight"] for c in policy["clusters"]}
    assert steady == {"dev-1": 20, "eu-west-1": 30, "us-east-1": 50}
    assert policy["traffic"]["routes"][0] == {
        "name": rendered[clusters[0]]["route"]["metadata"]["name"]
    }
    for cluster in clusters:
        route = rendered[cluster]["route"]
        refs = route["spec"]["rules"][0]["backendRefs"]
        # Its own pods through its own pool (the picker keeps balancing the local share),
        # every other cluster through the ServiceImport the hub weights by name; every
        # copy starts from the policy's Steady weights, as the hub's first step assumes.
        local = [r for r in refs if r["kind"] == "InferencePool"]
        assert [r["weight"] for r in local] == [steady[cluster]]
        remote = {r["name"]: r for r in refs if r["kind"] == "ServiceImport"}
        assert sorted(remote) == sorted(backend_of[c] for c in clusters if c != cluster)
        assert all(r["group"] == "multicluster.x-k8s.io" for r in remote.values())
        assert {r["name"]: r["weight"] for r in remote.values()} == {
            backend_of[c]: steady[c] for c in clusters if c != cluster
        }
        assert all(r["port"] == 8000 for r in remote.values())
        assert sum(r["weight"] for r in refs) == 100
        # What the others import: this cluster's serving pods under its backend's name.
        service = rendered[cluster]["backend-service"]
        export = rendered[cluster]["backend-export"]
        assert service["metadata"]["name"] == export["metadata"]["name"] == backend_of[cluster]
        assert export["kind"] == "ServiceExport"
        assert service["spec"]["ports"][0]["port"] == 8000
        assert service["spec"]["selector"]["modelplane.ai/serving"]


def test_an_on_demand_replica_with_nothing_ready_routes_to_the_members_activator(
    function_servers, tmp_path
):
    xr = yaml.safe_load(XR.read_text())
    xr["spec"]["activator"] = True
    path = tmp_path / "activator.yaml"
    path.write_text(yaml.safe_dump(xr))
    _composite, composed = _render(function_servers, path)
    manifests = {
        d["spec"]["forProvider"]["manifest"]["kind"]: d["spec"]["forProvider"]["manifest"]
        for d in composed
    }
    (rule,) = manifests["HTTPRoute"]["spec"]["rules"]
    assert rule["backendRefs"] == [
        {
            "group": "",
            "kind": "Service",
            "name": contracts.ACTIVATOR_SERVICE_NAME,
            "namespace": contracts.SYSTEM_NAMESPACE,
            "port": contracts.ACTIVATOR_PORT,
        }
    ]
    namespace, name = xr["metadata"]["namespace"], xr["spec"]["deployment"]
    (modifier,) = rule["filters"]
    assert modifier["requestHeaderModifier"]["set"] == [
        {"name": contracts.HEADER_DEPLOYMENT, "value": f"{namespace}/{name}"}
    ]
    # The activator serves exactly the identity this route vouches for (and sets, so a
    # client's copy of the header never passes).
    assert activator_core.route_index([manifests["HTTPRoute"]]).served == {(namespace, name)}
    grant = manifests["ReferenceGrant"]
    assert grant["metadata"]["namespace"] == contracts.SYSTEM_NAMESPACE
    assert grant["spec"]["from"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": namespace}
    ]
    assert grant["spec"]["to"] == [
        {"group": "", "kind": "Service", "name": contracts.ACTIVATOR_SERVICE_NAME}
    ]


def test_launch_warnings_reach_the_replicas_status_and_its_events(function_servers, tmp_path):
    xr = yaml.safe_load(XR.read_text())  # its engine image is vllm/vllm-openai:v0.11.0
    container = xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["args"] = [*(container.get("args") or []), "--x", "$(MODELPLANE_RANK)"]
    path = tmp_path / "warned.yaml"
    path.write_text(yaml.safe_dump(xr))
    result = render.render(function_servers, path, required=CLUSTER)
    assert result.returncode == 0, result.stderr
    composite = result.documents[0]
    engine = "spec.engines[0].members[0].template.spec.containers[0]"
    assert [(w["field"], w["reason"]) for w in composite["status"]["warnings"]] == [
        (f"{engine}.args[{len(container['args']) - 1}]", "UndefinedVariable"),
        (f"{engine}.image", "ImageOlderThanChecked"),
    ]
    said = [d.get("message", "") for d in result.documents if d["kind"] == "Result"]
    assert any("$(MODELPLANE_RANK) is not defined in this container" in m for m in said)


def test_a_503_body_names_no_cluster_device_class_or_spec_path(function_servers, tmp_path):
    xr = yaml.safe_load(XR.read_text())
    xr["spec"]["replicas"] = 0
    operator = (
        "needs 8 free H100 per replica; most free: eu-west-1/b200 2; DeviceClass gpu.nvidia.com "
        "missing on ap-south-1 (status.deviceClasses); spec.template.spec.engines[0] asks for it"
    )
    xr["spec"]["unavailable"] = {"reason": "Unplaceable", "message": operator}
    path = tmp_path / "unplaceable.yaml"
    path.write_text(yaml.safe_dump(xr))
    composite, composed = _render(function_servers, xr=path)
    manifests = {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d for d in composed
    }
    response = manifests["route-unavailable"]["spec"]["forProvider"]["manifest"]
    body = response["spec"]["directResponse"]["body"]["inline"]
    for word in ("eu-west-1", "ap-south-1", "us-east-1", "gpu.nvidia.com", "DeviceClass", "spec."):
        assert word not in body
    error = json.loads(body)["error"]
    assert (error["reason"], error["message"]) == (
        "Unplaceable",
        answers.caller_message("Unplaceable"),
    )
    # The operator's detail stays in the replica's status.
    assert operator in _condition(composite, conditions.SERVING)["message"]


def _with_revision(tmp_path: Path, replica: dict, revision: str) -> Path:
    replica = copy.deepcopy(replica)
    replica["spec"]["revision"] = revision
    path = tmp_path / f"{replica['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(replica))
    return path


def _observed_workload(tmp_path: Path, revision: str, status: dict, name: str) -> Path:
    """observed-ready.yaml with the member's Deployment at `revision` and `status`."""
    documents = list(yaml.safe_load_all((OBSERVED / "observed-ready.yaml").read_text()))
    remote = documents[0]["status"]["atProvider"]["manifest"]
    remote["metadata"].update(labels={contracts.LABEL_REVISION: revision}, generation=4)
    remote["status"] = {"observedGeneration": 4, **status}
    path = tmp_path / name
    path.write_text(yaml.safe_dump_all(documents))
    return path


def test_a_replica_says_which_revision_its_workload_has_fully_rolled(function_servers, tmp_path):
    xr = _with_revision(tmp_path, yaml.safe_load(XR.read_text()), "r0123456789")
    _, composed = _render(function_servers, xr=xr)
    workload = next(
        d for d in composed if d["metadata"]["annotations"][RESOURCE_NAME] == "workload"
    )
    manifest = workload["spec"]["forProvider"]["manifest"]
    # On the workload, not on its pods: a revision label on the pod template would
    # restart every pod of a replica whose engines did not change.
    assert manifest["metadata"]["labels"][contracts.LABEL_REVISION] == "r0123456789"
    assert contracts.LABEL_REVISION not in manifest["spec"]["template"]["metadata"]["labels"]

    rolled = _observed_workload(
        tmp_path, "r0123456789", {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}, "a.yaml"
    )
    composite, _ = _render(function_servers, xr=xr, observed=rolled)
    assert composite["status"]["revision"] == "r0123456789"
    # Mid-roll: the old pods are still the ready ones.
    rolling = _observed_workload(
        tmp_path, "r0123456789", {"replicas": 3, "updatedReplicas": 1, "readyReplicas": 2}, "b.yaml"
    )
    composite, _ = _render(function_servers, xr=xr, observed=rolling)
    assert "revision" not in composite["status"]
    # The workload applied is another revision's.
    other = _observed_workload(
        tmp_path, "r9999999999", {"replicas": 2, "updatedReplicas": 2, "readyReplicas": 2}, "c.yaml"
    )
    composite, _ = _render(function_servers, xr=xr, observed=other)
    assert "revision" not in composite["status"]


def test_a_replica_reports_the_rollout_signals_its_members_agent_computed(
    function_servers, tmp_path
):
    replica = _managed_replicas()[0]
    xr = _with_revision(tmp_path, replica, "r0123456789")
    _, composed = _render(function_servers, xr=xr)
    policy = next(
        d for d in composed if d["metadata"]["annotations"][RESOURCE_NAME] == "adaptivepolicy"
    )
    observed = copy.deepcopy(policy)
    observed["status"] = {
        "atProvider": {
            "manifest": {
                **policy["spec"]["forProvider"]["manifest"],
                "status": {"report": {"extra": {"rolloutErrorRate": 0.01, "rolloutTtftP95": 0.35}}},
            }
        }
    }
    path = tmp_path / "observed-policy.yaml"
    path.write_text(yaml.safe_dump(observed))
    composite, _ = _render(function_servers, xr=xr, observed=path)
    assert composite["status"]["signals"] == {"errorRate": 0.01, "timeToFirstTokenP95": 0.35}
