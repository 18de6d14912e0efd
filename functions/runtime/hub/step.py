"""The working copy one hub step mutates, phase by phase, and what every phase measures
the same way.

`Step` starts from the hub's memory (`status.fleet`) and the members' reports, keeps
only the reports the hub may use (phase 1: present, at most 2 minutes old, and carrying
the spec hash the hub computes for that member; the others are `outOfSync` or absent),
and ends as a `Decision`. The phases (`hub_capacity`, `hub_traffic`, `hub_release`) each
read what the phases before them decided; `hub.plan` runs them in the seed's order.
"""

from dataclasses import replace

from functions.common.adaptivepolicy import equal_shares, fit_to_bounds
from functions.runtime.hub.decision import (
    EVENT_MEMBERS_OUT_OF_SYNC,
    SOURCE_RULE,
    Change,
    Decision,
    HubEvent,
    HubState,
)
from functions.runtime.hub.fleet import ClusterFleet, FleetStatus
from functions.runtime.shared.policy import REPORT_STALE_SECONDS, PolicySpec
from functions.runtime.shared.report import Report


def fit_weights(weights: dict[str, int], spec: PolicySpec) -> dict[str, int]:
    """`fit_to_bounds` with each member's minWeight/maxWeight."""
    entries = spec.by_name
    lo = {n: entries[n].min_weight for n in weights}
    hi = {n: entries[n].max_weight for n in weights}
    return fit_to_bounds(weights, lo, hi)


def configured_weights(spec: PolicySpec) -> dict[str, int] | None:
    """The Steady weights `clusters[].weight` asks for (members without one share the
    rest evenly), within the bounds; None when no member sets one."""
    if all(c.weight is None for c in spec.clusters):
        return None
    unset = sorted(c.name for c in spec.clusters if c.weight is None)
    rest = 100 - sum(c.weight or 0 for c in spec.clusters)
    weights = {c.name: c.weight for c in spec.clusters if c.weight is not None}
    weights |= equal_shares(unset, rest)
    return fit_weights(weights, spec)


class Step:
    """The working copy one call to `plan` mutates, step by step."""

    def __init__(self, state: HubState, spec: PolicySpec, now: float):
        self.spec, self.now, self.state = spec, now, state
        esc = spec.escalation
        self.step, self.cooldown, self.calm_for = esc.step, esc.cooldown, esc.calm_for
        previous = {c.name: c for c in state.fleet.clusters}
        self.clusters: dict[str, ClusterFleet] = {
            name: previous.get(name) or ClusterFleet(name) for name in spec.cluster_names
        }
        self.phase = state.fleet.phase
        self.calm_since = state.fleet.calm_since
        self.last_traffic_at = state.fleet.last_traffic_at
        self.last_return_at = state.fleet.last_return_at
        self.changes: list[Change] = []
        self.events: list[HubEvent] = []
        self.notes: list[str] = []
        self.out_of_sync: list[str] = []
        self.held: list[str] = []
        self.usable: dict[str, Report | None] = {}
        self.model: dict | None = None
        self.source = SOURCE_RULE

    def read_reports(self) -> None:
        """Phase 1: keep the reports the hub may use; name the members out of sync."""
        for name in self.spec.cluster_names:
            report = self.state.reports.get(name)
            if report is None or self.now - report.time > REPORT_STALE_SECONDS:
                self.usable[name] = None
            elif report.spec_hash != self.spec.member_hash(name):
                self.usable[name] = None
                self.out_of_sync.append(name)
            else:
                self.usable[name] = report
        if self.out_of_sync and tuple(self.out_of_sync) != self.state.fleet.out_of_sync:
            self.events.append(
                HubEvent(
                    EVENT_MEMBERS_OUT_OF_SYNC,
                    "Warning",
                    "ignoring the reports of "
                    + ", ".join(self.out_of_sync)
                    + ": their copy of the policy differs in workload, signals, capacity"
                    " or their own clusters[] entry",
                )
            )
        self._init_weights()
        self.before = replace(
            self.state.fleet, clusters=tuple(self.clusters[n] for n in sorted(self.clusters))
        )

    def _init_weights(self) -> None:
        """Weights come from the hub's memory; the first step takes the configured Steady
        weights (`clusters[].weight`), else the route's live ones, else equal shares."""
        if not self.spec.manages_traffic:
            return
        if all(c.weight is not None for c in self.clusters.values()):
            return
        configured = configured_weights(self.spec)
        live = self.state.route_weights
        if configured is not None:
            start = configured
        elif live is not None:
            start = {name: int(live.get(name, 0)) for name in self.clusters}
        else:
            start = equal_shares(sorted(self.clusters))
        for name, c in self.clusters.items():
            self.clusters[name] = replace(c, weight=start[name])

    def room(self, name: str) -> tuple[int, int]:
        """(static room, total room) a member can still take: its own pending replicas
        and those other policies reserved there (`HubState.reserved`) counted."""
        report, c = self.usable[name], self.clusters[name]
        entry = self.spec.cluster(name)
        if report is None or entry is None:
            return 0, 0
        pending = max(0, c.floor - report.scheduled) if c.floor else 0
        taken = pending + self.state.reserved.get(name, 0)
        base = max(c.floor, report.desired)
        ceiling = max(0, entry.max_replicas - base)
        static = max(0, report.static_room - taken)
        headroom = max(0, report.node_pool_headroom - max(0, taken - report.static_room))
        return min(static, ceiling), min(static + headroom, ceiling)

    def result(self) -> Decision:
        fleet = FleetStatus(
            phase=self.phase,
            hub=self.state.hub,
            out_of_sync=tuple(self.out_of_sync),
            held=tuple(self.held),
            clusters=tuple(self.clusters[n] for n in sorted(self.clusters)),
            calm_since=self.calm_since,
            last_traffic_at=self.last_traffic_at,
            last_return_at=self.last_return_at,
            time=self.now,
        )
        return Decision(
            time=self.now,
            before=self.before,
            fleet=fleet,
            changes=tuple(self.changes),
            events=tuple(self.events),
            reports=dict(sorted(self.usable.items())),
            notes=tuple(self.notes),
            model=self.model,
            source=self.source,
        )
