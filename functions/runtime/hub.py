"""The hub's decision step: `plan(state, policy, now) -> Decision`, pure.

Every 10 s the hub reads every member's report and its own memory (`status.fleet` on
its copy) and runs the steps below in this order; each step sees what the previous one
decided. Nothing here reads a clock or talks to an API: the agent passes `now` and the
reports in, and acts on the returned decision (or, in shadow mode, only records it).

1. **Reports**: a member's report is usable when it exists, is at most 2 minutes old
   and carries the spec hash the hub computes for that member from its own copy.
   Divergent members are listed in `outOfSync` (event `MembersOutOfSync`).
2. **Waiting replicas**: a floor the hub raised that is not ready after `readyTimeout`
   is taken back if its replicas never reached a node (the member is then skipped as a
   helper for another `readyTimeout`), or kept with `ReplicasNotReady` if they are on
   nodes but not ready.
3. **Missing replicas**: a member short for `after` (or `earlyAfter` when its own
   NodePools have no headroom) is due; the shortage is what the due members need minus
   what the hub has already lent them. LocalFirst: until then the member scales alone.
4. **Candidates**: other members with a usable report, not skipped, not short, below
   `maxReplicas`, with room: static room first (most first), then NodePool headroom,
   preferring regions other than the short member's (same-region pools share the
   cloud capacity the short member could not get).
5. **Allocation**: at most `step` replicas per member per `cooldown`, never past
   `maxReplicas`; each new helper gets the next tier (released highest first).
6. **Traffic** (with `spec.route`): while escalated, at most `stepPercent` per
   `cooldown` moves from the busiest member to the least busy one below its ready share,
   never to a member over its latency or error SLO. While recovering, one `stepPercent`
   per `calmFor` returns toward the Steady weights, only if home's pressure afterwards
   stays within `safePressure`; otherwise home's floor is raised first (tier -1).
7. **Release**: after `calmFor` without shortage, one member per step, highest tier
   first, `step` replicas at a time, a helper only once its weight is back at Steady,
   home's floor last; a member without a usable report is held (`ReleaseHeld`).

Phases: Steady -> Escalated (a due shortage) -> Recovering (calm for `calmFor`) ->
Steady (no hub floor left and weights back).
"""

import math
from dataclasses import dataclass, field, replace
from typing import Final

from functions.common.naming import stable_hash
from functions.runtime.policy import (
    REPORT_STALE_SECONDS,
    PolicySpec,
    format_duration,
    parse_time,
    rfc3339,
    spec_hash,
)
from functions.runtime.report_core import Report

PHASE_STEADY: Final = "Steady"
PHASE_ESCALATED: Final = "Escalated"
PHASE_RECOVERING: Final = "Recovering"

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
HOME_TIER: Final = -1


# --- the hub's memory: status.fleet ------------------------------------------------------


