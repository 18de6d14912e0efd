"""Invariants of the hub's step under random load, rooms and SLO breaches (hypothesis):
no floor above a member's maxReplicas, weights that always add up to 100, no traffic
step larger than stepPercent, and no traffic gained by a member over its latency SLO.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from functions.runtime.hub.decision import SHIFT_TRAFFIC
from tests.unit.hubsim import Member, World, make_spec

member = st.fixed_dictionaries(
    {
        "own": st.integers(0, 4),
        "static_room": st.integers(0, 6),
        "headroom": st.integers(0, 6),
        "launch_seconds": st.sampled_from([30.0, 120.0, 1e9]),
        "becomes_ready": st.booleans(),
        "latency": st.sampled_from([None, 0.5, 3.0]),
        "reports": st.booleans(),
    }
)
# Demand per member: a level and the times it changes to another level.
demand_script = st.lists(st.tuples(st.integers(0, 3000), st.floats(0, 150)), max_size=4)


@settings(max_examples=40, deadline=None)
@given(
    members=st.lists(member, min_size=2, max_size=4),
    scripts=st.lists(demand_script, min_size=4, max_size=4),
    max_replicas=st.lists(st.integers(0, 8), min_size=4, max_size=4),
    step_percent=st.integers(1, 40),
)
def test_floors_and_weights_stay_within_their_limits(members, scripts, max_replicas, step_percent):
    names = [f"m{i}" for i in range(len(members))]
    spec = make_spec(
        clusters=[
            {"name": n, "maxReplicas": max_replicas[i], "region": f"r{i % 2}"}
            for i, n in enumerate(names)
        ],
        traffic={"stepPercent": step_percent},
        latencySLO=1.0,
    )
    script = {n: sorted(scripts[i]) for i, n in enumerate(names)}

    def demand(name: str, now: float) -> float:
        level = 20.0
        for at, value in script[name]:
            if now >= at:
                level = value
        return level

    world = World(spec, {n: Member(n, **members[i]) for i, n in enumerate(names)}, demand)
    caps = {n: max_replicas[i] for i, n in enumerate(names)}
    over_slo = {n for i, n in enumerate(names) if (members[i]["latency"] or 0) > 1.0}
    previous = None
    while world.now <= 3600:
        decision = world.step()
        world.now += 10
        for c in decision.fleet.clusters:
            assert c.floor <= max(caps[c.name], 0) or c.floor == 0
        weights = decision.weights
        assert sum(weights.values()) == 100
        assert all(0 <= w <= 100 for w in weights.values())
        if previous is not None:
            moved = sum(abs(weights[n] - previous[n]) for n in weights) / 2
            assert moved <= step_percent
            for change in decision.changes:
                if change.action == SHIFT_TRAFFIC and change.cluster in over_slo:
                    assert weights[change.cluster] < previous[change.cluster] or (
                        "back home" in change.message
                    )
        previous = weights
