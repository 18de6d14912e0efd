"""The experimental ranking model through the real `openai` client against a local
OpenAI-compatible server answering from a script (tests/unit/chatserver.py): good,
malformed, off-schema, slow and failing answers; the breaker; and the hub using the
ranking only within a tier, only over the confidence threshold, only in apply mode, with
the decision log's `model` field read by the operations guide's `jq` example."""

import io
import json
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from functions.runtime.hub.advisor import SKIP_SECONDS, ChatAdvisor
from functions.runtime.hub.decision import ADD_CAPACITY, HubState
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.fleet import ClusterFleet, FleetStatus
from functions.runtime.hub.plan import plan
from functions.runtime.shared.policy import RankingModel, spec_hash
from functions.runtime.shared.report import Report
from tests.unit.chatserver import Answer, ChatServer
from tests.unit.hubsim import make_spec

NOW = 1_800_000_000.0
JQ = Path.home() / ".cache" / "modelplane" / "tools" / "bin" / "jq"


@pytest.fixture
def server():
    s = ChatServer()
    yield s
    s.close()


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def advisor(server, clock=None, observed=None, **config) -> ChatAdvisor:
    cfg = RankingModel.model_validate(
        {"endpoint": server.url, "model": "ranker-1", "timeout": "1s", **config}
    )
    observe = (lambda s, r: observed.append(r)) if observed is not None else (lambda s, r: None)
    return ChatAdvisor(cfg, "sk-test", observe, clock or Clock())


def ranking(**probabilities) -> Answer:
    return Answer(json.dumps({"probabilities": probabilities}))


def test_a_ranking_is_asked_with_the_schema_and_read_back(server):
    server.script = [ranking(b=0.8, c=0.2)]
    seen = []
    result = advisor(server, observed=seen).rank(("b", "c"), {"short": {"a": 2}})
    assert result.error is None
    assert result.probabilities == {"b": 0.8, "c": 0.2}
    asked = server.requests[0]
    assert asked["_path"] == "/v1/chat/completions"
    assert asked["model"] == "ranker-1"
    assert asked["response_format"]["type"] == "json_schema"
    assert json.loads(asked["messages"][1]["content"])["candidates"] == ["b", "c"]
    assert seen == ["ok"]


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (Answer("not json at all"), "answer is not JSON"),
        (Answer(json.dumps({"ranking": ["b"]})), "does not follow the schema"),
        (Answer(json.dumps({"probabilities": {"b": 1.7}})), "does not follow the schema"),
        (ranking(b=0.5, z=0.5), "not candidates"),
        (Answer(status=500), "endpoint answered 500"),
        (Answer(ranking(b=1.0).content, delay=3.0), "no answer within 1s"),
    ],
    ids=["malformed", "off-schema", "out-of-range", "unknown-cluster", "failing", "slow"],
)
def test_a_bad_answer_is_an_error_and_the_rules_rank(server, answer, error):
    server.script = [answer]
    seen = []
    result = advisor(server, observed=seen).rank(("b", "c"), {})
    assert result.probabilities == {}
    assert error in result.error
    assert seen[-1] == ("ok" if "not candidates" in error else "error")


def test_three_consecutive_failures_skip_the_endpoint_for_a_minute(server):
    clock = Clock()
    server.script = [Answer(status=503)] * 3 + [ranking(b=1.0, c=0.0)]
    a = advisor(server, clock)
    for _ in range(3):
        assert a.rank(("b", "c"), {}).error
    assert len(server.requests) == 3
    clock.now += SKIP_SECONDS - 1
    assert "skipped" in a.rank(("b", "c"), {}).error
    assert len(server.requests) == 3  # not asked while skipped
    clock.now += 1
    assert a.rank(("b", "c"), {}).error is None


# --- the hub with the ranking -----------------------------------------------------------


def fleet_spec(mode: str, threshold: int = 70):
    clusters = [{"name": n, "region": f"r{i}", "maxReplicas": 10} for i, n in enumerate("abcd")]
    return make_spec(
        clusters=clusters,
        route=None,
        experimental={
            "model": {
                "endpoint": "http://unused/v1",
                "model": "ranker-1",
                "mode": mode,
                "confidenceThresholdPercent": threshold,
            }
        },
    )


