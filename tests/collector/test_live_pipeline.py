"""The rendered cluster-tier config in the real collector, end to end.

Six fake pods serve `/metrics` on loopback (tests/collector/engines.py, written from
vLLM's and SGLang's published metric definitions): two vLLM pods of one deployment, an
SGLang pod, a pod of a made-up engine that reports milliseconds and percent (mapped by a
test MetricMapping with `scale`), a llama.cpp pod (no mapping), and a vLLM pod without
the `modelplane.ai/serving` label. The config is the one `render_cluster_collector_config`
renders for the built-in mappings, run by the real collector with the overlays
tests/collector/harness.py describes:

- discovery: `static_configs` targets carrying the `__meta_kubernetes_*` labels
  Kubernetes discovery would give each pod, so the rendered relabel rules decide what is
  scraped, and the receiver sets `k8s.pod.uid`/`k8s.pod.name`/`k8s.namespace.name` from
  them exactly as it does in a cluster;
- pod attributes: `k8s_attributes` needs an API server, so a transform stands in for it,
  looking each pod up by `k8s.pod.uid` and setting the engine, deployment and serving
  resource attributes k8s_attributes would lift from the pod's labels;
- export: OTLP/HTTP JSON to a loopback receiver, with the rendered bearer-token
  authenticator reading the token from a file.

Everything between discovery and export — renames, scaling, passthrough, the identity
move, alignment, compaction and aggregation — runs as rendered.
"""

import glob
from collections import Counter
from pathlib import Path

import pytest
import yaml

from functions.common import contracts, vocabulary
from functions.common import metricmapping as mappings
from functions.compose_serving_stack import collector
from tests.collector import engines, harness
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "us-east-1"
RUN_SECONDS = 8

# A test mapping for the made-up engine: milliseconds and percent into base units.
LEGACY_MAPPING = {
    "metadata": {"name": "legacy"},
    "spec": {
        "engine": "legacy",
        "metrics": [
            {
                "to": "modelplane_time_to_first_token",
                "from": ["legacy:ttft_milliseconds"],
                "scale": 0.001,
            },
            # Two names across releases of a scaled target: renamed by statements (the
            # tables do only plain renames), which take the first name present only.
            {
                "to": "modelplane_kv_cache_usage",
                "from": ["legacy:kv_cache_percent", "legacy:kv_cache_percent_old"],
                "scale": 0.01,
            },
            # Three names of a plain rename (the table's): the first present supersedes
            # every later one, the one after it and, through it, the last.
            {
                "to": "modelplane_requests_running",
                "from": [
                    "legacy:requests_running",
                    "legacy:requests_running_v2",
                    "legacy:requests_running_v1",
                ],
            },
        ],
        "labels": [{"from": "model_name", "to": "model"}],
    },
}
INSTANCE_LABELS = {label for _, label in collector.INSTANCE_LABELS}


def _builtin() -> mappings.ParsedMappings:
    paths = sorted(glob.glob(str(REPO / "functions/common/builtin_mappings/*.yaml")))
    return mappings.parse_mappings([yaml.safe_load(Path(p).read_text()) for p in paths])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    otelcol = require_tool("otelcol")
    folder = tmp_path_factory.mktemp("live")
    parsed = _builtin()
    legacy = mappings.parse_mappings([LEGACY_MAPPING])
    assert parsed.refused == legacy.refused == ()
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster(CLUSTER),
        parsed.accepted + legacy.accepted,
        collector.CollectorDestination("gateway.invalid:4317"),
        scrape_interval_seconds=1,
    )
    pods = engines.fleet_pods()
    by_name = {p.name: p for p in pods}
    with engines.EngineServers(pods), harness.OtlpJsonSink() as sink:
        # vLLM pod a also has a port named `metrics` (serving the stray page): the engines
        # job scrapes only ports named `http`, so it must never be read.
        by_name["llama-8b-a"].extra_ports = {contracts.PORT_NAME_METRICS: by_name["stray"].port}
        live = harness.live_overlay(config, pods, folder, sink.endpoint)
        with harness.running_collector(otelcol, live, folder) as log:

            def merged_seen() -> bool:
                return any(
                    p.metric == "modelplane_requests_running" and p.value == 8.0
                    for p in harness.points(sink.exports)
                )

            harness.wait_for(merged_seen, 30, "a merged vLLM point", log)
            harness.wait_for(lambda: len(sink.exports) >= RUN_SECONDS, 30, "more exports", log)
        return sink.exports, harness.points(sink.exports), log.read_text()


