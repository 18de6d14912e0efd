"""Launch warnings: what the engine or the kubelet would say about a launch, said when it
is composed (functions/compose_model_replica/launch.py, the deployment's launch.py and
functions/common/launch_warnings.py).

Each case composes a shipped input with one change a migrating user makes, and states
the warning's whole text: the serving page quotes these texts, and a user reads them.
"""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1
from hypothesis import given
from hypothesis import strategies as st

from functions.common import launch_warnings, layout
from functions.common.launch_warnings import LaunchWarning
from functions.common.reader import InputError
from functions.compose_model_deployment import fn as deployment_fn
from functions.compose_model_deployment import launch as deployment_launch
from functions.compose_model_deployment.fn import REQUIRED_CLUSTERS
from functions.compose_model_deployment.model import read_deployment
from functions.compose_model_replica import fn as replica_fn
from functions.compose_model_replica import launch
from functions.compose_model_replica.cluster import REQUIRED_CLUSTER
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import InvalidReplica, parse
from tests.engines.containers import expand
from tests.unit.test_model_replica import load, manifests, workload_pods

REPO = Path(__file__).resolve().parents[2]
ARGS0 = "spec.engines[0].members[0].template.spec.containers[0].args"


def _check(xr: dict) -> list[LaunchWarning]:
    replica = parse(xr)
    return launch.check(replica, compose(replica).workloads)


def _engine(xr: dict, member: int = 0, engine: int = 0) -> dict:
    return xr["spec"]["engines"][engine]["members"][member]["template"]["spec"]["containers"][0]


@pytest.mark.parametrize(
    "shape",
    [
        "standalone",
        "leader-worker",
        "leader-worker-sglang",
        "grove-leader-worker",
        "grove-leader-worker-vllm",
        "prefill-decode",
        "grove-prefill-decode",
        "cpu-leader-worker",
        "model-cache",
    ],
)
def test_the_shipped_shapes_launch_without_a_warning(shape):
    assert _check(load(shape)) == []


# --- $(VAR) that names nothing ------------------------------------------------------------


def test_an_undefined_variable_in_args_is_named_with_the_ones_that_are_defined():
    xr = load("leader-worker")
    _engine(xr, 1)["args"] = ["--node-rank", "$(MODELPLANE_RANK)"]
    (warning,) = _check(xr)
    assert warning.field == "spec.engines[0].members[1].template.spec.containers[0].args[1]"
    assert warning.reason == "UndefinedVariable"
    assert warning.message == (
        "$(MODELPLANE_RANK) is not defined in this container, so Kubernetes passes it to "
        "the process as written; defined: LWS_GROUP_SIZE, LWS_LEADER_ADDRESS, "
        "LWS_WORKER_INDEX, MODELPLANE_GROUP_INDEX, MODELPLANE_GROUP_SIZE, "
        "MODELPLANE_LEADER_ADDRESS, MODELPLANE_MODEL_URI, MODELPLANE_NODE_COUNT, "
        "MODELPLANE_NODE_RANK"
    )


@pytest.mark.parametrize(
    "arg",
    [
        "$(MODELPLANE_NODE_RANK)",
        "$(LWS_WORKER_INDEX)",
        "$$(NOT_A_REFERENCE)",
        "$(VLLM_LOGGING_LEVEL)",
        "no reference",
        "$(unclosed",
    ],
    ids=[
        "ours",
        "the_controllers",
        "an_escaped_reference",
        "the_users_own_env",
        "plain_text",
        "an_unclosed_reference",
    ],
)
def test_a_defined_or_escaped_reference_is_not_warned_about(arg):
    xr = load("leader-worker")
    container = _engine(xr, 1)
    container["args"] = ["--x", arg]
    container["env"] = [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}]
    assert _check(xr) == []


def test_lws_variables_are_not_defined_on_a_single_pod_deployment():
    xr = load("standalone")
    _engine(xr)["args"] = [*_engine(xr)["args"], "--x", "$(LWS_WORKER_INDEX)"]
    (warning,) = _check(xr)
    assert warning.reason == "UndefinedVariable"
    assert warning.message.startswith("$(LWS_WORKER_INDEX) is not defined in this container")


