"""The experimental planner: plans from a scripted OpenAI-compatible server (through the
real `openai` client) are checked against the policy's limits; a plan with any action
outside them is rejected whole and never executed; in shadow mode the rules act; the
decision and proposal lines answer the operations guide's `jq` examples unchanged."""

import io
import json
import subprocess

import pytest

from functions.runtime.hub import planner
from functions.runtime.hub.advisor import ChatAdvisor
from functions.runtime.hub.decision import HubState
from functions.runtime.hub.fleet import ClusterFleet, FleetStatus
from functions.runtime.hub.plan import plan
from functions.runtime.shared.policy import ChatEndpoint, spec_hash
from functions.runtime.shared.report import Report
from tests.unit import test_hub_acting as acting
from tests.unit.chatserver import Answer, ChatServer
from tests.unit.hubsim import make_spec
from tests.unit.test_advisor import JQ

NOW = 1_800_000_000.0


@pytest.fixture
def server():
    s = ChatServer()
    yield s
    s.close()


def plans_answer(*plans) -> Answer:
    return Answer(json.dumps({"plans": list(plans)}))


def world():
    spec = make_spec(
        clusters=[{"name": n, "region": f"r{i}", "maxReplicas": 6} for i, n in enumerate("abc")],
        escalation={"step": 2},
        traffic={"stepPercent": 10},
    )

    def report(name, **kw):
        values = dict(ready=4, desired=4, scheduled=4, needed=0, static_room=0)
        values["node_pool_headroom"] = 0
        values["pressure"] = 3.0
        values.update(kw)
        return Report(time=NOW - 5, spec_hash=spec_hash(spec, name), **values)

    reports = {"a": report("a", needed=2, pressure=9.0), "b": report("b", static_room=3)}
    reports["c"] = None  # no usable report
    fleet = FleetStatus(
        clusters=(
            ClusterFleet("a", weight=34, short_since=NOW - 600),
            ClusterFleet("b", weight=33),
            ClusterFleet("c", weight=33),
        )
    )
    state = HubState("a/hub", reports, fleet)
    return spec, state, plan(state, spec, NOW)


def propose(server, *plans):
    server.script = [plans_answer(*plans)]
    config = ChatEndpoint.model_validate({"endpoint": server.url, "model": "planner-1"})
    spec, state, rules = world()
    found, error, _ = ChatAdvisor(config, None).propose(
        planner.PLANNER_PROMPT, planner.context(state, spec, rules), planner.PLAN_SCHEMA
    )
    assert error is None
    return spec, state, rules, found


OUTSIDE = [
    ({"type": "add", "cluster": "b", "replicas": 3}, "more than step (2)"),
    ({"type": "add", "cluster": "c", "replicas": 1}, "no usable report"),
    ({"type": "add", "cluster": "zz", "replicas": 1}, "not a cluster of the policy"),
    ({"type": "release", "cluster": "b", "replicas": 1}, "no floor the hub raised"),
    ({"type": "shift", "cluster": "b", "from": "a", "percent": 20}, "more than stepPercent"),
    ({"type": "shift", "cluster": "c", "from": "a", "percent": 5}, "not serving"),
]


@pytest.mark.parametrize(("action", "reason"), OUTSIDE, ids=[r for _, r in OUTSIDE])
def test_a_plan_outside_the_limits_is_rejected_and_never_executed(server, action, reason):
    bad = {"id": "bad", "actions": [{"type": "add", "cluster": "b", "replicas": 1}, action]}
    spec, state, rules, plans = propose(server, {**bad, "hypothesis": "more is better"})
    decision, adaptive = planner.choose(plans, state, spec, rules, apply=True)
    assert adaptive["rejections"][0]["id"] == "bad"
    assert reason in adaptive["rejections"][0]["reason"]
    assert adaptive["chosen"] == adaptive["executed"] == "rules"
    assert decision is rules  # the rules' step, not a piece of the bad plan


