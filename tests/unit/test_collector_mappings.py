"""MetricMapping parsing: what may enter a collector's OTTL, and what is refused, with
the field and the rule. Every refusal leaves the other mappings in place."""

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from functions.common import builtin_mappings
from functions.common import metricmapping as mappings
from functions.compose_serving_stack import collector
from tests.unit.test_collector import DESTINATION, REPO


def _mapping(name="m", engine="vllm", metrics=None, labels=None) -> dict:
    spec = {
        "engine": engine,
        "metrics": metrics
        if metrics is not None
        else [{"to": "modelplane_requests_running", "from": ["vllm:num_requests_running"]}],
    }
    if labels is not None:
        spec["labels"] = labels
    return {"metadata": {"name": name}, "spec": spec}


REFUSALS = {
    "a_source_name_with_a_quote": (
        _mapping(metrics=[{"to": "modelplane_requests_running", "from": ['a"b']}]),
        "spec.metrics[0].from[0]",
    ),
    "a_source_name_ending_in_a_newline": (
        _mapping(metrics=[{"to": "modelplane_requests_running", "from": ["vllm:x\n"]}]),
        "spec.metrics[0].from[0]",
    ),
    "a_target_outside_the_vocabulary": (
        _mapping(metrics=[{"to": "modelplane_made_up", "from": ["a"]}]),
        "spec.metrics[0].to",
    ),
    "a_target_that_is_not_a_vocabulary_name": (
        _mapping(metrics=[{"to": "requests", "from": ["a"]}]),
        "spec.metrics[0].to",
    ),
    "a_target_named_twice": (
        _mapping(
            metrics=[
                {"to": "modelplane_requests_running", "from": ["a"]},
                {"to": "modelplane_requests_running", "from": ["b"]},
            ]
        ),
        "spec.metrics[1].to",
    ),
    "a_source_mapped_twice": (
        _mapping(
            metrics=[
                {"to": "modelplane_requests_running", "from": ["a"]},
                {"to": "modelplane_requests_waiting", "from": ["a"]},
            ]
        ),
        "spec.metrics[1].from[0]",
    ),
    "a_source_that_is_already_a_vocabulary_name": (
        _mapping(
            metrics=[{"to": "modelplane_requests_running", "from": ["modelplane_requests_waiting"]}]
        ),
        "spec.metrics[0].from[0]",
    ),
    "a_zero_scale": (
        _mapping(metrics=[{"to": "modelplane_requests_running", "from": ["a"], "scale": 0}]),
        "spec.metrics[0].scale",
    ),
    "an_infinite_scale": (
        _mapping(
            metrics=[{"to": "modelplane_requests_running", "from": ["a"], "scale": float("inf")}]
        ),
        "spec.metrics[0].scale",
    ),
    "a_scale_that_is_a_string": (
        _mapping(metrics=[{"to": "modelplane_requests_running", "from": ["a"], "scale": "0.001"}]),
        "spec.metrics[0].scale",
    ),
    "an_engine_that_is_not_a_label_value": (_mapping(engine='vllm" or true'), "spec.engine"),
    "no_metrics": (_mapping(metrics=[]), "spec.metrics"),
    "a_label_renamed_onto_le": (
        _mapping(labels=[{"from": "bucket", "to": "le"}]),
        "spec.labels[0].to",
    ),
    "a_label_renamed_onto_pod": (
        _mapping(labels=[{"from": "p", "to": "pod"}]),
        "spec.labels[0].to",
    ),
    "a_label_name_with_a_brace": (
        _mapping(labels=[{"from": "a}", "to": "model"}]),
        "spec.labels[0].from",
    ),
    "no_spec": ({"metadata": {"name": "m"}}, "spec"),
    "a_selected_value_with_a_quote": (
        _mapping(
            metrics=[{"to": "modelplane_requests_running", "from": ["a"], "select": {"t": 'x"'}}]
        ),
        "spec.metrics[0].select.t",
    ),
    "a_selected_label_that_is_not_a_label_name": (
        _mapping(
            metrics=[{"to": "modelplane_requests_running", "from": ["a"], "select": {"t]": "x"}}]
        ),
        "spec.metrics[0].select key",
    ),
    "a_selection_by_le": (
        _mapping(
            metrics=[{"to": "modelplane_requests_running", "from": ["a"], "select": {"le": "1"}}]
        ),
        "spec.metrics[0].select.le",
    ),
    "a_select_that_is_a_list": (
        _mapping(metrics=[{"to": "modelplane_requests_running", "from": ["a"], "select": ["t"]}]),
        "spec.metrics[0].select",
    ),
    "a_source_selected_twice_by_the_same_value": (
        _mapping(
            metrics=[
                {"to": "modelplane_requests_running", "from": ["a"], "select": {"t": "x"}},
                {"to": "modelplane_requests_waiting", "from": ["a"], "select": {"t": "x"}},
            ]
        ),
        "spec.metrics[1].from[0]",
    ),
    "help_text_that_is_a_regex": (
        _mapping(metrics=[{"to": "modelplane_requests_running", "from": ["a"], "help": "tok.*"}]),
        "spec.metrics[0].help",
    ),
    "help_text_with_a_quote": (
        _mapping(
            metrics=[{"to": "modelplane_requests_running", "from": ["a"], "help": 'a") or ("'}]
        ),
        "spec.metrics[0].help",
    ),
    "a_scrape_path_that_is_relative": (
        {**_mapping(), "spec": {**_mapping()["spec"], "scrape": {"path": "metrics"}}},
        "spec.scrape.path",
    ),
    "a_scrape_path_that_climbs": (
        {**_mapping(), "spec": {**_mapping()["spec"], "scrape": {"path": "/a/../b"}}},
        "spec.scrape.path",
    ),
    "a_scrape_path_with_a_query": (
        {**_mapping(), "spec": {**_mapping()["spec"], "scrape": {"path": "/m?x=1"}}},
        "spec.scrape.path",
    ),
    "a_target_the_collector_derives": (
        _mapping(metrics=[{"to": "modelplane_kv_cache_used", "from": ["a"]}]),
        "spec.metrics[0].to",
    ),
    "a_scrape_port_out_of_range": (
        {**_mapping(), "spec": {**_mapping()["spec"], "scrape": {"port": 70000}}},
        "spec.scrape.port",
    ),
    "a_scrape_port_with_a_fraction": (
        {**_mapping(), "spec": {**_mapping()["spec"], "scrape": {"port": 8002.5}}},
        "spec.scrape.port",
    ),
    "a_scrape_port_that_is_a_string": (
        {**_mapping(), "spec": {**_mapping()["spec"], "scrape": {"port": "8002"}}},
        "spec.scrape.port",
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refuses(case):
    resource, field = REFUSALS[case]
    parsed = mappings.parse_mappings([resource, _mapping(name="z-good", engine="sglang")])
    assert [r.field for r in parsed.refused] == [field]
    assert [m.name for m in parsed.accepted] == ["z-good"]
    assert parsed.refused[0].message.startswith(f"MetricMapping m: {field}: ")


def test_a_scrape_port_read_from_a_protobuf_struct_is_a_whole_number():
    # Crossplane hands a function every number as a double: 8002 arrives as 8002.0.
    resource = {**_mapping(), "spec": {**_mapping()["spec"], "scrape": {"port": 8002.0}}}
    parsed = mappings.parse_mappings([resource])
    assert parsed.refused == ()
    assert parsed.accepted[0].scrape.port == 8002


def test_accepts_every_builtin_mapping():
    paths = sorted((REPO / "functions" / "common" / "builtin_mappings").glob("*.yaml"))
    parsed = mappings.parse_mappings([yaml.safe_load(p.read_text()) for p in paths])
    assert parsed.refused == ()
    assert sorted(parsed.mapped_engines) == ["sglang", "triton-trtllm", "trtllm", "vllm"]


BUILTINS = [
    _mapping(name="sglang", engine="sglang"),
    _mapping(name="vllm", engine="vllm"),
]

RESOLUTIONS = {
    # case: (applied mappings, expected (engine, mapping, source) in use, refused names)
    "nothing_applied_leaves_every_builtin_in_effect": (
        [],
        [("sglang", "sglang", "BuiltIn"), ("vllm", "vllm", "BuiltIn")],
        [],
    ),
    "a_mapping_for_a_builtin_engine_replaces_it": (
        [_mapping(name="vllm-fork", engine="vllm")],
        [("sglang", "sglang", "BuiltIn"), ("vllm", "vllm-fork", "MetricMapping")],
        [],
    ),
    "an_applied_copy_of_a_builtin_is_the_platform_teams_mapping": (
        [_mapping(name="vllm", engine="vllm")],
        [("sglang", "sglang", "BuiltIn"), ("vllm", "vllm", "MetricMapping")],
        [],
    ),
    "a_mapping_for_a_new_engine_is_added_beside_the_builtins": (
        [_mapping(name="llamacpp", engine="llamacpp")],
        [
            ("llamacpp", "llamacpp", "MetricMapping"),
            ("sglang", "sglang", "BuiltIn"),
            ("vllm", "vllm", "BuiltIn"),
        ],
        [],
    ),
    "a_refused_mapping_leaves_the_builtin_in_effect": (
        [_mapping(name="vllm-typo", engine="vllm", metrics=[{"to": "nope", "from": ["a"]}])],
        [("sglang", "sglang", "BuiltIn"), ("vllm", "vllm", "BuiltIn")],
        ["vllm-typo"],
    ),
    "two_mappings_for_one_engine_keep_the_first_by_name": (
        [_mapping(name="b-vllm"), _mapping(name="a-vllm")],
        [("sglang", "sglang", "BuiltIn"), ("vllm", "a-vllm", "MetricMapping")],
        ["b-vllm"],
    ),
}


@pytest.mark.parametrize("case", sorted(RESOLUTIONS))
def test_resolves(case):
    applied, in_use, refused = RESOLUTIONS[case]
    resolved = mappings.resolve_mappings(applied, BUILTINS)
    assert [(m.engine, m.name, m.source) for m in resolved.in_use] == in_use
    assert [r.name for r in resolved.refused] == refused
    assert [m.engine for m in resolved.accepted] == [e for e, _, _ in in_use]


def test_a_builtin_that_does_not_parse_is_a_bug_not_a_status():
    broken = _mapping(name="vllm", metrics=[{"to": "nope", "from": ["a"]}])
    with pytest.raises(ValueError, match="built-in MetricMapping does not parse"):
        mappings.resolve_mappings([], [broken])


def test_the_shipped_builtins_load_as_package_data():
    assert builtin_mappings.builtin_mapping_files() == (
        "sglang.yaml",
        "triton-trtllm.yaml",
        "trtllm.yaml",
        "vllm.yaml",
    )
    resolved = mappings.resolve_mappings([], builtin_mappings.builtin_mapping_resources())
    assert [m.source for m in resolved.in_use] == ["BuiltIn"] * 4


def test_builtins_name_where_each_engine_serves_prometheus_text():
    resolved = mappings.resolve_mappings([], builtin_mappings.builtin_mapping_resources())
    scrape = {m.engine: (m.scrape.path, m.scrape.port) for m in resolved.accepted}
    assert scrape == {
        "sglang": ("/metrics", None),
        "triton-trtllm": ("/metrics", 8002),
        "trtllm": ("/prometheus/metrics", None),
        "vllm": ("/metrics", None),
    }


def test_one_source_split_by_a_label_feeds_one_target_per_selected_value():
    parsed = mappings.parse_mapping(
        _mapping(
            engine="triton",
            metrics=[
                {"to": "modelplane_requests_running", "from": ["r"], "select": {"t": "active"}},
                {"to": "modelplane_requests_waiting", "from": ["r"], "select": {"t": "waiting"}},
            ],
            labels=[{"from": "t", "to": "kind"}, {"from": "model", "to": "triton_model"}],
        )
    )
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("c"), [parsed], DESTINATION
    )
    statements = [
        s
        for g in config["processors"]["transform/normalize"]["metric_statements"]
        for s in g["statements"]
    ]
    assert 'copy_metric(name="modelplane_requests_running") where metric.name == "r"' in statements
    assert 'copy_metric(name="modelplane_requests_waiting") where metric.name == "r"' in statements
    assert not [s for s in statements if s.startswith('set(metric.name, "modelplane_requests_')]
    # The mapping selects by the engine's own label (`t`); the receiver has renamed it
    # (to `kind`) by the time the filter runs, so the filter reads it there. One
    # condition for the engine, its engine tested once per point.
    assert config["processors"]["filter/select"]["metrics"]["datapoint"] == [
        'resource.attributes["modelplane.engine"] == "triton" and ((metric.name == '
        '"modelplane_requests_running" and not (datapoint.attributes["kind"] == "active")) '
        'or (metric.name == "modelplane_requests_waiting" and not '
        '(datapoint.attributes["kind"] == "waiting")))',
    ]
    assert collector.PROCESSORS.index("filter/select") == (
        collector.PROCESSORS.index("transform/normalize") + 1
    )
    (engines,) = [
        j
        for j in config["receivers"]["prometheus"]["config"]["scrape_configs"]
        if j["job_name"] == collector.ENGINES_JOB
    ]
    assert {
        "action": "replace",
        "source_labels": [collector.SCRAPE_ENGINE_LABEL, "t"],
        "regex": "(?:triton);(.+)",
        "target_label": "kind",
        "replacement": "$${1}",
    } in engines["metric_relabel_configs"]


def test_an_engine_with_its_own_endpoint_is_scraped_there_and_only_there():
    parsed = mappings.parse_mapping(
        {
            **_mapping(engine="triton"),
            "spec": {**_mapping(engine="triton")["spec"], "scrape": {"port": 8002}},
        }
    )
    jobs = collector.scrape_configs("Standard", 30, [parsed])
    engines = next(j for j in jobs if j["job_name"] == collector.ENGINES_JOB)
    # Before the last rules, which drop pods that are not running and name the pod.
    assert engines["relabel_configs"][-4] == {
        "action": "drop",
        "source_labels": ["__meta_kubernetes_pod_label_modelplane_ai_engine"],
        "regex": "triton",
    }
    own = next(j for j in jobs if j["job_name"] == f"{collector.ENGINES_JOB}-triton")
    assert own["metrics_path"] == "/metrics"
    assert own["relabel_configs"][-4]["replacement"] == "$${1}:8002"


def test_a_second_mapping_for_one_engine_is_refused_and_the_first_by_name_kept():
    parsed = mappings.parse_mappings([_mapping(name="b"), _mapping(name="a")])
    assert [m.name for m in parsed.accepted] == ["a"]
    assert [(r.name, r.field) for r in parsed.refused] == [("b", "spec.engine")]


def test_several_label_sources_may_share_a_target():
    parsed = mappings.parse_mappings(
        [_mapping(labels=[{"from": "model_name", "to": "model"}, {"from": "name", "to": "model"}])]
    )
    assert parsed.refused == ()


@pytest.mark.parametrize(
    ("scale", "literal"),
    [(0.001, "0.001"), (1e-06, "0.000001"), (100, "100.0"), (0.5, "0.5"), (2.5e3, "2500.0")],
)
def test_scale_literals_are_plain_decimals(scale, literal):
    assert (
        mappings.MetricRename("modelplane_requests_running", ("a",), float(scale)).scale_literal
        == literal
    )


_UNSAFE = st.text(min_size=1, max_size=30)


@given(source=_UNSAFE, engine=_UNSAFE, label=_UNSAFE)
def test_whatever_a_mapping_says_nothing_unchecked_reaches_ottl(source, engine, label):
    resource = _mapping(
        engine=engine,
        metrics=[{"to": "modelplane_requests_running", "from": [source]}],
        labels=[{"from": label, "to": "model"}],
    )
    parsed = mappings.parse_mappings([resource])
    if parsed.refused:
        return
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster("c"), parsed.accepted, DESTINATION
    )
    statements = [
        s
        for g in config["processors"]["transform/normalize"]["metric_statements"]
        for s in g.get("statements", [])
    ]
    for text in (source, engine, label):
        assert '"' not in text
        assert "\\" not in text
        assert "\n" not in text
        assert "$" not in text
    assert any(f'"{source}"' in s for s in statements)


def test_the_collector_never_renders_a_rename_onto_a_roll_up_label():
    # The same rule compose-telemetry reports in MappingValid: one parse for both.
    mapping = {
        "metadata": {"name": "sneaky"},
        "spec": {
            "engine": "vllm",
            "metrics": [
                {"to": "modelplane_requests_running", "from": ["vllm:num_requests_running"]}
            ],
            "labels": [{"from": "model_name", "to": "modelplane_gateway"}],
        },
    }
    parsed = mappings.parse_mappings([mapping])
    assert parsed.accepted == ()
    assert [(r.field, "is reserved" in r.rule) for r in parsed.refused] == [
        ("spec.labels[0].to", True)
    ]