def test_grove_variables_expand_in_args_but_never_in_an_env_value():
    """Grove appends its variables after the template's: an env value cannot read them."""
    xr = load("grove-leader-worker-vllm")
    container = _engine(xr, 1)
    container["args"] = ["--x", "$(GROVE_PCLQ_POD_INDEX)"]
    container["env"] = [{"name": "RANK", "value": "$(GROVE_PCLQ_POD_INDEX)"}]
    (warning,) = _check(xr)
    assert warning.field == "spec.engines[0].members[1].template.spec.containers[0].env[0].value"
    assert warning.message.startswith(
        "$(GROVE_PCLQ_POD_INDEX) is not defined in this container before it, so Kubernetes "
        "passes it to the process as written; defined before it: "
    )
    assert "GROVE" not in warning.message.split("defined before it:")[1]


def test_an_env_value_sees_the_variables_before_it_and_lws_s():
    xr = load("leader-worker")
    container = _engine(xr, 1)
    container["env"] = [
        {"name": "EARLY", "value": "$(LATE)"},
        {"name": "LATE", "value": "x"},
        {"name": "ADDR", "value": "$(LWS_LEADER_ADDRESS):$(MODELPLANE_NODE_RANK)"},
    ]
    (warning,) = _check(xr)
    assert warning.field == "spec.engines[0].members[1].template.spec.containers[0].env[0].value"
    assert warning.message.startswith("$(LATE) is not defined in this container before it")


def test_a_container_with_env_from_may_define_anything():
    xr = load("standalone")
    container = _engine(xr)
    container["args"] = [*container["args"], "$(FROM_A_CONFIGMAP)"]
    container["envFrom"] = [{"configMapRef": {"name": "settings"}}]
    assert _check(xr) == []


def test_a_shell_script_s_command_substitution_is_the_shells():
    xr = load("standalone")
    container = _engine(xr)
    container["command"] = ["sh", "-c"]
    container["args"] = ["exec vllm serve m --port 8000 --x $(hostname) --y $(MODELPLANE_RANK)"]
    (warning,) = _check(xr)
    assert warning.field == f"{ARGS0}[0]"
    assert warning.message.startswith("$(MODELPLANE_RANK) is not defined")


def test_every_undefined_variable_of_one_argument_is_named_once():
    xr = load("standalone")
    _engine(xr)["args"] = [*_engine(xr)["args"], "$(B)-$(A)-$(B)"]
    (warning,) = _check(xr)
    assert warning.message.startswith(
        "$(A), $(B) are not defined in this container, so Kubernetes passes them"
    )


# --- A parallel layout written in part ----------------------------------------------------


def test_a_pipeline_size_alone_is_completed_and_said():
    xr = load("standalone")  # 1 pod of 2 GPUs
    _engine(xr)["args"] = ["meta-llama/Llama-3.1-8B-Instruct", "--pipeline-parallel-size", "1"]
    xr["spec"]["engines"][0]["members"][0]["devices"][0]["count"] = 4
    (warning,) = _check(xr)
    assert warning == LaunchWarning(
        ARGS0,
        "LayoutCompleted",
        "the parallel layout written (--pipeline-parallel-size 1) uses 1 of the 4 "
        "accelerators one replica claims (4 per pod x 1 pod); --tensor-parallel-size 4 was "
        "added so "
        "the engine uses all of them (write the size yourself to choose another layout)",
    )
    (pod,) = [p for p in _pods(xr)]
    args = pod["spec"]["containers"][0]["args"]
    assert args[args.index("--tensor-parallel-size") + 1] == "4"


def _pods(xr: dict) -> list[dict]:
    return workload_pods(xr)


