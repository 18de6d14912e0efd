"""The cluster-tier collector config, whole, against readable golden files.

Each case renders `render_cluster_collector_config` (or the node tier) for fixed inputs
and compares the dict with tests/unit/testdata/collector/<case>.yaml. Regenerate with

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_collector.py

and read the diff. tests/collector/test_validate.py runs `otelcol validate` on every
golden file, and tests/collector/test_live_pipeline.py runs one in the real collector.
"""

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from functions.common import contracts, vocabulary
from functions.common import metricmapping as mappings
from functions.compose_model_replica.serving import EPP_IMAGE, PD_EPP_IMAGE
from functions.compose_serving_stack import collector, substrate_targets

COST = "modelplane_model_cost_per_hour"
REPO = Path(__file__).resolve().parents[2]
GOLDEN = Path(__file__).parent / "testdata" / "collector"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
DESTINATION = collector.CollectorDestination("telemetry.fleet.example.com:4317")
METRICS_ONLY_DESTINATION = collector.CollectorDestination(
    "telemetry.fleet.example.com:4317", traces_and_logs=False
)


def builtin() -> mappings.ParsedMappings:
    paths = sorted((REPO / "functions" / "common" / "builtin_mappings").glob("*.yaml"))
    return mappings.parse_mappings([yaml.safe_load(p.read_text()) for p in paths])


MILLISECONDS = {
    "metadata": {"name": "legacy"},
    "spec": {
        "engine": "legacy",
        "metrics": [
            {"to": "modelplane_time_to_first_token", "from": ["legacy:ttft_ms"], "scale": 0.001},
            {"to": "modelplane_kv_cache_usage", "from": ["legacy:kv_percent"], "scale": 0.01},
            {"to": "modelplane_requests_total", "from": ["legacy:finished_total"]},
        ],
        "labels": [{"from": "model_id", "to": "model"}],
    },
}


def _cases() -> dict[str, dict]:
    standard = collector.CollectorCluster("us-east-1", contracts.STACK_STANDARD)
    dynamo = collector.CollectorCluster("eu-west-1", contracts.STACK_DYNAMO)
    return {
        "builtin-mappings-standard": collector.render_cluster_collector_config(
            standard, builtin().accepted, DESTINATION
        ),
        "builtin-mappings-dynamo": collector.render_cluster_collector_config(
            dynamo, builtin().accepted, DESTINATION
        ),
        "passthrough-only": collector.render_cluster_collector_config(standard, (), DESTINATION),
        "scaled-mapping": collector.render_cluster_collector_config(
            standard, mappings.parse_mappings([MILLISECONDS]).accepted, DESTINATION
        ),
        "node-tier": collector.render_node_collector_config(standard, DESTINATION),
        # A destination that carries metrics only (remote write): no traces, no logs.
        "node-tier-metrics-only": collector.render_node_collector_config(
            standard, METRICS_ONLY_DESTINATION
        ),
        "push-metrics-only": collector.render_cluster_collector_config(
            standard, builtin().accepted, METRICS_ONLY_DESTINATION
        ),
        # No destination, replicas autoscaled from vocabulary signals: the agent's page only.
        "signals-only": collector.render_cluster_collector_config(
            standard, builtin().accepted, None, signals=True
        ),
        "push-and-signals": collector.render_cluster_collector_config(
            standard, builtin().accepted, DESTINATION, signals=True
        ),
    }


def golden_configs() -> dict[str, Path]:
    """Every golden config, for the otelcol tests."""
    return {p.stem: p for p in sorted(GOLDEN.glob("*.yaml"))}


@pytest.mark.parametrize("case", sorted(_cases()))
def test_config_matches_its_golden_file(case):
    rendered = _cases()[case]
    path = GOLDEN / f"{case}.yaml"
    if UPDATE:
        path.write_text(yaml.safe_dump(rendered, sort_keys=False, width=120))
    assert path.exists(), f"no golden file {path}: run with UPDATE_GOLDEN=1"
    assert yaml.safe_load(path.read_text()) == rendered


def test_rendering_is_deterministic_whatever_the_mapping_order():
    accepted = builtin().accepted
    a = collector.render_cluster_collector_config(
        collector.CollectorCluster("c"), accepted, DESTINATION
    )
    b = collector.render_cluster_collector_config(
        collector.CollectorCluster("c"), tuple(reversed(accepted)), DESTINATION
    )
    assert a == b


