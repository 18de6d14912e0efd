"""compose-model-replica's pure code: what every shape guarantees, and what it rejects.

The golden files (test_model_replica_golden.py) show whole outputs; these cases state
the contracts the rest of the suite relies on, over every input shape.
"""

import copy
import json
from pathlib import Path

import pytest
import yaml

from functions.common import answers
from functions.common.contracts import (
    ANNOTATION_DEFINITION_HASH,
    ENV_NODE_RANK,
    LABEL_ENGINE,
    LABEL_ROLE,
    LABEL_SERVING,
    MULTINODE_ENV,
    POD_LABELS,
    PORT_DECODE_ENGINE,
    PORT_NAME_HTTP,
    PORT_SERVING,
)
from functions.common.health import health_record_name
from functions.compose_model_replica.compose import HEALTH_KEY, POLICY_KEY, compose
from functions.compose_model_replica.engines import (
    DRAIN_SECONDS,
    MultiNode,
    drain_seconds,
    engine_args,
)
from functions.compose_model_replica.model import InvalidReplica, parse
from functions.compose_model_replica.pods import Wiring
from functions.compose_model_replica.status import observe

INPUTS = Path(__file__).parent / "testdata" / "model_replica" / "inputs"
SHAPES = sorted(INPUTS.glob("*.yaml"))


def load(name: str) -> dict:
    return yaml.safe_load((INPUTS / f"{name}.yaml").read_text())


def manifests(xr: dict) -> dict[str, dict]:
    return {c.key: c.manifest for c in compose(parse(xr)).composed}


def pod_templates(manifest: dict) -> list[dict]:
    """Every pod template inside a workload manifest, with its metadata."""
    spec = manifest.get("spec", {})
    if manifest["kind"] == "Deployment":
        return [spec["template"]]
    if manifest["kind"] == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        return [lwt["leaderTemplate"], lwt["workerTemplate"]]
    if manifest["kind"] == "PodCliqueSet":
        return [
            {
                "metadata": {"labels": c["labels"], "annotations": c.get("annotations", {})},
                "spec": c["spec"]["podSpec"],
            }
            for c in spec["template"]["cliques"]
        ]
    return []


def workload_pods(xr: dict) -> list[dict]:
    return [
        t
        for key, m in manifests(xr).items()
        if key.startswith("workload")
        for t in pod_templates(m)
    ]


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_every_pod_carries_the_four_labels(xr_path):
    xr = yaml.safe_load(xr_path.read_text())
    pods = workload_pods(xr)
    assert pods
    for pod in pods:
        labels = pod["metadata"]["labels"]
        assert set(POD_LABELS) <= set(labels)
        assert labels["modelplane.ai/serving"] == xr["metadata"]["name"]
        assert labels["modelplane.ai/deployment"] == xr["spec"]["deployment"]


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_every_pod_names_the_definition_its_start_failures_count_against(xr_path):
    # The member agent counts start failures per this annotation; parking compares it
    # with the deployment's current definition hash.
    xr = yaml.safe_load(xr_path.read_text())
    for pod in workload_pods(xr):
        annotations = pod["metadata"]["annotations"]
        assert annotations[ANNOTATION_DEFINITION_HASH] == xr["spec"]["definitionHash"]


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_only_serving_engine_containers_name_a_port_http(xr_path):
    xr = yaml.safe_load(xr_path.read_text())
    for pod in workload_pods(xr):
        role = pod["metadata"]["labels"][LABEL_ROLE]
        named_http = [
            (c["name"], p["containerPort"])
            for c in pod["spec"]["containers"]
            for p in c.get("ports", [])
            if p["name"] == PORT_NAME_HTTP
        ]
        if role == "Worker":
            assert named_http == []  # workers do not serve requests
        elif role == "Decode":
            assert named_http == [("engine", PORT_DECODE_ENGINE)]
        else:
            assert named_http == [("engine", PORT_SERVING)]


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_pods_claim_their_devices_and_stay_on_the_pool(xr_path):
    xr = yaml.safe_load(xr_path.read_text())
    built = manifests(xr)
    claim_templates = {
        m["metadata"]["name"] for m in built.values() if m["kind"] == "ResourceClaimTemplate"
    }
    for pod in workload_pods(xr):
        spec = pod["spec"]
        pool = xr["spec"]["nodePool"]
        pinned = dict(pool["nodeSelector"])
        if len(pool.get("fabrics") or []) == 1:
            pinned[pool["fabricNodeLabel"]] = pool["fabrics"][0]
        assert spec["nodeSelector"] == pinned
        if all(m.get("cpu") for e in xr["spec"]["engines"] for m in e["members"]):
            # A CPU-only pool: cpu and memory, never a claim.
            assert "resourceClaims" not in spec
            assert not claim_templates
            continue
        claimed = {c["resourceClaimTemplateName"] for c in spec["resourceClaims"]}
        assert claimed <= claim_templates


