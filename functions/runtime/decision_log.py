"""The decision log: one JSON line per hub decision that changed something, then outcome
lines at 1, 5 and 15 minutes with the same `decisionId`.

It is the dataset for judging a policy on real traffic, so every line stands alone
(`jq` over the file needs no join state) and carries what the hub saw (`reports`: null
for a member it ignored), what it did (`before`/`after` floors, static flags and
weights), and, in the outcome lines, what happened next: each member's state, how long
every floor the decision raised took to be ready (`readyAfterSeconds`, whole seconds,
absent until it happens, never for shadow decisions because replicas that became ready
meanwhile were not theirs) and the decisions that followed (`followedBy`).

The log keeps only the decisions whose last checkpoint is still ahead (15 minutes of a
policy's decisions at most), in memory: after a hub change the new hub starts its own.
"""

import json
import math
from dataclasses import dataclass, field
from typing import IO, Final

from functions.runtime.hub_decision import SOURCE_RULE, Decision, per_cluster
from functions.runtime.hub_fleet import FleetStatus
from functions.runtime.policy import rfc3339
from functions.runtime.report_core import Report

CHECKPOINTS_SECONDS: Final = (60, 300, 900)
KIND_DECISION: Final = "decision"
KIND_OUTCOME: Final = "outcome"


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
    for key in ("demand", "pressure", "latency", "errorRate"):
        value = report.signal(key)
        if value is not None:
            out[key] = value
    return out


class DecisionLog:
    def __init__(self, stream: IO[str], checkpoints: tuple[int, ...] = CHECKPOINTS_SECONDS):
        self._stream = stream
        self._checkpoints = tuple(checkpoints)  # shorter only in tests on real servers
        self._pending: list[_Pending] = []

    def _write(self, line: dict) -> None:
        self._stream.write(json.dumps(line, sort_keys=False, separators=(",", ":")) + "\n")
        self._stream.flush()

    def record(
        self,
        decision: Decision,
        policy: str,
        mode: str,
        applied: bool,
        error: str | None = None,
    ) -> str:
        """Write the decision line; outcome lines follow from `observe`."""
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
                "source": SOURCE_RULE,
                "message": decision.message,
                "outOfSync": list(decision.fleet.out_of_sync),
                "held": list(decision.fleet.held),
                "applied": applied,
                "error": error,
            }
        )
        for earlier in self._pending:
            if earlier.policy == policy:
                earlier.followed_by.append(f"{decision_id} {decision.action}")
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
        return observations
