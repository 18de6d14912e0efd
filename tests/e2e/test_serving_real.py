"""Serving for real: ModelDeployments whose pods run as real vLLM processes on the box.

On one example member (us-east-1, Standard stack) the box turns on real serving
(hack/fleetbox/serving.py): the LeaderWorkerSet controller v0.8.0 and a pod runner that
starts the pods labelled `modelplane.test/run: real` as local processes, from the pod
spec the member holds, with the vLLM CPU build of the pinned image's version as the
image's entrypoint and the tiny model as `hf://modelplane/tiny-llama` in the image's hub
cache. Everything between is the box's: Crossplane core, our functions,
provider-kubernetes, the member's real kube-scheduler binding the pod to a KWOK node
with a DRA GPU (the engine runs on the CPU; the claim is what placement asked for).

- A Standalone replica serves `/v1/chat/completions` for the deployment's name (the
  name a client sends) and refuses another name; the rendered cluster collector scrapes
  its real `/metrics` and every vocabulary name vLLM exposes arrives in base units, and
  a burst of real requests moves the request counter; its readiness reaches the
  ModelDeployment's status.
- A Leader + headless Worker replica (a LeaderWorkerSet made into pods by the real
  controller) serves with tensor parallel 2 across its two pods.
- The example LeaderWorkerSet, applied before the controller ran, gets its (KWOK) pods.
- A launch with a flag vLLM does not know exits for real, is counted as start failures
  by the member's health agent and parks the model, with the engine's own error.

The engine takes 1-2 minutes to start on 2 shared cores and about 1 GiB of RSS per process
here: the waits are watches with generous timeouts. Measured (printed at the end of the
run): the time to serve, the engines' RSS.
"""

from __future__ import annotations

import time

import openai
import pytest
from kubernetes import client

from fleetbox.podrunner import REAL_RUN_LABEL, REAL_RUN_VALUE
from fleetbox.serving import REQUIRED_TOOLS as REAL_TOOLS
from fleetbox.serving import TINY_MODEL_REPO, TINY_MODEL_URI, engine_rss
from functions.common import builtin_mappings, contracts, vocabulary
from functions.common import metricmapping as mappings
from functions.common.contracts import LABEL_DEPLOYMENT, LABEL_SERVING, PORT_NAME_HTTP
from functions.compose_model_deployment.parking import DEFAULT_MAX_CONSECUTIVE_FAILURES
from functions.compose_serving_stack import collector
from tests.collector import harness, releases
from tests.collector.engines import Pod
from tests.conftest import require_tool
from tests.e2e import claims
from tests.e2e.conftest import measured
from tests.e2e.watches import watch_until

NAMESPACE = "ml-team"
MEMBER = "us-east-1"
GROUP, VERSION, PLURAL = "modelplane.ai", "v1alpha1", "modeldeployments"
# Placement's choice made certain: only us-east-1's H100s match.
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
# What this model needs on this machine: a short context, no graph capture.
ENGINE_ARGS = ["--max-model-len", "512", "--enforce-eager"]
# Composition, scheduling, the engine's start (1-2 minutes on 2 busy cores) and the
# startup probe's 10 s period: generous.
SERVE_SECONDS = 420.0
PARK_SECONDS = 420.0
GONE_SECONDS = 120.0
# How an OTLP export names each vocabulary type.
KIND = {
    vocabulary.MetricType.GAUGE: "gauge",
    vocabulary.MetricType.COUNTER: "sum",
    vocabulary.MetricType.HISTOGRAM: "histogram",
}


@pytest.fixture(scope="module")
def runner(box):
    for tool in REAL_TOOLS:
        require_tool(tool)
    began = time.monotonic()
    running = box.serve_for_real(MEMBER)
    measured("real serving turned on (LWS controller ready, pod runner)", time.monotonic() - began)
    return running


def _real(document: dict) -> dict:
    template = document["spec"]["template"]
    labels = template.setdefault("metadata", {}).setdefault("labels", {})
    labels[REAL_RUN_LABEL] = REAL_RUN_VALUE
    return document


def standalone(name: str, extra_args: tuple[str, ...] = ()) -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), name)
    spec = document["spec"]
    spec["replicas"] = 1
    spec.pop("autoscaling", None)
    spec["source"] = {"uri": TINY_MODEL_URI}
    member = spec["template"]["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"].append({"cel": H100})
    member["template"]["spec"]["containers"][0]["args"] = [*ENGINE_ARGS, *extra_args]
    return _real(document)


