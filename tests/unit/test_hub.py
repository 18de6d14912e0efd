"""Scripted simulations of the hub's pure step (`plan`), one scenario per test.

Each scenario runs the hub every 10 s against tests/unit/hubsim.py's small world, whose
members answer the hub's floors the way their reports would, and asserts what the
hub decided and when.
"""

import itertools
import math

from functions.runtime.hub.decision import (
    ADD_CAPACITY,
    EVENT_MEMBERS_OUT_OF_SYNC,
    EVENT_RELEASE_HELD,
    EVENT_REPLICAS_NOT_READY,
    RELEASE_CAPACITY,
    SHIFT_TRAFFIC,
    HubState,
)
from functions.runtime.hub.fleet import (
    HOME_TIER,
    PHASE_ESCALATED,
    PHASE_RECOVERING,
    PHASE_STEADY,
    ClusterFleet,
    FleetStatus,
)
from functions.runtime.hub.plan import plan
from tests.unit.hubsim import Member, World, make_spec


def burst(at: float, before: float, after: float, member: str = "home"):
    def demand(name: str, now: float) -> float:
        if name != member:
            return 0.0
        return after if now >= at else before

    return demand


def changes(decisions, action, cluster=None):
    return [
        (d.time, c)
        for d in decisions
        for c in d.changes
        if c.action == action and (cluster is None or c.cluster == cluster)
    ]


def events(world, reason, since=0.0):
    return [(t, e) for t, e in world.events if e.reason == reason and t >= since]


def no_route_world(home: Member, *helpers: Member, demand=None, **spec) -> World:
    clusters = [{"name": home.name, "region": "us-east-1", "maxReplicas": 10}]
    clusters += [
        {"name": h.name, "region": spec.pop(f"{h.name}_region", "eu-west-1"), "maxReplicas": 6}
        for h in helpers
    ]
    policy = make_spec(route=None, clusters=clusters, **spec)
    members = {m.name: m for m in (home, *helpers)}
    return World(policy, members, demand or burst(60, 40, 80))


# --- capacity -----------------------------------------------------------------------------


def test_a_burst_at_home_borrows_the_helpers_static_room_a_step_per_cooldown():
    world = no_route_world(Member("home", own=4), Member("helper", own=2, static_room=4))
    decisions = world.run(until=400)

    added = changes(decisions, ADD_CAPACITY, "helper")
    # home's NodePools cannot help (no headroom): earlyAfter (30 s) after the shortage.
    assert added[0][0] == 90
    assert [c.message for _, c in added] == [
        "+2 on helper (static room) for home",
        "+2 on helper (static room) for home",
    ]
    assert added[1][0] - added[0][0] == 60  # cooldown
    helper = world.fleet.cluster("helper")
    assert (helper.floor, helper.static, helper.tier) == (6, True, 1)
    assert world.fleet.phase == PHASE_ESCALATED
    assert world.fleet.cluster("home").floor == 0  # home scales on its own


def test_a_helper_with_only_nodepool_headroom_is_used_and_not_marked_static():
    world = no_route_world(Member("home", own=4), Member("helper", own=2, headroom=4))
    decisions = world.run(until=400)
    added = changes(decisions, ADD_CAPACITY, "helper")
    assert added[0][1].message == "+2 on helper (NodePool headroom) for home"
    helper = world.fleet.cluster("helper")
    assert (helper.floor, helper.static) == (6, False)


def test_static_room_is_preferred_over_nodepool_headroom_elsewhere():
    world = no_route_world(
        Member("home", own=4),
        Member("pools", own=1, headroom=6),
        Member("spare", own=1, static_room=2),
        demand=burst(60, 40, 70),  # 3 short
    )
    decisions = world.run(until=200)
    first = changes(decisions, ADD_CAPACITY)
    assert [c.cluster for _, c in first][:2] == ["spare", "pools"]
    assert world.fleet.cluster("spare").floor == 3
    assert world.fleet.cluster("pools").floor == 2  # the 1 replica spare could not take


