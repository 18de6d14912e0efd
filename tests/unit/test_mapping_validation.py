"""MetricMapping validation: compose-serving-stack's parse plus the roll-up's rules,
each error naming the field and the rule."""

import pytest
import yaml

from functions.common import builtin_mappings
from functions.compose_telemetry.mapping_validation import validate_mapping

BUILTIN = builtin_mappings.DIRECTORY


def mapping(name="vllm", engine="vllm", metrics=None, labels=None):
    return {
        "metadata": {"name": name},
        "spec": {
            "engine": engine,
            "metrics": metrics
            or [{"to": "modelplane_requests_running", "from": ["vllm:num_requests_running"]}],
            "labels": labels or [],
        },
    }


@pytest.mark.parametrize("path", sorted(BUILTIN.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_builtin_mapping_is_valid(path):
    builtin = [yaml.safe_load(p.read_text()) for p in sorted(BUILTIN.glob("*.yaml"))]
    assert validate_mapping(yaml.safe_load(path.read_text()), builtin) == []


@pytest.mark.parametrize(
    ("spec", "field", "rule"),
    [
        (
            {"metrics": [{"to": "modelplane_time_to_first_tokens", "from": ["a"]}]},
            "spec.metrics[0].to",
            "is not in the vocabulary",
        ),
        (
            {
                "metrics": [
                    {"to": "modelplane_requests_running", "from": ["a"]},
                    {"to": "modelplane_requests_running", "from": ["b"]},
                ]
            },
            "spec.metrics[1].to",
            "already the target of spec.metrics[0]",
        ),
        (
            {"metrics": [{"to": "modelplane_requests_running", "from": ["a"], "scale": 0}]},
            "spec.metrics[0].scale",
            "above 0",
        ),
        (
            {"metrics": [{"to": "modelplane_requests_running", "from": ['a"b']}]},
            "spec.metrics[0].from[0]",
            "is not a Prometheus metric name",
        ),
        (
            {
                "metrics": [{"to": "modelplane_requests_running", "from": ["a"]}],
                "labels": [{"from": "cluster", "to": "modelplane_cluster"}],
            },
            "spec.labels[0].to",
            "is reserved",
        ),
        (
            {
                "metrics": [{"to": "modelplane_requests_running", "from": ["a"]}],
                "labels": [
                    {"from": "model_name", "to": "model"},
                    {"from": "x", "to": "modelplane_scope"},
                ],
            },
            "spec.labels[1].to",
            "is reserved",
        ),
        (
            {
                "metrics": [{"to": "modelplane_requests_running", "from": ["a"]}],
                "labels": [{"from": "engine", "to": "modelplane_scrape_engine"}],
            },
            "spec.labels[0].to",
            "is reserved",
        ),
        (
            {
                "metrics": [
                    {"to": "modelplane_requests_running", "from": ["a"]},
                    {"to": "modelplane_requests_waiting", "from": ["a"], "select": {"model": "x"}},
                ],
                "labels": [{"from": "model_name", "to": "model"}],
            },
            "spec.metrics[1].select.model",
            "renames model_name onto 'model'",
        ),
        (
            {
                "metrics": [
                    {"to": "modelplane_requests_waiting", "from": ["a"], "select": {"name": "x"}}
                ],
                "labels": [{"from": "model_name", "to": "model"}, {"from": "name", "to": "model"}],
            },
            "spec.metrics[0].select.name",
            "renames model_name, name all onto 'model'",
        ),
    ],
    ids=[
        "target-outside-vocabulary",
        "target-twice",
        "scale-zero",
        "quote-in-source",
        "label-onto-cluster",
        "label-onto-scope",
        "label-onto-scratch",
        "select-by-a-rename-target",
        "select-by-one-of-several-renamed-alike",
    ],
)
def test_refuses_naming_the_field_and_rule(spec, field, rule):
    errors = validate_mapping(mapping(**spec))
    assert any(e.field == field and rule in e.rule for e in errors), errors


def test_several_sources_for_one_target_are_version_alternatives():
    alternatives = [{"to": "modelplane_kv_cache_usage", "from": ["vllm:a", "vllm:b"]}]
    assert validate_mapping(mapping(metrics=alternatives)) == []


def test_a_second_mapping_for_one_engine_is_refused_and_the_first_by_name_kept():
    first = mapping(name="a-vllm")
    second = mapping(name="b-vllm")
    assert validate_mapping(first, [second]) == []
    errors = validate_mapping(second, [first])
    assert [e.field for e in errors] == ["spec.engine"]
    assert "a-vllm" in errors[0].rule


def test_a_select_by_a_label_renamed_alone_is_taken():
    spec = {
        "metrics": [{"to": "modelplane_requests_total", "from": ["a"], "select": {"model": "t"}}],
        "labels": [{"from": "model", "to": "triton_model"}],
    }
    assert validate_mapping(mapping(**spec)) == []
