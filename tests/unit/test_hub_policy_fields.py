"""The policy fields of the operations guide, one behaviour each, through the real `plan`:
per-cluster weights and their bounds, `placement`, `costRank`, the `saturation` signal,
extra named metrics, per-cluster `replicaCapacity`, several routes, and free room shared
between policies on one member (`HubState.reserved`)."""

import io
import json
from dataclasses import replace

import pytest
from pydantic import ValidationError

from functions.common.adaptivepolicy import fit_cluster_weights
from functions.runtime.hub.decision import (
    ADD_CAPACITY,
    SHIFT_TRAFFIC,
    HubState,
    reservations,
)
from functions.runtime.hub.decision_log import DecisionLog
from functions.runtime.hub.fleet import PHASE_ESCALATED, ClusterFleet, FleetStatus
from functions.runtime.hub.plan import plan
from functions.runtime.shared.policy import spec_hash
from functions.runtime.shared.report import Report
from tests.unit.hubsim import make_spec

NOW = 1_800_000_000.0


def report(spec, name, *, needed=0, ready=4, static=0, headroom=0, **signals) -> Report:
    return Report(
        time=NOW - 5,
        spec_hash=spec_hash(spec, name),
        ready=ready,
        desired=ready,
        scheduled=ready,
        needed=needed,
        static_room=static,
        node_pool_headroom=headroom,
        **signals,
    )


def three(**fields) -> list[dict]:
    base = [
        {"name": "a", "region": "r1", "maxReplicas": 10},
        {"name": "b", "region": "r2", "maxReplicas": 10},
        {"name": "c", "region": "r3", "maxReplicas": 10},
    ]
    for entry in base:
        entry.update(fields.get(entry["name"], {}))
    return base


def added(decision) -> dict[str, str]:
    return {c.cluster: c.message for c in decision.changes if c.action == ADD_CAPACITY}


# --- capacity ---------------------------------------------------------------------------


def test_the_cheaper_of_two_equal_helpers_is_asked_first():
    spec = make_spec(clusters=three(b={"costRank": 5}, c={"costRank": 1}), route=None)
    reports = {
        "a": report(spec, "a", needed=2),
        "b": report(spec, "b", static=4),
        "c": report(spec, "c", static=4),
    }
    fleet = FleetStatus(clusters=(ClusterFleet("a", short_since=NOW - 600),))
    decision = plan(HubState("a/hub", reports, fleet), spec, NOW)
    assert list(added(decision)) == ["c"]
    # Without a cost rank the one with more room, then the name, decides: b.
    spec = make_spec(clusters=three(), route=None)
    reports = {
        n: report(spec, n, needed=r.needed, static=r.static_room) for n, r in reports.items()
    }
    assert list(added(plan(HubState("a/hub", reports, fleet), spec, NOW))) == ["b"]


@pytest.mark.parametrize(
    ("placement", "escalates_after"), [("LocalFirst", 120.0), ("StaticFirst", 30.0)]
)
def test_static_first_borrows_idle_nodes_before_home_launches(placement, escalates_after):
    # Home could launch nodes itself (headroom), and b has idle nodes (static room).
    spec = make_spec(clusters=three(), route=None, placement=placement)
    reports = {
        "a": report(spec, "a", needed=2, headroom=6),
        "b": report(spec, "b", static=3),
        "c": report(spec, "c"),
    }
    first = None
    for t in range(0, 200, 10):
        fleet = FleetStatus(clusters=(ClusterFleet("a", short_since=NOW),))
        fresh = {n: replace(r, time=NOW + t - 5) for n, r in reports.items()}
        if added(plan(HubState("a/hub", fresh, fleet), spec, NOW + t)):
            first = float(t)
            break
    assert first == escalates_after


