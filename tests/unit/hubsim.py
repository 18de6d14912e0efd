"""A small scripted world for the hub's pure step: members whose replicas follow the
floors the hub sets (scheduled at once on static room, after a node launch on NodePool
headroom, never when neither is there) and whose load follows the route's weights.

It is deliberately simple — the tests assert what the hub decides, and this world only
has to answer the way a member's report would.
"""

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from functions.runtime.hub.decision import Decision, HubState
from functions.runtime.hub.fleet import ClusterFleet, FleetStatus
from functions.runtime.hub.plan import plan
from functions.runtime.shared.policy import PolicySpec, spec_hash
from functions.runtime.shared.report import Report

REPLICA_CAPACITY = 10.0  # demand one replica serves


@dataclass
class Replica:
    scheduled_at: float | None
    load_seconds: float

    def scheduled(self, now: float) -> bool:
        return self.scheduled_at is not None and now >= self.scheduled_at

    def ready(self, now: float) -> bool:
        return self.scheduled_at is not None and now >= self.scheduled_at + self.load_seconds


@dataclass
class Member:
    name: str
    own: int  # replicas it runs before any shortage
    static_room: int = 0  # extra replicas its existing nodes take
    headroom: int = 0  # extra replicas its NodePools can launch
    launch_seconds: float = 90.0
    load_seconds: float = 60.0
    becomes_ready: bool = True  # False: pods land on nodes but never turn ready
    safe_pressure: float | None = 9.0
    latency: float | None = None
    saturation: float | None = None
    reports: bool = True  # False: its agent stopped (the report goes stale)
    launch_fails: bool = False  # True: its NodePools launch nothing (the cloud is out)
    spec_hash: str | None = None  # set to diverge from the hub's copy
    replicas: list[Replica] = field(default_factory=list)

    def capacity_used(self) -> int:
        return len(self.replicas)


@dataclass
class World:
    spec: PolicySpec
    members: dict[str, Member]
    demand: Callable[[str, float], float]  # a member's own demand at a time
    now: float = 0.0
    fleet: FleetStatus = field(default_factory=FleetStatus)
    last_reports: dict[str, Report] = field(default_factory=dict)
    decisions: list[Decision] = field(default_factory=list)
    acting: bool = True  # False: shadow — floors and weights are only recorded
    states: list[tuple[HubState, float]] = field(default_factory=list)
    events: list = field(default_factory=list)  # (time, HubEvent) from every step
    last: Decision | None = None  # the latest step, changed or not

    initial_weights: dict[str, int] | None = None
    # Per member, replicas other policies' floors wait for there (HubState.reserved).
    reserved: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for m in self.members.values():
            m.replicas = [Replica(-1e9, 0.0) for _ in range(m.own)]
        if self.initial_weights is not None and not self.fleet.clusters:
            self.fleet = FleetStatus(
                clusters=tuple(
                    ClusterFleet(n, weight=w) for n, w in sorted(self.initial_weights.items())
                )
            )

    # what each member serves
    def served(self, name: str) -> float:
        if not self.spec.manages_traffic:
            return self.demand(name, self.now)
        total = sum(self.demand(n, self.now) for n in self.members)
        weights = self.weights()
        return total * weights.get(name, 0) / 100.0

    def weights(self) -> dict[str, int]:
        if self.acting:
            live = {c.name: c.weight for c in self.fleet.clusters if c.weight is not None}
            if live:
                return live
        if self.initial_weights is not None:
            return self.initial_weights
        names = sorted(self.members)
        share, extra = divmod(100, len(names))
        return {n: share + (1 if i < extra else 0) for i, n in enumerate(names)}

    def floor(self, name: str) -> int:
        c = self.fleet.cluster(name)
        return c.floor if (c and self.acting) else 0

    def _scale(self, m: Member) -> None:
        want_by_load = math.ceil(self.served(m.name) / REPLICA_CAPACITY - 1e-9)
        # The member's own autoscaler: up to what its own nodes and pools can place.
        own_limit = m.own + m.static_room + m.headroom
        want = max(self.floor(m.name), min(max(want_by_load, m.own), own_limit))
        while len(m.replicas) < want:
            extra = len(m.replicas) - m.own
            if extra < m.static_room:
                at = self.now
            elif extra < m.static_room + m.headroom and not m.launch_fails:
                at = self.now + m.launch_seconds
            else:
                at = None
            m.replicas.append(Replica(at, m.load_seconds if m.becomes_ready else math.inf))
        while len(m.replicas) > want:
            m.replicas.pop()

    def report(self, m: Member) -> Report:
        now = self.now
        scheduled = sum(1 for r in m.replicas if r.scheduled(now))
        ready = sum(1 for r in m.replicas if r.ready(now))
        served = self.served(m.name)
        need = max(0, math.ceil(served / REPLICA_CAPACITY - 1e-9) - scheduled)
        extra = max(0, len(m.replicas) - m.own)
        return Report(
            time=now,
            spec_hash=m.spec_hash or spec_hash(self.spec, m.name),
            ready=ready,
            desired=len(m.replicas),
            scheduled=scheduled,
            needed=need,
            static_room=max(0, m.static_room - extra),
            node_pool_headroom=max(0, m.headroom - max(0, extra - m.static_room)),
            safe_pressure=m.safe_pressure,
            demand=served,
            pressure=served / ready if ready else served,
            latency=m.latency,
            saturation=m.saturation,
            region=self.spec.cluster(m.name).region,
        )

    def step(self) -> Decision:
        for m in self.members.values():
            self._scale(m)
            if m.reports:
                self.last_reports[m.name] = self.report(m)
        state = HubState(
            hub="home/agent-0",
            reports={n: self.last_reports.get(n) for n in self.members},
            fleet=self.fleet,
            reserved=dict(self.reserved),
        )
        self.states.append((state, self.now))
        decision = plan(state, self.spec, self.now)
        self.fleet = decision.fleet
        self.last = decision
        self.events += [(self.now, e) for e in decision.events]
        if decision.changed:
            self.decisions.append(decision)
        return decision

    def run(self, until: float, every: float = 10.0) -> list[Decision]:
        """Hub steps every `every` seconds up to `until`; the decisions that changed something."""
        start = len(self.decisions)
        while self.now <= until:
            self.step()
            self.now += every
        return self.decisions[start:]


def make_spec(**overrides) -> PolicySpec:
    raw = {
        "mode": "auto",
        "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "llm"},
        "clusters": [
            {"name": "home", "region": "us-east-1", "maxReplicas": 10},
            {"name": "helper", "region": "eu-west-1", "maxReplicas": 6},
        ],
        "signals": {"demand": "d", "pressure": "p"},
        "capacity": {"replicaCapacity": REPLICA_CAPACITY},
        "route": {"name": "llm"},
    }
    raw.update(overrides)
    return PolicySpec.model_validate(raw)