def test_nodepool_headroom_in_another_region_is_preferred_to_homes_region():
    # Same-region pools share the cloud capacity home could not get.
    world = no_route_world(
        Member("home", own=4),
        Member("near", own=1, headroom=6),
        Member("far", own=1, headroom=4),
        demand=burst(60, 40, 60),  # 2 short
        near_region="us-east-1",
        far_region="eu-west-1",
    )
    decisions = world.run(until=200)
    assert [c.cluster for _, c in changes(decisions, ADD_CAPACITY)] == ["far"]


def test_waits_after_when_homes_own_nodepools_can_still_help():
    # home has NodePool headroom, but its nodes launch slower than `after`: the hub
    # leaves home alone for 2 minutes, not 30 seconds.
    world = no_route_world(
        Member("home", own=4, headroom=10, launch_seconds=600),
        Member("helper", own=2, static_room=4),
    )
    decisions = world.run(until=400)
    added = changes(decisions, ADD_CAPACITY, "helper")
    assert added[0][0] == 60 + 120


def test_escalates_after_early_after_when_homes_nodepools_are_exhausted():
    world = no_route_world(
        Member("home", own=4, headroom=0), Member("helper", own=2, static_room=4)
    )
    decisions = world.run(until=200)
    assert changes(decisions, ADD_CAPACITY, "helper")[0][0] == 60 + 30


def test_a_floor_never_exceeds_the_helpers_max_replicas():
    world = no_route_world(
        Member("home", own=4),
        Member("helper", own=2, static_room=10),
        demand=burst(60, 40, 200),  # 16 short
    )
    decisions = world.run(until=900)
    assert world.fleet.cluster("helper").floor == 6  # maxReplicas
    assert all(c.floor <= 6 for d in decisions for c in d.fleet.clusters if c.name == "helper")
    assert world.last.message == "12 replicas short and no other cluster has room"


def test_escalated_with_no_room_anywhere_says_how_many_are_short():
    world = no_route_world(Member("home", own=4), Member("helper", own=6))
    decisions = world.run(until=200)
    assert [d.action for d in decisions] == ["Escalate"]
    assert decisions[0].message == "4 replicas short and no other cluster has room"
    assert world.fleet.phase == PHASE_ESCALATED


# --- waiting replicas ---------------------------------------------------------------------


def test_replicas_that_never_reach_a_node_are_taken_back_and_the_helper_skipped():
    world = no_route_world(
        Member("home", own=4, headroom=0),
        Member("stuck", own=1, headroom=4, launch_seconds=math.inf),  # launches fail
        Member("spare", own=1, headroom=2),
        demand=burst(60, 40, 60),  # 2 short
        stuck_region="ap-south-1",
    )
    decisions = world.run(until=1400)
    taken = changes(decisions, RELEASE_CAPACITY, "stuck")
    assert taken[0][1].message == "-2 on stuck: not on a node after 10m"
    took_back_at = taken[0][0]
    assert took_back_at == 90 + 600
    assert world.fleet.cluster("stuck").skipped_until == took_back_at + 600
    # The shortage goes elsewhere in the same step, and not back to `stuck` while skipped.
    moved = changes(decisions, ADD_CAPACITY, "spare")
    assert moved[0][0] == took_back_at
    assert not [t for t, _ in changes(decisions, ADD_CAPACITY, "stuck") if t > took_back_at]
    assert world.fleet.cluster("stuck").floor == 0


def test_replicas_on_nodes_but_not_ready_raise_replicas_not_ready_and_keep_the_floor():
    world = no_route_world(
        Member("home", own=4), Member("helper", own=2, static_room=4, becomes_ready=False)
    )
    world.run(until=1000)
    not_ready = events(world, EVENT_REPLICAS_NOT_READY)
    assert len(not_ready) == 1  # once per raise, not every step
    assert not_ready[0][0] == 150 + 600  # the second raise at 150 s, plus readyTimeout
    assert world.fleet.cluster("helper").floor == 6


# --- traffic ------------------------------------------------------------------------------