def test_user_labels_env_args_and_volumes_are_kept():
    xr = load("standalone")
    (pod,) = workload_pods(xr)
    assert pod["metadata"]["labels"]["team.example.com/owner"] == "ml-team"
    engine = pod["spec"]["containers"][0]
    assert {"name": "VLLM_LOGGING_LEVEL", "value": "INFO"} in engine["env"]
    assert engine["args"][:3] == ["meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "8192"]
    assert pod["spec"]["volumes"][0] == {"name": "cache", "emptyDir": {}}
    assert engine["volumeMounts"][0] == {"name": "cache", "mountPath": "/root/.cache"}


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_every_container_reports_its_last_log_lines_when_it_fails(xr_path):
    """A failing engine's reason (a bad flag, a bad model) is on its output: the kubelet
    puts it in the terminated state, where the health agent reads it, only with
    FallbackToLogsOnError."""
    for pod in workload_pods(yaml.safe_load(xr_path.read_text())):
        for container in pod["spec"]["containers"]:
            assert container["terminationMessagePolicy"] == "FallbackToLogsOnError", container[
                "name"
            ]


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_what_gates_serving_is_watched_not_polled(xr_path):
    """The workloads (their readiness is the replica's), the health record (start
    failures park the model) and the AdaptivePolicy copy (its report carries the signals
    a rollout's gates read) ask provider-kubernetes to watch them; nothing else does,
    since every watched kind is one more informer in the provider."""
    for composed in compose(parse(yaml.safe_load(xr_path.read_text()))).composed:
        watched = composed.key.startswith("workload") or composed.key in (HEALTH_KEY, POLICY_KEY)
        assert composed.object["spec"].get("watch", False) is watched, composed.key


def test_a_termination_message_policy_the_user_set_is_kept():
    xr = load("standalone")
    member = xr["spec"]["engines"][0]["members"][0]
    member["template"]["spec"]["containers"][0]["terminationMessagePolicy"] = "File"
    (pod,) = workload_pods(xr)
    assert pod["spec"]["containers"][0]["terminationMessagePolicy"] == "File"


def _serving_engines(pod: dict) -> list[dict]:
    return [
        c
        for c in pod["spec"]["containers"]
        if any(port.get("name") == PORT_NAME_HTTP for port in c.get("ports") or [])
    ]


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_a_serving_pod_leaves_rotation_before_its_engine_stops(xr_path):
    """Every pod that serves requests waits in preStop while the routes learn it is
    going (SIGTERM only follows the hook), and its grace period covers the hook, the
    engine's drain and its teardown: no request it was given is cut off."""
    xr = yaml.safe_load(xr_path.read_text())
    for pod in workload_pods(xr):
        for engine in _serving_engines(pod):
            assert engine["lifecycle"]["preStop"] == {"sleep": {"seconds": 10}}, engine["name"]
            grace = pod["spec"]["terminationGracePeriodSeconds"]
            drain = drain_seconds(pod["metadata"]["labels"][LABEL_ENGINE], engine.get("args", []))
            assert grace >= 10 + drain + 10, (grace, drain)
            if pod["metadata"]["labels"][LABEL_ENGINE] == "vllm" and engine.get("args"):
                # vLLM aborts what it serves on SIGTERM unless told to drain.
                assert drain == DRAIN_SECONDS, engine["args"]


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_a_changed_template_replaces_pods_one_at_a_time_keeping_the_old_until_ready(xr_path):
    for key, manifest in manifests(yaml.safe_load(xr_path.read_text())).items():
        if key.startswith("workload") and manifest["kind"] == "Deployment":
            assert manifest["spec"]["strategy"] == {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
            }, key


def test_a_prestop_hook_grace_period_and_drain_the_user_wrote_are_kept():
    xr = load("standalone")
    template = xr["spec"]["engines"][0]["members"][0]["template"]
    container = template["spec"]["containers"][0]
    container["lifecycle"] = {"preStop": {"exec": {"command": ["/bin/drain"]}}}
    container["args"] += ["--shutdown-timeout", "300"]
    template["spec"]["terminationGracePeriodSeconds"] = 400
    (pod,) = workload_pods(xr)
    engine = pod["spec"]["containers"][0]
    assert engine["lifecycle"] == {"preStop": {"exec": {"command": ["/bin/drain"]}}}
    assert engine["args"].count("--shutdown-timeout") == 1
    assert engine["args"][engine["args"].index("--shutdown-timeout") + 1] == "300"
    assert pod["spec"]["terminationGracePeriodSeconds"] == 400


def test_a_grace_period_too_short_for_the_sleep_gets_no_sleep():
    """The API server refuses a preStop sleep not shorter than the grace period; a pod
    the user gives 5 s is meant to stop fast."""
    xr = load("standalone")
    xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["terminationGracePeriodSeconds"] = 5
    (pod,) = workload_pods(xr)
    assert "preStop" not in (pod["spec"]["containers"][0].get("lifecycle") or {})
    assert pod["spec"]["terminationGracePeriodSeconds"] == 5


def test_the_grace_period_covers_a_longer_drain_the_user_asked_the_engine_for():
    xr = load("standalone")
    container = xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["args"] += ["--shutdown-timeout=300"]
    (pod,) = workload_pods(xr)
    assert pod["spec"]["terminationGracePeriodSeconds"] == 10 + 300 + 10


def test_a_flag_the_user_set_is_not_added_again():
    xr = load("standalone")
    container = xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["args"] += ["--port=8000", "--served-model-name", "llama"]
    (pod,) = workload_pods(xr)
    args = pod["spec"]["containers"][0]["args"]
    assert sum(a.startswith("--port") for a in args) == 1
    assert args.count("--served-model-name") == 1


def test_credentials_travel_as_a_secret_reference():
    (pod,) = workload_pods(load("standalone"))
    token = next(e for e in pod["spec"]["containers"][0]["env"] if e["name"] == "HF_TOKEN")
    assert token == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
    }


