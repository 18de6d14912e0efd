"""Acceptance: engine pages the suite was not tuned against, several releases of each
engine (tests/collector/releases.py, from the engines' own definitions), through the
real collector on the config rendered for the built-in mappings alone.

Each release is its own deployment, so its series arrive apart. For every release the
test asks: does every vocabulary name the engine exposes in that release arrive, under
the vocabulary's base unit and type, and nothing that would be a lie (a block count
added to token counts, the ensemble's steps counted as requests, milliseconds as
seconds)? Discovery and pod attributes are stood in for as tests/collector/harness.py
describes; where each engine serves its Prometheus text (trtllm-serve's
`/prometheus/metrics`, Triton's own metrics port) is decided by the rendered scrape jobs.
"""

import copy

import pytest

from functions.common import builtin_mappings, contracts, vocabulary
from functions.common import metricmapping as mappings
from functions.compose_serving_stack import collector
from tests.collector import harness, releases
from tests.collector.engines import EngineServers
from tests.conftest import require_tool

CLUSTER = "us-east-1"
KIND = {
    vocabulary.MetricType.GAUGE: "gauge",
    vocabulary.MetricType.COUNTER: "sum",
    vocabulary.MetricType.HISTOGRAM: "histogram",
}


def _builtins_with_triton_port(port: int) -> mappings.ResolvedMappings:
    """The built-ins, with Triton's metrics port moved off 8002 (which this machine may
    be using) by applying the built-in's own copy with only the port changed, as a
    platform team would."""
    builtin = builtin_mappings.builtin_mapping_resources()
    triton = copy.deepcopy(next(m for m in builtin if m["spec"]["engine"] == "triton-trtllm"))
    assert triton["spec"]["scrape"]["port"] == 8002
    triton["spec"]["scrape"]["port"] = port
    return mappings.resolve_mappings([triton], builtin)


@pytest.fixture(scope="module")
def arrived(tmp_path_factory):
    otelcol = require_tool("otelcol")
    folder = tmp_path_factory.mktemp("releases")
    port = harness.free_port()
    resolved = _builtins_with_triton_port(port)
    assert resolved.refused == ()
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster(CLUSTER),
        resolved.accepted,
        collector.CollectorDestination("gateway.invalid:4317"),
        scrape_interval_seconds=1,
    )
    pods = releases.release_pods(port)
    with EngineServers(pods), harness.OtlpJsonSink() as sink:
        live = harness.live_overlay(config, pods, folder, sink.endpoint)
        with harness.running_collector(otelcol, live, folder) as log:

            def every_release_seen() -> bool:
                seen = {
                    p.resource.get(contracts.RESOURCE_ATTR_DEPLOYMENT)
                    for p in harness.points(sink.exports)
                    if p.metric.startswith("modelplane_")
                }
                return all(releases.deployment_of(e, r) in seen for e, r in releases.EXPECTED)

            harness.wait_for(every_release_seen, 60, "a point from every release", log)
            # A few more scrapes, so every series had its chance to arrive.
            count = len(sink.exports)
            harness.wait_for(lambda: len(sink.exports) >= count + 4, 30, "more exports", log)
        return harness.points(sink.exports)


def _of(points, engine, release):
    deployment = releases.deployment_of(engine, release)
    return [p for p in points if p.resource.get(contracts.RESOURCE_ATTR_DEPLOYMENT) == deployment]


def _last(points, metric):
    matching = [p for p in points if p.metric == metric]
    assert matching, f"no {metric}"
    return max(matching, key=lambda p: p.time)


@pytest.mark.parametrize(("engine", "release"), sorted(releases.EXPECTED), ids=str)
def test_every_vocabulary_name_the_release_exposes_arrives_in_base_units(arrived, engine, release):
    points = _of(arrived, engine, release)
    seen = {p.metric for p in points if p.metric in vocabulary.VOCABULARY_BY_NAME}
    expected = releases.EXPECTED[(engine, release)]
    # The collector derives the KV-cache sums the fleet ratio is made of from the ratio.
    derived = {m.name for m in vocabulary.VOCABULARY if m.derived_from in expected}
    assert seen == expected | derived
    for name in seen:
        definition = vocabulary.VOCABULARY_BY_NAME[name]
        metric_points = [p for p in points if p.metric == name]
        assert {p.unit for p in metric_points} == {definition.unit}, name
        assert {p.kind for p in metric_points} == {KIND[definition.type]}, name
        # Merged to the vocabulary's labels: nothing per pod, no engine label left over.
        for p in metric_points:
            assert set(p.attributes) <= set(definition.labels), (name, p.attributes)