def leader_worker(name: str) -> dict:
    """One leader and one headless worker, a GPU each, tensor parallel 2 across them
    (pipeline parallel across two CPU processes crashes on the first request: a CPU
    engine limit, TOOLS.md). The worker names no layout: it is given the leader's."""
    document = claims.renamed(claims.example("modeldeployments/deepseek-multinode.yaml"), name)
    spec = document["spec"]
    spec["source"] = {"uri": TINY_MODEL_URI}
    leader, worker = spec["template"]["spec"]["engines"][0]["members"]
    for member in (leader, worker):
        member["nodeSelector"]["devices"][0]["count"] = 1
        member["template"]["spec"]["containers"][0]["args"] = list(ENGINE_ARGS)
    leader["template"]["spec"]["containers"][0]["args"] += [
        "--tensor-parallel-size", "2", "--pipeline-parallel-size", "1",
    ]  # fmt: skip
    return _real(document)


def _pods(box, name: str, check, what: str, timeout: float = SERVE_SECONDS, *, terminating=False):
    """`check` on the deployment's pods on the member (without those being deleted,
    unless `terminating`), until it answers."""
    api = box.api(MEMBER)
    try:
        return watch_until(
            what,
            client.CoreV1Api(api).list_namespaced_pod,
            lambda pods: check(
                [p for p in pods if terminating or not p["metadata"].get("deletionTimestamp")]
            ),
            timeout,
            NAMESPACE,
            label_selector=f"{LABEL_DEPLOYMENT}={name}",
        )
    finally:
        api.close()


def _gone(box, name: str, timeout: float) -> None:
    """Until the deployment's pods are removed (not only being deleted)."""
    _pods(box, name, lambda pods: not pods or None, f"{name} removed", timeout, terminating=True)


def _deployment(box, name: str, check, what: str, timeout: float):
    api = box.api()
    try:
        return watch_until(
            what,
            client.CustomObjectsApi(api).list_namespaced_custom_object,
            lambda found: check(found[0] if found else {}),
            timeout,
            GROUP,
            VERSION,
            NAMESPACE,
            PLURAL,
            field_selector=f"metadata.name={name}",
        )
    finally:
        api.close()


def _ready(pod: dict) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _scheduled_on_a_gpu_node(box, pod: dict) -> None:
    assert pod["spec"].get("nodeName"), pod["metadata"]["name"]
    conditions = pod["status"].get("conditions") or []
    assert any(c["type"] == "PodScheduled" and c["status"] == "True" for c in conditions)
    # The real scheduler allocated the pod's GPU claim (DRA) on that node.
    (claim,) = pod["status"].get("resourceClaimStatuses") or [None]
    assert claim, pod["status"]
    allocated = claims.get(
        box, "resourceclaim", claim["resourceClaimName"], NAMESPACE, cluster=MEMBER
    )
    (result,) = allocated["status"]["allocation"]["devices"]["results"]
    assert result["driver"] == "gpu.nvidia.com", result


def _http_address(pod: dict) -> str:
    (engine,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    port = next(p["containerPort"] for p in engine["ports"] if p["name"] == PORT_NAME_HTTP)
    return f"http://{pod['status']['podIP']}:{port}"


def _chat(address: str, model: str) -> openai.types.chat.ChatCompletion:
    with openai.OpenAI(base_url=f"{address}/v1", api_key="unused", max_retries=0) as api:
        return api.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say something."}],
            max_tokens=8,
            temperature=0,
            timeout=120,
        )


def _answers_for_its_name_only(address: str, name: str) -> None:
    answer = _chat(address, name)
    assert answer.model == name
    assert answer.usage.completion_tokens >= 1, answer
    assert answer.choices[0].message.role == "assistant"
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        _chat(address, "another-model")


