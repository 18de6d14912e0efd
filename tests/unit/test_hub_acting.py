"""What the agent writes for a hub decision, through a recording stand-in for each
member's API client: shadow writes only status.fleet; auto writes fenced intents,
Events and route weights; a Lease copy naming someone else stops the write.

The real API server proves the HTTP side (tests/runtime/test_hub_integration.py); this
proves which writes happen at all.
"""

import copy
import io
import json

import pytest
from kubernetes.client.exceptions import ApiException
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from functions.common.contracts import ANNOTATION_FENCING_TOKEN
from functions.runtime.agent.loop import Agent, AgentConfig
from functions.runtime.agent.role import FixedRole
from functions.runtime.hub.acting import FIELD_MANAGER, Actor, LeaseCopy, NotHub, weighted_rules
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.metrics import HUB_STEP_ERRORS_TOTAL, HubMetrics
from functions.runtime.shared.policy import Policy, PolicySpec, rfc3339, spec_hash
from functions.runtime.shared.report import Report

NOW = 1_800_000_000.0
POLICY_PATH = "/apis/autoscaling.modelplane.ai/v1alpha1/namespaces/ml/adaptivepolicies/llm"
ROUTE_PATH = "/apis/gateway.networking.k8s.io/v1/namespaces/ml/httproutes/llm"
LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/modelplane-system/leases/modelplane-hub"


class FakeResponse:
    def __init__(self, body: dict):
        self.status = 200
        self.reason = "OK"
        self.data = json.dumps(body).encode()
        self.headers = {}

    def read(self):
        return self.data

    def getheaders(self):
        return self.headers


class FakeApi:
    """Stands in for kubernetes.client.ApiClient at its two request methods: answers GETs
    from `objects` by path and records every write."""

    def __init__(self, objects: dict[str, dict]):
        self.objects = objects
        self.writes: list[tuple[str, str, dict, list]] = []

    def param_serialize(self, method, resource_path, query_params=None, body=None, **_):
        return method, (resource_path, list(query_params or [])), {}, body, []

    def call_api(self, method, url, header_params=None, body=None, **_):
        path, query = url
        if method == "GET":
            if path.endswith("/adaptivepolicies"):
                held = self.objects.get(POLICY_PATH)
                return FakeResponse({"items": [copy.deepcopy(held)] if held else []})
            if path not in self.objects:
                raise ApiException(status=404, reason="Not Found")
            return FakeResponse(copy.deepcopy(self.objects[path]))
        self.writes.append((method, path, body, query))
        return FakeResponse({})

    def sanitize_for_serialization(self, obj):
        return obj


SPEC = {
    "workload": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "llm"},
    "clusters": [
        {"name": "home", "maxReplicas": 10},
        {"name": "helper", "maxReplicas": 6, "backendRef": "llm-helper"},
    ],
    "route": {"name": "llm"},
    "signals": {"demand": "d", "pressure": "p"},
    "capacity": {"replicaCapacity": 10},
}


def report(name: str, **fields) -> dict:
    spec = PolicySpec.model_validate(SPEC)
    values = {
        "time": NOW - 5,
        "spec_hash": spec_hash(spec, name),
        "ready": 4,
        "desired": 4,
        "scheduled": 4,
        "needed": 0,
        "static_room": 0,
        "node_pool_headroom": 0,
        "pressure": 5.0,
        "demand": 20.0,
    }
    values.update(fields)
    return Report(**values).to_status()


def policy_object(mode: str, status: dict) -> dict:
    return {
        "apiVersion": "autoscaling.modelplane.ai/v1alpha1",
        "kind": "AdaptivePolicy",
        "metadata": {"name": "llm", "namespace": "ml", "generation": 1},
        "spec": {**SPEC, "mode": mode},
        "status": status,
    }


def lease(holder: str, token: str) -> dict:
    return {
        "metadata": {"annotations": {ANNOTATION_FENCING_TOKEN: token}},
        "spec": {"holderIdentity": holder},
    }


ROUTE = {
    "spec": {
        "parentRefs": [{"name": "inference"}],
        "rules": [
            {
                "backendRefs": [
                    {"name": "home", "port": 8000, "weight": 100},
                    {"name": "llm-helper", "port": 8000, "weight": 0},
                ]
            }
        ],
    }
}