def state(spec, ranker) -> HubState:
    def report(name, **kw):
        values = dict(ready=4, desired=4, scheduled=4, needed=0, static_room=0)
        values["node_pool_headroom"] = 0
        values.update(kw)
        return Report(time=NOW - 5, spec_hash=spec_hash(spec, name), **values)

    reports = {
        "a": report("a", needed=1),
        "b": report("b", static_room=3),  # static tier, first by the rules
        "c": report("c", static_room=2),  # static tier
        "d": report("d", node_pool_headroom=5),  # NodePool tier
    }
    fleet = FleetStatus(clusters=(ClusterFleet("a", short_since=NOW - 600),))
    return HubState("a/hub", reports, fleet, ranker=ranker)


def helper_added(decision) -> str:
    (change,) = [c for c in decision.changes if c.action == ADD_CAPACITY]
    return change.cluster


def test_a_confident_ranking_in_apply_mode_reorders_within_the_tier(server):
    server.script = [ranking(b=0.05, c=0.9, d=0.05)]
    decision = plan(state(fleet_spec("apply"), advisor(server).rank), fleet_spec("apply"), NOW)
    assert helper_added(decision) == "c"
    assert decision.source == "model"
    assert decision.model == {
        "probabilities": {"b": 0.05, "c": 0.9, "d": 0.05},
        "accepted": True,
        "shadow": False,
        "error": None,
    }


def test_a_ranking_never_moves_a_cluster_across_tiers(server):
    # d has only NodePool headroom: static room elsewhere goes first whatever the model says.
    server.script = [ranking(b=0.0, c=0.0, d=1.0)]
    spec = fleet_spec("apply")
    decision = plan(state(spec, advisor(server).rank), spec, NOW)
    assert helper_added(decision) == "b"
    assert decision.model["accepted"] is True


def test_below_the_confidence_threshold_the_rules_order_stands(server):
    server.script = [ranking(b=0.3, c=0.6, d=0.1)]
    spec = fleet_spec("apply", threshold=70)
    decision = plan(state(spec, advisor(server).rank), spec, NOW)
    assert helper_added(decision) == "b"
    assert decision.source == "rule"
    assert decision.model["accepted"] is False


def test_shadow_records_the_ranking_and_the_guides_jq_reads_it(server, tmp_path):
    if not JQ.exists():
        pytest.fail(f"jq not at {JQ}: run hack/tools.sh")
    server.script = [ranking(b=0.1, c=0.85, d=0.05)]
    spec = fleet_spec("shadow")
    decision = plan(state(spec, advisor(server).rank), spec, NOW)
    assert helper_added(decision) == "b"  # the rules acted
    stream = io.StringIO()
    DecisionLog(stream).record(decision, "ml/llm", "shadow", applied=False)
    log = tmp_path / "decisions.jsonl"
    log.write_text(stream.getvalue())
    # The operations guide's "Evaluating the model" example, unchanged.
    expr = (
        'select(.kind=="decision" and .model.shadow and .model.accepted)\n'
        "  | {decisionId, rules: .message, model: (.model.probabilities | to_entries"
        " | max_by(.value) | .key)}"
    )
    out = subprocess.run([JQ, "-c", expr, log], capture_output=True, text=True, check=True)
    line = json.loads(out.stdout)
    assert line["model"] == "c"
    assert line["rules"].startswith("+")
    assert "on b" in line["rules"]


def test_a_failing_model_leaves_the_rules_order_and_says_why(server):
    server.script = [Answer(status=500)]
    spec = fleet_spec("apply")
    decision = plan(state(spec, advisor(server).rank), spec, NOW)
    assert helper_added(decision) == "b"
    assert decision.model["error"] == "endpoint answered 500"
    assert decision.model["accepted"] is False


def test_the_model_is_off_by_default():
    spec = make_spec(route=None)
    assert spec.experimental.model is None
    assert spec.experimental.adaptive is None
    asked = []
    s = replace(state(fleet_spec("apply"), lambda n, c: asked.append(n)), ranker=None)
    plan(s, fleet_spec("apply"), NOW)
    assert asked == []