def _collector_reads_the_real_engine(pod: dict, name: str, folder) -> None:
    """The cluster collector, rendered for the built-in mappings, scrapes the real
    engine's /metrics (discovery and pod attributes stood in for as
    tests/collector/harness.py says): every vocabulary name vLLM exposes arrives in the
    vocabulary's unit and type, and a burst of real requests moves the request counter
    the signals are computed from."""
    otelcol = require_tool("otelcol")
    labels = pod["metadata"]["labels"]
    target = Pod(
        name=pod["metadata"]["name"],
        uid=pod["metadata"]["uid"],
        namespace=NAMESPACE,
        engine="vllm",
        deployment=name,
        serving=labels[LABEL_SERVING],
        page="",
        port=int(_http_address(pod).rsplit(":", 1)[1]),
        ip=pod["status"]["podIP"],
    )
    resolved = mappings.resolve_mappings([], builtin_mappings.builtin_mapping_resources())
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster(MEMBER),
        resolved.accepted,
        collector.CollectorDestination("gateway.invalid:4317"),
        scrape_interval_seconds=1,
    )
    expected = releases.EXPECTED[("vllm", "0.11")]
    expected |= {m.name for m in vocabulary.VOCABULARY if m.derived_from in expected}
    with harness.OtlpJsonSink() as sink:
        live = harness.live_overlay(config, [target], folder, sink.endpoint)
        with harness.running_collector(otelcol, live, folder) as log:

            def requests_total() -> float:
                found = [p for p in harness.points(sink.exports)
                         if p.metric == "modelplane_requests_total"]  # fmt: skip
                latest = max((p.time for p in found), default=None)
                return sum(p.value for p in found if p.time == latest)

            harness.wait_for(
                lambda: expected <= {p.metric for p in harness.points(sink.exports)},
                60,
                "every vocabulary name vLLM exposes",
                log,
            )
            before = requests_total()
            burst = 4
            for _ in range(burst):
                _chat(_http_address(pod), name)
            harness.wait_for(
                lambda: requests_total() >= before + burst, 60, "the burst counted", log
            )
    points = harness.points(sink.exports)
    for metric in expected:
        definition = vocabulary.VOCABULARY_BY_NAME[metric]
        arrived = [p for p in points if p.metric == metric]
        assert {p.unit for p in arrived} == {definition.unit}, metric
        assert {p.kind for p in arrived} == {KIND[definition.type]}, metric
        for p in arrived:
            assert p.resource.get(contracts.RESOURCE_ATTR_DEPLOYMENT) == name, p
            assert p.attributes.get(vocabulary.MODEL_LABEL, name) == name, p


def _delete_and_wait_gone(box, runner, name: str) -> None:
    claims.delete(box, "modeldeployment", name, NAMESPACE)
    _gone(box, name, GONE_SECONDS)
    # The runner stops a deleted pod's processes before it confirms the deletion.
    assert not [k for k in runner.pids(NAMESPACE) if f"/{name}" in k], runner.pids(NAMESPACE)


def test_a_standalone_vllm_replica_serves_the_name_a_client_sends(box, runner, tmp_path):
    name = "e2e-real-standalone"
    began = time.monotonic()
    claims.apply_document(box, standalone(name))
    try:
        (pod,) = _pods(
            box, name, lambda pods: len(pods) == 1 and _ready(pods[0]) and pods, f"{name} Ready"
        )
        measured("apply → real Standalone pod Ready", time.monotonic() - began)
        _scheduled_on_a_gpu_node(box, pod)
        # Started from the pod spec the member holds: our rendered arguments, the model
        # the deployment's source names, by its id, first after `vllm serve`.
        (pid,) = runner.pids(NAMESPACE, pod["metadata"]["name"]).values()
        argv = runner.argv(NAMESPACE, pod["metadata"]["name"], "engine")
        serve = argv.index("serve")
        assert argv[serve + 1] == TINY_MODEL_REPO, argv
        assert argv[serve + 1 :] == pod["spec"]["containers"][0]["args"], argv
        assert ["--served-model-name", name] == argv[
            argv.index("--served-model-name") : argv.index("--served-model-name") + 2
        ]
        measured("RSS of one real vLLM process tree (GiB)", engine_rss([pid]) / 2**30)

        _answers_for_its_name_only(_http_address(pod), name)
        _collector_reads_the_real_engine(pod, name, tmp_path)

        # The pod's readiness reaches the ModelDeployment's status on the control plane.
        _deployment(
            box,
            name,
            lambda md: (md.get("status") or {}).get("readyReplicas") == 1,
            f"{name} readyReplicas 1",
            claims.CONVERGE_SECONDS,
        )
        measured("apply → ModelDeployment readyReplicas 1 (real engine)", time.monotonic() - began)
    finally:
        _delete_and_wait_gone(box, runner, name)