def _of(points, metric, deployment):
    return [
        p
        for p in points
        if p.metric == metric and p.resource.get(contracts.RESOURCE_ATTR_DEPLOYMENT) == deployment
    ]


def test_every_export_carries_the_mounted_bearer_token(exported):
    exports, _, _ = exported
    assert exports
    assert {e.authorization for e in exports} == {"Bearer test-gateway-token"}


def test_mapped_engines_arrive_under_vocabulary_names_only(exported):
    _, points, _ = exported
    names = {p.metric for p in points}
    assert not [n for n in names if ":" in n]
    for engine, expected in (
        (
            "vllm",
            {
                "modelplane_requests_running",
                "modelplane_requests_waiting",
                "modelplane_kv_cache_usage",
                "modelplane_requests_total",
                "modelplane_prompt_tokens_total",
                "modelplane_time_to_first_token",
            },
        ),
        (
            "sglang",
            {
                "modelplane_requests_running",
                "modelplane_kv_cache_usage",
                "modelplane_generation_tokens_total",
                "modelplane_request_duration",
            },
        ),
    ):
        seen = {
            p.metric for p in points if p.resource.get(contracts.RESOURCE_ATTR_ENGINE) == engine
        }
        assert expected <= seen, (engine, expected - seen)
    # No engine's current name survives, in either spelling (an older name survives only
    # beside the current one on the same pod: see the next test).
    sources = {r.sources[0] for m in _builtin().accepted for r in m.metrics}
    assert not names & (sources | {s.replace(":", "_") for s in sources})
    # Units become the vocabulary's.
    for p in points:
        if p.metric in vocabulary.VOCABULARY_BY_NAME:
            assert p.unit == vocabulary.VOCABULARY_BY_NAME[p.metric].unit, p


def test_label_renames_apply(exported):
    _, points, _ = exported
    requests = _of(points, "modelplane_requests_total", "llama-8b")
    assert {p.attributes.get("finish_reason") for p in requests} == {"stop", "length"}
    assert all(
        "model_name" not in p.attributes and "finished_reason" not in p.attributes for p in requests
    )


def test_two_pods_of_one_deployment_merge_into_one_series(exported):
    _, points, _ = exported
    running = _of(points, "modelplane_requests_running", "llama-8b")
    # Sum over the pods (3 + 5), the KV-cache ratio averaged (0.25, 0.75), counters summed.
    assert 8.0 in {p.value for p in running}
    assert 0.5 in {p.value for p in _of(points, "modelplane_kv_cache_usage", "llama-8b")}
    stops = [
        p.value
        for p in _of(points, "modelplane_requests_total", "llama-8b")
        if p.attributes["finish_reason"] == "stop"
    ]
    assert 30.0 in stops
    for p in points:
        if p.metric in vocabulary.VOCABULARY_BY_NAME:
            assert not INSTANCE_LABELS & set(p.attributes), p
            # vLLM's engine-core index is aggregated away too.
            assert set(p.attributes) <= {"model", "finish_reason"}, p


def test_a_deployments_kv_cache_arrives_as_the_two_sums_of_its_pods(exported):
    _, points, _ = exported
    # Pods at 0.25 and 0.75: one pod's worth in use, out of two (the fleet ratio's parts).
    assert 1.0 in {p.value for p in _of(points, "modelplane_kv_cache_used", "llama-8b")}
    assert 2.0 in {p.value for p in _of(points, "modelplane_kv_cache_pods", "llama-8b")}


