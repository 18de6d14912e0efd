"""Hundreds of seeded random fleets, for hours of simulated time each, through the real
`plan` step, with the invariants checked after every step.

Each fleet is drawn from its seed: 2 to 6 members (own replicas, static room, NodePool
headroom, maxReplicas, regions, launch and load times, latency), the escalation and
traffic knobs, and bursty demand. Faults come and go at random: a member stops
reporting (its report goes stale), its copy of the policy diverges (out of sync), its
NodePools stop launching, replicas land on nodes but never turn ready, and the hub
changes (its memory goes through the `status.fleet` codec, as a new hub reads it). Every
fleet ends with a calm tail without faults, long enough for traffic to return and every
floor to go.

The policy's optional fields are drawn too: `placement`, `costRank`, weight bounds around
the Steady weights (and the Steady weights as `clusters[].weight`), a `saturation`
signal that follows load, several routes; and another policy's floors reserving room on
a member now and then (`HubState.reserved`).

Invariants, every step:
- no floor above the member's maxReplicas;
- weights within each member's minWeight..maxWeight and summing to 100;
- no member over its latency SLO or saturated gains traffic;
- a helper never gets more replicas than its room less what other policies reserved;
- a floor goes down only on a member whose report the hub could use;
- nothing stays escalated while a helper with static room stands idle for 30 minutes;
and at the end of the calm tail: Steady, no floor, weights back where they started.

The default run (a few tens of seconds) is part of `make test`. A longer soak:

    MODELPLANE_SIM_FLEETS=2000 MODELPLANE_SIM_HOURS=6 \
        .venv/bin/pytest tests/unit/test_hub_simulation.py -s

On failure the message names the seed; `run_fleet(seed, hours)` replays it alone.
"""

from __future__ import annotations

import math
import os
import random
from dataclasses import dataclass, field

import pytest

from functions.runtime.hub.decision import ADD_CAPACITY, Decision
from functions.runtime.hub.fleet import PHASE_ESCALATED, PHASE_STEADY, FleetStatus
from functions.runtime.shared.policy import PolicySpec
from tests.unit.hubsim import REPLICA_CAPACITY, Member, World

FLEETS = int(os.environ.get("MODELPLANE_SIM_FLEETS", "200"))
HOURS = float(os.environ.get("MODELPLANE_SIM_HOURS", "1"))
CHUNKS = 8  # so a failure names a small range of seeds, and -x stops early
STEP_SECONDS = 10.0
STUCK_SECONDS = 1800.0


@dataclass
class Totals:
    fleets: int = 0
    simulated_seconds: float = 0.0
    steps: int = 0
    decisions: int = 0
    hub_changes: int = 0
    breaks: list[str] = field(default_factory=list)


TOTALS = Totals()


def random_spec(
    rng: random.Random, names: list[str], maxima: dict[str, int], steady: dict[str, int]
) -> PolicySpec:
    regions = ["us-east-1", "eu-west-1", "ap-south-1"]
    clusters = []
    bounded = rng.random() < 0.4
    configured = rng.random() < 0.3
    for n in names:
        entry = {"name": n, "region": rng.choice(regions), "maxReplicas": maxima[n]}
        if rng.random() < 0.5:
            entry["costRank"] = rng.randint(0, 3)
        if bounded:  # around the Steady weight, so the calm tail can bring it back
            entry["minWeight"] = rng.randint(0, steady[n])
            entry["maxWeight"] = rng.randint(steady[n], 100)
        if configured:
            entry["weight"] = steady[n]
        clusters.append(entry)
    raw = {
        "mode": "auto",
        "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
        "clusters": clusters,
        "placement": rng.choice(["LocalFirst", "StaticFirst"]),
        "signals": {"demand": "d", "pressure": "p", "latency": "l"},
        "capacity": {"replicaCapacity": REPLICA_CAPACITY},
        "route": {"name": "llm"},
        "escalation": {
            "step": rng.choice([1, 2, 3]),
            "after": f"{rng.choice([60, 120, 180])}s",
            "earlyAfter": f"{rng.choice([20, 30, 60])}s",
            "readyTimeout": f"{rng.choice([300, 600])}s",
            "calmFor": f"{rng.choice([120, 300, 600])}s",
            "cooldown": f"{rng.choice([30, 60])}s",
        },
        "traffic": {"stepPercent": rng.choice([10, 20, 25, 50])},
    }
    if rng.random() < 0.6:
        raw["latencySLO"] = 1.0
    if rng.random() < 0.4:
        raw["signals"]["saturation"] = "s"
        raw["saturationThreshold"] = rng.choice([0.8, 0.9, 1.0])
    if rng.random() < 0.3:
        raw["traffic"]["routes"] = [{"name": "llm-internal", "namespace": "gw"}]
    return PolicySpec.model_validate(raw)