def test_each_engines_renames_are_its_own_table_and_every_group_tests_its_engine():
    config = _cases()["builtin-mappings-standard"]
    groups = config["processors"]["transform/normalize"]["metric_statements"]
    engines = sorted(m.engine for m in builtin().accepted)
    engine_is = {
        e: f'resource.attributes["{contracts.RESOURCE_ATTR_ENGINE}"] == "{e}"' for e in engines
    }
    sources = f'resource.attributes["{collector.SOURCES_TABLE}"]'
    guarded = f'resource.attributes["{collector.GUARDED_TABLE}"]'
    # Once per scrape, an engine's resource gets that engine's tables and no other's.
    tables = [g for g in groups if g["statements"][0].startswith(f"set({sources}, {{")]
    assert [g["conditions"] for g in tables] == [
        [c]
        for e, c in engine_is.items()
        if e != "triton-trtllm"  # it copies (select)
    ]
    (vllm,) = [g for g in tables if g["conditions"] == [engine_is["vllm"]]]
    assert '"vllm:num_requests_running": "modelplane_requests_running"' in vllm["statements"][0]
    # The rename pass: one lookup a metric, whatever the number of renames.
    assert groups[-1] == {
        "conditions": [f"{sources}[metric.name] != nil"],
        "statements": [f"set(metric.name, {sources}[metric.name])"],
    }
    # The guards run only on a metric the guarded table names, and each tests its engine
    # (another engine's guarded table may hold the same name): they mark the names
    # present and refuse by HELP. Then, once per scrape and gated on the engine, the
    # names the marks supersede leave the table, all before the rename pass reads it.
    (guards,) = [g for g in groups if g["conditions"] == [f"{guarded}[metric.name] != nil"]]
    for statement in guards["statements"]:
        assert statement.startswith(
            (f"delete_key({sources}, ", f'set(resource.attributes["{collector.PRESENT_MARKER}.')
        )
        assert any(statement.endswith(f" and {c}") for c in engine_is.values())
    after = groups[groups.index(guards) + 1 : -1]
    assert [g["conditions"] for g in after] == [
        [engine_is[e]] for e in ("sglang", "trtllm", "vllm")
    ]
    assert (
        f'delete_key({sources}, "vllm:gpu_cache_usage_perc") where resource.attributes'
        f'["{collector.PRESENT_MARKER}.modelplane_kv_cache_usage.0"] != nil'
    ) in after[-1]["statements"]
    # Triton's copies and its histograms' sums stay statements, gated on Triton, before
    # the rename pass.
    (triton,) = [g for g in groups if g["conditions"] == [engine_is["triton-trtllm"]]]
    assert all(
        s.startswith(("copy_metric(", "scale_metric(", "extract_sum_metric(", "set(metric.name"))
        for s in triton["statements"]
    )
    # No built-in mapping needs a mark (only a scaled or selected target with several
    # names would), and label renames are the receiver's relabel rules, not passes here.
    assert not [g for g in groups if "conditions" not in g]
    assert not [g for g in groups if "datapoint." in str(g)]


def test_a_scaled_or_selected_target_with_several_names_is_marked_and_gated():
    parsed = _parse(
        {
            "engine": "legacy",
            "metrics": [
                {
                    "to": "modelplane_time_to_first_token",
                    "from": ["ttft_ms", "ttft_old_ms"],
                    "scale": 0.001,
                },
                {"to": "modelplane_requests_running", "from": ["running"]},
            ],
        }
    )
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("c"), [parsed], DESTINATION
    )
    groups = config["processors"]["transform/normalize"]["metric_statements"]
    marker = f'resource.attributes["{collector.PRESENT_MARKER}.modelplane_time_to_first_token.0"]'
    engine = 'resource.attributes["modelplane.engine"] == "legacy"'
    assert {
        "statements": [f'set({marker}, true) where metric.name == "ttft_ms" and {engine}']
    } in groups
    (scaled,) = [g for g in groups if any("scale_metric" in s for s in g["statements"])]
    assert scaled["conditions"] == [engine]
    assert (
        'set(metric.name, "modelplane_time_to_first_token") where metric.name == "ttft_old_ms" '
        f"and {marker} == nil"
    ) in scaled["statements"]
    # The unscaled target is the table's, and the statements never rename it.
    assert '{"running": "modelplane_requests_running"}' in groups[0]["statements"][0]
    assert not [s for s in scaled["statements"] if '"running"' in s]


