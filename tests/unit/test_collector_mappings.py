"""MetricMapping parsing: what may enter a collector's OTTL, and what is refused, with
the field and the rule. Every refusal leaves the other mappings in place."""

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

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
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refuses(case):
    resource, field = REFUSALS[case]
    parsed = mappings.parse_mappings([resource, _mapping(name="z-good", engine="sglang")])
    assert [r.field for r in parsed.refused] == [field]
    assert [m.name for m in parsed.accepted] == ["z-good"]
    assert parsed.refused[0].message.startswith(f"MetricMapping m: {field}: ")


def test_accepts_every_builtin_mapping():
    paths = sorted((REPO / "apis" / "metricmappings" / "builtin").glob("*.yaml"))
    parsed = mappings.parse_mappings([yaml.safe_load(p.read_text()) for p in paths])
    assert parsed.refused == ()
    assert sorted(parsed.mapped_engines) == ["sglang", "trtllm", "vllm"]


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