def fleet(mode: str, holder="home/agent-0", token="t1", helper_holder=None):
    """A hub on `home`; `home` has been short long enough; `helper` has static room.
    `helper_holder` is whom helper's Lease copy names, when not the same as home's."""
    short_since = rfc3339(NOW - 300)
    home = FakeApi(
        {
            POLICY_PATH: policy_object(
                mode,
                {
                    "report": report("home", needed=3, pressure=14.0),
                    "fleet": {
                        "phase": "Steady",
                        "clusters": [
                            {"name": "helper", "floor": 0, "weight": 0},
                            {"name": "home", "floor": 0, "weight": 100, "shortSince": short_since},
                        ],
                    },
                },
            ),
            LEASE_PATH: lease(holder, token),
            ROUTE_PATH: ROUTE,
        }
    )
    helper = FakeApi(
        {
            POLICY_PATH: policy_object(
                mode, {"report": report("helper", static_room=4, pressure=1.0)}
            ),
            LEASE_PATH: lease(helper_holder or holder, token),
            ROUTE_PATH: ROUTE,
        }
    )
    return home, helper


def run_hub_step(mode: str, reader: InMemoryMetricReader | None = None, **lease_kw):
    home, helper = fleet(mode, **lease_kw)
    stream = io.StringIO()
    provider = MeterProvider(metric_readers=[reader] if reader else [])
    agent = Agent(
        AgentConfig(cluster="home"),
        {"home": home, "helper": helper},
        FixedRole("home/agent-0", True, "t1"),
        HubMetrics(provider.get_meter("test")),
        DecisionLog(stream),
        clock=lambda: NOW,
    )
    agent.hub_step(NOW)
    return home, helper, [json.loads(x) for x in stream.getvalue().splitlines()]


def hub_agent(home: FakeApi, helper: FakeApi, stream) -> Agent:
    """The hub's agent on `home` (leading, term t1), its decision log into `stream`."""
    return Agent(
        AgentConfig(cluster="home"),
        {"home": home, "helper": helper},
        FixedRole("home/agent-0", True, "t1"),
        HubMetrics(MeterProvider().get_meter("test")),
        DecisionLog(stream),
        clock=lambda: NOW,
    )


def step_errors(reader: InMemoryMetricReader) -> int:
    data = reader.get_metrics_data()
    return int(
        sum(
            point.value
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == HUB_STEP_ERRORS_TOTAL
            for point in metric.data.data_points
        )
    )


def test_shadow_writes_nothing_but_the_hubs_status_fleet():
    home, helper, lines = run_hub_step("shadow")
    assert helper.writes == []
    assert [(m, p) for m, p, _, _ in home.writes] == [("PATCH", POLICY_PATH + "/status")]
    fleet_status = home.writes[0][2]["status"]["fleet"]
    assert {c["name"]: c["floor"] for c in fleet_status["clusters"]} == {"helper": 6, "home": 0}
    assert set(home.writes[0][2]["status"]) == {"fleet"}
    assert lines[0]["mode"] == "shadow"
    assert lines[0]["applied"] is False


def test_auto_writes_fenced_intents_weights_and_an_event():
    home, helper, lines = run_hub_step("auto")
    intents = [b for m, p, b, _ in helper.writes if p == POLICY_PATH + "/status"]
    assert intents == [
        {
            "status": {
                "intent": {
                    "floor": 6,
                    "tier": 1,
                    "hub": "home/agent-0",
                    "fencingToken": "t1",
                    "expires": rfc3339(NOW + 300),
                    "decisionId": lines[0]["decisionId"],  # the decision that added it
                }
            }
        }
    ]
    applies = [(b, q) for m, p, b, q in helper.writes if p == ROUTE_PATH]
    assert len(applies) == 1
    body, query = applies[0]
    assert ("fieldManager", FIELD_MANAGER) in query
    assert body["spec"]["rules"][0]["backendRefs"] == [
        {"name": "home", "port": 8000, "weight": 90},
        {"name": "llm-helper", "port": 8000, "weight": 10},
    ]
    assert set(body["spec"]) == {"rules"}  # parentRefs stay the Composition's
    events = [b for m, p, b, _ in home.writes if p == "/api/v1/namespaces/ml/events"]
    assert [(e["reason"], e["type"]) for e in events] == [("AddCapacityShiftTraffic", "Normal")]
    assert lines[0]["applied"] is True