def test_a_histogram_sum_target_is_the_histograms_running_sum_under_the_target_name():
    parsed = _parse(
        {
            "engine": "triton",
            "metrics": [
                {
                    "to": "modelplane_prompt_tokens_total",
                    "from": ["input_len"],
                    "histogramSum": True,
                    "select": {"model": "tensorrt_llm"},
                },
                # The same histogram may also feed a histogram target of its own.
                {"to": "modelplane_request_duration", "from": ["input_len"]},
            ],
        }
    )
    (summed,) = [m for m in parsed.metrics if m.histogram_sum]
    assert summed.target == "modelplane_prompt_tokens_total"
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("c"), [parsed], DESTINATION
    )
    groups = config["processors"]["transform/normalize"]["metric_statements"]
    engine = 'resource.attributes["modelplane.engine"] == "triton"'
    (group,) = [
        g
        for g in groups
        if g.get("conditions") == [engine]
        and "statements" in g
        and any("extract_sum_metric" in s for s in g["statements"])
    ]
    assert group["statements"] == [
        'extract_sum_metric(true, "_sum") where metric.name == "input_len"',
        'set(metric.name, "modelplane_prompt_tokens_total") where metric.name == "input_len_sum"',
    ]
    # The histogram target is still a plain table rename, and the select applies to the sum.
    assert '"input_len": "modelplane_request_duration"' in str(groups)
    (select,) = config["processors"]["filter/select"]["metrics"]["datapoint"]
    assert 'metric.name == "modelplane_prompt_tokens_total"' in select
    assert 'datapoint.attributes["model"] == "tensorrt_llm"' in select


@pytest.mark.parametrize(
    ("target", "value", "rule"),
    [
        ("modelplane_requests_running", True, "only a counter"),
        ("modelplane_time_to_first_token", True, "only a counter"),
        ("modelplane_prompt_tokens_total", "yes", "must be true or false"),
    ],
)
def test_histogram_sum_is_refused_for_anything_but_a_counter(target, value, rule):
    with pytest.raises(mappings._Refusal) as refused:
        _parse({"engine": "e", "metrics": [{"to": target, "from": ["h"], "histogramSum": value}]})
    assert refused.value.field == "spec.metrics[0].histogramSum"
    assert rule in refused.value.rule


def _parse(spec: dict) -> mappings.MetricMapping:
    return mappings.parse_mapping({"metadata": {"name": spec["engine"]}, "spec": spec})


def _without(labels: dict[str, str], name: str) -> dict[str, str]:
    return {k: v for k, v in labels.items() if k != name}


def _engines_job(config: dict) -> dict:
    (job,) = [
        j
        for j in config["receivers"]["prometheus"]["config"]["scrape_configs"]
        if j["job_name"] == collector.ENGINES_JOB
    ]
    return job


def _relabel(rules: list[dict], labels: dict[str, str]) -> dict[str, str]:
    """Prometheus' `replace` and `labeldrop` as the receiver applies them (regexes fully
    anchored, an empty result removes the label), for the rules these tests render."""
    out = dict(labels)
    for rule in rules:
        regex = re.compile(f"^(?s:{rule['regex']})$")
        if rule["action"] == "labeldrop":
            out = {k: v for k, v in out.items() if not regex.match(k)}
            continue
        assert rule["action"] == "replace"
        value = ";".join(out.get(name, "") for name in rule["source_labels"])
        match = regex.match(value)
        if match is None:
            continue
        # The collector's config unescapes `$$` to `$`; Prometheus expands `${1}`.
        result = match.expand(rule["replacement"].replace("$${", "\\g<").replace("}", ">"))
        if result:
            out[rule["target_label"]] = result
        else:
            out.pop(rule["target_label"], None)
    return out


