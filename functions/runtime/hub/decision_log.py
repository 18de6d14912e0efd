"""The decision log: one JSON line per hub decision that changed something, then outcome
lines at 1, 5 and 15 minutes with the same `decisionId`.

It is the dataset for judging a policy on real traffic, so every line stands alone
(`jq` over the file needs no join state) and carries what the hub saw (`reports`: null
for a member it ignored), what it did (`before`/`after` floors, static flags and
weights), and, in the outcome lines, what happened next: each member's state, how long
every floor the decision raised took to be ready (`readyAfterSeconds`, whole seconds,
absent until it happens, never for shadow decisions because replicas that became ready
meanwhile were not theirs) and the decisions that followed (`followedBy`).

The decisions being followed (last checkpoint still ahead) and the last few decisions
are the hub's memory too: `memory()` is what the agent writes into `status.fleet` beside
the fleet (bounded: the newest FOLLOWING_MAX followed, RECENT_MAX recent, FOLLOWED_BY_MAX
follow-ups each), and `adopt()` is how a new hub takes them over, so the outcome lines of
its predecessor's decisions continue instead of stopping at the failover. The agent
`hold()`s the lines of a step and `flush()`es them only once that memory is written: a
line is never written twice by two hubs, and a deposed hub (whose write is refused)
leaves its decisions' outcome lines to the new hub. A checkpoint that fell due while no
hub ran is written at the new hub's first step, with that step's state.
"""

import json
import math
from dataclasses import dataclass, field
from typing import IO, Final

from functions.runtime.hub.decision import Decision, per_cluster
from functions.runtime.hub.fleet import FleetStatus
from functions.runtime.shared.policy import parse_time, rfc3339
from functions.runtime.shared.report import Report

CHECKPOINTS_SECONDS: Final = (60, 300, 900)
# Bounds on the memory kept in status.fleet (an object must stay well under etcd's limit).
FOLLOWING_MAX: Final = 32
RECENT_MAX: Final = 10
FOLLOWED_BY_MAX: Final = 16
KIND_DECISION: Final = "decision"
KIND_OUTCOME: Final = "outcome"
KIND_PROPOSAL: Final = "proposal"


@dataclass
class _Pending:
    decision_id: str
    policy: str
    time: float
    applied: bool
    raised: dict[str, int]  # member -> floor to become ready
    ready_after: dict[str, int] = field(default_factory=dict)
    followed_by: list[str] = field(default_factory=list)
    checkpoints: list[int] = field(default_factory=lambda: list(CHECKPOINTS_SECONDS))

    def to_status(self) -> dict:
        return {
            "decisionId": self.decision_id,
            "time": rfc3339(self.time),
            "applied": self.applied,
            "raised": dict(sorted(self.raised.items())),
            "readyAfterSeconds": dict(sorted(self.ready_after.items())),
            "followedBy": self.followed_by[:FOLLOWED_BY_MAX],
            "checkpoints": list(self.checkpoints),
        }

    @classmethod
    def from_status(cls, policy: str, entry: dict) -> "_Pending":
        return cls(
            decision_id=entry["decisionId"],
            policy=policy,
            time=parse_time(entry["time"]),
            applied=bool(entry.get("applied", False)),
            raised={k: int(v) for k, v in (entry.get("raised") or {}).items()},
            ready_after={k: int(v) for k, v in (entry.get("readyAfterSeconds") or {}).items()},
            followed_by=list(entry.get("followedBy") or []),
            checkpoints=[int(x) for x in entry.get("checkpoints") or []],
        )


@dataclass(frozen=True)
class ReadyObservation:
    """A floor some decision raised became ready: for plumb_decision_time_to_ready_seconds."""

    policy: str
    cluster: str
    seconds: int


def _report_line(report: Report | None) -> dict | None:
    return None if report is None else report.to_status()


def _cluster_outcome(report: Report | None, fleet: FleetStatus, name: str) -> dict:
    if report is None:
        return {"stale": True}
    c = fleet.cluster(name)
    out: dict = {
        "ready": report.ready,
        "desired": report.desired,
        "needed": report.needed,
        "floor": c.floor if c else 0,
        "weight": c.weight if c else None,
    }
    for key in ("demand", "pressure", "latency", "errorRate", "saturation"):
        value = report.signal(key)
        if value is not None:
            out[key] = value
    if report.extra:
        out["extra"] = dict(sorted(report.extra.items()))
    return out