def test_a_release_serving_old_and_new_names_is_counted_once(exported):
    _, points, _ = exported
    # Pod a (vLLM 0.8) has only gpu_prefix_cache_hits (40); pod b (0.9) has the new name
    # and the old one beside it (60 each). The deployment sees 100, not 160.
    hits = [p.value for p in _of(points, "modelplane_prefix_cache_hits_total", "llama-8b")]
    # Counting the old name too would make every point 160. A single point can still miss
    # a pod when its scrape lands on the collector's tick (a documented limit of merging
    # per interval), so the test asks what the steady state is, not for every point.
    assert Counter(hits).most_common(1)[0][0] == 100.0, Counter(hits)
    assert hits.count(100.0) * 2 > len(hits), Counter(hits)
    # Three names, the first and the last served: the first is taken, the last passes
    # through (renaming it too would sum 3 + 7).
    assert {p.value for p in _of(points, "modelplane_requests_running", "old")} == {3.0}
    last = [p for p in points if p.metric == "legacy_requests_running_v1"]
    assert last
    assert {p.value for p in last} == {7.0}
    # Pod b's old name is not renamed; it passes through under its own name, per pod.
    old = [p for p in points if p.metric == "vllm_gpu_prefix_cache_hits_total"]
    assert {p.attributes["pod"] for p in old} == {"llama-8b-b"}
    scratch = (collector.PRESENT_MARKER, collector.SOURCES_TABLE, collector.GUARDED_TABLE)
    assert not [k for p in points for k in p.resource if k.startswith(scratch)]


def test_histograms_keep_their_buckets_and_merge_bucket_by_bucket(exported):
    _, points, _ = exported
    ttft = _of(points, "modelplane_time_to_first_token", "llama-8b")
    merged = [p for p in ttft if p.count == 13]
    assert merged, {p.count for p in ttft}
    assert merged[0].bounds == engines.VLLM_TTFT_BUCKETS
    assert merged[0].buckets == (0, 1, 2, 2, 3, 4, 0, 0, 0, 0, 0, 0, 1)
    assert merged[0].total == pytest.approx(0.5 * 13)


def test_scale_converts_milliseconds_and_percent_including_histogram_bounds(exported):
    _, points, _ = exported
    ttft = _of(points, "modelplane_time_to_first_token", "old")
    assert ttft
    assert ttft[-1].bounds == pytest.approx(tuple(b / 1000 for b in engines.LEGACY_TTFT_BUCKETS_MS))
    assert ttft[-1].total == pytest.approx(0.25)
    assert ttft[-1].buckets == (1, 2, 3, 0, 0, 0)
    assert ttft[-1].unit == "s"
    # Scaled from the first name only: the older name beside it passes through as itself.
    assert {p.value for p in _of(points, "modelplane_kv_cache_usage", "old")} == {0.375}
    old_name = [p for p in points if p.metric == "legacy_kv_cache_percent_old"]
    assert old_name
    assert {p.value for p in old_name} == {61.0}


def test_an_unmapped_engine_passes_through_under_its_own_names(exported):
    _, points, _ = exported
    tiny = [p for p in points if p.resource.get(contracts.RESOURCE_ATTR_ENGINE) == "llamacpp"]
    names = {p.metric for p in tiny}
    assert {"llamacpp_requests_processing", "llamacpp_prompt_tokens_total"} <= names
    processing = [p for p in tiny if p.metric == "llamacpp_requests_processing"]
    assert {p.value for p in processing} == {2.0}
    # Not aggregated (nothing says whether a sum or a mean is right): still per pod.
    assert processing[0].attributes["pod"] == "tiny-a"


def test_resources_carry_the_rollup_dimensions_and_nothing_per_pod(exported):
    _, points, _ = exported
    for p in points:
        assert p.resource[contracts.RESOURCE_ATTRIBUTE_CLUSTER] == CLUSTER
        assert set(p.resource) <= set(collector.KEPT_RESOURCE_ATTRIBUTES), p.resource
    vllm = _of(points, "modelplane_requests_running", "llama-8b")[0].resource
    assert vllm[contracts.RESOURCE_ATTR_ENGINE] == "vllm"
    assert vllm[contracts.RESOURCE_ATTR_SERVING] == "llama-8b-us-east-1"
    assert vllm[contracts.RESOURCE_ATTR_NAMESPACE] == "ml-team"


def test_pods_without_the_serving_label_and_other_ports_are_never_scraped(exported):
    _, points, _ = exported
    assert not [p for p in points if p.value == 99.0]
    assert not [p for p in points if p.attributes.get("pod") == "stray"]


def test_the_engine_scratch_label_never_leaves_the_collector(exported):
    """The label renames read the pod's engine type from a scratch label the shared
    engines job sets; the receiver's own series (`up`, `scrape_*`) get target labels but
    skip the rename rules that drop it, so a processor takes it off those."""
    _, points, _ = exported
    assert [p for p in points if p.metric == "up" and p.attributes.get("pod") == "llama-8b-a"]
    assert not [p for p in points if collector.SCRAPE_ENGINE_LABEL in p.attributes]