def test_label_renames_are_the_engines_jobs_relabel_rules_each_gated_on_its_engines():
    config = _cases()["builtin-mappings-standard"]
    processors = config["processors"]
    # No statement on the points renames labels any more: the receiver relabels each
    # series once, when it first appears.
    assert "model_name" not in str(processors["transform/instance"])
    job = _engines_job(config)
    assert {
        "action": "replace",
        "source_labels": ["__meta_kubernetes_pod_label_modelplane_ai_engine"],
        "target_label": collector.SCRAPE_ENGINE_LABEL,
    } in job["relabel_configs"]
    rules = job["metric_relabel_configs"]
    # The scratch label goes last, so no series leaves the receiver with it.
    assert rules[-1] == {"action": "labeldrop", "regex": collector.SCRAPE_ENGINE_LABEL}
    scratch = collector.SCRAPE_ENGINE_LABEL
    series = {"__name__": "x", "model": "ensemble", "model_name": "m", "finished_reason": "stop"}
    # vLLM renames model_name and finished_reason, on vLLM's series only.
    assert _relabel(rules, {**series, scratch: "vllm"}) == {
        "__name__": "x",
        "model": "m",
        "finish_reason": "stop",
    }
    # SGLang's model_name and name both become model; name, later, wins.
    assert _relabel(rules, {"model_name": "a", "name": "b", scratch: "sglang"}) == {"model": "b"}
    assert _relabel(rules, {"model_name": "a", scratch: "sglang"}) == {"model": "a"}
    # Another engine's series, or a pod with no engine label, keep their labels.
    assert _relabel(rules, {**series, scratch: "other"}) == series
    assert _relabel(rules, series) == series
    # Engines scraped by a job of their own get their renames there, ungated.
    jobs = {j["job_name"]: j for j in config["receivers"]["prometheus"]["config"]["scrape_configs"]}
    triton = jobs[f"{collector.ENGINES_JOB}-triton-trtllm"]["metric_relabel_configs"]
    # Triton's `model` (its own model) becomes triton_model.
    assert _relabel(triton, series) == {**_without(series, "model"), "triton_model": "ensemble"}
    trtllm = jobs[f"{collector.ENGINES_JOB}-trtllm"]["metric_relabel_configs"]
    assert _relabel(trtllm, series) == {"__name__": "x", "model": "m", "finish_reason": "stop"}
    # Mappings that rename labels alike share rules gated on either engine.
    alike = collector.scrape_configs(
        contracts.STACK_STANDARD,
        30,
        [replace(m, scrape=mappings.ScrapeEndpoint()) for m in builtin().accepted],
    )[0]["metric_relabel_configs"]
    assert sum(r.get("regex", "").startswith("(?:trtllm|vllm);") for r in alike) == 4
    # filter/select reads Triton's selected `model` under its renamed name.
    (select,) = processors["filter/select"]["metrics"]["datapoint"]
    assert 'datapoint.attributes["triton_model"] == "tensorrt_llm"' in select
    assert 'datapoint.attributes["model"]' not in select


def test_the_receivers_own_series_lose_the_engine_scratch_label_before_anything_reads_them():
    config = _cases()["builtin-mappings-standard"]
    pipeline = config["service"]["pipelines"]["metrics"]["processors"]
    reports = config["processors"][collector.SCRAPE_REPORTS_PROCESSOR]
    assert reports == {
        "include": {"match_type": "strict", "metric_names": list(collector.SCRAPE_REPORT_SERIES)},
        "actions": [{"key": collector.SCRAPE_ENGINE_LABEL, "action": "delete"}],
    }
    assert "up" in collector.SCRAPE_REPORT_SERIES
    assert pipeline.index(collector.SCRAPE_REPORTS_PROCESSOR) < pipeline.index("interval")


def test_a_mapping_with_its_own_endpoint_or_a_component_renames_labels_on_its_jobs_series():
    own = _parse(
        {
            "engine": "myengine",
            "metrics": [{"to": "modelplane_requests_running", "from": ["running"]}],
            "labels": [{"from": "model_id", "to": "model"}],
            "scrape": {"port": 9400},
        }
    )
    component = _parse(
        {
            "engine": "kube-scheduler",
            "metrics": [{"to": "modelplane_requests_running", "from": ["pending"]}],
            "labels": [{"from": "profile", "to": "model"}],
        }
    )
    jobs = {
        j["job_name"]: j
        for j in collector.scrape_configs(contracts.STACK_STANDARD, 30, [own, component])
    }
    own_rules = jobs[f"{collector.ENGINES_JOB}-myengine"]["metric_relabel_configs"]
    # Every series of the engine's own job is the engine's: no gate, no scratch label.
    assert _relabel(own_rules, {"model_id": "m", "x": "y"}) == {"model": "m", "x": "y"}
    assert collector.SCRAPE_ENGINE_LABEL not in str(own_rules)
    scheduler = jobs["kube-scheduler"]["metric_relabel_configs"]
    assert _relabel(scheduler, {"profile": "p"}) == {"model": "p"}
    # The shared engines job renames for the component's type (no pod there has it).
    shared = jobs[collector.ENGINES_JOB]["metric_relabel_configs"]
    assert any(r.get("regex", "").startswith("(?:kube\\-scheduler);") for r in shared)


