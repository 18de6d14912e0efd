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
    ],
)
def test_every_selector_gets_the_scope(query, scoped):
    assert scope_query(query, SCOPE) == scoped


@pytest.mark.parametrize("query", ["q{a=", "sum by (model", "q ? 1"])
def test_a_query_it_cannot_read_is_refused(query):
    with pytest.raises(UnscopableQuery):
        scope_query(query, SCOPE)


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