def test_leader_worker_group_is_leader_plus_worker_nodes():
    lws = manifests(load("leader-worker"))["workload"]
    assert lws["spec"]["leaderWorkerTemplate"]["size"] == 2
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    assert {
        "name": "MODELPLANE_LEADER_ADDRESS",
        "value": "deepseek-v3-$(MODELPLANE_GROUP_INDEX).deepseek-v3.ml-team",
    } in leader["env"]
    assert "--master-addr" in leader["args"]


def test_grove_cliques_are_gang_scheduled_by_kai_in_the_modelplane_queue():
    pcs = manifests(load("grove-leader-worker"))["workload"]
    cliques = {c["name"]: c for c in pcs["spec"]["template"]["cliques"]}
    # One clique per worker rank: Grove numbers pods per clique, and the rank is literal.
    assert list(cliques) == ["leader", "worker-1", "worker-2"]
    ranks = {
        name: next(
            e["value"]
            for e in c["spec"]["podSpec"]["containers"][0]["env"]
            if e["name"] == ENV_NODE_RANK
        )
        for name, c in cliques.items()
    }
    assert ranks == {"leader": "0", "worker-1": "1", "worker-2": "2"}
    for clique in cliques.values():
        assert clique["spec"]["podSpec"]["schedulerName"] == "kai-scheduler"
        assert clique["labels"]["kai.scheduler/queue"] == "modelplane"
        assert clique["spec"]["minAvailable"] == clique["spec"]["replicas"]
    (group,) = pcs["spec"]["template"]["podCliqueScalingGroups"]
    assert group["cliqueNames"] == ["leader", "worker-1", "worker-2"]


def _engine_launch(shape: str) -> dict[str, list[list[str]]]:
    """Per role, the engine container's args on every pod template of the shape."""
    launched: dict[str, list[list[str]]] = {}
    for pod in workload_pods(load(shape)):
        engine = pod["spec"]["containers"][0]
        launched.setdefault(pod["metadata"]["labels"][LABEL_ROLE], []).append(engine["args"])
    return launched


@pytest.mark.parametrize(
    ("standard", "dynamo"),
    [
        ("leader-worker", "grove-leader-worker-vllm"),
        ("leader-worker-sglang", "grove-leader-worker"),
    ],
    ids=["vllm", "sglang"],
)
def test_one_replica_launches_with_the_same_flags_on_both_stacks(standard, dynamo):
    lws, grove = _engine_launch(standard), _engine_launch(dynamo)
    assert lws["Leader"] == grove["Leader"]
    # LWS has one worker template for every rank; Grove one clique per rank.
    assert all(args == lws["Worker"][0] for args in grove["Worker"])


def test_every_multinode_pod_carries_the_launch_contract():
    for shape in ("leader-worker", "grove-leader-worker-vllm", "grove-leader-worker"):
        for pod in workload_pods(load(shape)):
            names = {e["name"] for e in pod["spec"]["containers"][0]["env"]}
            assert set(MULTINODE_ENV) <= names, shape