def test_a_second_policy_does_not_count_room_the_first_reserved():
    spec = make_spec(clusters=three(), route=None)
    reports = {
        "a": report(spec, "a", needed=4),
        "b": report(spec, "b", static=2),
        "c": report(spec, "c"),
    }
    fleet = FleetStatus(clusters=(ClusterFleet("a", short_since=NOW - 600),))
    first = plan(HubState("a/hub", reports, fleet), spec, NOW)
    assert "b" in added(first)
    reserved = reservations(first)
    assert reserved == {"b": 2}  # raised by 2, none on a node yet
    # Another model short on the same member at the same time sees b's room taken.
    second = plan(HubState("a/hub", reports, fleet, reserved=reserved), spec, NOW)
    assert "b" not in added(second)
    assert "no other cluster has room" in second.message
    # Once b's replicas are on nodes its report shows the room used; nothing is reserved.
    landed = {**reports, "b": report(spec, "b", ready=6, static=0)}
    assert reservations(plan(HubState("a/hub", landed, first.fleet), spec, NOW + 10)) == {}


# --- traffic ----------------------------------------------------------------------------


def test_steady_weights_move_toward_the_configured_ones_a_step_per_cooldown():
    spec = make_spec(clusters=three(a={"weight": 60}), traffic={"stepPercent": 10})
    reports = {n: report(spec, n) for n in ("a", "b", "c")}
    fleet = FleetStatus(
        clusters=tuple(ClusterFleet(n, weight=w) for n, w in zip("abc", (34, 33, 33), strict=True))
    )
    seen = []
    now = NOW
    for _ in range(8):
        fresh = {n: replace(r, time=now - 5) for n, r in reports.items()}
        decision = plan(HubState("a/hub", fresh, fleet), spec, now)
        fleet = decision.fleet
        seen.append(decision.weights)
        now += 60
    assert seen[0]["a"] == 44
    assert sum(seen[0].values()) == 100
    assert seen[-1] == {"a": 60, "b": 20, "c": 20}


def test_weights_stay_within_their_bounds_while_spreading():
    spec = make_spec(
        clusters=three(a={"minWeight": 40}, b={"maxWeight": 35}),
        traffic={"stepPercent": 30},
    )
    reports = {
        "a": report(spec, "a", needed=6, ready=2, pressure=20.0),
        "b": report(spec, "b", ready=8, pressure=1.0),
        "c": report(spec, "c", ready=8, pressure=2.0),
    }
    fleet = FleetStatus(
        phase=PHASE_ESCALATED,
        clusters=tuple(
            ClusterFleet(n, weight=w, steady_weight=w, short_since=NOW - 600 if n == "a" else None)
            for n, w in zip("abc", (60, 20, 20), strict=True)
        ),
    )
    now = NOW
    for _ in range(10):
        fresh = {n: replace(r, time=now - 5) for n, r in reports.items()}
        decision = plan(HubState("a/hub", fresh, fleet), spec, now)
        fleet = decision.fleet
        w = decision.weights
        assert sum(w.values()) == 100
        assert w["a"] >= 40
        assert w["b"] <= 35
        now += 60
    assert w["a"] == 40
    assert w["b"] == 35


def test_weights_outside_new_bounds_are_fitted_at_once_and_written():
    spec = make_spec(clusters=three(c={"maxWeight": 10}))
    reports = {n: report(spec, n) for n in ("a", "b", "c")}
    fleet = FleetStatus(
        clusters=tuple(ClusterFleet(n, weight=w) for n, w in zip("abc", (34, 33, 33), strict=True))
    )
    decision = plan(HubState("a/hub", reports, fleet), spec, NOW)
    assert decision.weights["c"] == 10
    assert sum(decision.weights.values()) == 100
    assert decision.weights_changed
    assert "within minWeight/maxWeight" in decision.message


def test_a_saturated_member_gives_traffic_and_never_gains_it():
    spec = make_spec(
        clusters=three(),
        signals={"demand": "d", "pressure": "p", "saturation": "s"},
        saturationThreshold=0.8,
    )
    reports = {
        "a": report(spec, "a", needed=2, pressure=9.0, saturation=0.95),
        "b": report(spec, "b", ready=8, pressure=2.0, saturation=0.85),  # saturated too
        "c": report(spec, "c", ready=8, pressure=3.0, saturation=0.5),
    }
    fleet = FleetStatus(
        phase=PHASE_ESCALATED,
        clusters=tuple(
            ClusterFleet(n, weight=w, steady_weight=w, short_since=NOW - 600 if n == "a" else None)
            for n, w in zip("abc", (50, 25, 25), strict=True)
        ),
    )
    decision = plan(HubState("a/hub", reports, fleet), spec, NOW)
    shifts = [c for c in decision.changes if c.action == SHIFT_TRAFFIC]
    assert [c.cluster for c in shifts] == ["c"]  # b is less busy but saturated
    assert decision.weights["b"] == 25