def test_a_lease_copy_naming_another_hub_stops_the_intent_and_the_weights_and_warns():
    reader = InMemoryMetricReader()
    home, helper, lines = run_hub_step("auto", reader, helper_holder="helper/agent-1")
    assert helper.writes == []  # neither the intent nor the route's weights
    assert [p for _, p, _, _ in home.writes if p == ROUTE_PATH]  # home's copy names it
    assert lines[0]["applied"] is False
    assert lines[0]["error"].count("helper: does not hold the hub lease") == 2
    assert step_errors(reader) == 2
    events = [b for m, p, b, _ in home.writes if p == "/api/v1/namespaces/ml/events"]
    assert events[0]["type"] == "Warning"


def test_a_hub_deposed_everywhere_writes_nothing_at_all():
    reader = InMemoryMetricReader()
    home, helper, lines = run_hub_step("auto", reader, holder="helper/agent-1", token="t9")
    # No intent, weight, memory or Event anywhere.
    assert home.writes == []
    assert helper.writes == []
    assert lines[0]["applied"] is False
    # The intent, the two routes, the Events and status.fleet: each refused, each counted.
    assert lines[0]["error"].count("does not hold the hub lease") == 5
    assert step_errors(reader) == 5


@pytest.mark.parametrize(
    ("copy_", "term"),
    [
        (LeaseCopy("other/agent", "t1"), "t1"),
        (LeaseCopy("home/agent-0", "t0"), "t1"),  # a later term of another hub
        (LeaseCopy("home/agent-0", "t1"), ""),  # this agent lost its term
    ],
    ids=["other-holder", "other-term", "no-term"],
)
def test_an_intent_is_written_only_under_this_hubs_current_term(copy_, term):
    api = FakeApi({})
    actor = Actor({"m": api}, "m", "home/agent-0", lambda: term, lease_reader=lambda _: copy_)
    policy = Policy(namespace="ml", name="llm", spec=PolicySpec.model_validate(SPEC))
    with pytest.raises(NotHub, match="does not hold the hub lease"):
        actor.write_intent("m", policy, 3, 1, NOW)
    assert api.writes == []


@pytest.mark.parametrize(
    ("copy_", "term"),
    [
        (LeaseCopy("other/agent", "t1"), "t1"),
        (LeaseCopy("home/agent-0", "t0"), "t1"),
        (LeaseCopy("home/agent-0", "t1"), ""),
    ],
    ids=["other-holder", "other-term", "no-term"],
)
def test_route_weights_are_written_only_under_this_hubs_current_term(copy_, term):
    api = FakeApi({ROUTE_PATH: ROUTE})
    actor = Actor({"m": api}, "m", "home/agent-0", lambda: term, lease_reader=lambda _: copy_)
    with pytest.raises(NotHub, match="does not hold the hub lease"):
        actor.write_route_weights("m", "ml", "llm", {"home": 0, "llm-helper": 100})
    assert api.writes == []


def test_weighted_rules_change_only_the_named_backends_weights():
    rules = weighted_rules(ROUTE, {"llm-helper": 30, "home": 70})
    assert rules[0]["backendRefs"][1] == {"name": "llm-helper", "port": 8000, "weight": 30}
    assert ROUTE["spec"]["rules"][0]["backendRefs"][1]["weight"] == 0  # not mutated


POOL = {"group": "inference.networking.k8s.io", "kind": "InferencePool"}
COMPOSED_ROUTE = {
    "spec": {
        "rules": [
            {
                "backendRefs": [
                    {**POOL, "name": "llm", "weight": 100},
                    {"group": "multicluster.x-k8s.io", "kind": "ServiceImport", "name": "llm-at-b"},
                ]
            }
        ]
    }
}