@pytest.mark.parametrize(
    ("engine_type", "user_args", "expected"),
    [
        (
            "vllm",
            [],
            [
                "--nnodes",
                "$(MODELPLANE_NODE_COUNT)",
                "--node-rank",
                "$(MODELPLANE_NODE_RANK)",
                "--master-addr",
                "$(MODELPLANE_LEADER_ADDRESS)",
                "--headless",
                "--tensor-parallel-size",
                "8",
                "--pipeline-parallel-size",
                "2",
            ],
        ),
        (
            "vllm",
            ["-tp", "16", "--master-addr=10.0.0.1", "-r", "1"],
            ["--nnodes", "$(MODELPLANE_NODE_COUNT)", "--headless"],
        ),
        (
            "sglang",
            ["--tp", "16", "--dist-init-addr", "leader:7000"],
            ["--nnodes", "$(MODELPLANE_NODE_COUNT)", "--node-rank", "$(MODELPLANE_NODE_RANK)"],
        ),
        (
            "sglang",
            [],
            [
                "--nnodes",
                "$(MODELPLANE_NODE_COUNT)",
                "--node-rank",
                "$(MODELPLANE_NODE_RANK)",
                "--dist-init-addr",
                "$(MODELPLANE_LEADER_ADDRESS):5000",
                "--tp-size",
                "16",
            ],
        ),
        ("trtllm", [], []),
    ],
    ids=[
        "vllm_worker_gets_every_flag_and_the_per_node_layout",
        "vllm_user_flags_win_under_any_spelling",
        "sglang_user_tp_and_address_win",
        "sglang_tp_counts_every_gpu_of_every_node",
        "unknown_multinode_engine_gets_only_the_environment",
    ],
)
def test_added_multinode_flags_never_override_the_users(engine_type, user_args, expected):
    wiring = Wiring(serves_http=False, multinode=MultiNode(leader=False, nodes=2, gpus_per_node=8))
    assert (
        engine_args(engine_type, ["serve"], user_args, port=8000, served_name="m", wiring=wiring)
        == expected
    )


def test_a_shell_script_gets_no_flags_only_the_environment():
    wiring = Wiring(multinode=MultiNode(leader=True, nodes=2, gpus_per_node=8))
    script = ["vllm serve m --node-rank $MODELPLANE_NODE_RANK"]
    assert (
        engine_args("vllm", ["/bin/sh", "-c"], script, port=8000, served_name="m", wiring=wiring)
        == []
    )
    assert (
        engine_args("vllm", [], ["bash", "-c", *script], port=8000, served_name="m", wiring=wiring)
        == []
    )


def test_prefill_decode_puts_the_sidecar_on_8000_in_front_of_decode():
    for shape in ("prefill-decode", "grove-prefill-decode"):
        pods = {p["metadata"]["labels"][LABEL_ROLE]: p for p in workload_pods(load(shape))}
        decode = pods["Decode"]["spec"]["containers"]
        sidecar = next(c for c in decode if c["name"] == "routing-sidecar")
        assert sidecar["ports"][0]["containerPort"] == PORT_SERVING
        assert f"--vllm-port={PORT_DECODE_ENGINE}" in sidecar["args"]
        assert f"--port={PORT_SERVING}" in sidecar["args"]
        assert [c["name"] for c in pods["Prefill"]["spec"]["containers"]] == ["engine"]


@pytest.mark.parametrize("shape", ["prefill-decode", "grove-prefill-decode"])
def test_prefill_decode_routes_through_a_picker_that_finds_both_roles(shape):
    """The whole path agrees: route -> InferencePool -> llm-d picker whose prefill and
    decode filters find the pods by llm-d.ai/role, on the port the sidecar and the
    prefill engine listen on."""
    xr = load(shape)
    built = manifests(xr)
    pool = built["inferencepool"]
    (rule,) = built["route"]["spec"]["rules"]
    assert rule["backendRefs"] == [
        {
            "group": "inference.networking.k8s.io",
            "kind": "InferencePool",
            "name": pool["metadata"]["name"],
        }
    ]
    pods = {p["metadata"]["labels"][LABEL_ROLE]: p for p in workload_pods(xr)}
    selector = pool["spec"]["selector"]["matchLabels"]
    for role, value in (("Prefill", "prefill"), ("Decode", "decode")):
        labels = pods[role]["metadata"]["labels"]
        assert labels["llm-d.ai/role"] == value
        assert all(labels[k] == v for k, v in selector.items())  # the pool holds both
    (target,) = pool["spec"]["targetPorts"]
    sidecar = next(
        c for c in pods["Decode"]["spec"]["containers"] if c["name"] == "routing-sidecar"
    )
    prefill_engine = pods["Prefill"]["spec"]["containers"][0]
    assert target["number"] == sidecar["ports"][0]["containerPort"] == PORT_SERVING
    assert prefill_engine["ports"][0]["containerPort"] == PORT_SERVING
    assert "--secure-proxy=false" in sidecar["args"]  # the gateway speaks plain HTTP to it

    picker = built["epp-deployment"]["spec"]["template"]["spec"]
    (epp,) = picker["containers"]
    assert epp["image"].startswith("ghcr.io/llm-d/llm-d-inference-scheduler:")
    assert epp["args"][epp["args"].index("--pool-name") + 1] == pool["metadata"]["name"]
    config_path = epp["args"][epp["args"].index("--config-file") + 1]
    (mount,) = epp["volumeMounts"]
    (volume,) = picker["volumes"]
    config_map = built["epp-config"]
    assert volume["configMap"]["name"] == config_map["metadata"]["name"]
    assert config_path.startswith(mount["mountPath"] + "/")
    config = yaml.safe_load(config_map["data"][config_path.rsplit("/", 1)[1]])
    assert config["kind"] == "EndpointPickerConfig"
    types = {p["type"] for p in config["plugins"]}
    assert {
        "prefill-header-handler",
        "pd-profile-handler",
        "prefill-filter",
        "decode-filter",
    } <= types
    profiles = {
        p["name"]: [r["pluginRef"] for r in p["plugins"]] for p in config["schedulingProfiles"]
    }
    assert "prefill-filter" in profiles["prefill"]
    assert "decode-filter" in profiles["decode"]
    assert "metrics" in {p["name"] for p in epp["ports"]}  # scraped by the picker job