def test_a_multinode_pipeline_size_alone_gets_the_tensor_size_on_every_rank():
    xr = load("leader-worker")  # 2 nodes x 8 GPUs
    _engine(xr, 0)["args"] = ["deepseek-ai/DeepSeek-V3", "-pp", "2"]
    (warning,) = _check(xr)
    assert warning.reason == "LayoutCompleted"
    assert "uses 2 of the 16 accelerators one replica claims (8 per pod x 2 pods)" in (
        warning.message
    )
    assert "--tensor-parallel-size 8 was added" in warning.message
    for pod in _pods(xr):
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--tensor-parallel-size") + 1] == "8"
        assert args[args.index("-pp") + 1] == "2"


def test_a_layout_that_cannot_be_completed_names_the_sizes_and_the_idle_count():
    xr = load("prefill-decode")  # each role: 1 pod of 4 GPUs, --tensor-parallel-size 4
    _engine(xr, 0, engine=0)["args"] = ["meta-llama/Llama-3.3-70B-Instruct", "-tp", "2"]
    (warning,) = _check(xr)
    assert warning == LaunchWarning(
        ARGS0,
        "UnusedAccelerators",
        "the parallel layout written (-tp 2) uses 2 of the 4 accelerators one replica "
        "claims (4 per pod x 1 pod), leaving 2 idle; write sizes whose product is 4, "
        "or claim 2",
    )


def test_a_layout_larger_than_the_claim_is_refused_naming_the_field():
    xr = load("prefill-decode")
    _engine(xr, 0, engine=1)["args"] = ["meta-llama/Llama-3.3-70B-Instruct", "-tp", "8"]
    with pytest.raises(InvalidReplica) as refused:
        _check(xr)
    assert str(refused.value) == (
        "spec.engines[1].members[0].template.spec.containers[0].args: the parallel layout "
        "written (-tp 8) needs 8 accelerators, but one replica claims 4 (4 per pod x 1 pod): "
        "the engine cannot start; lower the sizes or claim more accelerators"
    )


@pytest.mark.parametrize(
    "args",
    [["-tp", "$(TP)"], ["--tensor-parallel-size", "four"]],
    ids=["a_variable", "text"],
)
def test_a_size_that_cannot_be_counted_is_left_alone(args):
    xr = load("standalone")
    _engine(xr)["args"] = ["m", *args]
    container = _engine(xr)
    container["env"] = [{"name": "TP", "value": "1"}]
    assert _check(xr) == []


def test_a_cpu_member_has_no_accelerators_to_leave_idle():
    xr = load("cpu-standalone")
    _engine(xr)["args"] = ["m", "-pp", "1"]
    assert _check(xr) == []


# --- An image older than the release whose flags are checked ------------------------------


@pytest.mark.parametrize(
    ("image", "warned"),
    [
        ("vllm/vllm-openai:v0.30.1", True),
        ("docker.io/vllm/vllm-openai:v0.9.2", True),
        ("vllm/vllm-openai-cpu:v0.31.0-x86_64", True),
        ("vllm/vllm-openai:v0.32.0", False),
        ("vllm/vllm-openai:v0.33.1", False),
        ("vllm/vllm-openai:latest", False),
        ("vllm/vllm-openai@sha256:" + "a" * 64, False),
        ("registry.example/ml/vllm:v0.1.0", False),
    ],
)
def test_an_engine_image_older_than_the_checked_release_is_warned_about(image, warned):
    xr = load("standalone")
    _engine(xr)["image"] = image
    found = _check(xr)
    assert bool(found) is warned
    if warned:
        (warning,) = found
        tag = image.rsplit(":", 1)[1]
        assert warning == LaunchWarning(
            "spec.engines[0].members[0].template.spec.containers[0].image",
            "ImageOlderThanChecked",
            f"image tag {tag} is older than vLLM v0.32.0, the release the flags added to the "
            f"launch line are checked against; one of them may not exist in {tag}, and the "
            "engine then refuses to start (use vllm/vllm-openai:v0.32.0 or later)",
        )