def test_every_scrape_names_the_pod_on_its_series_as_target_labels():
    for config in (_cases()["builtin-mappings-standard"], _cases()["builtin-mappings-dynamo"]):
        for job in config["receivers"]["prometheus"]["config"]["scrape_configs"]:
            relabel = job["relabel_configs"]
            # After the keep and drop rules, so a target dropped costs nothing more.
            assert relabel[-2:] == [
                {
                    "action": "replace",
                    "source_labels": ["__meta_kubernetes_pod_name"],
                    "target_label": "pod",
                },
                {
                    "action": "replace",
                    "source_labels": ["__meta_kubernetes_pod_uid"],
                    "target_label": "pod_uid",
                },
            ], job["job_name"]
    # Only the scrape instance is moved by a statement on every point.
    statements = str(_cases()["builtin-mappings-standard"]["processors"]["transform/instance"])
    assert 'datapoint.attributes["instance"]' in statements
    assert 'datapoint.attributes["pod' not in statements


def test_every_vocabulary_metric_gets_its_unit_once_before_pods_merge():
    config = _cases()["builtin-mappings-standard"]
    pipeline = config["service"]["pipelines"]["metrics"]["processors"]
    groups = config["processors"]["transform/instance"]["metric_statements"]
    (units,) = [g for g in groups if any(s.startswith("set(metric.unit") for s in g["statements"])]
    # Gated on the vocabulary's prefix: an engine's own series pass with one test.
    assert units["conditions"] == ['HasPrefix(metric.name, "modelplane_")']
    # One statement per unit, naming every vocabulary metric of that unit exactly once.
    named: dict[str, str] = {}
    for statement in units["statements"]:
        if statement.startswith("copy_metric"):
            continue
        unit, names = re.fullmatch(r'set\(metric\.unit, "(.*?)"\) where (.*)', statement).groups()
        for name in re.findall(r'metric\.name == "([^"]+)"', names):
            assert name not in named
            named[name] = unit
    assert named == {m.name: m.unit for m in vocabulary.VOCABULARY}
    # In the weighted ratios' copies' pass, after them: a copy is appended to the
    # metrics the pass walks and gets its own unit further on.
    copies = [s for s in units["statements"] if s.startswith("copy_metric")]
    assert copies
    assert units["statements"][: len(copies)] == copies
    # Before the pods' points merge by metric identity, which includes the unit.
    assert pipeline.index("transform/instance") < pipeline.index(collector.INTERVAL)
    # No other step sets a unit (a scale converting one says its unit itself).
    for name in pipeline:
        for group in config["processors"][name].get("metric_statements", []):
            if group is not units:
                assert not [s for s in group["statements"] if s.startswith("set(metric.unit")]


def test_unmapped_names_lose_their_colons_once_per_merged_metric():
    config = _cases()["builtin-mappings-standard"]
    pipeline = config["service"]["pipelines"]["metrics"]["processors"]
    # After the merge, where a deployment's pods are one resource.
    assert pipeline[-1] == collector.FINISH
    assert config["processors"][collector.FINISH]["metric_statements"] == [
        {"statements": ['replace_pattern(metric.name, ":", "_") where IsMatch(metric.name, ":")']}
    ]
    for name in pipeline[:-1]:
        assert "replace_pattern(metric.name" not in yaml.safe_dump(config["processors"][name])


def test_scaling_happens_on_the_source_name_before_the_rename():
    config = _cases()["scaled-mapping"]
    (statements,) = [
        g["statements"]
        for g in config["processors"]["transform/normalize"]["metric_statements"]
        if any("scale_metric" in s for s in g["statements"])
    ]
    scale = statements.index('scale_metric(0.001, "s") where metric.name == "legacy:ttft_ms"')
    rename = statements.index(
        'set(metric.name, "modelplane_time_to_first_token") where metric.name == "legacy:ttft_ms"'
    )
    assert scale < rename
    assert 'scale_metric(0.01, "1") where metric.name == "legacy:kv_percent"' in statements
    # Unscaled entries get no scale_metric at all.
    assert not [s for s in statements if "scale_metric" in s and "finished_total" in s]


