"""The hub's memory between steps: `status.fleet` on the hub's copy of a policy.

One codec for it (`FleetStatus.from_status` / `to_status`), so the decision step works on
typed values and a failover hub reads back exactly what the previous hub wrote: the
phase, per member the floor the hub raised, its tier, weight and timers. Kept apart from
the step (`hub.py` and its phases) because the agent, the decision log and the metrics
read it too.
"""

from dataclasses import dataclass
from typing import Final

from functions.runtime.shared.policy import parse_time, rfc3339

PHASE_STEADY: Final = "Steady"
PHASE_ESCALATED: Final = "Escalated"
PHASE_RECOVERING: Final = "Recovering"
# The tier of a member's own floor raised so borrowed traffic can come home: released
# last, after every helper (tiers 1, 2, ... in the order they were asked to help).
HOME_TIER: Final = -1


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
    # The decision that last set this floor (its intent carries it; renewals keep it).
    decision_id: str | None = None

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
            "decisionId": self.decision_id,
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
            decision_id=entry.get("decisionId"),
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