def test_sglang_releases_compare_as_numbers_not_text():
    xr = load("leader-worker-sglang")
    _engine(xr, 0)["image"] = "lmsysorg/sglang:v0.5.9-cu126"
    (warning,) = _check(xr)
    assert warning.message.startswith("image tag v0.5.9-cu126 is older than SGLang v0.5.23")


# --- The KV-transfer role -----------------------------------------------------------------


@pytest.mark.parametrize(("member", "wanted"), [(0, "kv_producer"), (1, "kv_consumer")])
def test_a_users_kv_both_with_nixl_is_warned_about_with_the_role_to_set(member, wanted):
    xr = load("prefill-decode")
    engine = 0 if member == 0 else 1
    role = "Prefill" if member == 0 else "Decode"
    config = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
    _engine(xr, 0, engine=engine)["args"] += ["--kv-transfer-config", config]
    (warning,) = _check(xr)
    assert warning == LaunchWarning(
        f"spec.engines[{engine}].members[0].template.spec.containers[0].args",
        "DeprecatedKVRole",
        '--kv-transfer-config sets "kv_role": "kv_both", which vLLM 0.32\'s NixlConnector '
        "deprecates (it warns at start and will remove it); set the role the engine wants "
        f"(this {role} member's is {wanted}), or leave --kv-transfer-config out to have "
        "each side's role set for you",
    )


def test_the_composed_prefill_decode_roles_are_the_ones_vllm_wants():
    built = manifests(load("prefill-decode"))
    roles = {}
    for key in ("workload-prefill", "workload-decode"):
        (engine,) = [
            c for c in built[key]["spec"]["template"]["spec"]["containers"] if c["name"] == "engine"
        ]
        config = engine["args"][engine["args"].index("--kv-transfer-config") + 1]
        roles[key] = config
    assert roles == {
        "workload-prefill": '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}',
        "workload-decode": '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}',
    }


# --- The status shape and the deployment's list -------------------------------------------


def test_the_status_list_is_sorted_once_each_and_read_back_as_written():
    a = LaunchWarning("spec.engines[0].members[0].x", "UndefinedVariable", "m")
    b = LaunchWarning("spec.engines[0].members[1].workerNodes", "Other", "n")
    written = launch_warnings.to_status([b, a, b])
    assert written == [a.to_status(), b.to_status()]
    assert launch_warnings.from_status(written) == (a, b)
    assert launch_warnings.from_status([{"field": 1}, "x", {"field": "f"}]) == ()
    assert launch_warnings.from_status("not a list") == ()


def test_the_deployment_lists_each_warning_once_in_its_own_terms_with_its_clusters():
    a = LaunchWarning(f"{ARGS0}[1]", "UndefinedVariable", "m")
    own = LaunchWarning("spec.template.spec.engines[0].members[1].worker.nodes", "W", "n")
    found = launch_warnings.aggregate({"us-east-1": (a,), "eu-west-1": (a,)}, [own])
    assert found == [
        {
            "field": "spec.template.spec.engines[0].members[0].template.spec.containers[0].args[1]",
            "reason": "UndefinedVariable",
            "message": "m",
            "clusters": ["eu-west-1", "us-east-1"],
        },
        {"field": own.field, "reason": "W", "message": "n"},
    ]


@pytest.mark.parametrize(
    ("replica_field", "deployment_field"),
    [
        (
            "spec.engines[0].members[1].workerNodes",
            "spec.template.spec.engines[0].members[1].worker.nodes",
        ),
        (
            "spec.engines[1].members[0].devices[0].count",
            "spec.template.spec.engines[1].members[0].nodeSelector.devices[0].count",
        ),
        (
            "spec.engines[0].members[0].template.spec.volumeDevices",
            "spec.template.spec.engines[0].members[0].template.spec.volumeDevices",
        ),
    ],
)
def test_a_replica_field_is_spelled_as_the_deployment_spells_it(replica_field, deployment_field):
    assert launch_warnings.deployment_field(replica_field) == deployment_field


# --- worker.nodes on a Worker, and the deployment's own layout check ----------------------