def test_cardinality_is_controlled_by_aggregation_never_by_deleting_labels():
    config = _cases()["builtin-mappings-standard"]
    processors = config["processors"]
    transforms = processors["metrics_transform/aggregate"]["transforms"]
    # The vocabulary, and the runtime's cost series (one per model whichever agent
    # replica exports it).
    assert {t["include"] for t in transforms} == {*vocabulary.VOCABULARY_BY_NAME, COST}
    for t in transforms:
        (operation,) = t["operations"]
        assert operation["action"] == "aggregate_labels"
        assert "pod" not in operation["label_set"]
        expected = {"modelplane_kv_cache_usage": "mean", COST: "max"}.get(t["include"], "sum")
        assert operation["aggregation_type"] == expected
    text = yaml.safe_dump(processors)
    assert 'delete_key(datapoint.attributes, "pod' not in text
    for name in ("attributes", "resource"):
        assert not [p for p in processors if p == name or p.startswith(f"{name}/delete")]
    # The per-pod identity moves to labels the aggregation drops; the roll-up keys stay.
    kept = processors["transform/instance"]["metric_statements"][-1]["statements"][-1]
    for attribute in (
        contracts.RESOURCE_ATTRIBUTE_CLUSTER,
        contracts.RESOURCE_ATTR_ENGINE,
        contracts.RESOURCE_ATTR_DEPLOYMENT,
        contracts.RESOURCE_ATTR_NAMESPACE,
    ):
        assert f'"{attribute}"' in kept


def test_pipeline_order_limits_memory_first_and_batches_before_aggregating():
    pipeline = _cases()["builtin-mappings-standard"]["service"]["pipelines"]["metrics"][
        "processors"
    ]
    assert pipeline[0] == "memory_limiter"
    assert pipeline.index("k8s_attributes") < pipeline.index("transform/normalize")
    # interval's tick holds a deployment's pods on one resource: they aggregate there.
    assert pipeline.index(collector.INTERVAL) < pipeline.index("metrics_transform/aggregate")


def test_counters_and_histograms_merge_as_increases_so_a_missing_pod_never_dips_them():
    config = _cases()["builtin-mappings-standard"]
    pipeline = config["service"]["pipelines"]["metrics"]["processors"]
    processors = config["processors"]
    # Per pod, after the tick picked each pod's latest point; merged; accumulated again.
    order = [
        collector.INTERVAL,
        collector.TO_DELTA,
        "transform/align",
        collector.TICK_BATCH,
        "metrics_transform/aggregate",
        collector.TO_CUMULATIVE,
    ]
    assert [pipeline.index(name) for name in order] == sorted(
        pipeline.index(name) for name in order
    )
    to_delta = processors[collector.TO_DELTA]
    # Exactly the vocabulary's counters and histograms: gauges are levels (the KV-cache
    # mean, requests running), and what no mapping named is not merged at all.
    summed = [
        m.name
        for m in vocabulary.VOCABULARY
        if m.type in (vocabulary.MetricType.COUNTER, vocabulary.MetricType.HISTOGRAM)
    ]
    assert to_delta["include"] == {"match_type": "strict", "metrics": summed}
    assert "modelplane_kv_cache_usage" not in to_delta["include"]["metrics"]
    # A pod's first point is all of its total, as in a plain sum of the pods' totals.
    assert to_delta["initial_value"] == "keep"
    # The per-pod state outlasts the merged one: a pod forgotten first would be counted
    # whole again when it came back.
    staleness = {"m": 60, "h": 3600}
    pod_state = to_delta["max_staleness"]
    merged_state = processors[collector.TO_CUMULATIVE]["max_stale"]
    assert (
        int(pod_state[:-1]) * staleness[pod_state[-1]]
        > int(merged_state[:-1]) * staleness[merged_state[-1]]
    )
    # The points of one tick share one time and the increases one start, so aggregation
    # merges them: the time read once per resource, copied to each point, then removed.
    stamp, points, unstamp = processors["transform/align"]["metric_statements"]
    tick = f'resource.attributes["{collector.TICK_ATTRIBUTE}"]'
    assert stamp == {"context": "resource", "statements": [f"set({tick}, UnixNano(Now()))"]}
    assert points["statements"][0] == f"set(datapoint.time_unix_nano, {tick})"
    assert unstamp["context"] == "resource"
    assert unstamp["statements"] == [
        f'delete_key(resource.attributes, "{collector.TICK_ATTRIBUTE}")'
    ]
    # Unset, so the merged series carries no start time a collector restart would change.
    assert points["statements"][-1] == collector.UNSET_START_STATEMENT
    assert collector.UNSET_START_STATEMENT == "set(datapoint.start_time_unix_nano, 0)"