def test_autoscaling_leaves_the_replica_count_to_keda():
    built = manifests(load("autoscaling"))
    assert "replicas" not in built["workload"]["spec"]
    scaled = built["scaledobject"]["spec"]
    assert scaled["scaleTargetRef"]["name"] == built["workload"]["metadata"]["name"]
    assert scaled["maxReplicaCount"] >= 6  # this member's maxReplicas
    (trigger,) = scaled["triggers"]
    assert trigger["type"] == "external-push"
    assert trigger["metadata"]["scalerAddress"].startswith("modelplane-scaler.modelplane-system")
    # Client certificates: the ClusterTriggerAuthentication compose-serving-stack composes.
    assert trigger["authenticationRef"] == {
        "name": "modelplane-scaler",
        "kind": "ClusterTriggerAuthentication",
    }


def test_adaptive_policy_spec_is_identical_on_every_member():
    home = load("autoscaling")
    other = copy.deepcopy(home)
    other["metadata"]["name"] = "llama-3-1-8b-eu-west-1"
    # Another stack, so another workload kind: the policy must not say which.
    other["spec"]["cluster"] = {
        "name": "eu-west-1",
        "region": "eu-west-1",
        "stack": "Dynamo",
        "providerConfigRef": {"name": "eu-west-1"},
    }
    other["spec"]["nodePool"] = {"name": "h200", "nodeSelector": {"pool": "h200"}}
    other["spec"]["replicas"] = 1
    # Numbers reach the function as floats through protobuf; the copy must not differ.
    other["spec"]["autoscaling"]["capacity"]["replicaCapacity"] = 4.0
    home_built, other_built = manifests(home), manifests(other)
    a, b = home_built["adaptivepolicy"], other_built["adaptivepolicy"]
    assert yaml.safe_dump(a["spec"]) == yaml.safe_dump(b["spec"])
    assert a["metadata"]["name"] == b["metadata"]["name"]
    # The workload it names is each member's ScaledObject, which leads to its pods.
    for built in (home_built, other_built):
        scaled = built["scaledobject"]
        assert a["spec"]["workload"] == {
            "apiVersion": scaled["apiVersion"],
            "kind": scaled["kind"],
            "name": scaled["metadata"]["name"],
        }
        assert scaled["spec"]["scaleTargetRef"]["name"] == built["workload"]["metadata"]["name"]
    assert home_built["workload"]["kind"] != other_built["workload"]["kind"]


def test_prefill_decode_autoscales_both_roles_and_names_the_serving_one():
    xr = load("prefill-decode")
    xr["spec"]["autoscaling"] = {"clusters": [{"name": "us-east-1", "maxReplicas": 3}]}
    built = manifests(xr)
    decode, prefill = built["scaledobject-decode"], built["scaledobject-prefill"]
    assert decode["metadata"]["name"] == built["adaptivepolicy"]["spec"]["workload"]["name"]
    assert decode["spec"]["scaleTargetRef"]["name"] == built["workload-decode"]["metadata"]["name"]
    assert (
        prefill["spec"]["scaleTargetRef"]["name"] == built["workload-prefill"]["metadata"]["name"]
    )
    assert decode["metadata"]["name"] != prefill["metadata"]["name"]


