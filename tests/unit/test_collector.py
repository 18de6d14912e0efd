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


def test_each_mapping_is_one_group_gated_on_its_engine():
    config = _cases()["builtin-mappings-standard"]
    groups = config["processors"]["transform/normalize"]["metric_statements"]
    engines = sorted(m.engine for m in builtin().accepted)
    engine_is = {
        e: f'resource.attributes["{contracts.RESOURCE_ATTR_ENGINE}"] == "{e}"' for e in engines
    }
    # The first group marks which source names a scrape has, for every mapping at once:
    # each mark tests its own engine, so it never marks another engine's resource.
    marks, *groups = groups
    assert "conditions" not in marks
    for statement in marks["statements"]:
        assert statement.startswith('set(resource.attributes["modelplane.mapping.present.')
        assert any(statement.endswith(f" and {c}") for c in engine_is.values())
    # Every other group is gated on engines: nothing touches another engine's series.
    assert all(set(g["conditions"]) <= set(engine_is.values()) for g in groups)
    renames = [g for g in groups if any("set(metric.name" in s for s in g["statements"])]
    assert sorted(c for g in renames for c in g["conditions"]) == sorted(
        c
        for e, c in engine_is.items()
        if e != "triton-trtllm"  # it copies (select)
    )
    # Label renames are not passes here: transform/instance's pass over the points does them.
    assert not [g for g in groups if "datapoint." in str(g)]


def test_label_renames_share_the_one_pass_over_the_points_each_gated_on_its_engines():
    config = _cases()["builtin-mappings-standard"]
    processors = config["processors"]
    pipeline = config["service"]["pipelines"]["metrics"]["processors"]
    points = [
        g
        for g in processors["transform/instance"]["metric_statements"]
        if any(s.startswith("set(datapoint.") for s in g["statements"])
    ]
    (group,) = points
    assert "conditions" not in group
    by_engine = {m.engine: m for m in builtin().accepted}
    triton = collector.mapping_label_statements(by_engine["triton-trtllm"])
    # Triton's `model` (its own model) becomes triton_model, on Triton's points only.
    assert triton == [
        'set(datapoint.attributes["triton_model"], datapoint.attributes["model"]) where '
        'datapoint.attributes["model"] != nil and '
        'resource.attributes["modelplane.engine"] == "triton-trtllm"',
        'delete_key(datapoint.attributes, "model") where datapoint.attributes["model"] != nil '
        'and resource.attributes["modelplane.engine"] == "triton-trtllm"',
    ]
    assert all(s in group["statements"] for s in triton)
    # vLLM and TensorRT-LLM rename model_name and finished_reason alike: one set of
    # statements gated on either engine, not one per engine.
    both = (
        '(resource.attributes["modelplane.engine"] == "trtllm" or '
        'resource.attributes["modelplane.engine"] == "vllm")'
    )
    renames = [s for s in group["statements"] if s.endswith(both)]
    assert len(renames) == 4  # set and delete, for each of the two labels
    assert all('["model_name"] != nil' in s or '["finished_reason"] != nil' in s for s in renames)
    # filter/select runs first and reads the engine's own label names (Triton's `model`).
    assert pipeline.index("filter/select") < pipeline.index("transform/instance")
    (select,) = processors["filter/select"]["metrics"]["datapoint"]
    assert 'datapoint.attributes["model"] == "tensorrt_llm"' in select
    assert "triton_model" not in select


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
    statements = config["processors"]["transform/normalize"]["metric_statements"][0]["statements"]
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
    for name in (contracts.AGENT_SERVICE_NAME, contracts.SCALER_SERVICE_NAME):
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
    assert contracts.AGENT_SERVICE_NAME not in _jobs(local)
    # Not a mappable substrate component (nothing maps the runtime's own names).
    for stack in (contracts.STACK_STANDARD, contracts.STACK_DYNAMO):
        assert contracts.AGENT_SERVICE_NAME not in collector.component_types(stack)


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
    (group,) = config["processors"]["transform/align"]["metric_statements"]
    assert f'metric.name == "{COST}"' in group["conditions"][0]
    (cost,) = [
        t
        for t in config["processors"]["metrics_transform/aggregate"]["transforms"]
        if t["include"] == COST
    ]
    assert cost["operations"][0]["label_set"] == ["namespace", "deployment", "pool"]