def test_the_first_valid_plan_is_chosen_and_executed_in_apply_mode(server):
    spec, state, rules, plans = propose(
        server,
        {
            "id": "big",
            "actions": [{"type": "add", "cluster": "b", "replicas": 5}],
            "hypothesis": "h",
        },
        {
            "id": "shift-first",
            "actions": [
                {"type": "add", "cluster": "b", "replicas": 1},
                {"type": "shift", "cluster": "b", "from": "a", "percent": 10},
            ],
            "hypothesis": "b takes load while it grows",
        },
    )
    decision, adaptive = planner.choose(plans, state, spec, rules, apply=True)
    assert [c["id"] for c in adaptive["candidates"]] == ["rules", "hold", "shift-first"]
    assert adaptive["chosen"] == adaptive["executed"] == "shift-first"
    assert decision.floors["b"] == 5  # 4 running + 1
    assert decision.weights == {"a": 24, "b": 43, "c": 33}
    assert decision.source == "planner"
    # In shadow mode the same choice is recorded and the rules act.
    shadow, recorded = planner.choose(plans, state, spec, rules, apply=False)
    assert recorded["chosen"] == "shift-first"
    assert recorded["executed"] == "rules"
    assert shadow is rules


def run_agent(monkeypatch, server, mode):
    monkeypatch.setitem(
        acting.SPEC,
        "experimental",
        {"adaptive": {"planner": {"endpoint": server.url, "model": "planner-1"}, "mode": mode}},
    )
    home, helper = acting.fleet("auto")
    stream = io.StringIO()
    acting.hub_agent(home, helper, stream).hub_step(acting.NOW)
    return home, helper, stream.getvalue()


def jq(expr: str, text: str, tmp_path) -> list[dict]:
    if not JQ.exists():
        pytest.fail(f"jq not at {JQ}: run hack/tools.sh")
    log = tmp_path / "decisions.jsonl"
    log.write_text(text)
    out = subprocess.run([JQ, "-c", expr, log], capture_output=True, text=True, check=True)
    return [json.loads(x) for x in out.stdout.splitlines()]


def test_the_guides_jq_examples_read_the_adaptive_and_proposal_lines(monkeypatch, server, tmp_path):
    server.script = [
        plans_answer(
            {
                "id": "one",
                "actions": [{"type": "add", "cluster": "helper", "replicas": 1}],
                "hypothesis": "one replica on helper covers the burst",
            }
        )
    ]
    _home, helper, text = run_agent(monkeypatch, server, "apply")
    chosen = jq(
        'select(.kind=="decision" and .adaptive.chosen and .adaptive.chosen != "rules")'
        " | .adaptive as $a\n  | {decisionId, chosen: $a.chosen, executed: $a.executed,"
        " plan: ($a.candidates[] | select(.id == $a.chosen))}",
        text,
        tmp_path,
    )
    assert [(c["chosen"], c["executed"]) for c in chosen] == [("one", "one")]
    assert chosen[0]["plan"]["hypothesis"] == "one replica on helper covers the burst"
    proposals = jq(
        'select(.kind=="proposal") | {time, policy, seconds, error,'
        " plans: [.candidates[]? | {id, actions, hypothesis}]}",
        text,
        tmp_path,
    )
    assert proposals[0]["error"] is None
    assert [p["id"] for p in proposals[0]["plans"]] == ["one"]
    # Executed: helper's intent is the plan's floor (4 running + 1), not the rules' 6.
    intents = [b for m, p, b, _ in helper.writes if p == acting.POLICY_PATH + "/status"]
    assert intents[0]["status"]["intent"]["floor"] == 5
    assert intents[0]["status"]["intent"]["tier"] == 1


def test_a_failing_planner_leaves_the_rules_and_a_proposal_line_with_the_error(
    monkeypatch, server, tmp_path
):
    server.script = [Answer("{not json")]
    _home, _helper, text = run_agent(monkeypatch, server, "apply")
    lines = [json.loads(x) for x in text.splitlines()]
    (proposal,) = [x for x in lines if x["kind"] == "proposal"]
    assert "not JSON" in proposal["error"]
    (decision,) = [x for x in lines if x["kind"] == "decision"]
    assert decision["adaptive"]["executed"] == "rules"
    assert decision["source"] == "rule"