def test_a_leader_and_a_headless_worker_serve_with_tensor_parallel_2(box, runner):
    name = "e2e-real-lws"
    began = time.monotonic()
    claims.apply_document(box, leader_worker(name))
    try:
        pods = _pods(
            box,
            name,
            lambda pods: len(pods) == 2 and all(map(_ready, pods)) and pods,
            f"{name}'s leader and worker Ready",
        )
        measured("apply → real leader + worker Ready", time.monotonic() - began)
        by_index = {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/worker-index"]: p
                    for p in pods}  # fmt: skip
        assert sorted(by_index) == ["0", "1"]
        leader, worker = by_index["0"], by_index["1"]
        for pod in (leader, worker):
            _scheduled_on_a_gpu_node(box, pod)
            # Made by the real controller: its labels, and its env on every container.
            assert pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/name"] == name
            env = {e["name"] for e in pod["spec"]["containers"][0].get("env") or []}
            assert "LWS_LEADER_ADDRESS" in env, env
        pids = {
            role: runner.pids(NAMESPACE, pod["metadata"]["name"])
            for role, pod in (("leader", leader), ("worker", worker))
        }
        argvs = {
            role: runner.argv(NAMESPACE, pod["metadata"]["name"], "engine")
            for role, pod in (("leader", leader), ("worker", worker))
        }
        for role, argv in argvs.items():
            serve = argv.index("serve")
            assert argv[serve + 1] == TINY_MODEL_REPO, (role, argv)  # the model on every rank
            flags = " ".join(argv)
            assert "--tensor-parallel-size 2 --pipeline-parallel-size 1" in flags, (role, argv)
            assert "--nnodes 2" in flags, (role, argv)
            # The leader's address, expanded from our variables to its DNS name.
            assert f"--master-addr {name}-0.{name}.{NAMESPACE}" in flags, (role, argv)
        assert "--headless" in argvs["worker"]
        assert "--node-rank 1" in " ".join(argvs["worker"])
        assert "--headless" not in argvs["leader"]
        measured(
            "RSS of a real leader + worker, process trees (GiB)",
            engine_rss([p for found in pids.values() for p in found.values()]) / 2**30,
        )

        _answers_for_its_name_only(_http_address(leader), name)
    finally:
        _delete_and_wait_gone(box, runner, name)


def test_the_examples_leader_worker_set_made_before_the_controller_gets_kwok_pods(box, runner):
    """deepseek-v3 (examples/) was applied before real serving was turned on, so before
    the controller's defaulting webhook: the box defaults it through the webhook, and the
    controller makes its leader and worker; without the real-run label they are KWOK's
    pods, Ready at once, and the runner leaves them alone."""
    example = "deepseek-v3"
    pods = _pods(
        box,
        example,
        lambda pods: len(pods) == 2 and all(map(_ready, pods)) and pods,
        f"{example}'s leader and worker Ready",
        claims.CONVERGE_SECONDS,
    )
    for pod in pods:
        assert pod["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/name"] == example
        assert REAL_RUN_LABEL not in pod["metadata"]["labels"]
        assert not runner.pids(NAMESPACE, pod["metadata"]["name"])


def test_a_launch_with_a_wrong_flag_is_parked_from_real_exits(box, runtime, runner):
    name = "e2e-real-broken"
    claims.apply_document(box, standalone(name, extra_args=("--no-such-flag",)))
    try:
        status = _deployment(
            box,
            name,
            lambda md: (md.get("status") or {}).get("parked"),
            f"{name} parked",
            PARK_SECONDS,
        )
        assert status["failures"] >= DEFAULT_MAX_CONSECUTIVE_FAILURES, status
        # The real process's exit (argparse: 2) and its own words, from its last log
        # lines (terminationMessagePolicy FallbackToLogsOnError).
        assert "container engine exited 2 (Error) before ready" in status["lastError"], status
        assert "--no-such-flag" in status["lastError"], status
        # Parked: nothing runs any more.
        _gone(box, name, PARK_SECONDS)
        assert not [k for k in runner.pids(NAMESPACE) if f"/{name}" in k]
    finally:
        _delete_and_wait_gone(box, runner, name)