def test_parked_autoscaled_model_is_held_at_zero_by_keda():
    xr = load("autoscaling")
    xr["spec"]["unavailable"] = {"reason": "Unplaceable", "message": "no pool has 8 free H100"}
    built = manifests(xr)
    annotations = built["scaledobject"]["metadata"]["annotations"]
    assert annotations == {"autoscaling.keda.sh/paused-replicas": "0"}
    body = built["route-unavailable"]["spec"]["directResponse"]["body"]["inline"]
    assert yaml.safe_load(body)["error"]["reason"] == "Unplaceable"


def test_a_reason_with_quotes_stays_inside_the_json_body():
    xr = load("parked")
    xr["spec"]["unavailable"]["reason"] = 'x", "code": 200, "y": "'
    body = manifests(xr)["route-unavailable"]["spec"]["directResponse"]["body"]["inline"]
    parsed = json.loads(body)
    assert parsed["error"]["code"] == 503
    assert parsed["error"]["reason"] == 'x", "code": 200, "y": "'
    assert parsed["error"]["message"] == answers.RETRY_LATER


def test_the_operators_message_stays_in_status_and_out_of_the_body():
    xr = load("parked")
    xr["spec"]["unavailable"]["message"] = 'x", "code": 200, "y": "'
    body = manifests(xr)["route-unavailable"]["spec"]["directResponse"]["body"]["inline"]
    assert json.loads(body)["error"]["message"] == answers.caller_message("Parked")
    serving = observe(parse(xr), compose(parse(xr)).workloads, {}, HEALTH_KEY).conditions[1]
    assert 'x", "code": 200' in serving.message


def test_health_record_is_read_through_an_observe_only_object():
    plan = compose(parse(load("standalone")))
    health = next(c for c in plan.composed if c.key == HEALTH_KEY)
    assert health.object["spec"]["managementPolicies"] == ["Observe"]
    assert health.manifest["metadata"]["name"] == health_record_name("llama-3-1-8b-us-east-1")


def _set(xr, path, value):
    node = xr["spec"]
    *parents, last = path
    for part in parents:
        node = node[part]
    node[last] = value
    return xr


@pytest.mark.parametrize(
    ("name", "path", "value", "field", "rule"),
    [
        ("standalone", ["servingMode"], "Sideways", "spec.servingMode", "must be"),
        ("standalone", ["cluster", "stack"], "Other", "spec.cluster.stack", "must be"),
        ("standalone", ["replicas"], -1, "spec.replicas", "greater than or equal"),
        (
            "leader-worker",
            ["engines", 0, "members", 0, "workerNodes"],
            0,
            "spec.engines[0].members[0].workerNodes",
            "at least one worker",
        ),
        (
            "prefill-decode",
            ["engines", 1, "port"],
            8000,
            "spec.engines[1].port",
            "routing sidecar",
        ),
        (
            "autoscaling",
            ["autoscaling", "clusters"],
            [{"name": "elsewhere", "maxReplicas": 2}],
            "spec.autoscaling.clusters",
            "member list",
        ),
        (
            "standalone",
            ["engines", 0, "members", 0, "template"],
            {"spec": {}},
            "spec.engines[0].members[0].template.spec.containers",
            "needs a container",
        ),
    ],
    ids=[
        "unknown_serving_mode",
        "unknown_stack",
        "negative_replicas",
        "leader_without_worker_nodes",
        "decode_engine_on_the_sidecar_port",
        "this_cluster_missing_from_the_autoscaling_members",
        "member_without_containers",
    ],
)
def test_rejects_with_the_field_and_the_rule(name, path, value, field, rule):
    xr = _set(load(name), path, value)
    with pytest.raises(InvalidReplica) as err:
        parse(xr)
    assert err.value.path == field
    assert rule in err.value.rule


def test_prefill_decode_without_decode_is_rejected():
    xr = load("prefill-decode")
    xr["spec"]["engines"] = xr["spec"]["engines"][:1]
    with pytest.raises(InvalidReplica, match="needs a Decode member"):
        parse(xr)


def _observed_workload(ready: int | None, replicas: int = 2) -> dict:
    status = {} if ready is None else {"readyReplicas": ready}
    return {
        "status": {
            "atProvider": {"manifest": {"spec": {"replicas": replicas}, "status": status}},
            "conditions": [{"type": "Ready", "status": "True" if ready == replicas else "False"}],
        }
    }


def _observed_health(failures: int, definition: str = "3f2a9c1d0b") -> dict:
    data = {
        "definitionHash": definition,
        "consecutiveStartFailures": str(failures),
        "lastError": "OOMKilled",
        "observedAt": "2026-12-02T10:00:00Z",
    }
    return {"status": {"atProvider": {"manifest": {"data": data}}}}


