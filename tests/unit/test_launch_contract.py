"""The launch contract: a pod compose-model-replica writes starts as written.

Every engine process names its model; parallelism counts accelerators only; the leader's
address and the rank expand whatever order a controller puts its own variables in
(checked here by expanding the environment the way the kubelet does, after LWS or Grove
have added theirs); prefill/decode pods open vLLM's NIXL side channel on the pod's
address; engines get a memory-backed /dev/shm and a startup budget that fits the model;
SGLang gets the spellings its parser takes; examples run the engine releases whose flags
were checked.
"""

import copy
import re
from pathlib import Path

import pytest
import yaml

from functions.common.contracts import (
    ENV_LEADER_ADDRESS,
    ENV_NODE_RANK,
    LABEL_ROLE,
    ROLE_DECODE,
    ROLE_PREFILL,
)
from functions.common.modelcache import engine_argv, model_named_in
from functions.compose_model_replica.engines import (
    CHECKED_IMAGES,
    Model,
    MultiNode,
    launch_args,
    layout_flags,
)
from functions.compose_model_replica.model import parse
from functions.compose_model_replica.pods import (
    STARTUP_FAILURE_THRESHOLD,
    Wiring,
    shm_size_limit,
    startup_failure_threshold,
)
from tests.unit.test_model_replica import INPUTS, SHAPES, load, manifests, workload_pods

REPO = Path(__file__).parents[2]


def engine_containers(xr: dict) -> list[tuple[str, dict, dict]]:
    """(engine type, pod labels, engine container) for every composed engine pod."""
    replica = parse(xr)
    types = {e.name: e.type for e in replica.engines}
    found = []
    for pod in workload_pods(xr):
        labels = pod["metadata"]["labels"]
        engine_type = labels["modelplane.ai/engine"]
        assert engine_type in types.values()
        found.append((engine_type, labels, pod["spec"]["containers"][0]))
    return found


# --- The model on every process ------------------------------------------------------------


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_every_engine_process_names_the_same_model(xr_path):
    xr = yaml.safe_load(xr_path.read_text())
    models = set()
    for engine_type, labels, container in engine_containers(xr):
        argv = engine_argv(engine_type, container.get("command") or [], container["args"])
        named = model_named_in(engine_type, argv)
        assert named, (xr_path.stem, labels[LABEL_ROLE])
        models.add((labels.get("modelplane.ai/engine"), named))
    # One engine's ranks agree (PrefillDecode may run two engines of one model).
    assert len({m for _, m in models}) == 1, models


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_vllm_takes_the_model_first_after_serve(xr_path):
    # `vllm serve` refuses --served-model-name before the positional model. A user's own
    # `--model X` (deprecated) is kept: vLLM moves it to the front itself.
    xr = yaml.safe_load(xr_path.read_text())
    for engine_type, _, container in engine_containers(xr):
        if engine_type != "vllm" or container.get("command"):
            continue
        args = container["args"]
        assert not args[0].startswith("-") or "--model" in args, args


@pytest.mark.parametrize(
    ("engine_type", "command", "user_args", "model", "expected"),
    [
        ("vllm", [], [], Model("org/m"), ["org/m"]),
        (
            "vllm",
            ["vllm", "serve"],
            ["--max-model-len", "8"],
            Model("org/m"),
            ["org/m", "--max-model-len", "8"],
        ),
        ("vllm", [], [], Model("org/m", "abc123"), ["org/m", "--revision", "abc123"]),
        ("vllm", [], ["--revision", "r"], Model("org/m", "abc"), ["org/m", "--revision", "r"]),
        (
            "vllm",
            ["python3", "-m", "vllm.entrypoints.openai.api_server"],
            [],
            Model("org/m"),
            ["--model", "org/m"],
        ),
        ("vllm", [], ["own/model"], Model("org/m"), ["own/model"]),
        ("vllm", [], ["--model", "own/model"], Model("org/m"), ["--model", "own/model"]),
        (
            "sglang",
            ["python3", "-m", "sglang.launch_server"],
            [],
            Model("/models/c"),
            ["--model-path", "/models/c"],
        ),
        ("trtllm", [], [], Model("org/m"), []),
    ],
    ids=[
        "vllm_image_entrypoint_gets_the_model_positionally",
        "vllm_serve_command_gets_the_model_right_after_serve",
        "a_source_revision_travels_with_the_model",
        "the_users_revision_wins",
        "the_api_server_module_gets_the_model_flag",
        "the_users_positional_model_wins",
        "the_users_model_flag_wins",
        "sglang_gets_its_model_path_flag",
        "an_unknown_engine_gets_no_model_flag",
    ],
)
def test_the_model_argument_goes_where_the_engine_reads_it(
    engine_type, command, user_args, model, expected
):
    wiring = Wiring(serves_http=False)
    args = launch_args(
        engine_type, command, user_args, model=model, port=8000, served_name="m", wiring=wiring
    )
    assert args == expected


