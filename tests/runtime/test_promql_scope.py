"""A PromQL signal sees only its own deployment's series (issue #20, class 5).

The scoping (functions/runtime/agent/promql_scope.py) is checked twice: what it writes, for the
query shapes a policy uses and the ones an attacker would try; and what the real
Prometheus query engine (`promtool test rules`, the engine Prometheus runs) answers for
the scoped query over a store holding two tenants' series — a tenant's query, however
written, returns only its own.
"""

import os
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.runtime.agent.promql_scope import UnscopableQuery, scope_query
from tests.conftest import require_tool

SCOPE = {"k8s_namespace_name": "team-a", "modelplane_deployment": "llm"}
ADDED = 'k8s_namespace_name="team-a",modelplane_deployment="llm"'


@pytest.mark.parametrize(
    ("query", "scoped"),
    [
        ("sum(rate(q_total[2m]))", f"sum(rate(q_total{{{ADDED}}}[2m]))"),
        ('q{job="x"}', f'q{{{ADDED},job="x"}}'),
        ('{__name__=~".+"}', f'{{{ADDED},__name__=~".+"}}'),
        ("sum by (model) (q)", f"sum by (model) (q{{{ADDED}}})"),
        ("sum(q) without (pod)", f"sum(q{{{ADDED}}}) without (pod)"),
        ("a / on (m) group_left b", f"a{{{ADDED}}} / on (m) group_left b{{{ADDED}}}"),
        (
            "a / ignoring (m) group_right (n) b",
            f"a{{{ADDED}}} / ignoring (m) group_right (n) b{{{ADDED}}}",
        ),
        ("q offset 5m > bool 2", f"q{{{ADDED}}} offset 5m > bool 2"),
        ('q{a="}{"}', f'q{{{ADDED},a="}}{{"}}'),
        ("q # {__name__=~'.+'}\n", f"q{{{ADDED}}} \n"),
        # Metrics named like keywords (the grammar's metric_identifier allows them).
        ("offset", f"offset{{{ADDED}}}"),
        ("rate(offset[5m])", f"rate(offset{{{ADDED}}}[5m])"),
        ("by", f"by{{{ADDED}}}"),
        ('sum by (m) (by{a="b"})', f'sum by (m) (by{{{ADDED},a="b"}})'),
        ("start", f"start{{{ADDED}}}"),
        ("q @ start()", f"q{{{ADDED}}} @ start()"),
        ("AND", f"AND{{{ADDED}}}"),
        ("a AND and", f"a{{{ADDED}}} AND and{{{ADDED}}}"),
        ("q OFFSET 5m unless offset", f"q{{{ADDED}}} OFFSET 5m unless offset{{{ADDED}}}"),
        ("SUM BY (m) (sum)", f"SUM BY (m) (sum{{{ADDED}}})"),
        ("sum(q) by (m) or without", f"sum(q{{{ADDED}}}) by (m) or without{{{ADDED}}}"),
        ("topk(3, end)", f"topk(3, end{{{ADDED}}})"),
    ],
    ids=[
        "rate",
        "matcher",
        "any_name",
        "aggregation_by",
        "aggregation_without",
        "group_left_without_labels",
        "group_right_with_labels",
        "offset_bool",
        "braces_in_a_string",
        "comment_dropped",
        "metric_named_offset",
        "metric_named_offset_in_a_range",
        "metric_named_by",
        "metric_named_by_inside_an_aggregation",
        "metric_named_start",
        "start_as_the_at_modifier",
        "metric_named_AND",
        "and_as_operator_then_as_metric",
        "offset_keyword_then_metric",
        "aggregation_in_capitals_over_metric_named_sum",
        "grouping_after_the_aggregation_then_metric_named_without",
        "metric_named_end_as_an_argument",
    ],
)
def test_every_selector_gets_the_scope(query, scoped):
    assert scope_query(query, SCOPE) == scoped


@pytest.mark.parametrize(
    "query", ["q{a=", "sum by (model", "q ? 1", "sum by (rate(secret[1m])) (q)"]
)
def test_a_query_it_cannot_read_is_refused(query):
    with pytest.raises(UnscopableQuery):
        scope_query(query, SCOPE)


# Words a metric may be named (the grammar's metric_identifier, besides plain names),
# in any case: PromQL matches keywords case-insensitively.
_KEYWORD_NAMES = ["offset", "by", "without", "start", "end", "and", "or", "unless", "sum", "q"]
_metric = st.tuples(st.sampled_from(_KEYWORD_NAMES), st.booleans()).map(
    lambda pair: pair[0].upper() if pair[1] else pair[0]
)


