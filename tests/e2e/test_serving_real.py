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
- The same replica autoscales (shadow) from vocabulary signals, so the composition turns
  the member's collector's signals page on for it; the agent's own code (its sampler,
  `read_member_inputs` on the member's real objects, `compute_report`) reads that page
  served by the collector over the real engine and reports the signals the hub reads
  (demand, pressure, latency) moved by a burst of concurrent requests, in agreement
  with the burst's size.
- A Leader + headless Worker replica (a LeaderWorkerSet made into pods by the real
  controller) serves with tensor parallel 2 across its two pods, the worker finding its
  leader (`--master-addr <lws>-0.<lws>.<namespace>`) through the member's CoreDNS
  (hack/fleetbox/dns.py) from the resolv.conf the kubelet would write, with no other
  pod in its hosts file: the record exists because the LWS controller made its headless
  Service, which no Service of ours takes the name of (`<deployment>-serving`).
- The example LeaderWorkerSet, applied before the controller ran, gets its (KWOK) pods,
  and the controller its headless Service: the leader's and the worker's names resolve
  through the member's CoreDNS to the pod IPs KWOK wrote, from EndpointSlices the
  member's endpointslice controller made.
- A launch with a flag vLLM does not know exits for real, is counted as start failures
  by the member's health agent and parks the model, with the engine's own error.