def test_a_headless_worker_written_without_a_model_gets_the_leaders():
    xr = load("leader-worker")
    (worker,) = [c for _, labels, c in engine_containers(xr) if labels[LABEL_ROLE] == "Worker"]
    assert worker["args"][0] == "deepseek-ai/DeepSeek-V3"
    assert "--headless" in worker["args"]


def _drop_user_args(spec: dict) -> None:
    for member in spec["engines"][0]["members"]:
        member["template"]["spec"]["containers"][0].pop("args", None)


@pytest.mark.parametrize(
    ("change", "model"),
    [
        (lambda spec: None, "deepseek-ai/DeepSeek-V3"),
        (_drop_user_args, "deepseek-ai/DeepSeek-V3"),
        (
            lambda spec: (
                _drop_user_args(spec),
                spec.update(
                    modelCache={
                        "name": "w",
                        "claimName": "modelcache-w",
                        "mountPath": "/models/w",
                    }
                ),
            ),
            "/models/w",
        ),
        (
            lambda spec: (_drop_user_args(spec), spec.update(source={"uri": "s3://b/m"})),
            "s3://b/m",
        ),
    ],
    ids=[
        "the_model_a_member_names",
        "else_the_sources_hugging_face_repository",
        "else_the_cache_mount_before_the_source",
        "an_object_store_uri_as_written",
    ],
)
def test_every_rank_loads_the_engines_one_model(change, model):
    xr = load("leader-worker")
    change(xr["spec"])
    for engine_type, _, container in engine_containers(xr):
        assert model_named_in(engine_type, engine_argv(engine_type, [], container["args"])) == model


# --- Parallelism counts accelerators -----------------------------------------------------