@pytest.mark.parametrize(
    ("observed", "ready", "reason", "serving"),
    [
        ({}, False, "Creating", "NoReadyReplicas"),
        ({"workload": {"status": {}}}, False, "Creating", "NoReadyReplicas"),
        ({"workload": _observed_workload(None)}, False, "Progressing", "NoReadyReplicas"),
        ({"workload": _observed_workload(1)}, False, "Progressing", "Serving"),
        ({"workload": _observed_workload(2)}, True, "Available", "Serving"),
        (
            {"workload": _observed_workload(0), "health": _observed_health(4)},
            False,
            "StartFailing",
            "NoReadyReplicas",
        ),
        (
            # Failures of an older definition do not explain this one's progress.
            {"workload": _observed_workload(0), "health": _observed_health(4, "0ld")},
            False,
            "Progressing",
            "NoReadyReplicas",
        ),
    ],
    ids=[
        "nothing_observed_yet_waits",
        "object_without_remote_state_waits",
        "workload_without_ready_count_is_progressing",
        "one_of_two_ready_serves_but_is_not_ready",
        "all_ready_is_ready",
        "start_failures_of_this_definition_are_reported",
        "start_failures_of_another_definition_are_not_blamed",
    ],
)
def test_status_from_what_the_cluster_shows(observed, ready, reason, serving):
    replica = parse(load("standalone"))
    status = observe(replica, compose(replica).workloads, observed, HEALTH_KEY)
    workload_ready, serving_condition = status.conditions
    assert status.ready is ready
    assert workload_ready.reason == reason
    assert serving_condition.reason == serving


def test_prefill_decode_is_ready_only_when_both_roles_are():
    replica = parse(load("prefill-decode"))
    workloads = compose(replica).workloads
    observed = {
        "workload-prefill": _observed_workload(1, replicas=1),
        "workload-decode": _observed_workload(0, replicas=1),
    }
    status = observe(replica, workloads, observed, HEALTH_KEY)
    assert status.ready_replicas == 0
    assert not status.ready


def test_parked_replica_says_so_in_both_conditions():
    replica = parse(load("parked"))
    status = observe(replica, compose(replica).workloads, {}, HEALTH_KEY)
    assert [c.reason for c in status.conditions] == ["Parked", "Parked"]
    assert all("parked after 5" in c.message for c in status.conditions)


def test_a_replica_waits_for_its_cache_at_zero_and_says_why():
    xr = load("model-cache-downloading")
    replica = parse(xr)
    assert replica.desired_replicas == 0
    status = observe(replica, compose(replica).workloads, {}, HEALTH_KEY)
    workload_ready = status.conditions[0]
    assert (workload_ready.status, workload_ready.reason) == ("False", "WaitingForModelCache")
    assert "ModelCache deepseek-v3-weights" in workload_ready.message
    # Once the cache is Ready the placed replicas run.
    xr["spec"]["modelCache"]["ready"] = True
    assert parse(xr).desired_replicas == xr["spec"]["replicas"]


@pytest.mark.parametrize(
    ("ready", "activator", "answered"),
    [(False, False, True), (True, False, False), (False, True, False)],
    ids=[
        "a_model_waiting_for_its_cache_answers_503_saying_so",
        "a_model_whose_cache_is_ready_routes_to_its_pool",
        "an_on_demand_model_waiting_for_its_cache_routes_to_the_activator",
    ],
)
def test_a_model_waiting_for_its_cache_answers_why_instead_of_routing_to_nothing(
    ready, activator, answered
):
    xr = load("model-cache-downloading")
    xr["spec"]["modelCache"]["ready"] = ready
    xr["spec"]["activator"] = activator
    built = manifests(xr)
    (rule,) = built["route"]["spec"]["rules"]
    assert ("route-unavailable" in built) is answered
    if answered:
        assert "backendRefs" not in rule
        body = json.loads(built["route-unavailable"]["spec"]["directResponse"]["body"]["inline"])
        assert body["error"]["reason"] == "WaitingForModelCache"
        # What the caller can do; which ModelCache and cluster is in the status.
        assert body["error"]["message"] == answers.caller_message("WaitingForModelCache")
        assert "deepseek-v3-weights" not in json.dumps(body)
        serving = observe(parse(xr), compose(parse(xr)).workloads, {}, HEALTH_KEY).conditions[1]
        assert (serving.reason, serving.status) == ("WaitingForModelCache", "False")
    else:
        assert rule["backendRefs"]


@pytest.mark.parametrize(("routes", "answered"), [([], True), ([{"name": "llama-3-1-8b"}], False)])
def test_a_cluster_waiting_for_its_cache_still_routes_to_the_other_clusters_it_weights(
    routes, answered
):
    xr = load("autoscaling")
    xr["spec"]["modelCache"] = {
        "name": "w",
        "claimName": "modelcache-w",
        "mountPath": "/models/w",
        "ready": False,
    }
    if routes:
        xr["spec"]["autoscaling"]["traffic"] = {"routes": routes}
    built = manifests(xr)
    (rule,) = built["route"]["spec"]["rules"]
    assert ("route-unavailable" in built) is answered
    if not answered:
        kinds = {r["kind"] for r in rule["backendRefs"]}
        assert "ServiceImport" in kinds  # eu-west-1's pods may serve meanwhile