DEPLOYMENT = {
    "apiVersion": "modelplane.ai/v1alpha1",
    "kind": "ModelDeployment",
    "metadata": {"name": "deepseek-v3", "namespace": "ml-team"},
    "spec": {
        "replicas": 1,
        "source": {"uri": "hf://deepseek-ai/DeepSeek-V3"},
        "template": {
            "spec": {
                "engines": [
                    {
                        "name": "vllm",
                        "type": "vllm",
                        "members": [
                            {
                                "role": "Leader",
                                "worker": {"nodes": 1},
                                "nodeSelector": {"devices": [{"name": "gpus", "count": 8}]},
                                "template": {
                                    "spec": {"containers": [{"name": "engine", "image": "x"}]}
                                },
                            },
                            {
                                "role": "Worker",
                                "nodeSelector": {"devices": [{"name": "gpus", "count": 8}]},
                                "template": {
                                    "spec": {"containers": [{"name": "engine", "image": "x"}]}
                                },
                            },
                        ],
                    }
                ]
            }
        },
    },
}


def _deployment(change=None) -> dict:
    xr = copy.deepcopy(DEPLOYMENT)
    if change:
        change(xr["spec"]["template"]["spec"]["engines"][0]["members"])
    return xr


def test_worker_nodes_on_a_worker_that_repeats_the_leaders_is_ignored_and_said():
    xr = _deployment(lambda m: m[1].update(worker={"nodes": 1}))
    (warning,) = deployment_launch.check_spec(xr, read_deployment(xr))
    assert warning == LaunchWarning(
        "spec.template.spec.engines[0].members[1].worker.nodes",
        "WorkerNodesOnWorker",
        "worker.nodes is read only on the Leader member "
        "(spec.template.spec.engines[0].members[0].worker.nodes, which says the same); "
        "this one is ignored: remove it",
    )


def test_worker_nodes_on_a_worker_that_disagrees_is_refused_naming_where_it_belongs():
    xr = _deployment(lambda m: m[1].update(worker={"nodes": 3}))
    with pytest.raises(InputError) as refused:
        deployment_launch.check_spec(xr, read_deployment(xr))
    assert str(refused.value) == (
        "spec.template.spec.engines[0].members[1].worker.nodes: worker.nodes belongs on the "
        "Leader member (spec.template.spec.engines[0].members[0].worker.nodes, which says 1); "
        "a Worker's is not read, and this one says 3: set the Leader's to the worker nodes "
        "you want and remove this one"
    )


def test_the_deployment_refuses_a_layout_larger_than_a_replica_before_placing():
    def leader_tp_32(members):
        members[0]["template"]["spec"]["containers"][0]["args"] = ["m", "-tp", "32"]

    xr = _deployment(leader_tp_32)
    with pytest.raises(InputError) as refused:
        deployment_launch.check_spec(xr, read_deployment(xr))
    assert str(refused.value) == (
        "spec.template.spec.engines[0].members[0].template.spec.containers[0].args: the "
        "parallel layout written (-tp 32) needs 32 accelerators, but one replica claims 16 "
        "(8 per pod x 2 pods): the engine cannot start; lower the sizes or claim more "
        "accelerators"
    )


def test_a_layout_that_fits_and_no_worker_nodes_on_the_worker_is_quiet():
    def leader_tp_8_pp_2(members):
        members[0]["template"]["spec"]["containers"][0]["args"] = ["m", "-tp", "8", "-pp", "2"]

    xr = _deployment(leader_tp_8_pp_2)
    assert deployment_launch.check_spec(xr, read_deployment(xr)) == []


def test_both_functions_read_one_layout_rule():
    fit = layout.fit("vllm", ["-tp", "32"], per_pod=8, pods=2, multinode=True)
    assert fit is not None
    assert fit.too_large
    assert fit.refusal().startswith("the parallel layout written (-tp 32) needs 32")


# --- The serving page quotes the texts as the code writes them ----------------------------


