"""The experimental planner (`experimental.adaptive`): up to three plans a step from an
OpenAI-compatible endpoint, each validated against the policy's limits before one is
chosen.

A plan is a list of actions with a hypothesis: `add` (replicas on a cluster), `release`
(replicas of a floor the hub raised) and `shift` (percent of traffic from one cluster
to another). The limits are the rules' own: at most `step` replicas per cluster per
`cooldown`, never past `maxReplicas` or the cluster's room (less its pending replicas
and other policies' reservations), never on a skipped cluster or one without a usable
report; releases only of floors the hub raised, from a usable report; shifts of at most
`stepPercent`, within minWeight/maxWeight, never to a cluster over its SLO or saturated.
A plan with any action outside them is rejected whole, with the reason.

The candidates are `rules` (what the rules decided this step), `hold` (nothing) and the
valid plans; the planner is the chooser (`chooser: planner`): its first valid plan,
else the rules. In `shadow` mode the rules act and the choice is only recorded; in
`apply` the chosen plan is executed instead of the rules' step.
"""

from dataclasses import replace
from typing import Final

from functions.runtime.hub.decision import (
    ADD_CAPACITY,
    RELEASE_CAPACITY,
    SHIFT_TRAFFIC,
    Change,
    Decision,
    HubState,
)
from functions.runtime.hub.fleet import ClusterFleet
from functions.runtime.hub.step import Step
from functions.runtime.shared.policy import PolicySpec

MAX_PLANS: Final = 3
RULES: Final = "rules"
HOLD: Final = "hold"
SOURCE_PLANNER: Final = "planner"