class DecisionLog:
    def __init__(self, stream: IO[str], checkpoints: tuple[int, ...] = CHECKPOINTS_SECONDS):
        self._stream = stream
        self._checkpoints = tuple(checkpoints)  # shorter only in tests on real servers
        self._pending: list[_Pending] = []
        self._recent: dict[str, list[dict]] = {}
        self._held: list[dict] | None = None

    def _write(self, line: dict) -> None:
        if self._held is not None:
            self._held.append(line)
            return
        self._stream.write(json.dumps(line, sort_keys=False, separators=(",", ":")) + "\n")
        self._stream.flush()

    # --- lines held until the memory that says they were written is written ----------

    def hold(self) -> None:
        self._held = []

    def flush(self) -> None:
        held, self._held = self._held or [], None
        for line in held:
            self._write(line)

    def drop(self) -> None:
        self._held = None

    # --- the memory a new hub continues from ------------------------------------------

    def memory(self, policy: str) -> dict:
        """`following` and `recent` for this policy's status.fleet (bounded)."""
        following = [p for p in self._pending if p.policy == policy][-FOLLOWING_MAX:]
        return {
            "following": [p.to_status() for p in following],
            "recent": list(self._recent.get(policy, []))[-RECENT_MAX:],
        }

    def adopt(self, policy: str, fleet: dict) -> None:
        """Continue from what status.fleet remembers for this policy (replacing what this
        log held: the status is what the last hub to write it was following)."""
        self._pending = [p for p in self._pending if p.policy != policy]
        self._pending += [_Pending.from_status(policy, e) for e in fleet.get("following") or []]
        self._recent[policy] = list(fleet.get("recent") or [])[-RECENT_MAX:]

    def proposal(
        self,
        time: float,
        policy: str,
        seconds: float,
        plans: list[dict],
        error: str | None,
    ) -> None:
        """The planner's answer as it came (`kind: proposal`), valid or not."""
        self._write(
            {
                "kind": KIND_PROPOSAL,
                "time": rfc3339(time),
                "policy": policy,
                "seconds": round(seconds, 3),
                "error": error,
                "candidates": plans,
            }
        )

    def record(
        self,
        decision: Decision,
        policy: str,
        mode: str,
        applied: bool,
        error: str | None = None,
        *,
        follow: bool = True,
    ) -> str:
        """Write the decision line; outcome lines follow from `observe` (unless `follow`
        is False: a step whose memory was not written is nobody's to follow)."""
        decision_id = decision.decision_id(policy)
        self._write(
            {
                "kind": KIND_DECISION,
                "decisionId": decision_id,
                "time": rfc3339(decision.time),
                "policy": policy,
                "hub": decision.fleet.hub,
                "mode": mode,
                "reports": {n: _report_line(r) for n, r in decision.reports.items()},
                "before": per_cluster(decision.before),
                "after": per_cluster(decision.fleet),
                "phase": decision.fleet.phase,
                "action": decision.action,
                "source": decision.source,
                "message": decision.message,
                "outOfSync": list(decision.fleet.out_of_sync),
                "held": list(decision.fleet.held),
                "applied": applied,
                "error": error,
            }
            | ({"model": decision.model} if decision.model is not None else {})
            | ({"adaptive": decision.adaptive} if decision.adaptive is not None else {})
        )
        if not follow:
            return decision_id
        for earlier in self._pending:
            if earlier.policy == policy:
                earlier.followed_by.append(f"{decision_id} {decision.action}")
        recent = self._recent.setdefault(policy, [])
        recent.append(
            {
                "decisionId": decision_id,
                "time": rfc3339(decision.time),
                "action": decision.action,
                "applied": applied,
                "hub": decision.fleet.hub,
            }
        )
        del recent[:-RECENT_MAX]
        self._pending.append(
            _Pending(
                decision_id,
                policy,
                decision.time,
                applied,
                decision.raised(),
                checkpoints=list(self._checkpoints),
            )
        )
        return decision_id

    def observe(
        self,
        policy: str,
        now: float,
        reports: dict[str, Report | None],
        fleet: FleetStatus,
    ) -> list[ReadyObservation]:
        """Follow this policy's recent decisions with what the members report now."""
        observations: list[ReadyObservation] = []
        for pending in [p for p in self._pending if p.policy == policy]:
            if pending.applied:
                for name, floor in sorted(pending.raised.items()):
                    report = reports.get(name)
                    if name in pending.ready_after or report is None or report.ready < floor:
                        continue
                    seconds = max(0, math.floor(report.time - pending.time + 0.5))
                    pending.ready_after[name] = seconds
                    observations.append(ReadyObservation(policy, name, seconds))
            while pending.checkpoints and now >= pending.time + pending.checkpoints[0]:
                after = pending.checkpoints.pop(0)
                line: dict = {
                    "kind": KIND_OUTCOME,
                    "decisionId": pending.decision_id,
                    "time": rfc3339(now),
                    "policy": policy,
                    "afterSeconds": after,
                    "final": not pending.checkpoints,
                    "applied": pending.applied,
                    "clusters": {
                        n: _cluster_outcome(reports.get(n), fleet, n) for n in sorted(reports)
                    },
                    "followedBy": list(pending.followed_by),
                }
                if pending.applied:
                    line["readyAfterSeconds"] = dict(sorted(pending.ready_after.items()))
                self._write(line)
        self._pending = [p for p in self._pending if p.checkpoints]
        mine = [p for p in self._pending if p.policy == policy]
        for dropped in mine[:-FOLLOWING_MAX]:  # the memory's bound holds in memory too
            self._pending.remove(dropped)
        return observations