def _tp(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def _with_devices(xr: dict, devices: list[dict]) -> dict:
    xr = copy.deepcopy(xr)
    for member in xr["spec"]["engines"][0]["members"]:
        member["devices"] = devices
        member["template"]["spec"]["containers"][0]["args"] = []
    return xr


GPUS_AND_NICS = [
    {"name": "gpus", "count": 8},
    {"name": "nics", "count": 16, "deviceClassName": "rdma.example.com"},
]


@pytest.mark.parametrize(
    ("shape", "devices", "flag", "expected"),
    [
        ("leader-worker", GPUS_AND_NICS, "--tensor-parallel-size", "8"),
        ("leader-worker-sglang", GPUS_AND_NICS, "--tp-size", "24"),
        ("standalone", [{"name": "gpu", "count": 4}], "--tensor-parallel-size", "4"),
        ("standalone", [{"name": "gpu", "count": 1}], "--tensor-parallel-size", None),
        (
            "standalone",
            [{"name": "gpu", "count": 2}, {"name": "nic", "count": 2, "deviceClassName": "n"}],
            "--tensor-parallel-size",
            "2",
        ),
    ],
    ids=[
        "eight_gpus_and_sixteen_nics_are_tensor_parallel_eight",
        "sglang_counts_the_gpus_of_every_node_and_no_nic",
        "a_single_pod_spreads_over_its_four_gpus",
        "one_gpu_needs_no_layout",
        "a_single_pod_ignores_its_nics",
    ],
)
def test_parallelism_counts_accelerators_only(shape, devices, flag, expected):
    xr = _with_devices(load(shape), devices)
    for _, _, container in engine_containers(xr):
        assert _tp(container["args"], flag) == expected


@pytest.mark.parametrize(
    ("engine_type", "user_args"),
    [
        ("vllm", ["-tp", "2"]),
        ("vllm", ["--pipeline-parallel-size=2", "-tp", "2"]),
        ("vllm", ["--data-parallel-size", "4"]),
        ("sglang", ["--tp", "2"]),
        ("sglang", ["--dp-size", "4"]),
    ],
    ids=[
        "vllm_users_tensor_size_even_if_it_leaves_some_idle",
        "vllm_users_pipeline_and_tensor_size",
        "vllm_users_data_parallel_size",
        "sglang_users_tp_abbreviation",
        "sglang_users_data_parallel_size",
    ],
)
def test_a_layout_the_user_chose_gets_no_added_size(engine_type, user_args):
    """A layout that uses every accelerator, or one whose tensor size is written (the
    engine's own default dimension: nothing is left to complete unambiguously), is run
    as written; launch.py warns about the accelerators left idle."""
    args = launch_args(
        engine_type,
        ["x"],
        user_args,
        model=None,
        port=8000,
        served_name="m",
        wiring=Wiring(),
        accelerators=4,
    )
    assert args[: len(user_args)] == user_args
    assert not layout_flags(engine_type, args[len(user_args) :])


@pytest.mark.parametrize(
    ("engine_type", "user_args", "multinode", "added"),
    [
        ("vllm", ["--pipeline-parallel-size=2"], None, ["--tensor-parallel-size", "2"]),
        ("vllm", ["-dp", "2"], None, ["--tensor-parallel-size", "2"]),
        ("sglang", ["--pp-size", "2"], None, ["--tp-size", "2"]),
        ("vllm", ["-pp", "2"], MultiNode(True, 2, 4), ["--tensor-parallel-size", "4"]),
        ("vllm", ["-tp", "4"], MultiNode(False, 2, 4), ["--pipeline-parallel-size", "2"]),
        ("sglang", ["--pp-size", "2"], MultiNode(True, 2, 4), ["--tp-size", "4"]),
    ],
    ids=[
        "vllm_pipeline_size_alone_gets_the_tensor_size_that_fills_the_pod",
        "vllm_data_parallel_size_alone_gets_the_tensor_size_that_fills_the_pod",
        "sglang_pipeline_size_alone_gets_the_tp_size_that_fills_the_pod",
        "vllm_multinode_pipeline_size_alone_gets_the_tensor_size",
        "vllm_multinode_tensor_size_alone_gets_the_pipeline_size_across_nodes",
        "sglang_multinode_pipeline_size_alone_gets_the_tp_size_across_nodes",
    ],
)
def test_a_layout_written_in_part_is_completed_to_use_every_accelerator(
    engine_type, user_args, multinode, added
):
    args = launch_args(
        engine_type,
        ["x"],
        user_args,
        model=None,
        port=8000,
        served_name="m",
        wiring=Wiring(serves_http=False, multinode=multinode),
        accelerators=4,
    )
    assert args[: len(user_args)] == user_args
    assert layout_flags(engine_type, args[len(user_args) :]) == added


def test_a_layout_written_on_the_leader_is_given_to_the_workers():
    xr = load("leader-worker")
    xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["args"] = [
        "deepseek-ai/DeepSeek-V3",
        "-tp",
        "4",
        "-pp",
        "4",
    ]
    for _, _, container in engine_containers(xr):
        assert layout_flags("vllm", container["args"]) == ["-tp", "4", "-pp", "4"]


# --- Leader address and rank, whatever order a controller adds its variables in ------------

_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _expand(text: str, known: dict[str, str]) -> str:
    return _REF.sub(lambda m: known.get(m.group(1), m.group(0)), text)


def kubelet_environment(env: list[dict], labels: dict[str, str], pod_ip: str) -> dict[str, str]:
    """The container's variables as the kubelet computes them: in order, `$(VAR)` only
    from entries before it, `fieldRef` from the pod itself."""
    known: dict[str, str] = {}
    for entry in env:
        if "valueFrom" in entry:
            path = entry["valueFrom"]["fieldRef"]["fieldPath"]
            if path == "status.podIP":
                value = pod_ip
            else:
                key = re.fullmatch(r"metadata\.labels\['(.+)'\]", path)
                assert key, path
                value = labels.get(key.group(1), "")
        else:
            value = _expand(entry["value"], known)
        known[entry["name"]] = value
    return known


def lws_injects(env: list[dict], name: str, group: int, worker: int, namespace: str) -> list:
    """sigs.k8s.io/lws v0.8.0 pod_utils.AddLWSVariables: its variables first."""
    ours = [
        {"name": "LWS_LEADER_ADDRESS", "value": f"{name}-{group}.{name}.{namespace}"},
        {"name": "LWS_GROUP_SIZE", "value": "2"},
        {"name": "LWS_WORKER_INDEX", "value": str(worker)},
    ]
    names = {e["name"] for e in ours}
    return ours + [e for e in env if e["name"] not in names]


def grove_appends(env: list[dict], pcs: str, replica: int, namespace: str) -> list:
    """Grove: its variables after the template's."""
    return [
        *env,
        {"name": "GROVE_PCS_NAME", "value": pcs},
        {"name": "GROVE_PCS_INDEX", "value": str(replica)},
        {"name": "GROVE_HEADLESS_SERVICE", "value": f"{pcs}-{replica}.{namespace}.svc"},
        {"name": "GROVE_PCSG_NAME", "value": f"{pcs}-{replica}-model"},
        {"name": "GROVE_PCSG_INDEX", "value": "0"},
    ]


@pytest.mark.parametrize("group", [0, 3])
def test_lws_pods_expand_the_leader_address_and_rank(group):
    xr = load("leader-worker")
    lws = manifests(xr)["workload"]
    name, namespace = lws["metadata"]["name"], lws["metadata"]["namespace"]
    lwt = lws["spec"]["leaderWorkerTemplate"]
    for worker, template in ((0, lwt["leaderTemplate"]), (1, lwt["workerTemplate"])):
        container = template["spec"]["containers"][0]
        labels = {
            "leaderworkerset.sigs.k8s.io/group-index": str(group),
            "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
        }
        env = lws_injects(container["env"], name, group, worker, namespace)
        known = kubelet_environment(env, labels, "10.0.0.9")
        assert known[ENV_LEADER_ADDRESS] == known["LWS_LEADER_ADDRESS"]
        assert known[ENV_NODE_RANK] == str(worker)
        args = [_expand(a, known) for a in container["args"]]
        assert not any("$(" in a for a in args), args
        assert args[args.index("--master-addr") + 1] == f"{name}-{group}.{name}.{namespace}"


@pytest.mark.parametrize("replica", [0, 2])
def test_grove_pods_expand_the_leader_address_though_grove_appends_its_variables(replica):
    xr = load("grove-leader-worker-vllm")
    pcs = manifests(xr)["workload"]
    name, namespace = pcs["metadata"]["name"], pcs["metadata"]["namespace"]
    labels = {"grove.io/podcliqueset-replica-index": str(replica)}
    # The leader pod Grove creates: hostname <clique>-0, subdomain the headless Service.
    leader = f"{name}-{replica}-model-0-leader-0.{name}-{replica}.{namespace}"
    for rank, clique in enumerate(pcs["spec"]["template"]["cliques"]):
        container = clique["spec"]["podSpec"]["containers"][0]
        env = grove_appends(container["env"], name, replica, namespace)
        known = kubelet_environment(env, labels, "10.0.0.9")
        assert known[ENV_LEADER_ADDRESS] == leader
        assert known[ENV_NODE_RANK] == str(rank)
        args = [_expand(a, known) for a in container["args"]]
        assert not any("$(" in a for a in args), args


# --- Prefill/decode: the NIXL side channel on the pod's address ---------------------------


@pytest.mark.parametrize("shape", ["prefill-decode", "grove-prefill-decode"])
def test_prefill_and_decode_pods_open_nixl_on_the_pods_address(shape):
    roles = set()
    for engine_type, labels, container in engine_containers(load(shape)):
        assert engine_type == "vllm"
        env = {e["name"]: e for e in container["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"] == {
            "fieldRef": {"fieldPath": "status.podIP"}
        }
        config = container["args"][container["args"].index("--kv-transfer-config") + 1]
        # The roles vLLM 0.32's NixlConnector wants: prefill produces the KV, decode
        # consumes it (kv_both is deprecated and warned about at start).
        wanted = {ROLE_PREFILL: "kv_producer", ROLE_DECODE: "kv_consumer"}[labels[LABEL_ROLE]]
        assert yaml.safe_load(config) == {"kv_connector": "NixlConnector", "kv_role": wanted}
        roles.add(labels[LABEL_ROLE])
    assert roles == {ROLE_PREFILL, ROLE_DECODE}


@pytest.mark.parametrize("shape", ["standalone", "leader-worker"])
def test_unified_pods_leave_nixl_alone(shape):
    for _, _, container in engine_containers(load(shape)):
        assert "VLLM_NIXL_SIDE_CHANNEL_HOST" not in {e["name"] for e in container["env"]}
        assert "--kv-transfer-config" not in container["args"]


# --- /dev/shm --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accelerators", "limit"), [(0, "2Gi"), (1, "2Gi"), (4, "8Gi"), (8, "16Gi")]
)
def test_shared_memory_grows_with_the_pods_accelerators(accelerators, limit):
    assert shm_size_limit(accelerators) == limit


@pytest.mark.parametrize("xr_path", SHAPES, ids=lambda p: p.stem)
def test_every_engine_pod_has_a_memory_backed_dev_shm(xr_path):
    xr = yaml.safe_load(xr_path.read_text())
    for pod in workload_pods(xr):
        engine = pod["spec"]["containers"][0]
        (mount,) = [m for m in engine["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
        assert volume["emptyDir"]["medium"] == "Memory"
        assert volume["emptyDir"]["sizeLimit"].endswith("Gi")


def test_the_users_own_dev_shm_wins():
    xr = load("standalone")
    pod_spec = xr["spec"]["engines"][0]["members"][0]["template"]["spec"]
    pod_spec["containers"][0]["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    pod_spec["volumes"] = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    (pod,) = workload_pods(xr)
    assert pod["spec"]["volumes"] == [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "shm", "mountPath": "/dev/shm"}
    ]


# --- Startup budget --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("size", "failures"),
    [("", STARTUP_FAILURE_THRESHOLD), ("16Gi", 76), ("200Gi", 260), ("700Gi", 760)],
    ids=[
        "an_unknown_size_keeps_thirty_minutes",
        "a_small_cached_model_gets_under_thirteen_minutes",
        "a_70b_cache_gets_about_forty_minutes",
        "a_700gi_cache_gets_over_two_hours",
    ],
)
def test_the_startup_budget_fits_the_cached_model(size, failures):
    xr = load("model-cache")
    if size:
        xr["spec"]["modelCache"]["size"] = size
    else:
        xr["spec"]["modelCache"].pop("size", None)
    replica = parse(xr)
    assert startup_failure_threshold(replica.model_cache) == failures
    (leader, _) = [c for _, _, c in engine_containers(xr)]
    assert leader["startupProbe"]["failureThreshold"] == failures


def test_the_users_own_startup_probe_is_never_replaced():
    xr = load("model-cache")
    own = {"httpGet": {"path": "/ready", "port": 8000}, "failureThreshold": 5}
    xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]["startupProbe"] = (
        own
    )
    (leader, _) = [c for _, _, c in engine_containers(xr)]
    assert leader["startupProbe"] == own


# --- SGLang's spellings and probes -----------------------------------------------------------


@pytest.mark.parametrize("shape", ["leader-worker-sglang", "grove-leader-worker"])
def test_sglang_gets_only_spellings_its_parser_takes(shape):
    xr = load(shape)
    for member in xr["spec"]["engines"][0]["members"]:
        member["template"]["spec"]["containers"][0]["args"] = ["--model-path", "m"]
    xr["spec"]["cluster"]["tracesEndpoint"] = "collector:4317"
    for engine_type, labels, container in engine_containers(xr):
        assert engine_type == "sglang"
        args = container["args"]
        assert "--tp" not in args
        assert "--pp" not in args
        assert "--enable-trace" not in args
        assert _tp(args, "--tp-size") == "24"
        if labels[LABEL_ROLE] == "Leader":
            assert args[args.index("--host") + 1] == "0.0.0.0"
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                # /health generates a token and waits up to 20 s before it answers 503.
                assert container[probe]["timeoutSeconds"] > 20


def test_vllm_probes_keep_the_kubelets_timeout():
    for _, _, container in engine_containers(load("standalone")):
        assert "timeoutSeconds" not in container["readinessProbe"]


def test_multinode_flags_read_only_the_contracts_variables():
    wiring = Wiring(serves_http=False, multinode=MultiNode(leader=False, nodes=2, gpus_per_node=8))
    args = launch_args("vllm", [], [], model=Model("m"), port=8000, served_name="m", wiring=wiring)
    assert not any("LWS_" in a or "GROVE_" in a for a in args)


# --- Images pinned to the checked releases ---------------------------------------------------


def _engine_images(doc: dict) -> list[tuple[str, str]]:
    spec = doc.get("spec") or {}
    engines = (spec.get("template") or {}).get("spec", {}).get("engines") or spec.get("engines")
    found = []
    for engine in engines or []:
        for member in engine["members"]:
            for container in member["template"]["spec"]["containers"]:
                found.append((engine["type"], container["image"]))
    return found


@pytest.mark.parametrize(
    "path",
    sorted((REPO / "examples" / "modeldeployments").glob("*.yaml")) + sorted(INPUTS.glob("*.yaml")),
    ids=lambda p: f"{p.parent.name}/{p.stem}",
)
def test_engines_run_the_release_whose_flags_were_checked(path):
    images = _engine_images(yaml.safe_load(path.read_text()))
    assert images
    for engine_type, image in images:
        if engine_type in CHECKED_IMAGES:
            assert image == CHECKED_IMAGES[engine_type], path.name