# --- validation, reports and the decision log -------------------------------------------


@pytest.mark.parametrize(
    ("clusters", "rule"),
    [
        (three(a={"weight": 70}, b={"weight": 40}), "sum to at most 100"),
        (three(a={"minWeight": 50, "maxWeight": 40}), "minWeight must not exceed maxWeight"),
        (three(a={"maxWeight": 20}, b={"maxWeight": 20}, c={"maxWeight": 20}), "at least 100"),
    ],
)
def test_inconsistent_weights_are_refused_naming_the_rule(clusters, rule):
    with pytest.raises(ValidationError, match=rule):
        make_spec(clusters=clusters)


def test_hub_only_fields_do_not_change_a_members_spec_hash():
    # A member ignored until it catches up would be the price of changing a weight.
    plain = make_spec(clusters=three())
    tuned = make_spec(clusters=three(a={"weight": 50, "minWeight": 10, "costRank": 3}))
    assert spec_hash(plain, "a") == spec_hash(tuned, "a")
    # What the member's report is computed from does.
    own = make_spec(clusters=three(a={"replicaCapacity": 3}))
    assert spec_hash(plain, "a") != spec_hash(own, "a")


def test_extra_metrics_and_saturation_travel_in_the_report_and_outcome_lines():
    spec = make_spec(
        clusters=three(),
        signals={"demand": "d", "saturation": "s", "extra": [{"name": "waiting", "promql": "w"}]},
    )
    r = report(spec, "a", saturation=0.5, extra={"waiting": 7.0})
    assert Report.from_status(r.to_status()) == r
    assert r.to_status()["extra"] == {"waiting": 7.0}
    stream = io.StringIO()
    log = DecisionLog(stream, checkpoints=(60,))
    reports = {"a": r, "b": report(spec, "b", needed=2), "c": report(spec, "c", static=2)}
    fleet = FleetStatus(clusters=(ClusterFleet("b", short_since=NOW - 600),))
    decision = plan(HubState("a/hub", reports, fleet), spec, NOW)
    log.record(decision, "ns/llm", "auto", applied=True)
    log.observe("ns/llm", NOW + 60, reports, decision.fleet)
    lines = [json.loads(x) for x in stream.getvalue().splitlines()]
    assert lines[0]["reports"]["a"]["extra"] == {"waiting": 7.0}
    assert lines[1]["clusters"]["a"]["extra"] == {"waiting": 7.0}
    assert lines[1]["clusters"]["a"]["saturation"] == 0.5


def test_a_deployments_weights_are_shares_of_the_clusters_it_uses():
    used = [{"name": "a", "weight": 30}, {"name": "b", "weight": 30}]
    assert [e["weight"] for e in fit_cluster_weights(used)] == [50, 50]
    # Bounds that cannot add up to 100 over the used clusters are dropped, weights kept.
    bounded = [
        {"name": "a", "weight": 50, "maxWeight": 50},
        {"name": "b", "weight": 50, "maxWeight": 40},
    ]
    fitted = fit_cluster_weights(bounded)
    assert all("maxWeight" not in e for e in fitted)
    # Weights that still break a bound after rescaling are dropped: equal shares.
    clash = [
        {"name": "a", "weight": 10, "maxWeight": 40},
        {"name": "b", "weight": 10, "maxWeight": 60},
    ]
    assert all("weight" not in e for e in fit_cluster_weights(clash))


def test_a_route_named_twice_is_refused_naming_the_rule():
    with pytest.raises(ValidationError, match=r"traffic.routes\[\] must be unique"):
        make_spec(traffic={"routes": [{"name": "r"}, {"name": "r", "namespace": None}]})
    # The same name in another namespace is another route.
    spec = make_spec(traffic={"routes": [{"name": "r"}, {"name": "r", "namespace": "gw"}]})
    assert [(r.name, r.namespace) for r in spec.routes] == [("llm", None), ("r", None), ("r", "gw")]