@st.composite
def _expression(draw, depth: int = 0) -> tuple[str, int]:
    """A PromQL expression and how many vector selectors it holds."""
    shapes = ["selector", "range", "offset"] + (
        ["binary", "word_binary", "aggregation", "aggregation_after", "function"]
        if depth < 3
        else []
    )
    shape = draw(st.sampled_from(shapes))
    if shape == "selector":
        matchers = draw(st.sampled_from(["", '{a="b"}', "{}"]))
        return draw(_metric) + matchers, 1
    if shape == "range":
        return f"rate({draw(_metric)}[5m])", 1
    if shape == "offset":
        return f"{draw(_metric)} {draw(st.sampled_from(['offset', 'OFFSET']))} 5m", 1
    if shape == "function":
        inner, count = draw(_expression(depth + 1))
        return f"abs({inner})", count
    if shape in ("aggregation", "aggregation_after"):
        inner, count = draw(_expression(depth + 1))
        op = draw(st.sampled_from(["sum", "SUM", "max"]))
        clause = draw(st.sampled_from(["by", "BY", "without"])) + " (m)"
        if shape == "aggregation":
            return f"{op} {clause} ({inner})", count
        return f"{op}({inner}) {clause}", count
    left, left_count = draw(_expression(depth + 1))
    right, right_count = draw(_expression(depth + 1))
    if shape == "word_binary":
        op = draw(st.sampled_from(["and", "AND", "or", "unless", "Unless"]))
    else:
        op = draw(st.sampled_from(["+", "/ on (m)", "* ignoring (m) group_left (n)", "> bool"]))
    return f"({left}) {op} ({right})", left_count + right_count


@settings(max_examples=300, deadline=None)
@given(_expression())
def test_every_selector_is_scoped_whatever_its_name(generated):
    query, selectors = generated
    assert scope_query(query, SCOPE).count("{" + ADDED) == selectors, query


@pytest.fixture(scope="module")
def promtool() -> Path:
    prometheus = require_tool("prometheus")
    path = Path(os.path.realpath(prometheus)).parent / "promtool"
    if not path.exists():
        pytest.fail(f"promtool is not next to {os.path.realpath(prometheus)}")
    return path


def _series(namespace: str, deployment: str, value: int) -> dict:
    labels = f'k8s_namespace_name="{namespace}",modelplane_deployment="{deployment}"'
    return {"series": f"queue_depth{{{labels}}}", "values": f"{value}x10"}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("sum(queue_depth)", [{"value": 3}]),
        # Naming another tenant's namespace selects nothing, so the sum has no sample.
        ('sum(queue_depth{k8s_namespace_name="team-b"}) + sum(queue_depth)', []),
        ('sum({__name__=~"queue.*"})', [{"value": 3}]),
        (
            'sum(queue_depth) or vector(0) * sum({__name__="queue_depth",'
            ' modelplane_deployment="other"})',
            [{"value": 3}],
        ),
    ],
    ids=["plain", "other_namespace_named", "any_name", "vector_or"],
)
def test_the_real_engine_returns_only_the_tenants_own_series(promtool, tmp_path, query, expected):
    scoped = scope_query(query, SCOPE)
    tests = {
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    _series("team-a", "llm", 3),
                    _series("team-b", "llm", 1000),
                    _series("team-a", "other", 500),
                ],
                "promql_expr_test": [
                    {"expr": f"sum({scoped})", "eval_time": "5m", "exp_samples": expected}
                ],
            }
        ]
    }
    path = tmp_path / "scope_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [str(promtool), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, scoped + "\n" + done.stdout + done.stderr


@pytest.mark.parametrize(
    "query",
    ["sum(offset)", "sum(rate(by[5m])) * 0 + sum(by)", "sum(AND) and sum(offset)", "max(start)"],
    ids=["offset", "by_in_a_range", "and_as_metric_and_operator", "start"],
)
def test_the_real_engine_scopes_metrics_named_like_keywords(promtool, tmp_path, query):
    scoped = scope_query(query, SCOPE)
    labels = {
        tenant: f'k8s_namespace_name="{tenant}",modelplane_deployment="llm"'
        for tenant in ("team-a", "team-b")
    }
    series = [
        {"series": f"{name}{{{labels[tenant]}}}", "values": f"{value}x10"}
        for name in ("offset", "by", "AND", "start")
        for tenant, value in (("team-a", 3), ("team-b", 1000))
    ]
    tests = {
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": scoped, "eval_time": "5m", "exp_samples": [{"value": 3}]}
                ],
            }
        ]
    }
    path = tmp_path / "scope_test.yaml"
    path.write_text(yaml.safe_dump(tests))
    done = subprocess.run(
        [str(promtool), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
        cwd=tmp_path,
    )
    assert done.returncode == 0, scoped + "\n" + done.stdout + done.stderr