def traffic_world(**members) -> World:
    policy = make_spec(
        clusters=[
            {"name": "home", "region": "us-east-1", "maxReplicas": 10},
            {"name": "helper", "region": "eu-west-1", "maxReplicas": 8},
        ],
        latencySLO=1.0,
    )
    return World(
        policy,
        {
            "home": members.get("home", Member("home", own=5)),
            "helper": members.get("helper", Member("helper", own=1, static_room=5)),
        },
        members.get("demand", burst(60, 50, 90)),
        initial_weights={"home": 100, "helper": 0},
    )


def test_traffic_moves_at_most_step_percent_per_cooldown_to_the_least_busy_member():
    world = traffic_world()
    decisions = world.run(until=900)
    shifts = changes(decisions, SHIFT_TRAFFIC)
    assert shifts, "an escalated burst with a ready helper shifts traffic"
    assert all(c.cluster == "helper" for _, c in shifts)
    weights = [d.fleet.cluster("helper").weight for d in decisions if d.weights_changed]
    steps = [b - a for a, b in zip([0, *weights], weights, strict=False)]
    assert all(0 < s <= 10 for s in steps)
    times = [t for t, _ in shifts]
    assert all(b - a >= 60 for a, b in itertools.pairwise(times))
    assert sum(world.fleet.cluster(n).weight for n in ("home", "helper")) == 100


def test_no_traffic_goes_to_a_member_over_its_latency_slo():
    world = traffic_world(helper=Member("helper", own=1, static_room=5, latency=2.5))
    decisions = world.run(until=900)
    assert changes(decisions, SHIFT_TRAFFIC) == []
    assert world.fleet.cluster("helper").weight == 0


def recovering_world(home: Member, total: float, weights=(0, 100)) -> World:
    """Escalated earlier: all traffic on `helper`; the shortage has just ended."""
    policy = make_spec(latencySLO=1.0)
    world = World(
        policy,
        {"home": home, "helper": Member("helper", own=6)},
        lambda name, now: total if name == "home" else 0.0,
        initial_weights={"home": weights[0], "helper": weights[1]},
    )
    world.fleet = FleetStatus(
        phase=PHASE_ESCALATED,
        clusters=(
            ClusterFleet("helper", weight=weights[1], steady_weight=0),
            ClusterFleet("home", weight=weights[0], steady_weight=100),
        ),
    )
    return world


def test_a_full_return_at_ten_percent_takes_ten_calm_for():
    world = recovering_world(Member("home", own=6), total=50)
    decisions = world.run(until=7000)
    returns = [t for t, c in changes(decisions, SHIFT_TRAFFIC) if c.cluster == "home"]
    assert returns == [600 * k for k in range(1, 11)]  # calm since 0, calmFor 10m
    assert world.fleet.cluster("home").weight == 100
    assert world.fleet.phase == PHASE_STEADY


def test_return_raises_homes_floor_first_when_home_would_exceed_safe_pressure():
    home = Member("home", own=1, static_room=3, safe_pressure=5.0)
    world = recovering_world(home, total=60)
    world.members["helper"].safe_pressure = 5.0
    decisions = world.run(until=800)
    raised = changes(decisions, ADD_CAPACITY, "home")
    assert raised[0][0] == 600
    assert raised[0][1].message == (
        "+1 on home first: returning 10% to home would take its pressure to 6, above safePressure 5"
    )
    assert world.fleet.cluster("home").tier == HOME_TIER
    # The return resumes as soon as home's new replica is ready (it loads for 60 s).
    returned = changes(decisions, SHIFT_TRAFFIC, "home")
    assert [t for t, _ in returned] == [670]


def test_return_holds_when_home_cannot_take_it_and_has_no_room():
    home = Member("home", own=1, safe_pressure=5.0)
    world = recovering_world(home, total=60)
    world.members["helper"].safe_pressure = 5.0
    world.run(until=1300)
    assert world.fleet.cluster("home").weight == 0
    last = plan(
        HubState("home/agent-0", dict(world.last_reports), world.fleet), world.spec, world.now
    )
    assert "above safePressure 5" in last.message