def test_discovery_keeps_serving_pods_and_scrapes_the_http_port_only():
    jobs = _cases()["builtin-mappings-standard"]["receivers"]["prometheus"]["config"][
        "scrape_configs"
    ]
    engines = next(j for j in jobs if j["job_name"] == collector.ENGINES_JOB)
    assert engines["kubernetes_sd_configs"] == [{"role": "pod"}]
    assert {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_pod_labelpresent_modelplane_ai_serving"],
        "regex": "true",
    } in engines["relabel_configs"]
    assert {
        "action": "keep",
        "source_labels": ["__meta_kubernetes_pod_container_port_name"],
        "regex": contracts.PORT_NAME_HTTP,
    } in engines["relabel_configs"]
    names = {j["job_name"] for j in jobs}
    assert {collector.ENDPOINT_PICKERS_JOB, "envoy-proxies", "leaderworkerset-controller"} <= names
    dynamo = {
        j["job_name"]
        for j in _cases()["builtin-mappings-dynamo"]["receivers"]["prometheus"]["config"][
            "scrape_configs"
        ]
    }
    assert {"grove-operator", "kai-scheduler", "modelexpress"} <= dynamo


def test_k8s_attributes_lifts_the_pod_labels_onto_resource_attributes():
    extract = _cases()["passthrough-only"]["processors"]["k8s_attributes"]["extract"]["labels"]
    assert {(e["key"], e["tag_name"]) for e in extract} == {
        (contracts.LABEL_ENGINE, contracts.RESOURCE_ATTR_ENGINE),
        (contracts.LABEL_DEPLOYMENT, contracts.RESOURCE_ATTR_DEPLOYMENT),
        (contracts.LABEL_SERVING, contracts.RESOURCE_ATTR_SERVING),
    }


def test_the_exporter_authenticates_with_a_token_file_never_a_token():
    config = _cases()["builtin-mappings-standard"]
    assert config["exporters"][collector.EXPORTER] == {
        "endpoint": DESTINATION.endpoint,
        "auth": {"authenticator": collector.AUTHENTICATOR},
    }
    assert config["extensions"][collector.AUTHENTICATOR] == {"filename": collector.TOKEN_FILE}
    assert "token" not in config["extensions"][collector.AUTHENTICATOR]


@pytest.mark.parametrize(
    "endpoint",
    ["gateway:4317\n", "${env:SECRET}:4317", "gateway:4317 extra", 'a"b:1'],
)
def test_an_endpoint_that_could_escape_the_config_is_refused(endpoint):
    with pytest.raises(collector.UnsafeValue):
        collector.render_cluster_collector_config(
            collector.CollectorCluster("c"), (), collector.CollectorDestination(endpoint)
        )


def test_a_mapping_that_skipped_parsing_still_cannot_inject():
    forged = mappings.MetricMapping(
        "forged",
        "vllm",
        (mappings.MetricRename("modelplane_requests_running", ('x" or true or "',)),),
    )
    with pytest.raises(collector.UnsafeValue):
        collector.render_cluster_collector_config(
            collector.CollectorCluster("c"), (forged,), DESTINATION
        )


def test_the_picker_job_scrapes_both_endpoint_pickers_we_compose():
    for image in (EPP_IMAGE, PD_EPP_IMAGE):
        assert re.fullmatch(collector.ENDPOINT_PICKER_IMAGE, image), image
    assert not re.fullmatch(collector.ENDPOINT_PICKER_IMAGE, "vllm/vllm-openai:v0.11.0")