@pytest.mark.parametrize(
    ("by_backend", "own", "expected"),
    [
        ({"llm-at-a": 60, "llm-at-b": 40}, 60, [60, 40]),
        ({"llm-at-a": 60, "llm-at-b": 40}, None, [100, 40]),
        # A pool a member names is that member's backend, whichever copy it is on.
        ({"llm": 25, "llm-at-b": 75}, 60, [25, 75]),
    ],
    ids=["own_pool_carries_the_routes_member", "no_own_weight_leaves_it", "named_pool_wins"],
)
def test_weighted_rules_put_the_routes_own_weight_on_its_own_pool(by_backend, own, expected):
    rules = weighted_rules(COMPOSED_ROUTE, by_backend, own)
    assert [r.get("weight") for r in rules[0]["backendRefs"]] == expected


def test_weighted_rules_leave_a_service_named_by_no_member_alone():
    route = {"spec": {"rules": [{"backendRefs": [{"name": "other", "weight": 7}]}]}}
    assert weighted_rules(route, {"home": 50}, 50)[0]["backendRefs"] == [
        {"name": "other", "weight": 7}
    ]


def written_fleet(api: FakeApi) -> dict:
    return next(
        b for m, p, b, _ in api.writes if p == POLICY_PATH + "/status" and "fleet" in b["status"]
    )["status"]["fleet"]


def test_a_new_hub_continues_from_the_freshest_fleet_status_on_any_copy():
    home, helper = fleet("shadow", holder="helper/agent-1")
    escalated = {
        "phase": "Escalated",
        "time": rfc3339(NOW - 10),
        "clusters": [
            {"name": "helper", "floor": 6, "tier": 1, "base": 4, "weight": 10, "steadyWeight": 0},
            {"name": "home", "floor": 0, "weight": 90, "steadyWeight": 100},
        ],
    }
    home.objects[POLICY_PATH]["status"]["fleet"] = escalated  # the old hub's copy
    helper.objects[POLICY_PATH]["status"]["fleet"] = {"phase": "Steady", "time": rfc3339(NOW - 600)}
    agent = Agent(
        AgentConfig(cluster="helper"),
        {"home": home, "helper": helper},
        FixedRole("helper/agent-1", True, "t1"),
        HubMetrics(MeterProvider().get_meter("test")),
        DecisionLog(io.StringIO()),
        clock=lambda: NOW,
    )
    agent.hub_step(NOW)
    fleet_status = written_fleet(helper)  # the new hub's own copy
    assert fleet_status["phase"] == "Escalated"
    assert {c["name"]: c["floor"] for c in fleet_status["clusters"]}["helper"] >= 6
    assert fleet_status["time"] == rfc3339(NOW)


def test_a_hub_without_its_own_copy_anchors_on_the_first_member_that_has_one():
    home, helper = fleet("shadow", holder="third/agent-0")
    third = FakeApi({LEASE_PATH: lease("third/agent-0", "t1")})  # runs no copy of it
    agent = Agent(
        AgentConfig(cluster="third"),
        {"home": home, "helper": helper, "third": third},
        FixedRole("third/agent-0", True, "t1"),
        HubMetrics(MeterProvider().get_meter("test")),
        DecisionLog(io.StringIO()),
        clock=lambda: NOW,
    )
    agent.hub_step(NOW)
    assert written_fleet(helper)["hub"] == "third/agent-0"  # "helper" sorts first
    assert third.writes == []


def _keep_written_fleet(api: FakeApi) -> None:
    """What the API server would do with the hub's status.fleet merge patch."""
    for _, path, body, _ in api.writes:
        if path == POLICY_PATH + "/status" and "fleet" in body["status"]:
            api.objects[POLICY_PATH]["status"]["fleet"] = copy.deepcopy(body["status"]["fleet"])
    api.writes.clear()