def test_no_traffic_returns_to_a_home_over_its_slo():
    world = recovering_world(Member("home", own=6, latency=3.0), total=50)
    world.run(until=1300)
    assert world.fleet.cluster("home").weight == 0
    assert world.last.message == "return held: home is over its latency or error SLO"


# --- release ------------------------------------------------------------------------------


def released_world(**helper) -> World:
    world = no_route_world(
        Member("home", own=4),
        Member("helper", own=2, static_room=4, **helper),
        demand=lambda name, now: (
            80.0 if name == "home" and 60 <= now < 400 else 40.0 * (name == "home")
        ),
    )
    return world


def test_floors_are_released_after_calm_for_one_step_at_a_time():
    world = released_world()
    decisions = world.run(until=2000)
    released = changes(decisions, RELEASE_CAPACITY, "helper")
    assert released[0][0] >= 400 + 600
    assert [c.message for _, c in released] == ["-2 on helper", "-4 on helper (floor released)"]
    assert world.fleet.phase == PHASE_STEADY


def test_release_is_held_while_the_member_does_not_report():
    world = released_world()
    world.run(until=700)
    world.members["helper"].reports = False  # its agent stops before the calm ends
    decisions = world.run(until=1300)
    assert changes(decisions, RELEASE_CAPACITY) == []
    held = events(world, EVENT_RELEASE_HELD)
    assert len(held) == 1  # raised when the list changes
    assert "helper" in held[0][1].message
    assert world.fleet.cluster("helper").floor == 6
    world.members["helper"].reports = True
    resumed = world.run(until=1500)
    assert changes(resumed, RELEASE_CAPACITY, "helper")


def test_higher_tiers_are_released_first_and_home_last():
    policy = make_spec(
        route=None,
        clusters=[
            {"name": "home", "maxReplicas": 10},
            {"name": "a", "maxReplicas": 6},
            {"name": "b", "maxReplicas": 6},
        ],
    )
    fleet = FleetStatus(
        phase=PHASE_RECOVERING,
        calm_since=0,
        clusters=(
            ClusterFleet("a", floor=4, tier=1, base=2),
            ClusterFleet("b", floor=4, tier=2, base=2),
            ClusterFleet("home", floor=6, tier=HOME_TIER, base=4),
        ),
    )
    world = World(
        policy,
        {"home": Member("home", own=6), "a": Member("a", own=4), "b": Member("b", own=4)},
        lambda n, t: 0.0,
    )
    world.fleet = fleet
    world.now = 700
    decisions = world.run(until=1200)
    order = [c.cluster for _, c in changes(decisions, RELEASE_CAPACITY)]
    assert order == ["b", "a", "home"]


# --- reports the hub cannot use -----------------------------------------------------------


def test_an_out_of_sync_member_is_ignored_and_named_once():
    world = no_route_world(
        Member("home", own=4), Member("helper", own=2, static_room=4, spec_hash="0" * 16)
    )
    decisions = world.run(until=300)
    assert changes(decisions, ADD_CAPACITY) == []
    assert decisions[0].reports["helper"] is None
    out = events(world, EVENT_MEMBERS_OUT_OF_SYNC)
    assert len(out) == 1
    assert world.fleet.out_of_sync == ("helper",)
    assert "no other cluster has room" in decisions[0].message


def test_a_stale_report_is_ignored():
    world = no_route_world(
        Member("home", own=4),
        Member("helper", own=2, static_room=4),
        demand=burst(200, 40, 80),
    )
    world.members["helper"].reports = False
    world.last_reports["helper"] = world.report(world.members["helper"])  # at t=0, then silent
    decisions = world.run(until=400)
    assert changes(decisions, ADD_CAPACITY) == []


# --- shadow -------------------------------------------------------------------------------


def test_shadow_plans_exactly_what_auto_plans_from_the_same_state():
    world = traffic_world()
    world.run(until=1500)
    shadow = world.spec.model_copy(update={"mode": "shadow"})
    for state, now in world.states:
        assert plan(state, shadow, now) == plan(state, world.spec, now)