def test_ratios_are_ratios_for_every_release(arrived):
    for (engine, release), expected in releases.EXPECTED.items():
        if "modelplane_kv_cache_usage" not in expected:
            continue
        kv = [p for p in _of(arrived, engine, release) if p.metric == "modelplane_kv_cache_usage"]
        assert kv, (engine, release)
        assert all(0.0 <= p.value <= 1.0 for p in kv), (engine, release)
        # One pod: its KV cache in use is its ratio, out of one pod's worth.
        used, capacity = vocabulary.VOCABULARY_BY_NAME["modelplane_kv_cache_usage"].weighted_by
        points = _of(arrived, engine, release)
        assert _last(points, capacity).value == 1, (engine, release)
        assert _last(points, used).value == pytest.approx(
            _last(points, "modelplane_kv_cache_usage").value
        ), (engine, release)


TRITON_RELEASES = ("23.12", "24.08", "main")


def test_triton_gauges_split_by_a_label_take_only_their_own_series(arrived):
    for release in TRITON_RELEASES:
        points = _of(arrived, "triton-trtllm", release)
        assert _last(points, "modelplane_requests_waiting").value == 3
        # The backend's waiting requests are active - scheduled: running is "scheduled"
        # (2), not "active" (5, which counts the 3 waiting again).
        assert _last(points, "modelplane_requests_running").value == 2
        assert _last(points, "modelplane_kv_cache_usage").value == pytest.approx(0.4875)
        # The backend model's requests, not every ensemble step's (4 x 42).
        assert _last(points, "modelplane_requests_total").value == 42


def test_triton_token_counters_are_the_sums_of_its_token_histograms(arrived):
    points = _of(arrived, "triton-trtllm", "main")
    prompt = _last(points, "modelplane_prompt_tokens_total")
    generated = _last(points, "modelplane_generation_tokens_total")
    assert (prompt.value, generated.value) == (860, 144)
    assert prompt.kind == generated.kind == "sum"
    # The histograms themselves pass on under their own names.
    assert {"nv_llm_input_token_len", "nv_llm_output_token_len"} <= {p.metric for p in points}


def test_triton_model_label_never_stands_in_for_the_served_model(arrived):
    for release in TRITON_RELEASES:
        for p in _of(arrived, "triton-trtllm", release):
            if p.metric.startswith("modelplane_"):
                assert "model" not in p.attributes, p
            elif "triton_model" in p.attributes or "model" in p.attributes:
                # Passed-through Triton series keep the Triton model, renamed.
                assert "model" not in p.attributes, p


def test_triton_milliseconds_become_seconds_bounds_included(arrived):
    ttft = _last(_of(arrived, "triton-trtllm", "24.08"), "modelplane_time_to_first_token")
    assert ttft.bounds == pytest.approx((0.1, 0.5, 2.0, 5.0))
    assert ttft.total == pytest.approx(6.3)
    assert ttft.count == 2  # the tensorrt_llm model's two, not the other steps'


def test_vllm_block_counts_are_never_added_to_token_counts(arrived):
    old = _of(arrived, "vllm", "0.7")
    names = {p.metric for p in old}
    assert "modelplane_prefix_cache_hits_total" not in names
    # They arrive under the engine's own (made-safe) names, unmapped.
    assert {"vllm_gpu_prefix_cache_hits_total", "vllm_gpu_prefix_cache_queries_total"} <= names
    for release in ("0.8", "0.11", "0.32"):
        points = _of(arrived, "vllm", release)
        assert _last(points, "modelplane_prefix_cache_hits_total").value == 300
        assert _last(points, "modelplane_prefix_cache_queries_total").value == 900


def test_trtllm_prometheus_text_is_read_where_trtllm_serve_serves_it(arrived):
    for release in ("1.1", "main"):
        points = _of(arrived, "trtllm", release)
        requests = [p for p in points if p.metric == "modelplane_requests_total"]
        latest = max(p.time for p in requests)
        by_reason = {
            p.attributes.get(vocabulary.FINISH_REASON_LABEL): p.value
            for p in requests
            if p.time == latest
        }
        assert by_reason == {"stop": 11, "length": 1}
        for p in requests:
            assert p.attributes.get(vocabulary.MODEL_LABEL) == releases.TRTLLM_MODEL


def test_sglang_model_label_of_either_release_becomes_model(arrived):
    for release in ("older", "newer", "0.5.23"):
        running = _last(_of(arrived, "sglang", release), "modelplane_requests_running")
        assert running.attributes == {vocabulary.MODEL_LABEL: releases.SGLANG_MODEL}
        assert running.value == 6