The engine takes 1-2 minutes to start on 2 shared cores and about 1 GiB of RSS per process
here: the waits are watches with generous timeouts. Measured (printed at the end of the
run): the time to serve, the engines' RSS.
"""

from __future__ import annotations

import concurrent.futures
import time
import urllib.request

import openai
import pytest
import yaml
from kubernetes import client

from fleetbox.podrunner import REAL_RUN_LABEL, REAL_RUN_VALUE
from fleetbox.serving import REQUIRED_TOOLS as REAL_TOOLS
from fleetbox.serving import TINY_MODEL_REPO, TINY_MODEL_URI, engine_rss
from fleetbox.wait import wait_for
from functions.common import builtin_mappings, contracts, vocabulary
from functions.common import metricmapping as mappings
from functions.common.contracts import (
    AUTOSCALING_GROUP_VERSION,
    COLLECTOR_SERVICE_NAME,
    LABEL_DEPLOYMENT,
    LABEL_SERVING,
    PORT_NAME_HTTP,
    SYSTEM_NAMESPACE,
)
from functions.common.naming import dns_label, serving_service_name
from functions.compose_serving_stack import collector
from functions.compose_serving_stack.collector_objects import CONFIG_KEY
from functions.runtime.agent.collect import policy_signals, read_member_inputs
from functions.runtime.agent.signal_sampling import SignalSampler
from functions.runtime.agent.signals import Scope
from functions.runtime.shared.policy import Policy
from functions.runtime.shared.report import compute_report
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
# Two real ranks joining one tensor-parallel group on the same 2 cores, while the other
# tier's control planes run: 190-490 s measured from apply to both Ready in CI runs, so a
# 420 s bound failed one. The bound only caps a broken start; a good one never waits it.
LEADER_WORKER_SERVE_SECONDS = 900.0
PARK_SECONDS = 420.0
GONE_SECONDS = 120.0
RESOLVE_SECONDS = 30.0
PARK_AFTER = 2  # the broken launch's spec.parking.maxConsecutiveFailures
# The collector's scrape interval (and so its scrape timeout) in the real-engine
# collector runs, seconds. At 1 s, on 2 shared cores, the engine's series left the
# signals page for the whole of a burst it was serving (its scrapes, seemingly, not
# answered within the timeout): the agent then rightly has no pressure at all.
INTERVAL = 3
# The signals burst: concurrent requests to an engine that runs one at a time
# (`--max-num-seqs 1`), each long enough (its tokens forced past end-of-sequence) that
# the others are seen waiting (384 tokens take about 2 s each here, over 4 s under load:
# the burst lasts several collector ticks). On 2 cores shared with the rest of the
# tier the engine has served the burst at under a tenth of its idle speed (one CI run
# timed the last request out after 120 s), so the burst's requests wait as long as the
# whole burst can take, and the signal window (the user's `signals.window`) holds it.
SIGNALS_BURST = 8
SIGNALS_ENGINE_ARGS = ("--max-num-seqs", "1")
BURST_TOKENS = 384
BURST_SECONDS = 600.0
SIGNALS_WINDOW = "15m"
# vLLM's TTFT buckets grow by at most 2.5x between neighbours (0.1 -> 0.25, 1 -> 2.5):
# an interpolated quantile lies at most that far above the slowest observation.
TTFT_BUCKET_RATIO = 2.5
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


def standalone(name: str, extra_args: tuple[str, ...] = (), *, autoscaled: bool = False) -> dict:
    """One real Standalone replica; `autoscaled`: with the example's shadow autoscaling
    from vocabulary signals, held at one replica (one real engine is what this box has
    room for)."""
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), name)
    spec = document["spec"]
    spec["replicas"] = 1
    if autoscaled:
        autoscaling = spec["autoscaling"]
        assert autoscaling["mode"] == "shadow", autoscaling  # the hub decides, applies nothing
        autoscaling["minReplicas"] = autoscaling["maxReplicas"] = 1
        autoscaling["signals"]["window"] = SIGNALS_WINDOW
    else:
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


def _the_controllers_headless_service(box, lws: str) -> dict:
    """The Service named after a LeaderWorkerSet: the one its controller made (headless,
    owned by it, publishing pods before they are ready), never one of ours."""
    api = box.api(MEMBER)
    try:
        core = client.CoreV1Api(api)
        service = api.sanitize_for_serialization(core.read_namespaced_service(lws, NAMESPACE))
        ours = core.read_namespaced_service(serving_service_name(lws), NAMESPACE)
    finally:
        api.close()
    assert service["spec"]["clusterIP"] == "None", service["spec"]
    assert service["spec"].get("publishNotReadyAddresses") is True, service["spec"]
    owners = service["metadata"].get("ownerReferences") or []
    assert [(o["kind"], o["name"]) for o in owners] == [("LeaderWorkerSet", lws)], owners
    assert ours.spec.cluster_ip != "None"  # the model's own Service, beside it
    return service


def _http_address(pod: dict) -> str:
    (engine,) = [c for c in pod["spec"]["containers"] if c["name"] == "engine"]
    port = next(p["containerPort"] for p in engine["ports"] if p["name"] == PORT_NAME_HTTP)
    return f"http://{pod['status']['podIP']}:{port}"


def _chat(
    address: str, model: str, max_tokens: int = 8, timeout: float = 120, **extra
) -> openai.types.chat.ChatCompletion:
    with openai.OpenAI(base_url=f"{address}/v1", api_key="unused", max_retries=0) as api:
        return api.chat.completions.create(
            model=model,
            messages=[{"role": "user", "content": "Say something."}],
            max_tokens=max_tokens,
            temperature=0,
            timeout=timeout,
            extra_body=extra or None,
        )


def _timed_long_chat(address: str, model: str) -> float:
    """One burst request, its tokens forced to BURST_TOKENS; its seconds, client side."""
    began = time.monotonic()
    answer = _chat(address, model, BURST_TOKENS, BURST_SECONDS, ignore_eos=True)
    assert answer.usage.completion_tokens == BURST_TOKENS, answer.usage
    return time.monotonic() - began


def _answers_for_its_name_only(address: str, name: str) -> None:
    answer = _chat(address, name)
    assert answer.model == name
    assert answer.usage.completion_tokens >= 1, answer
    assert answer.choices[0].message.role == "assistant"
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        _chat(address, "another-model")


def _signals_page_composed_for(box, name: str) -> Policy:
    """The composition's side of the signals: the member's InferenceCluster names this
    deployment's replica among those its agent computes vocabulary signals for, the
    collector config it rendered onto the member serves the signals page, and the
    member holds the deployment's AdaptivePolicy copy (what the agent evaluates)."""

    def cluster_reads_signals_for_it(found: list[dict]) -> dict:
        (cluster,) = found
        readers = ((cluster.get("status") or {}).get("telemetry") or {}).get("signalsFor") or []
        assert any(r.startswith(f"{NAMESPACE}/{name}") for r in readers), readers
        return cluster

    api = box.api()
    try:
        watch_until(
            f"InferenceCluster {MEMBER} signalsFor {name}",
            client.CustomObjectsApi(api).list_cluster_custom_object,
            cluster_reads_signals_for_it,
            claims.CONVERGE_SECONDS,
            GROUP,
            VERSION,
            "inferenceclusters",
            field_selector=f"metadata.name={MEMBER}",
        )
    finally:
        api.close()

    def serves_the_page(found: list[dict]) -> dict:
        (config_map,) = found
        config = yaml.safe_load(config_map["data"][CONFIG_KEY])
        assert collector.SIGNALS_EXPORTER in config["exporters"], sorted(config["exporters"])
        pipeline = config["service"]["pipelines"]["metrics"]
        assert collector.SIGNALS_EXPORTER in pipeline["exporters"], pipeline
        return config

    member = box.api(MEMBER)
    try:
        watch_until(
            f"{MEMBER}'s collector config serves the signals page",
            client.CoreV1Api(member).list_namespaced_config_map,
            serves_the_page,
            claims.CONVERGE_SECONDS,
            SYSTEM_NAMESPACE,
            field_selector=f"metadata.name={COLLECTOR_SERVICE_NAME}",
        )
        policy = watch_until(
            f"{name}'s AdaptivePolicy copy on {MEMBER}",
            client.CustomObjectsApi(member).list_namespaced_custom_object,
            lambda found: found[0] if found else None,
            claims.CONVERGE_SECONDS,
            *AUTOSCALING_GROUP_VERSION.split("/"),
            NAMESPACE,
            "adaptivepolicies",
            field_selector=f"metadata.name={dns_label(name)}",
        )
    finally:
        member.close()
    return Policy.from_object(policy)