def _documented_examples() -> list[str]:
    def lw_rank(xr):
        _engine(xr, 1)["args"] = ["--node-rank", "$(MODELPLANE_RANK)"]

    def grove_env(xr):
        _engine(xr, 1)["env"] = [{"name": "RANK", "value": "$(GROVE_PCLQ_POD_INDEX)"}]

    def lw_pp(xr):
        _engine(xr, 0)["args"] = ["deepseek-ai/DeepSeek-V3", "--pipeline-parallel-size", "2"]

    def pd_tp(size):
        def change(xr):
            _engine(xr, 0, engine=0)["args"] = ["m", "--tensor-parallel-size", size]

        return change

    def old_image(xr):
        _engine(xr)["image"] = "vllm/vllm-openai:v0.30.1"

    def kv_both(xr):
        config = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
        _engine(xr, 0, engine=0)["args"] += ["--kv-transfer-config", config]

    texts = []
    for shape, change in (
        ("leader-worker", lw_rank),
        ("grove-leader-worker-vllm", grove_env),
        ("leader-worker", lw_pp),
        ("prefill-decode", pd_tp("2")),
        ("standalone", old_image),
        ("prefill-decode", kv_both),
    ):
        xr = load(shape)
        change(xr)
        texts += [str(w) for w in _check(xr)]
    xr = load("prefill-decode")
    pd_tp("8")(xr)
    with pytest.raises(InvalidReplica) as refused:
        _check(xr)
    texts.append(str(refused.value))
    for nodes in (1, 3):
        deployment = _deployment(lambda m, n=nodes: m[1].update(worker={"nodes": n}))
        try:
            texts += [
                str(w)
                for w in deployment_launch.check_spec(deployment, read_deployment(deployment))
            ]
        except InputError as err:
            texts.append(str(err))
    return texts


def test_the_serving_page_quotes_every_warning_as_written():
    page = " ".join((REPO / "docs" / "serving.md").read_text().split())
    texts = _documented_examples()
    assert len(texts) == 9  # six warnings, the two refusals and worker.nodes repeated
    for text in texts:
        assert " ".join(text.split()) in page, text


# --- Through the functions' shells --------------------------------------------------------

US_EAST = REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml"
REPLICA_XR = REPO / "tests" / "render" / "testdata" / "modelreplica.yaml"
DEPLOYMENT_XR = REPO / "examples" / "modeldeployments" / "llama-8b-vllm.yaml"


