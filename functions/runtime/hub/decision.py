"""What one hub step takes and returns: `HubState` in, `Decision` out.

A decision is the fleet memory before and after the step, the changes (each one
`AddCapacity`, `ShiftTraffic` or `ReleaseCapacity` on one member, with a message a person
reads), the events to raise, the reports the hub used and notes on why nothing moved.
The agent acts on it, the decision log writes it, the metrics count it.
"""

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Final

from functions.common.naming import stable_hash
from functions.runtime.hub.fleet import (
    PHASE_ESCALATED,
    PHASE_RECOVERING,
    PHASE_STEADY,
    FleetStatus,
)
from functions.runtime.shared.report import Report

ADD_CAPACITY: Final = "AddCapacity"
SHIFT_TRAFFIC: Final = "ShiftTraffic"
RELEASE_CAPACITY: Final = "ReleaseCapacity"
ACTIONS: Final = (ADD_CAPACITY, SHIFT_TRAFFIC, RELEASE_CAPACITY)
# A decision that only changes the phase (e.g. escalated with no room anywhere).
PHASE_ACTIONS: Final = {
    PHASE_ESCALATED: "Escalate",
    PHASE_RECOVERING: "Recover",
    PHASE_STEADY: "Settle",
}

EVENT_RELEASE_HELD: Final = "ReleaseHeld"
EVENT_MEMBERS_OUT_OF_SYNC: Final = "MembersOutOfSync"
EVENT_REPLICAS_NOT_READY: Final = "ReplicasNotReady"

SOURCE_RULE: Final = "rule"
SOURCE_MODEL: Final = "model"


@dataclass(frozen=True)
class Ranking:
    """The ranking model's answer: a probability per candidate, or why there is none."""

    probabilities: dict[str, float]
    error: str | None = None


# Candidates (in the rules' order) and what the hub knows of them -> the model's ranking.
Ranker = Callable[[tuple[str, ...], dict], Ranking]


@dataclass(frozen=True)
class HubState:
    hub: str  # <cluster>/<pod> of this hub
    reports: dict[str, Report | None]  # every configured member's last report, None if absent
    fleet: FleetStatus = field(default_factory=FleetStatus)
    # The route's live weights by member, where the hub's memory has none yet.
    route_weights: dict[str, int] | None = None
    # Per member, replicas other policies' floors have claimed there but that are not on
    # a node yet: free room they will take, which this policy must not count again.
    reserved: dict[str, int] = field(default_factory=dict)
    # experimental.model: asked when two or more clusters are candidates for a shortage.
    ranker: Ranker | None = None


@dataclass(frozen=True)
class Change:
    action: str  # AddCapacity | ShiftTraffic | ReleaseCapacity
    cluster: str
    message: str


@dataclass(frozen=True)
class HubEvent:
    reason: str
    type: str  # Normal | Warning
    message: str


@dataclass(frozen=True)
class Decision:
    time: float
    before: FleetStatus
    fleet: FleetStatus
    changes: tuple[Change, ...]
    events: tuple[HubEvent, ...]
    reports: dict[str, Report | None]  # what the hub used: None for ignored members
    notes: tuple[str, ...] = ()  # why nothing moved, when a step was blocked
    # The ranking model's say, when it was asked: probabilities, accepted, shadow, error.
    model: dict | None = None
    source: str = SOURCE_RULE  # "model" when its ranking reordered the helpers
    # experimental.adaptive: candidates, rejections, chooser, chosen, executed.
    adaptive: dict | None = None

    @property
    def changed(self) -> bool:
        return bool(self.changes) or self.fleet.phase != self.before.phase

    @property
    def action(self) -> str:
        kinds = [a for a in ACTIONS if any(c.action == a for c in self.changes)]
        if kinds:
            return "".join(kinds)
        if self.fleet.phase != self.before.phase:
            return PHASE_ACTIONS.get(self.fleet.phase, "")
        return ""

    @property
    def message(self) -> str:
        return "; ".join([c.message for c in self.changes] + list(self.notes))

    @property
    def floors(self) -> dict[str, int]:
        return {c.name: c.floor for c in self.fleet.clusters}

    @property
    def weights_changed(self) -> bool:
        return any(c.action == SHIFT_TRAFFIC for c in self.changes)

    @property
    def weights(self) -> dict[str, int]:
        return {c.name: c.weight for c in self.fleet.clusters if c.weight is not None}

    def raised(self) -> dict[str, int]:
        """Floors this decision raised: member -> the floor to become ready."""
        before = {c.name: c.floor for c in self.before.clusters}
        return {c.name: c.floor for c in self.fleet.clusters if c.floor > before.get(c.name, 0)}

    def decision_id(self, policy_key: str) -> str:
        return stable_hash([policy_key, self.time, self.action, self.message], 12)

    def stamped(self, policy_key: str) -> "Decision":
        """This decision with its id on every member whose floor or tier it changed: the
        intent written there carries it, and later renewals keep it."""
        decision_id = self.decision_id(policy_key)
        before = {c.name: (c.floor, c.tier) for c in self.before.clusters}
        clusters = tuple(
            replace(c, decision_id=decision_id) if before.get(c.name) != (c.floor, c.tier) else c
            for c in self.fleet.clusters
        )
        return replace(self, fleet=replace(self.fleet, clusters=clusters))


def per_cluster(fleet: FleetStatus) -> dict[str, dict]:
    """Floor, static flag and weight per member: the decision log's before/after."""
    return {
        c.name: {"floor": c.floor, "static": c.static, "weight": c.weight}
        for c in sorted(fleet.clusters, key=lambda c: c.name)
    }


def reservations(decision: Decision) -> dict[str, int]:
    """Per member, the replicas this decision's floors still wait for (raised, not on a
    node yet): room the next policy stepped on that member must not count again. A
    member without a usable report keeps what its last raise asked for."""
    out: dict[str, int] = {}
    for c in decision.fleet.clusters:
        if c.tier is None or c.floor <= 0:
            continue
        report = decision.reports.get(c.name)
        on_nodes = report.scheduled if report is not None else c.raised_from
        if c.floor > on_nodes:
            out[c.name] = c.floor - on_nodes
    return out