def random_world(seed: int) -> tuple[World, random.Random, dict[str, float]]:
    rng = random.Random(seed)
    names = ["home"] + [f"m{i}" for i in range(1, rng.randint(2, 6))]
    members = {}
    maxima = {}
    for n in names:
        own = rng.randint(1, 4)
        members[n] = Member(
            n,
            own=own,
            static_room=rng.choice([0, 0, 1, 2, 4]),
            headroom=rng.choice([0, 0, 2, 4]),
            launch_seconds=rng.choice([60.0, 90.0, 300.0]),
            load_seconds=rng.choice([30.0, 60.0, 180.0]),
            safe_pressure=rng.choice([None, 8.0, 9.0]),
        )
        maxima[n] = own + rng.randint(0, 6)
    spec = random_spec(rng, names, maxima, _by_capacity(members))
    # Bursty demand per member: piecewise constant, each piece 5 to 40 minutes.
    base = {n: 0.5 * m.own * REPLICA_CAPACITY for n, m in members.items()}
    pieces: dict[str, list[tuple[float, float]]] = {}
    for n in names:
        t, out = 0.0, []
        while t < HOURS * 3600:
            level = base[n] * rng.choice([0.0, 1.0, 1.0, 2.0, 3.0, 5.0])
            out.append((t, level))
            t += rng.uniform(300, 2400)
        pieces[n] = out
    calm_from = {"t": math.inf}

    def demand(name: str, now: float) -> float:
        if now >= calm_from["t"]:
            return base[name]
        level = base[name]
        for start, value in pieces[name]:
            if start > now:
                break
            level = value
        return level

    world = World(spec, members, demand, initial_weights=_by_capacity(members))
    return world, rng, calm_from


def _by_capacity(members: dict[str, Member]) -> dict[str, int]:
    """Steady weights an operator would set: each member's share of the own replicas
    (so that calm demand is servable where it lands; equal shares on unequal members
    would leave a small member over its safePressure for good, and the return held)."""
    total = sum(m.own for m in members.values())
    exact = {n: 100 * m.own / total for n, m in members.items()}
    weights = {n: math.floor(v) for n, v in exact.items()}
    for n in sorted(exact, key=lambda n: (weights[n] - exact[n], n))[: 100 - sum(weights.values())]:
        weights[n] += 1
    return weights


def _over_slo(spec: PolicySpec, decision: Decision, name: str) -> bool:
    report = decision.reports.get(name)
    if report is None:
        return False
    saturated = (
        spec.signals.saturation is not None
        and report.saturation is not None
        and report.saturation >= spec.saturation_threshold
    )
    slow = (
        spec.latency_slo is not None
        and report.latency is not None
        and report.latency > spec.latency_slo
    )
    return saturated or slow


