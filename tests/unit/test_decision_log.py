"""The decision log over a simulated burst: one line per changing decision, outcome lines
at 1, 5 and 15 minutes, and the seed's `jq` examples run unchanged on the file with the
real `jq` (CI requires it; elsewhere a missing jq skips only those cases).
"""

import io
import json
import shutil
import subprocess

import pytest

from functions.runtime.hub.decision_log import DecisionLog
from tests.conftest import IN_CI
from tests.unit.hubsim import Member, World, make_spec

# The operations guide's examples, byte for byte.
JQ_OUTCOMES = (
    'select(.kind=="outcome" and .final) | {decisionId, readyAfterSeconds, '
    "pressure: (.clusters | map_values(.pressure))}"
)
JQ_MODEL = """select(.kind=="decision" and .model.shadow and .model.accepted)
  | {decisionId, rules: .message, model: (.model.probabilities | to_entries | max_by(.value) | .key)}"""  # noqa: E501
JQ_ADAPTIVE = """select(.kind=="decision" and .adaptive.chosen and .adaptive.chosen != "rules") | .adaptive as $a
  | {decisionId, chosen: $a.chosen, executed: $a.executed, plan: ($a.candidates[] | select(.id == $a.chosen))}"""  # noqa: E501
JQ_PROPOSALS = (
    'select(.kind=="proposal") | {time, policy, seconds, error, '
    "plans: [.candidates[]? | {id, actions, hypothesis}]}"
)


def run_logged(mode: str = "auto", until: float = 2400.0) -> tuple[list[dict], list]:
    spec = make_spec(mode=mode)
    world = World(
        spec,
        {"home": Member("home", own=5), "helper": Member("helper", own=1, static_room=5)},
        lambda name, now: (90.0 if 60 <= now < 700 else 50.0) if name == "home" else 0.0,
        initial_weights={"home": 100, "helper": 0},
        acting=mode == "auto",
    )
    stream = io.StringIO()
    log = DecisionLog(stream)
    ready = []
    while world.now <= until:
        decision = world.step()
        if decision.changed:
            log.record(decision, "ml-team/llm", mode, applied=mode == "auto")
        ready += log.observe("ml-team/llm", world.now, decision.reports, decision.fleet)
        world.now += 10
    return [json.loads(line) for line in stream.getvalue().splitlines()], ready


def test_every_changing_decision_is_one_line_with_the_seeds_fields():
    lines, _ = run_logged()
    decisions = [x for x in lines if x["kind"] == "decision"]
    assert decisions
    first = decisions[0]
    assert set(first) >= {
        "kind",
        "decisionId",
        "time",
        "policy",
        "hub",
        "mode",
        "reports",
        "before",
        "after",
        "phase",
        "action",
        "source",
        "message",
        "applied",
        "error",
    }
    assert first["action"] == "AddCapacityShiftTraffic"
    assert first["before"]["helper"] == {"floor": 0, "static": False, "weight": 0}
    assert first["after"]["helper"] == {"floor": 3, "static": True, "weight": 10}
    assert first["reports"]["home"]["needed"] == 4
    assert first["time"] == "1970-01-01T00:01:30Z"
    assert len({d["decisionId"] for d in decisions}) == len(decisions)


def test_each_decision_gets_outcome_lines_at_one_five_and_fifteen_minutes():
    lines, _ = run_logged(until=2400)
    decisions = [
        x["decisionId"]
        for x in lines
        if x["kind"] == "decision" and x["time"] <= "1970-01-01T00:25:00Z"  # 15 min before the end
    ]
    for decision_id in decisions:
        outcomes = [x for x in lines if x["kind"] == "outcome" and x["decisionId"] == decision_id]
        assert [o["afterSeconds"] for o in outcomes] == [60, 300, 900]
        assert [o["final"] for o in outcomes] == [False, False, True]
    final = next(x for x in lines if x["kind"] == "outcome" and x["final"])
    assert set(final["clusters"]) == {"home", "helper"}
    assert set(final["clusters"]["helper"]) >= {"ready", "desired", "needed", "floor", "weight"}
    assert final["followedBy"][0].endswith("ShiftTraffic")


def test_ready_after_seconds_measures_each_raised_floor():
    lines, ready = run_logged()
    first = next(x for x in lines if x["kind"] == "outcome" and x["afterSeconds"] == 900)
    # Raised at 90 s; the member scales at its next report (100 s) and the replicas
    # load for 60 s: ready at 160 s.
    assert first["readyAfterSeconds"] == {"helper": 70}
    assert ready[0].cluster == "helper"
    assert ready[0].seconds == 70


def test_shadow_decisions_are_followed_without_ready_after_seconds():
    lines, ready = run_logged(mode="shadow")
    outcomes = [x for x in lines if x["kind"] == "outcome"]
    assert outcomes
    assert all("readyAfterSeconds" not in o and o["applied"] is False for o in outcomes)
    assert ready == []


def test_a_member_without_a_usable_report_is_null_in_reports_and_stale_in_outcomes():
    spec = make_spec(
        clusters=[
            {"name": "home", "maxReplicas": 10},
            {"name": "helper", "maxReplicas": 6},
            {"name": "silent", "maxReplicas": 6},
        ]
    )
    world = World(
        spec,
        {
            "home": Member("home", own=5),
            "helper": Member("helper", own=1, static_room=5),
            "silent": Member("silent", own=1, static_room=5, reports=False),
        },
        lambda name, now: 90.0 if name == "home" else 0.0,
        initial_weights={"home": 100, "helper": 0, "silent": 0},
    )
    stream = io.StringIO()
    log = DecisionLog(stream)
    while world.now <= 200:
        decision = world.step()
        if decision.changed:
            log.record(decision, "ml-team/llm", "auto", applied=True)
        log.observe("ml-team/llm", world.now, decision.reports, decision.fleet)
        world.now += 10
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    decision = next(x for x in lines if x["kind"] == "decision")
    assert decision["reports"]["silent"] is None
    assert decision["reports"]["helper"] is not None
    outcome = next(x for x in lines if x["kind"] == "outcome")
    assert outcome["clusters"]["silent"] == {"stale": True}


def jq() -> str:
    path = shutil.which("jq")
    if path:
        return path
    message = "jq is not installed: apt-get install -y jq"
    if IN_CI:
        pytest.fail(f"CI requires {message}")
    pytest.skip(message)
    raise AssertionError("unreachable")


@pytest.mark.parametrize(
    "program",
    [JQ_OUTCOMES, JQ_MODEL, JQ_ADAPTIVE, JQ_PROPOSALS],
    ids=["outcomes", "model", "adaptive", "proposals"],
)
def test_the_seeds_jq_examples_run_unchanged_on_the_log(tmp_path, program):
    lines, _ = run_logged()
    path = tmp_path / "decisions.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    done = subprocess.run(
        [jq(), "-c", program, str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    results = [json.loads(x) for x in done.stdout.splitlines()]
    if program is JQ_OUTCOMES:
        finals = [x for x in lines if x["kind"] == "outcome" and x["final"]]
        assert len(results) == len(finals)
        assert results[0]["readyAfterSeconds"] == {"helper": 70}
        assert set(results[0]["pressure"]) == {"home", "helper"}
        assert all(isinstance(v, float | int) for v in results[0]["pressure"].values())
    else:
        assert results == []  # no model, adaptive path or planner in this suite