PLAN_SCHEMA: Final = {
    "type": "object",
    "properties": {
        "plans": {
            "type": "array",
            "maxItems": MAX_PLANS,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "maxLength": 63},
                    "hypothesis": {"type": "string", "maxLength": 1000},
                    "actions": {
                        "type": "array",
                        "maxItems": 16,
                        "items": {
                            "type": "object",
                            "properties": {
                                "type": {"enum": ["add", "release", "shift"]},
                                "cluster": {"type": "string"},
                                "from": {"type": "string"},
                                "replicas": {"type": "integer", "minimum": 1},
                                "percent": {"type": "integer", "minimum": 1, "maximum": 100},
                            },
                            "required": ["type", "cluster"],
                            "additionalProperties": False,
                        },
                    },
                },
                "required": ["id", "actions", "hypothesis"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["plans"],
    "additionalProperties": False,
}

PLANNER_PROMPT: Final = (
    "You plan capacity and traffic for an LLM serving fleet. Propose up to three plans; "
    "each is a list of actions (add replicas to a cluster, release replicas of a floor "
    "the hub raised, shift percent of traffic from one cluster to another) with a "
    "hypothesis of what it will do. Stay within the limits given; a plan with any "
    "action outside them is rejected. Answer only with JSON following the schema."
)


def context(state: HubState, spec: PolicySpec, rules: Decision) -> dict:
    """What the planner sees: the limits, every cluster's report and hub state, and what
    the rules decided."""
    esc = spec.escalation
    return {
        "limits": {
            "step": esc.step,
            "cooldownSeconds": esc.cooldown,
            "stepPercent": spec.traffic.step_percent,
            "managesTraffic": spec.manages_traffic,
        },
        "phase": rules.before.phase,
        "clusters": {
            c.name: {
                "maxReplicas": spec.cluster(c.name).max_replicas,
                "minWeight": spec.cluster(c.name).min_weight,
                "maxWeight": spec.cluster(c.name).max_weight,
                "floor": c.floor,
                "weight": c.weight,
                "report": None
                if rules.reports.get(c.name) is None
                else rules.reports[c.name].to_status(),
            }
            for c in rules.before.clusters
        },
        "rules": {"action": rules.action, "message": rules.message},
    }


def _fresh_step(state: HubState, spec: PolicySpec, now: float) -> Step:
    step = Step(state, spec, now)
    step.read_reports()
    return step


def check(plan: dict, step: Step) -> str | None:
    """Why the plan breaks a limit, or None. Actions are checked in order on the state
    the previous ones leave, so two adds on one cluster are one step together."""
    spec = step.spec
    added: dict[str, int] = {}
    weights = {n: c.weight or 0 for n, c in step.clusters.items()}
    for i, action in enumerate(plan["actions"]):
        where = f"actions[{i}] {action['type']} on {action['cluster']}"
        name = action["cluster"]
        entry = spec.cluster(name)
        if entry is None:
            return f"{where}: not a cluster of the policy"
        c, report = step.clusters[name], step.usable[name]
        if action["type"] in ("add", "release"):
            if report is None:
                return f"{where}: no usable report"
            n = action.get("replicas")
            if n is None:
                return f"{where}: replicas missing"
            if c.last_step_at is not None and step.now - c.last_step_at < step.cooldown:
                return f"{where}: in cooldown"
        if action["type"] == "add":
            added[name] = added.get(name, 0) + n
            if added[name] > step.step:
                return f"{where}: more than step ({step.step}) replicas"
            if c.skipped_until is not None and step.now < c.skipped_until:
                return f"{where}: skipped until its replicas reach a node"
            if added[name] > step.room(name)[1]:
                return f"{where}: more than its room ({step.room(name)[1]})"
        elif action["type"] == "release":
            if c.tier is None or c.floor <= 0:
                return f"{where}: no floor the hub raised"
            if n > step.step or n > c.floor:
                return f"{where}: more than step ({step.step}) or its floor ({c.floor})"
        else:
            donor, percent = action.get("from"), action.get("percent")
            if not spec.manages_traffic:
                return f"{where}: the policy manages no traffic"
            if donor is None or percent is None or spec.cluster(donor) is None:
                return f"{where}: needs from (a cluster) and percent"
            if percent > spec.traffic.step_percent:
                return f"{where}: more than stepPercent ({spec.traffic.step_percent})"
            if report is None or report.ready <= 0 or _strained(spec, report):
                return f"{where}: not serving within its SLOs"
            weights[donor] -= percent
            weights[name] += percent
            if weights[donor] < spec.cluster(donor).min_weight:
                return f"{where}: {donor} below its minWeight"
            if weights[name] > entry.max_weight:
                return f"{where}: above its maxWeight"
    return None


def _strained(spec: PolicySpec, report) -> bool:
    lat, err, sat = spec.latency_slo, spec.error_rate_slo, spec.saturation_threshold
    return (
        (lat is not None and report.latency is not None and report.latency > lat)
        or (err is not None and report.error_rate is not None and report.error_rate > err)
        or (
            spec.signals.saturation is not None
            and report.saturation is not None
            and report.saturation >= sat
        )
    )


def execute(plan: dict, state: HubState, spec: PolicySpec, rules: Decision) -> Decision:
    """The checked plan carried out on the fleet as it was before the step (the phase
    machine's outcome is the rules' own)."""
    step = _fresh_step(state, spec, rules.time)
    step.phase = rules.fleet.phase
    step.calm_since = rules.fleet.calm_since
    for after in rules.fleet.clusters:  # the timers the rules' phases kept
        c = step.clusters[after.name]
        step.clusters[after.name] = replace(
            c, short_since=after.short_since, steady_weight=after.steady_weight
        )
    top_tier = max((c.tier for c in step.clusters.values() if c.tier), default=0)
    for action in plan["actions"]:
        name = action["cluster"]
        c, report = step.clusters[name], step.usable.get(name)
        if action["type"] == "add":
            current = c.floor if c.floor else report.desired
            tier = c.tier if c.tier and c.tier > 0 else (top_tier := top_tier + 1)
            step.clusters[name] = replace(
                c,
                floor=current + action["replicas"],
                tier=tier,
                base=c.base if c.tier is not None else report.desired,
                raised_from=current,
                raised_at=step.now,
                not_ready_warned=False,
                last_step_at=step.now,
            )
            step.changes.append(
                Change(ADD_CAPACITY, name, f"+{action['replicas']} on {name} (planner)")
            )
        elif action["type"] == "release":
            floor = c.floor - action["replicas"]
            released = floor <= c.base
            step.clusters[name] = _released(c, floor, released, step.now)
            step.changes.append(
                Change(RELEASE_CAPACITY, name, f"-{action['replicas']} on {name} (planner)")
            )
        else:
            donor, percent = action["from"], action["percent"]
            d = step.clusters[donor]
            step.clusters[donor] = replace(d, weight=(d.weight or 0) - percent)
            c = step.clusters[name]
            step.clusters[name] = replace(c, weight=(c.weight or 0) + percent)
            step.last_traffic_at = step.now
            step.changes.append(
                Change(SHIFT_TRAFFIC, name, f"{percent}% from {donor} to {name} (planner)")
            )
    out = step.result()
    return replace(out, source=SOURCE_PLANNER, model=rules.model, events=rules.events)


def _released(c: ClusterFleet, floor: int, released: bool, now: float) -> ClusterFleet:
    return replace(
        c,
        floor=0 if released else floor,
        tier=None if released else c.tier,
        static=False if released else c.static,
        raised_at=None,
        last_step_at=now,
    )


def _rules_actions(rules: Decision) -> list[dict]:
    return [{"type": c.action, "cluster": c.cluster, "message": c.message} for c in rules.changes]


def choose(
    plans: list[dict], state: HubState, spec: PolicySpec, rules: Decision, *, apply: bool
) -> tuple[Decision, dict]:
    """The decision to carry out and the decision line's `adaptive` field."""
    step = _fresh_step(state, spec, rules.time)
    candidates = [
        {"id": RULES, "source": "rules", "actions": _rules_actions(rules)},
        {"id": HOLD, "source": "hold", "actions": []},
    ]
    rejections, valid = [], []
    for plan in plans[:MAX_PLANS]:
        taken = {c["id"] for c in candidates}
        why = f"id {plan['id']!r} is taken" if plan["id"] in taken else check(plan, step)
        if why is not None:
            rejections.append({"id": plan["id"], "reason": why})
            continue
        valid.append(plan)
        candidates.append({**plan, "source": SOURCE_PLANNER})
    chosen = valid[0]["id"] if valid else RULES
    executed = chosen if apply else RULES
    adaptive = {
        "candidates": candidates,
        "rejections": rejections,
        "probabilities": {},  # no Jev here: the planner chooses
        "chooser": SOURCE_PLANNER,
        "chosen": chosen,
        "executed": executed,
    }
    if executed == RULES:
        return rules, adaptive
    return execute(valid[0], state, spec, rules), adaptive