def _yaml(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def _replica_response(xr: dict):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    req.required_resources[REQUIRED_CLUSTER].SetInParent()
    req.required_resources[REQUIRED_CLUSTER].items.add().resource.update(_yaml(US_EAST))
    return asyncio.run(replica_fn.FunctionRunner().RunFunction(req))


def _results(rsp, severity) -> list[str]:
    return [r.message for r in rsp.results if r.severity == severity]


def test_the_replica_writes_its_warnings_to_status_and_says_them():
    xr = _yaml(REPLICA_XR)  # its image is vllm/vllm-openai:v0.11.0
    _engine(xr)["args"] = [*(_engine(xr).get("args") or []), "--x", "$(MODELPLANE_RANK)"]
    rsp = _replica_response(xr)
    assert not _results(rsp, fnv1.SEVERITY_FATAL)
    written = resource.struct_to_dict(rsp.desired.composite.resource)["status"]["warnings"]
    assert [(w["field"], w["reason"]) for w in written] == [
        (f"{ARGS0}[{len(_engine(xr)['args']) - 1}]", "UndefinedVariable"),
        ("spec.engines[0].members[0].template.spec.containers[0].image", "ImageOlderThanChecked"),
    ]
    said = _results(rsp, fnv1.SEVERITY_WARNING)
    assert any("$(MODELPLANE_RANK) is not defined" in m for m in said)


def test_a_replica_without_warnings_writes_none():
    xr = _yaml(REPLICA_XR)
    _engine(xr)["image"] = "vllm/vllm-openai:v0.32.0"
    rsp = _replica_response(xr)
    assert "warnings" not in resource.struct_to_dict(rsp.desired.composite.resource)["status"]


def test_a_replica_whose_layout_cannot_start_is_fatal_and_keeps_what_was_composed():
    xr = _yaml(REPLICA_XR)
    _engine(xr)["args"] = ["m", "-tp", "64"]
    rsp = _replica_response(xr)
    (fatal,) = _results(rsp, fnv1.SEVERITY_FATAL)
    assert f"{ARGS0}: the parallel layout written (-tp 64) needs 64 accelerators" in fatal
    assert list(rsp.desired.resources) == []


def _deployment_response(xr: dict, observed_replica: dict | None = None):
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    if observed_replica is not None:
        req.observed.resources["modelreplica-us-east-1"].resource.update(observed_replica)
    req.required_resources[REQUIRED_CLUSTERS].SetInParent()
    req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(_yaml(US_EAST))
    clock = lambda: datetime(2026, 12, 7, tzinfo=UTC)  # noqa: E731
    return asyncio.run(deployment_fn.FunctionRunner(clock=clock).RunFunction(req))


def test_the_deployment_lists_its_replicas_warnings_in_its_own_terms():
    xr = _yaml(DEPLOYMENT_XR)
    first = _deployment_response(xr)
    replica = resource.struct_to_dict(first.desired.resources["modelreplica-us-east-1"].resource)
    replica["status"] = {
        "readyReplicas": 0,
        "warnings": [
            {
                "field": f"{ARGS0}[3]",
                "reason": "UndefinedVariable",
                "message": "$(X) is not defined in this container, ...",
            }
        ],
    }
    rsp = _deployment_response(xr, replica)
    written = resource.struct_to_dict(rsp.desired.composite.resource)["status"]["warnings"]
    assert written == [
        {
            "field": "spec.template.spec.engines[0].members[0].template.spec.containers[0].args[3]",
            "reason": "UndefinedVariable",
            "message": "$(X) is not defined in this container, ...",
            "clusters": ["us-east-1"],
        }
    ]


def test_the_deployment_says_worker_nodes_on_a_worker_and_refuses_a_layout_too_large():
    xr = copy.deepcopy(DEPLOYMENT)
    xr["spec"]["template"]["spec"]["engines"][0]["members"][1]["worker"] = {"nodes": 1}
    rsp = _deployment_response(xr)
    assert not _results(rsp, fnv1.SEVERITY_FATAL)
    written = resource.struct_to_dict(rsp.desired.composite.resource)["status"]["warnings"]
    assert [w["reason"] for w in written] == ["WorkerNodesOnWorker"]
    assert "clusters" not in written[0]
    assert any(
        "worker.nodes is read only on the Leader" in m for m in _results(rsp, fnv1.SEVERITY_WARNING)
    )

    members = xr["spec"]["template"]["spec"]["engines"][0]["members"]
    members[0]["template"]["spec"]["containers"][0]["args"] = ["m", "-tp", "32"]
    rsp = _deployment_response(xr)
    (fatal,) = _results(rsp, fnv1.SEVERITY_FATAL)
    assert "needs 32 accelerators, but one replica claims 16" in fatal
    assert list(rsp.desired.resources) == []


# --- Properties: the reference scanner reads text as the kubelet does ---------------------


@given(st.text(alphabet="$()AB_x -", max_size=40))
def test_references_are_exactly_what_the_kubelet_looks_up(text):
    asked: list[str] = []
    expand(text, asked.append)
    assert list(launch.references(text)) == asked


@given(st.lists(st.sampled_from(["-tp", "-pp", "-dp", "2", "4", "x", "--tensor-parallel-size=8"])))
def test_a_layout_fit_never_asks_for_less_than_it_uses_nor_completes_past_the_claim(args):
    found = layout.fit("vllm", args, per_pod=8, pods=2, multinode=True)
    if found is None:
        return
    assert found.claimed == 16
    if found.added:
        assert found.used * int(found.added[1]) == found.claimed
        assert found.unused == 0
    else:
        assert found.unused == max(0, 16 - found.used)