def check_step(world: World, decision: Decision, seed: int, idle_since: dict) -> list[str]:
    spec, now = world.spec, world.now
    where = f"seed {seed} t={now:.0f}s"
    breaks = []
    before = {c.name: c for c in decision.before.clusters}
    weights = {}
    for c in decision.fleet.clusters:
        entry = spec.cluster(c.name)
        if c.floor > entry.max_replicas:
            breaks.append(f"{where}: {c.name} floor {c.floor} > maxReplicas {entry.max_replicas}")
        if c.weight is not None:
            weights[c.name] = c.weight
            if not entry.min_weight <= c.weight <= entry.max_weight:
                breaks.append(
                    f"{where}: {c.name} weight {c.weight} outside"
                    f" {entry.min_weight}..{entry.max_weight}"
                )
        was = before.get(c.name)
        if was is not None and c.floor < was.floor and decision.reports.get(c.name) is None:
            breaks.append(f"{where}: {c.name} floor {was.floor}->{c.floor} without a usable report")
        if (
            was is not None
            and (c.weight or 0) > (was.weight or 0)
            and _over_slo(spec, decision, c.name)
        ):
            breaks.append(f"{where}: {c.name} over its SLO gained traffic")
        report = decision.reports.get(c.name)
        if was is not None and c.tier is not None and c.tier > 0 and c.floor > was.floor:
            # Room a helper had for this policy: its own, less its pending replicas and
            # what other policies' floors reserved there.
            assert report is not None
            pending = max(0, was.floor - report.scheduled) if was.floor else 0
            room = report.static_room + report.node_pool_headroom
            room -= pending + world.reserved.get(c.name, 0)
            grown = c.floor - max(was.floor, report.desired)
            if grown > max(0, room):
                breaks.append(f"{where}: {c.name} +{grown} with room {room} after reservations")
    if weights and sum(weights.values()) != 100:
        breaks.append(f"{where}: weights {weights} sum to {sum(weights.values())}")
    # Escalated while a usable helper with static room, below its maxReplicas, is idle.
    idle_helper = decision.fleet.phase == PHASE_ESCALATED and any(
        r is not None
        and r.needed == 0
        and r.static_room > 0
        and (c := decision.fleet.cluster(n)) is not None
        and max(c.floor, r.desired) < spec.cluster(n).max_replicas
        and (c.skipped_until is None or now >= c.skipped_until)
        and (c.last_step_at is None or now - c.last_step_at >= STUCK_SECONDS)
        for n, r in decision.reports.items()
    )
    short = any(r is not None and r.needed > 0 for r in decision.reports.values())
    if not (idle_helper and short) or any(ch.action == ADD_CAPACITY for ch in decision.changes):
        idle_since.clear()
    else:
        idle_since.setdefault("t", now)
        if now - idle_since["t"] >= STUCK_SECONDS:
            breaks.append(f"{where}: escalated for 30 min with an idle helper with room")
            idle_since.clear()
    return breaks


def run_fleet(seed: int, hours: float = HOURS) -> Totals:
    world, rng, calm_from = random_world(seed)
    totals = Totals(fleets=1)
    spec = world.spec
    esc = spec.escalation
    start_weights = dict(world.initial_weights)
    # The calm tail: long enough for every return step (one stepPercent per calmFor) and
    # every release (one step per cooldown per member), plus the calm itself.
    returns = math.ceil(100 / spec.traffic.step_percent) + 2
    releases = sum(c.max_replicas for c in spec.clusters)
    tail = esc.calm_for * (returns + 2) + (releases / esc.step + 2) * max(esc.cooldown, 10) * 2
    end_faults = hours * 3600
    calm_from["t"] = end_faults
    idle_since: dict = {}
    faults: dict[str, float] = {}
    while world.now <= end_faults + tail:
        if world.now < end_faults:
            _faults(world, rng, faults)
        else:
            _heal(world)
        _latency_follows_load(world, faults)
        decision = world.step()
        totals.steps += 1
        totals.decisions += int(decision.changed)
        totals.breaks += check_step(world, decision, seed, idle_since)
        if world.now < end_faults and rng.random() < 0.003:
            # A hub change: the new hub knows only what status.fleet says.
            world.fleet = FleetStatus.from_status(world.fleet.to_status())
            totals.hub_changes += 1
        world.now += STEP_SECONDS
    totals.simulated_seconds = world.now
    fleet = world.fleet
    where = f"seed {seed} after the calm tail ({tail:.0f}s)"
    if fleet.phase != PHASE_STEADY:
        totals.breaks.append(f"{where}: phase {fleet.phase}, not Steady")
    if any(c.floor for c in fleet.clusters):
        totals.breaks.append(f"{where}: floors left {world.last.floors}")
    live = {c.name: c.weight for c in fleet.clusters if c.weight is not None}
    if live and live != start_weights:
        totals.breaks.append(f"{where}: weights {live}, not back to {start_weights}")
    return totals