def test_a_new_hub_writes_the_outcome_lines_its_predecessor_still_owed():
    home, helper = fleet("auto")
    old_log, new_log = io.StringIO(), io.StringIO()

    def hub(cluster: str, stream, at: float) -> Agent:
        return Agent(
            AgentConfig(cluster=cluster),
            {"home": home, "helper": helper},
            FixedRole(f"{cluster}/agent-0", True, "t1"),
            HubMetrics(MeterProvider().get_meter("test")),
            DecisionLog(stream),
            clock=lambda: at,
        )

    hub("home", old_log, NOW).hub_step(NOW)
    decision = json.loads(old_log.getvalue().splitlines()[0])
    _keep_written_fleet(home)
    memory = home.objects[POLICY_PATH]["status"]["fleet"]
    assert [f["decisionId"] for f in memory["following"]] == [decision["decisionId"]]
    assert memory["following"][0]["checkpoints"] == [60, 300, 900]
    assert memory["recent"][0]["action"] == decision["action"]
    helper_entry = next(c for c in memory["clusters"] if c["name"] == "helper")
    assert helper_entry["decisionId"] == decision["decisionId"]

    # The old hub is gone; the new one (on helper, its own copy without a fleet yet)
    # continues from home's status.fleet.
    for api in (home, helper):
        api.objects[LEASE_PATH] = lease("helper/agent-0", "t1")
    new_hub = hub("helper", new_log, NOW)
    for at in (NOW + 60, NOW + 300, NOW + 900, NOW + 960):
        for api in (home, helper):
            api.objects[POLICY_PATH]["status"]["report"]["time"] = rfc3339(at - 5)
        new_hub.hub_step(at)
        _keep_written_fleet(helper)
    outcomes = [
        json.loads(x)
        for x in new_log.getvalue().splitlines()
        if json.loads(x)["kind"] == "outcome"
        and json.loads(x)["decisionId"] == decision["decisionId"]
    ]
    assert [(o["afterSeconds"], o["final"]) for o in outcomes] == [
        (60, False),
        (300, False),
        (900, True),
    ]
    following = helper.objects[POLICY_PATH]["status"]["fleet"]["following"]
    assert decision["decisionId"] not in [f["decisionId"] for f in following]


def test_a_hub_whose_memory_write_is_refused_writes_no_outcome_line():
    home, helper = fleet("shadow")
    stream = io.StringIO()
    agent = hub_agent(home, helper, stream)
    agent.hub_step(NOW)
    _keep_written_fleet(home)
    home.objects[LEASE_PATH] = lease("helper/agent-0", "t2")  # deposed meanwhile
    agent.hub_step(NOW + 60)
    kinds = [json.loads(x)["kind"] for x in stream.getvalue().splitlines()]
    assert "outcome" not in kinds  # the 60 s line is the next hub's to write
    assert home.writes == []


def test_the_agent_is_ready_while_it_reads_its_member_and_live_while_its_loop_turns():
    home, helper = fleet("auto")
    agent = Agent(
        AgentConfig(cluster="home", report_interval=30.0),
        {"home": home, "helper": helper},
        FixedRole("home/agent-0", True, "t1"),
        HubMetrics(MeterProvider().get_meter("test")),
        DecisionLog(io.StringIO()),
        clock=lambda: NOW,
    )
    assert agent.live(NOW)[0] is False  # the loop has not turned yet
    assert agent.ready(NOW)[0] is False
    agent.ticked_at = NOW
    agent.report_step(NOW)
    assert agent.live(NOW + 60) == (True, "ok")
    assert agent.ready(NOW + 60) == (True, "ok")
    ready, why = agent.ready(NOW + 91)  # three report intervals without an answer
    assert not ready
    assert "own API server" in why
    assert agent.live(NOW + 121)[0] is False


def test_weights_are_written_on_every_route_of_traffic_routes(monkeypatch):
    second = "/apis/gateway.networking.k8s.io/v1/namespaces/gw/httproutes/llm-internal"
    monkeypatch.setitem(SPEC, "traffic", {"routes": [{"name": "llm-internal", "namespace": "gw"}]})
    home, helper = fleet("auto")
    for api in (home, helper):
        api.objects[second] = ROUTE
    agent = hub_agent(home, helper, io.StringIO())
    agent.hub_step(NOW)
    for api in (home, helper):
        written = {p: b for m, p, b, _ in api.writes if p in (ROUTE_PATH, second)}
        assert set(written) == {ROUTE_PATH, second}  # `route` and traffic.routes alike
        assert written[ROUTE_PATH]["spec"] == written[second]["spec"]
        weights = [r["weight"] for r in written[second]["spec"]["rules"][0]["backendRefs"]]
        assert weights == [90, 10]