def _collector_reads_the_real_engine(box, pod: dict, name: str, folder) -> None:
    """The cluster collector, rendered for the built-in mappings as the composition
    renders it for this member (a destination, and the signals page: a replica here
    autoscales from vocabulary signals), scrapes the real engine's /metrics (discovery
    and pod attributes stood in for as tests/collector/harness.py says): every
    vocabulary name vLLM exposes arrives in the vocabulary's unit and type, and a burst
    of real requests moves the request counter at the destination and, read by the
    agent's own sampler and report, the signals the hub reads."""
    otelcol = require_tool("otelcol")
    policy = _signals_page_composed_for(box, name)
    labels = pod["metadata"]["labels"]
    address = _http_address(pod)
    target = Pod(
        name=pod["metadata"]["name"],
        uid=pod["metadata"]["uid"],
        namespace=NAMESPACE,
        engine="vllm",
        deployment=name,
        serving=labels[LABEL_SERVING],
        page="",
        port=int(address.rsplit(":", 1)[1]),
        ip=pod["status"]["podIP"],
    )
    resolved = mappings.resolve_mappings([], builtin_mappings.builtin_mapping_resources())
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster(MEMBER),
        resolved.accepted,
        collector.CollectorDestination("gateway.invalid:4317"),
        signals=True,
        scrape_interval_seconds=INTERVAL,
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
                _chat(address, name)
            harness.wait_for(
                lambda: requests_total() >= before + burst, 60, "the burst counted", log
            )
            _agent_reads_a_burst(
                box,
                policy,
                address,
                name,
                url=harness.signals_url(live),
                counted=requests_total,
                log=log,
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


def _agent_reads_a_burst(
    box, policy: Policy, address: str, name: str, *, url: str, counted, log
) -> None:
    """The agent's sampler reads the collector's signals page before, during and after
    SIGNALS_BURST concurrent requests (`counted`: the requests the destination counted);
    its report (read_member_inputs on the member's real ScaledObject, Deployment and
    pod, then compute_report: what the agent writes on the policy copy, which the hub
    reads) shows the burst:

    - demand (requests per second over the window): times the span of the points it
      was computed over, exactly the burst;
    - pressure (waiting requests per ready replica): while the engine, taking one
      request at a time, works through the burst, requests are seen waiting, never
      more than all but the running one; none once it is served;
    - latency (p90 time to first token, queueing included): computed from the burst's
      observations, no slower than the slowest request (bucket interpolation aside).
    """
    spec = policy.spec
    assert set(spec.effective_signals) >= {"demand", "pressure", "latency"}, spec.signals
    assert spec.cluster(MEMBER) is not None, spec.clusters
    sampler = SignalSampler(url, INTERVAL / 2)
    sampler.keep_for([spec.signal_window])
    scope = Scope(NAMESPACE, name)

    def signal(which: str) -> tuple[float | None, str | None]:
        sampler.step(time.time())
        found = policy_signals(
            spec,
            scope,
            ready_replicas=1,
            history=sampler.sampling,
            prometheus_url=None,
            now=time.time(),
            interval=INTERVAL,
        )
        return found[which].single()

    began = time.time()
    # Before the burst: a demand over two points, and nobody waiting.
    harness.wait_for(
        lambda: signal("demand")[1] is None and signal("pressure") == (0.0, None),
        180,
        "the agent's demand and pressure computed from the signals page",
        log,
    )
    before = counted()
    waiting_seen: list = []
    engine_seen: list = []  # what the engine's own page said meanwhile, for a failure
    burst_began = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(SIGNALS_BURST) as pool:
        requests = [pool.submit(_timed_long_chat, address, name) for _ in range(SIGNALS_BURST)]
        pending = set(requests)
        while pending:
            value, error = signal("pressure")
            waiting_seen.append(value if error is None else error)
            engine_seen.append((round(time.monotonic() - burst_began, 1), _engine_queue(address)))
            _, pending = concurrent.futures.wait(pending, timeout=INTERVAL / 2)
        durations = [r.result() for r in requests]
    burst_seconds = time.monotonic() - burst_began
    # The burst counted at the destination (`counted`, independent of the agent's code),
    # so the page, updated in the same pipeline before the export is sent, counts it too.
    harness.wait_for(
        lambda: (
            counted() >= before + SIGNALS_BURST
            and signal("pressure") == (0.0, None)
            and signal("latency")[1] is None
        ),
        180,
        "the burst counted, the agent's pressure back to 0 and a latency over the burst",
        log,
    )
    now = time.time()
    report = _agent_report(box, spec, sampler, now)
    assert report.ready == 1, report
    # What the sampled points span: from the first read (its point at most the page's
    # expiry older) to now (the newest point at most STALE_INTERVALS old).
    margin = (collector.SIGNALS_EXPIRY_INTERVALS + 1) * INTERVAL
    seconds = now - began
    assert seconds + margin < spec.signal_window, (seconds, spec.signal_window)
    assert report.demand >= SIGNALS_BURST / (seconds + margin), (report, seconds)
    assert report.demand * max(0.0, seconds - margin) <= SIGNALS_BURST, (report, seconds)
    # Exactly: the per-second increase times the span of the points it was computed
    # over is the burst (every request of it finished in the window, none other did).
    span = _points_span(
        sampler.sampling, scope, "modelplane_requests_total", now - spec.signal_window
    )
    assert report.demand * span == pytest.approx(SIGNALS_BURST), (report.demand, span)
    # All sent at once, one runs: the rest wait, never more than all but that one.
    peak = max((w for w in waiting_seen if isinstance(w, float)), default=None)
    queue = (waiting_seen, engine_seen, durations, burst_seconds)
    assert peak is not None, queue
    assert 1 <= peak <= SIGNALS_BURST - 1, queue
    assert report.pressure == 0.0, report
    assert 0 < report.latency <= TTFT_BUCKET_RATIO * max(durations), (report, durations)
    measured(f"signals burst: {SIGNALS_BURST} requests, one at a time", burst_seconds)
    print(
        f"signals burst: peak pressure {peak}, demand {report.demand:.3f}/s over"
        f" {seconds:.1f} s, p90 TTFT {report.latency:.2f} s, slowest request"
        f" {max(durations):.2f} s"
    )


def _agent_report(box, spec, sampler: SignalSampler, now: float):
    """What the agent reports for the policy on the member at `now` from the sampler's
    history: read_member_inputs on the member's real objects, then compute_report."""
    api = box.api(MEMBER)
    try:
        inputs = read_member_inputs(
            api,
            spec,
            NAMESPACE,
            None,
            now,
            history=sampler.sampling,
            interval=INTERVAL,
            cluster=MEMBER,
        )
        result = compute_report(inputs, spec, MEMBER, None, now)
    finally:
        api.close()
    assert result.report is not None, result.condition
    assert not inputs.read_errors, inputs.read_errors
    return result.report


def _engine_queue(address: str) -> str:
    """The engine's own running and waiting gauges, as its /metrics says them."""
    with urllib.request.urlopen(f"{address}/metrics", timeout=10) as response:
        page = response.read().decode()
    return " ".join(
        line.split("{", 1)[0].split(":", 1)[1] + "=" + line.rsplit(" ", 1)[1]
        for line in page.splitlines()
        if line.startswith(("vllm:num_requests_running", "vllm:num_requests_waiting"))
    )


def _points_span(history, scope: Scope, metric: str, since: float) -> float:
    """Seconds between the first and the newest point of `metric` the history holds for
    `scope` since `since` (what a rate over the window divides by)."""
    times = [
        when
        for page in history.pages
        for (sample, _), (_, when) in (page.samples.get(scope) or {}).items()
        if sample == metric and when >= since
    ]
    return max(times) - min(times)


def _delete_and_wait_gone(box, runner, name: str) -> None:
    claims.delete(box, "modeldeployment", name, NAMESPACE)
    _gone(box, name, GONE_SECONDS)
    # The runner stops a deleted pod's processes before it confirms the deletion.
    assert not [k for k in runner.pids(NAMESPACE) if f"/{name}" in k], runner.pids(NAMESPACE)


def test_a_standalone_vllm_replica_serves_the_name_a_client_sends(box, runner, tmp_path):
    name = "e2e-real-standalone"
    began = time.monotonic()
    claims.apply_document(box, standalone(name, SIGNALS_ENGINE_ARGS, autoscaled=True))
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
        _collector_reads_the_real_engine(box, pod, name, tmp_path)

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
            LEADER_WORKER_SERVE_SECONDS,
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
        # The worker found the leader through cluster DNS: the controller's headless
        # Service exists, the worker's resolver is the kubelet's (the member's CoreDNS,
        # its namespace's search path), its hosts file names no other pod, and the
        # leader address resolves, in the worker's own view, to the leader's pod IP.
        _the_controllers_headless_service(box, name)
        dns = box.dns[MEMBER]
        leader_ip, worker_name = leader["status"]["podIP"], worker["metadata"]["name"]
        files = runner.files(NAMESPACE, worker_name)
        assert files["resolv.conf"] == (
            f"search {NAMESPACE}.svc.cluster.local svc.cluster.local cluster.local\n"
            f"nameserver {dns.address}\noptions ndots:5\n"
        )
        # By whole entries: the worker's own name starts with the leader's.
        entries = files["hosts"].split()
        leader_name = leader["metadata"]["name"]
        assert leader_ip not in entries, files["hosts"]
        assert not [e for e in entries if e.split(".")[0] == leader_name], files["hosts"]
        leader_address = f"{name}-0.{name}.{NAMESPACE}"
        assert runner.resolve(NAMESPACE, worker_name, "engine", leader_address) == [leader_ip]
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
    # The controller made its headless Service (ours is `<name>-serving`), and the
    # member's CoreDNS serves every pod of the group by `<hostname>.<lws>.<namespace>`
    # at the IP KWOK gave it, as a pod in the namespace resolves it.
    _the_controllers_headless_service(box, example)
    dns = box.dns[MEMBER]
    for pod in pods:
        address, ip = f"{pod['metadata']['name']}.{example}.{NAMESPACE}", pod["status"]["podIP"]
        # DNS has no watch: polled, for the EndpointSlice and CoreDNS's informer to catch up.
        wait_for(
            f"{address} resolving to {ip} through the member's CoreDNS",
            lambda address=address, ip=ip: dns.resolve(address, NAMESPACE) == [ip],
            RESOLVE_SECONDS,
        )


def test_a_launch_with_a_wrong_flag_is_parked_from_real_exits(box, runtime, runner):
    name = "e2e-real-broken"
    document = standalone(name, extra_args=("--no-such-flag",))
    # Parked after two start failures, as a user may set it: each failure is a real vLLM
    # process starting and exiting, and the kubelet's back-off between them doubles, so
    # the default five would spend minutes proving nothing more.
    document["spec"]["parking"] = {"maxConsecutiveFailures": PARK_AFTER}
    claims.apply_document(box, document)
    try:
        status = _deployment(
            box,
            name,
            lambda md: (md.get("status") or {}).get("parked"),
            f"{name} parked",
            PARK_SECONDS,
        )
        assert status["failures"] >= PARK_AFTER, status
        # The real process's exit (argparse: 2) and its own words, from its last log
        # lines (terminationMessagePolicy FallbackToLogsOnError).
        assert "container engine exited 2 (Error) before ready" in status["lastError"], status
        assert "--no-such-flag" in status["lastError"], status
        # Parked: nothing runs any more.
        _gone(box, name, PARK_SECONDS)
        assert not [k for k in runner.pids(NAMESPACE) if f"/{name}" in k]
    finally:
        _delete_and_wait_gone(box, runner, name)