def test_traces_and_logs_are_collected_only_for_a_destination_that_carries_them():
    standard = collector.CollectorCluster("us-east-1")
    full = collector.render_cluster_collector_config(standard, (), DESTINATION)
    metrics_only = collector.render_cluster_collector_config(standard, (), METRICS_ONLY_DESTINATION)
    assert {"traces", "logs"} <= set(full["service"]["pipelines"])
    assert not {"traces", "logs"} & set(metrics_only["service"]["pipelines"])
    assert collector.OTLP_RECEIVER not in metrics_only["receivers"]
    # Workload state is metrics: it goes to every destination, with the node tier.
    state = collector.render_cluster_collector_config(
        standard, (), replace(METRICS_ONLY_DESTINATION, cluster_state=True)
    )
    assert state["service"]["pipelines"]["metrics/cluster-state"]["receivers"] == [
        collector.CLUSTER_STATE_RECEIVER
    ]
    assert "metrics/cluster-state" not in full["service"]["pipelines"]
    node = collector.render_node_collector_config(standard, METRICS_ONLY_DESTINATION)
    assert collector.LOGS_RECEIVER not in node["receivers"]


def test_the_signals_page_alone_runs_no_cluster_state_traces_or_logs():
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("us-east-1"), (), None, signals=True
    )
    assert list(config["service"]["pipelines"]) == ["metrics"]


@pytest.mark.parametrize("stack", [contracts.STACK_STANDARD, contracts.STACK_DYNAMO])
def test_both_stacks_scrape_their_shared_substrate_and_the_scheduler(stack):
    jobs = {j["job_name"] for j in collector.scrape_configs(stack)}
    assert {"envoy-proxies", "nvidia-dra-driver", "cert-manager", "kube-scheduler"} <= jobs


def _jobs(config: dict) -> dict[str, dict]:
    scrape = config["receivers"][collector.RECEIVER]["config"]["scrape_configs"]
    return {job["job_name"]: job for job in scrape}


def test_the_runtime_is_scraped_where_the_collector_pushes_and_only_there():
    cluster = collector.CollectorCluster("us-east-1")
    pushing = collector.render_cluster_collector_config(cluster, (), DESTINATION)
    jobs = _jobs(pushing)
    runtime = (
        contracts.AGENT_SERVICE_NAME,
        contracts.SCALER_SERVICE_NAME,
        contracts.ACTIVATOR_SERVICE_NAME,
    )
    for name in runtime:
        job = jobs[name]
        assert job["kubernetes_sd_configs"] == [
            {"role": "pod", "namespaces": {"names": [contracts.SYSTEM_NAMESPACE]}}
        ]
        relabel = job["relabel_configs"]
        assert {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
            "regex": re.escape(name),
        } in relabel
        assert {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": contracts.PORT_NAME_METRICS,
        } in relabel
    # The signals page alone is the agent's: it has no use for the agent's own metrics.
    local = collector.render_cluster_collector_config(cluster, (), None, signals=True)
    assert not set(runtime) & set(_jobs(local))
    # Not a mappable substrate component (nothing maps the runtime's own names).
    for stack in (contracts.STACK_STANDARD, contracts.STACK_DYNAMO):
        assert not set(runtime) & set(collector.component_types(stack))


def test_the_runtime_series_lose_the_system_namespace_the_cost_series_would_be_mistaken_for():
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("us-east-1"), (), DESTINATION
    )
    statements = [
        s
        for group in config["processors"]["transform/instance"]["metric_statements"]
        for s in group["statements"]
    ]
    (deletion,) = [s for s in statements if s.startswith("delete_key(resource.attributes")]
    assert f'"{contracts.RESOURCE_ATTR_NAMESPACE}"' in deletion
    for target in substrate_targets.RUNTIME_TARGETS:
        assert f'== "{target.job}"' in deletion
    # Before the resource is trimmed to the kept keys, after the instance labels moved.
    assert statements.index(deletion) < len(statements) - 1


def test_the_cost_series_is_stamped_with_the_batch_time_so_replicas_merge():
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("us-east-1"), (), DESTINATION
    )
    (_, group, _) = config["processors"]["transform/align"]["metric_statements"]
    assert f'metric.name == "{COST}"' in group["conditions"][0]
    (cost,) = [
        t
        for t in config["processors"]["metrics_transform/aggregate"]["transforms"]
        if t["include"] == COST
    ]
    assert cost["operations"][0]["label_set"] == ["namespace", "deployment", "pool"]