@dataclass(frozen=True)
class ClusterFleet:
    """One member in `status.fleet.clusters[]`."""

    name: str
    floor: int = 0
    weight: int | None = None
    static: bool = False
    tier: int | None = None
    base: int = 0  # what the member ran before the hub first raised its floor
    raised_from: int = 0  # the floor before its last raise (what a take-back returns to)
    raised_at: float | None = None  # last raise, until that many replicas are ready
    not_ready_warned: bool = False
    skipped_until: float | None = None
    last_step_at: float | None = None
    short_since: float | None = None
    steady_weight: int | None = None

    def to_status(self) -> dict:
        out: dict = {"name": self.name, "floor": self.floor, "static": self.static}
        optional = {
            "weight": self.weight,
            "tier": self.tier,
            "base": self.base if self.tier is not None else None,
            "raisedFrom": self.raised_from if self.raised_at is not None else None,
            "raisedAt": _time(self.raised_at),
            "notReadyWarned": self.not_ready_warned or None,
            "skippedUntil": _time(self.skipped_until),
            "lastStepAt": _time(self.last_step_at),
            "shortSince": _time(self.short_since),
            "steadyWeight": self.steady_weight,
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out

    @classmethod
    def from_status(cls, entry: dict) -> "ClusterFleet":
        return cls(
            name=entry["name"],
            floor=int(entry.get("floor", 0)),
            weight=_int_or_none(entry.get("weight")),
            static=bool(entry.get("static", False)),
            tier=_int_or_none(entry.get("tier")),
            base=int(entry.get("base", 0)),
            raised_from=int(entry.get("raisedFrom", 0)),
            raised_at=_seconds(entry.get("raisedAt")),
            not_ready_warned=bool(entry.get("notReadyWarned", False)),
            skipped_until=_seconds(entry.get("skippedUntil")),
            last_step_at=_seconds(entry.get("lastStepAt")),
            short_since=_seconds(entry.get("shortSince")),
            steady_weight=_int_or_none(entry.get("steadyWeight")),
        )


@dataclass(frozen=True)
class FleetStatus:
    """`status.fleet` on the hub's copy: the phase and everything the next step needs."""

    phase: str = PHASE_STEADY
    hub: str = ""
    out_of_sync: tuple[str, ...] = ()
    held: tuple[str, ...] = ()
    clusters: tuple[ClusterFleet, ...] = ()
    calm_since: float | None = None
    last_traffic_at: float | None = None
    last_return_at: float | None = None
    time: float | None = None  # the step that wrote it: after a failover the freshest wins

    def cluster(self, name: str) -> ClusterFleet | None:
        return next((c for c in self.clusters if c.name == name), None)

    def to_status(self) -> dict:
        out: dict = {
            "phase": self.phase,
            "hub": self.hub,
            "outOfSync": list(self.out_of_sync),
            "held": list(self.held),
            "clusters": [c.to_status() for c in self.clusters],
        }
        optional = {
            "calmSince": _time(self.calm_since),
            "lastTrafficAt": _time(self.last_traffic_at),
            "lastReturnAt": _time(self.last_return_at),
            "time": _time(self.time),
        }
        out.update({k: v for k, v in optional.items() if v is not None})
        return out

    @classmethod
    def from_status(cls, fleet: dict | None) -> "FleetStatus":
        fleet = fleet or {}
        return cls(
            phase=fleet.get("phase", PHASE_STEADY),
            hub=fleet.get("hub", ""),
            out_of_sync=tuple(fleet.get("outOfSync") or ()),
            held=tuple(fleet.get("held") or ()),
            clusters=tuple(ClusterFleet.from_status(c) for c in fleet.get("clusters") or []),
            calm_since=_seconds(fleet.get("calmSince")),
            last_traffic_at=_seconds(fleet.get("lastTrafficAt")),
            last_return_at=_seconds(fleet.get("lastReturnAt")),
            time=_seconds(fleet.get("time")),
        )


def _time(seconds: float | None) -> str | None:
    return None if seconds is None else rfc3339(seconds)


def _seconds(text: str | None) -> float | None:
    return None if not text else parse_time(text)


def _int_or_none(value) -> int | None:
    return None if value is None else int(value)


# --- input and output ---------------------------------------------------------------------


@dataclass(frozen=True)
class HubState:
    hub: str  # <cluster>/<pod> of this hub
    reports: dict[str, Report | None]  # every configured member's last report, None if absent
    fleet: FleetStatus = field(default_factory=FleetStatus)
    # The route's live weights by member, where the hub's memory has none yet.
    route_weights: dict[str, int] | None = None


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


def per_cluster(fleet: FleetStatus) -> dict[str, dict]:
    """Floor, static flag and weight per member: the decision log's before/after."""
    return {
        c.name: {"floor": c.floor, "static": c.static, "weight": c.weight}
        for c in sorted(fleet.clusters, key=lambda c: c.name)
    }


# --- the step -----------------------------------------------------------------------------


class _Step:
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

    # step 1
    def read_reports(self) -> None:
        for name in self.spec.cluster_names:
            report = self.state.reports.get(name)
            if report is None or self.now - report.time > REPORT_STALE_SECONDS:
                self.usable[name] = None
            elif report.spec_hash != spec_hash(self.spec, name):
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
        """Weights come from the hub's memory; the first step takes the route's live ones
        (equal shares when the route has none to read)."""
        if self.spec.route is None:
            return
        if all(c.weight is not None for c in self.clusters.values()):
            return
        live = self.state.route_weights
        if live is not None:
            for name, c in self.clusters.items():
                self.clusters[name] = replace(c, weight=int(live.get(name, 0)))
            return
        names = sorted(self.clusters)
        share, extra = divmod(100, len(names))
        for i, name in enumerate(names):
            self.clusters[name] = replace(
                self.clusters[name], weight=share + (1 if i < extra else 0)
            )

    # step 2
    def waiting_replicas(self) -> None:
        timeout = self.spec.escalation.ready_timeout
        for name, c in sorted(self.clusters.items()):
            report = self.usable[name]
            if c.raised_at is None or report is None:
                continue
            if report.ready >= c.floor:
                self.clusters[name] = replace(c, raised_at=None, not_ready_warned=False)
                continue
            if self.now - c.raised_at < timeout:
                continue
            if report.scheduled >= c.floor:
                if not c.not_ready_warned:
                    self.events.append(
                        HubEvent(
                            EVENT_REPLICAS_NOT_READY,
                            "Warning",
                            f"{c.floor - report.ready} replicas on {name} are on nodes but not"
                            f" ready after {format_duration(timeout)}; the floor stays",
                        )
                    )
                    self.clusters[name] = replace(c, not_ready_warned=True)
                continue
            taken = c.floor - max(report.scheduled, c.raised_from)
            floor = c.floor - taken
            released = floor <= c.base
            self.clusters[name] = replace(
                c,
                floor=0 if released else floor,
                tier=None if released else c.tier,
                static=False if released else c.static,
                raised_at=None,
                skipped_until=self.now + timeout,
                last_step_at=self.now,
            )
            self.changes.append(
                Change(
                    RELEASE_CAPACITY,
                    name,
                    f"-{taken} on {name}: not on a node after {format_duration(timeout)}",
                )
            )

    # step 3
    def missing_replicas(self) -> tuple[list[str], int]:
        esc = self.spec.escalation
        due: list[str] = []
        for name, c in sorted(self.clusters.items()):
            report = self.usable[name]
            if report is None:
                continue
            if report.needed <= 0:
                self.clusters[name] = replace(c, short_since=None)
                continue
            since = c.short_since if c.short_since is not None else self.now
            self.clusters[name] = replace(c, short_since=since)
            wait = esc.early_after if report.node_pool_headroom <= 0 else esc.after
            if self.now - since >= wait:
                due.append(name)
        needed = sum(self.usable[n].needed for n in due)
        lent = sum(
            c.floor - c.base for c in self.clusters.values() if c.tier is not None and c.tier > 0
        )
        return due, max(0, needed - lent)

    def _room(self, name: str) -> tuple[int, int]:
        """(static room, total room) a member can still take, pending replicas counted."""
        report, c = self.usable[name], self.clusters[name]
        entry = self.spec.cluster(name)
        if report is None or entry is None:
            return 0, 0
        pending = max(0, c.floor - report.scheduled) if c.floor else 0
        base = max(c.floor, report.desired)
        ceiling = max(0, entry.max_replicas - base)
        static = max(0, report.static_room - pending)
        headroom = max(0, report.node_pool_headroom - max(0, pending - report.static_room))
        return min(static, ceiling), min(static + headroom, ceiling)

    # step 4
    def candidates(self, due: list[str]) -> list[str]:
        home = max(due, key=lambda n: (self.usable[n].needed, n)) if due else None
        home_region = self.usable[home].region if home else None
        found = []
        for name in sorted(self.clusters):
            report, c = self.usable[name], self.clusters[name]
            if report is None or name in due or report.needed > 0:
                continue
            if c.skipped_until is not None and self.now < c.skipped_until:
                continue
            static, total = self._room(name)
            if total <= 0:
                continue
            same_region = home_region is not None and report.region == home_region
            found.append(((0, -static) if static > 0 else (1, int(same_region), -total), name))
        return [name for _, name in sorted(found)]

    # step 5
    def allocate(self, due: list[str], missing: int) -> None:
        if not due:
            return
        short_on = ", ".join(due)
        if missing <= 0:
            return
        candidates = self.candidates(due)
        if not candidates:
            self.notes.append(f"{missing} replicas short and no other cluster has room")
            return
        left = missing
        top_tier = max((c.tier for c in self.clusters.values() if c.tier), default=0)
        for name in candidates:
            if left <= 0:
                break
            c, report = self.clusters[name], self.usable[name]
            if c.last_step_at is not None and self.now - c.last_step_at < self.cooldown:
                continue
            static, total = self._room(name)
            add = min(self.step, total, left)
            if add <= 0:
                continue
            current = c.floor if c.floor else report.desired
            base = c.base if c.tier is not None else report.desired
            if c.tier is None or c.tier <= 0:
                top_tier += 1
                tier = top_tier
            else:
                tier = c.tier
            uses_static = add <= static
            self.clusters[name] = replace(
                c,
                floor=current + add,
                tier=tier,
                base=base,
                static=uses_static if c.tier is None else (c.static and uses_static),
                raised_from=current,
                raised_at=self.now,
                not_ready_warned=False,
                last_step_at=self.now,
            )
            left -= add
            where = "static room" if uses_static else "NodePool headroom"
            self.changes.append(
                Change(ADD_CAPACITY, name, f"+{add} on {name} ({where}) for {short_on}")
            )
        if left == missing:
            self.notes.append(f"{missing} replicas short on {short_on}; helpers in cooldown")

    # step 6
    def _over_slo(self, report: Report) -> bool:
        lat, err = self.spec.latency_slo, self.spec.error_rate_slo
        if lat is not None and report.latency is not None and report.latency > lat:
            return True
        return err is not None and report.error_rate is not None and report.error_rate > err

    def shift_traffic(self) -> None:
        if self.spec.route is None:
            return
        if self.phase == PHASE_ESCALATED:
            self._spread()
        elif self.phase == PHASE_RECOVERING:
            self._return()

    def _spread(self) -> None:
        if self.last_traffic_at is not None and self.now - self.last_traffic_at < self.cooldown:
            return
        usable = {n: r for n, r in self.usable.items() if r is not None}
        total_ready = sum(r.ready for r in usable.values())
        if total_ready <= 0:
            return
        target = {n: 100 * r.ready / total_ready for n, r in usable.items()}
        weight = {n: self.clusters[n].weight or 0 for n in usable}

        def busy(n: str) -> tuple:
            p = usable[n].pressure
            return (p if p is not None else -math.inf, weight[n] - target[n], n)

        # Only a member under strain gives traffic away: short, or over an SLO. Without
        # one, the fleet is calm and returning traffic is the recovery's job.
        donors = [
            n
            for n in usable
            if weight[n] > target[n] and (usable[n].needed > 0 or self._over_slo(usable[n]))
        ]
        takers = [
            n
            for n in usable
            if weight[n] < target[n] and usable[n].ready > 0 and not self._over_slo(usable[n])
        ]
        if not donors or not takers:
            return
        donor = max(donors, key=busy)
        taker = min(takers, key=lambda n: (busy(n)[0], -(target[n] - weight[n]), n))
        p_d, p_t = usable[donor].pressure, usable[taker].pressure
        if p_d is not None and p_t is not None and p_t >= p_d:
            return
        move = min(
            self.spec.traffic.step_percent,
            math.floor(weight[donor] - target[donor] + 1e-9) or 1,
            math.floor(target[taker] - weight[taker] + 1e-9) or 1,
            weight[donor],
        )
        if move <= 0:
            return
        self._move(donor, taker, move, "to the least busy member")

    def _move(self, donor: str, taker: str, move: int, why: str) -> None:
        d, t = self.clusters[donor], self.clusters[taker]
        self.clusters[donor] = replace(d, weight=(d.weight or 0) - move)
        self.clusters[taker] = replace(t, weight=(t.weight or 0) + move)
        self.last_traffic_at = self.now
        self.changes.append(
            Change(
                SHIFT_TRAFFIC,
                taker,
                f"{move}% from {donor} to {taker} {why}"
                f" ({donor} {d.weight}->{d.weight - move}, {taker} {t.weight}->{t.weight + move})",
            )
        )

    def _return(self) -> None:
        if self.last_return_at is not None and self.now - self.last_return_at < self.calm_for:
            return
        above = {
            n: (c.weight or 0) - c.steady_weight
            for n, c in self.clusters.items()
            if c.steady_weight is not None and (c.weight or 0) > c.steady_weight
        }
        below = {
            n: c.steady_weight - (c.weight or 0)
            for n, c in self.clusters.items()
            if c.steady_weight is not None and (c.weight or 0) < c.steady_weight
        }
        if not above or not below:
            return
        donor = max(above, key=lambda n: (above[n], n))
        home = max(below, key=lambda n: (below[n], n))
        move = min(self.spec.traffic.step_percent, above[donor], below[home])
        home_c = self.clusters[home]
        home_report = self.usable[home]
        if home_report is not None and self._over_slo(home_report):
            self.notes.append(f"return held: {home} is over its latency or error SLO")
            return
        if home_c.tier == HOME_TIER and home_c.raised_at is not None:
            self.notes.append(f"return waits for {home}'s raised floor to become ready")
            return
        blocked = self._return_exceeds_safe(donor, home, move)
        if blocked is None:
            self._move(donor, home, move, "back home (calm)")
            self.last_return_at = self.now
            return
        predicted, bound, total_load = blocked
        self._raise_home(home, predicted, bound, total_load, move)

    def _return_exceeds_safe(
        self, donor: str, home: str, move: int
    ) -> tuple[float, float, float] | None:
        """None when the return is safe (or cannot be judged: traffic returns on time)."""
        h, d = self.usable[home], self.usable[donor]
        if h is None or d is None or h.pressure is None or d.pressure is None:
            return None
        bounds = [s for s in (h.safe_pressure, d.safe_pressure) if s is not None]
        if not bounds:
            return None
        # A replica of the same model serves alike in either member: the higher bound is
        # what one has been seen to serve within the SLOs.
        bound = max(bounds)
        donor_weight = self.clusters[donor].weight or 0
        moved = d.pressure * d.ready * move / donor_weight if donor_weight else 0.0
        total_load = h.pressure * h.ready + moved
        predicted = total_load / h.ready if h.ready > 0 else math.inf
        return None if predicted <= bound else (predicted, bound, total_load)

    def _raise_home(
        self, home: str, predicted: float, bound: float, total_load: float, move: int
    ) -> None:
        report, c = self.usable[home], self.clusters[home]
        held = (
            f"returning {move}% to {home} would take its pressure to {predicted:.3g},"
            f" above safePressure {bound:.3g}"
        )
        skipped = c.skipped_until is not None and self.now < c.skipped_until
        cooling = c.last_step_at is not None and self.now - c.last_step_at < self.cooldown
        _, room = self._room(home)
        if report is None or skipped or cooling or room <= 0:
            self.notes.append(held)
            return
        wanted = max(1, math.ceil(total_load / bound - 1e-9) - report.ready)
        add = min(self.step, room, wanted)
        current = c.floor if c.floor else report.desired
        self.clusters[home] = replace(
            c,
            floor=current + add,
            tier=HOME_TIER,
            base=c.base if c.tier is not None else report.desired,
            static=add <= self._room(home)[0],
            raised_from=current,
            raised_at=self.now,
            not_ready_warned=False,
            last_step_at=self.now,
        )
        self.changes.append(Change(ADD_CAPACITY, home, f"+{add} on {home} first: {held}"))

    # step 7
    def release(self) -> None:
        if self.phase != PHASE_RECOVERING:
            return
        floors = [c for c in self.clusters.values() if c.tier is not None and c.floor > 0]
        helpers_left = any(c.tier > 0 for c in floors)
        weights_back = all(
            c.steady_weight is None or (c.weight or 0) <= c.steady_weight
            for c in self.clusters.values()
        )
        for c in sorted(floors, key=lambda c: (-c.tier, c.name)):
            if (
                c.tier > 0
                and self.spec.route is not None
                and (c.weight or 0) > (c.steady_weight if c.steady_weight is not None else 100)
            ):
                continue  # its share of the traffic is not back yet
            if c.tier == HOME_TIER and (helpers_left or not weights_back):
                continue  # home's floor goes last
            if self.usable[c.name] is None:
                self.held.append(c.name)
                continue
            if c.last_step_at is not None and self.now - c.last_step_at < self.cooldown:
                return
            floor = c.floor - self.step
            released = floor <= c.base
            self.clusters[c.name] = replace(
                c,
                floor=0 if released else floor,
                tier=None if released else c.tier,
                static=False if released else c.static,
                raised_at=None,
                last_step_at=self.now,
            )
            gone = c.floor - (0 if released else floor)
            self.changes.append(
                Change(
                    RELEASE_CAPACITY,
                    c.name,
                    f"-{gone} on {c.name}" + (" (floor released)" if released else ""),
                )
            )
            return

    # phases
    def advance_phase(self, due: list[str]) -> None:
        any_short = any(r is not None and r.needed > 0 for r in self.usable.values())
        if due:
            if self.phase == PHASE_STEADY:
                for name, c in self.clusters.items():
                    self.clusters[name] = replace(c, steady_weight=c.weight)
            self.phase = PHASE_ESCALATED
            self.calm_since = None
            self.last_return_at = None
            return
        if self.phase == PHASE_STEADY:
            return
        if any_short:
            self.calm_since = None
            return
        if self.calm_since is None:
            self.calm_since = self.now
        if self.phase == PHASE_ESCALATED and self.now - self.calm_since >= self.calm_for:
            self.phase = PHASE_RECOVERING

    def settle(self) -> None:
        if self.phase != PHASE_RECOVERING:
            return
        floors_left = any(c.tier is not None and c.floor > 0 for c in self.clusters.values())
        weights_back = all(
            c.steady_weight is None or c.weight == c.steady_weight for c in self.clusters.values()
        )
        if not floors_left and weights_back:
            self.phase = PHASE_STEADY
            self.calm_since = self.last_return_at = None
            for name, c in self.clusters.items():
                self.clusters[name] = replace(c, steady_weight=None)

    def held_events(self) -> None:
        if self.held and tuple(self.held) != self.state.fleet.held:
            self.events.append(
                HubEvent(
                    EVENT_RELEASE_HELD,
                    "Warning",
                    "keeping the floor on "
                    + ", ".join(self.held)
                    + ": no usable report (stale, out of sync, or none)",
                )
            )

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
        )


def plan(state: HubState, spec: PolicySpec, now: float) -> Decision:
    """One hub step for one policy (see the module docstring for the order)."""
    step = _Step(state, spec, now)
    step.read_reports()
    step.waiting_replicas()
    due, missing = step.missing_replicas()
    step.advance_phase(due)
    step.allocate(due, missing)
    step.shift_traffic()
    step.release()
    step.held_events()
    step.settle()
    return step.result()