def _faults(world: World, rng: random.Random, until: dict[str, float]) -> None:
    """Start a fault now and then; end each after a while."""
    for name, m in world.members.items():
        ends = until.get(name)
        if ends is not None and world.now >= ends:
            _heal_member(m)
            world.reserved.pop(name, None)
            del until[name]
        if name in until or rng.random() > 0.002:
            continue
        kind = rng.choice(
            ["stale", "out-of-sync", "launch", "not-ready", "slow", "reserved", "reserved"]
        )
        if kind == "reserved":  # another model's floor waits for this member's room
            world.reserved[name] = rng.randint(1, 6)
        elif kind == "stale":
            m.reports = False
        elif kind == "out-of-sync":
            m.spec_hash = "diverged"
        elif kind == "launch":
            m.launch_fails = True
        elif kind == "not-ready":
            m.becomes_ready = False
        else:
            m.latency = 2.0  # over the SLO where one is set
        until[name] = world.now + rng.uniform(60, 1800)


def _latency_follows_load(world: World, faults: dict[str, float]) -> None:
    """An overloaded member answers slowly: over the SLO while its replicas serve more
    than they can (unless a fault already made it slow)."""
    for name, m in world.members.items():
        ready = sum(1 for r in m.replicas if r.ready(world.now))
        load = world.served(name) / (REPLICA_CAPACITY * max(ready, 1))
        m.saturation = min(1.0, load)
        if name in faults and m.latency is not None:
            continue
        m.latency = 2.0 if load > 1.2 else 0.5


def _heal_member(m: Member) -> None:
    m.reports, m.spec_hash, m.launch_fails, m.becomes_ready, m.latency = (
        True,
        None,
        False,
        True,
        None,
    )
    # Replicas created while it could not become ready turn ready once healed.
    for r in m.replicas:
        if math.isinf(r.load_seconds):
            r.load_seconds = m.load_seconds


def _heal(world: World) -> None:
    for m in world.members.values():
        _heal_member(m)
    world.reserved.clear()


@pytest.mark.parametrize("chunk", range(CHUNKS))
def test_random_fleets_keep_the_invariants(chunk):
    seeds = range(chunk, FLEETS, CHUNKS)
    breaks = []
    for seed in seeds:
        totals = run_fleet(seed)
        TOTALS.fleets += 1
        TOTALS.simulated_seconds += totals.simulated_seconds
        TOTALS.steps += totals.steps
        TOTALS.decisions += totals.decisions
        TOTALS.hub_changes += totals.hub_changes
        breaks += totals.breaks
    TOTALS.breaks += breaks
    assert not breaks, "\n".join(breaks[:20])


def test_the_simulation_reports_what_it_ran():
    """Last in the module: the fleets-by-hours figure, for the run's summary."""
    if TOTALS.fleets:
        print(
            f"\nhub simulation: {TOTALS.fleets} fleets, "
            f"{TOTALS.simulated_seconds / 3600:.0f} simulated hours "
            f"({TOTALS.steps} hub steps, {TOTALS.decisions} decisions, "
            f"{TOTALS.hub_changes} hub changes), {len(TOTALS.breaks)} invariant breaks"
        )