def test_an_autoscaled_replica_waiting_for_its_cache_is_held_at_zero_by_keda():
    xr = load("autoscaling")
    xr["spec"]["modelCache"] = {
        "name": "w",
        "claimName": "modelcache-w",
        "mountPath": "/models/w",
        "ready": False,
    }
    annotations = manifests(xr)["scaledobject"]["metadata"]["annotations"]
    assert annotations == {"autoscaling.keda.sh/paused-replicas": "0"}


def test_prefill_and_decode_may_share_one_engine():
    xr = load("prefill-decode")
    prefill, decode = xr["spec"]["engines"]
    xr["spec"]["engines"] = [
        {"name": "vllm", "type": "vllm", "members": prefill["members"] + decode["members"]}
    ]
    built = manifests(xr)
    assert {"claims-vllm-prefill", "claims-vllm-decode"} <= set(built)
    pods = {p["metadata"]["labels"][LABEL_ROLE]: p for p in workload_pods(xr)}
    ports = {
        role: pod["spec"]["containers"][0]["ports"][0]["containerPort"]
        for role, pod in pods.items()
    }
    assert ports == {"Prefill": PORT_SERVING, "Decode": PORT_DECODE_ENGINE}


@pytest.mark.parametrize(
    ("engine_type", "serves", "expected"),
    [
        ("sglang", True, True),
        ("sglang", False, False),  # a worker rank serves no /metrics of its own
        ("vllm", True, False),  # vLLM serves /metrics unasked
    ],
    ids=["sglang_server_enables_metrics", "sglang_worker_does_not", "vllm_needs_no_flag"],
)
def test_sglang_serves_metrics_for_the_collector(engine_type, serves, expected):
    added = engine_args(
        engine_type, [], [], port=8000, served_name="m", wiring=Wiring(serves_http=serves)
    )
    assert ("--enable-metrics" in added) is expected


def _with_fabrics(shape: str, fabrics: list[str], **pod_spec) -> dict:
    xr = yaml.safe_load((INPUTS / f"{shape}.yaml").read_text())
    xr["spec"]["nodePool"]["fabricNodeLabel"] = "network.example.com/fabric"
    xr["spec"]["nodePool"]["fabrics"] = fabrics
    for engine in xr["spec"]["engines"]:
        for member in engine["members"]:
            member["template"]["spec"].update(copy.deepcopy(pod_spec))
    return xr


@pytest.mark.parametrize("shape", ["leader-worker", "grove-leader-worker"])
def test_a_gang_on_one_fabric_is_pinned_to_it_by_node_selector(shape):
    for pod in workload_pods(_with_fabrics(shape, ["ib-b"])):
        assert pod["spec"]["nodeSelector"]["network.example.com/fabric"] == "ib-b"
        assert "affinity" not in pod["spec"]


@pytest.mark.parametrize(
    ("shape", "group_label"),
    [
        ("leader-worker", "leaderworkerset.sigs.k8s.io/group-key"),
        ("grove-leader-worker", "grove.io/podcliqueset-replica-index"),
    ],
)
def test_gangs_on_several_fabrics_stay_on_them_and_together(shape, group_label):
    user_term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    xr = _with_fabrics(
        shape,
        ["ib-a", "ib-b"],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [user_term]}
            }
        },
    )
    pods = workload_pods(xr)
    assert len(pods) >= 2
    for pod in pods:
        affinity = pod["spec"]["affinity"]
        terms = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        # The user's term still holds, ANDed with ours.
        assert terms["nodeSelectorTerms"] == [
            {
                "matchExpressions": [
                    *user_term["matchExpressions"],
                    {
                        "key": "network.example.com/fabric",
                        "operator": "In",
                        "values": ["ib-a", "ib-b"],
                    },
                ]
            }
        ]
        (together,) = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert together["topologyKey"] == "network.example.com/fabric"
        assert together["matchLabelKeys"] == [group_label]
        assert together["labelSelector"]["matchLabels"][LABEL_SERVING] == xr["metadata"]["name"]
        assert "network.example.com/fabric" not in pod["spec"].get("nodeSelector", {})


def test_single_node_replicas_are_never_pinned_to_a_fabric():
    for pod in workload_pods(_with_fabrics("standalone", ["ib-a", "ib-b"])):
        assert "affinity" not in pod["spec"]
        assert "network.example.com/fabric" not in pod["spec"]["nodeSelector"]
