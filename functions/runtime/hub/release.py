"""Release, phase 7 of a hub step, and the phase machine around the steps.

Release: after `calmFor` without shortage, one member per step, highest tier first,
`step` replicas at a time, a helper only once its weight is back at Steady, home's floor
last; a member without a usable report is held (`ReleaseHeld`). Phases: Steady ->
Escalated (a due shortage) -> Recovering (calm for `calmFor`) -> Steady (no hub floor
left and weights back).
"""

from dataclasses import replace

from functions.runtime.hub.decision import EVENT_RELEASE_HELD, RELEASE_CAPACITY, Change, HubEvent
from functions.runtime.hub.fleet import HOME_TIER, PHASE_ESCALATED, PHASE_RECOVERING, PHASE_STEADY
from functions.runtime.hub.step import Step


def release(step: Step) -> None:
    if step.phase != PHASE_RECOVERING:
        return
    floors = [c for c in step.clusters.values() if c.tier is not None and c.floor > 0]
    helpers_left = any(c.tier > 0 for c in floors)
    weights_back = all(
        c.steady_weight is None or (c.weight or 0) <= c.steady_weight
        for c in step.clusters.values()
    )
    for c in sorted(floors, key=lambda c: (-c.tier, c.name)):
        if (
            c.tier > 0
            and step.spec.manages_traffic
            and (c.weight or 0) > (c.steady_weight if c.steady_weight is not None else 100)
        ):
            continue  # its share of the traffic is not back yet
        if c.tier == HOME_TIER and (helpers_left or not weights_back):
            continue  # home's floor goes last
        if step.usable[c.name] is None:
            step.held.append(c.name)
            continue
        if c.last_step_at is not None and step.now - c.last_step_at < step.cooldown:
            return
        floor = c.floor - step.step
        released = floor <= c.base
        step.clusters[c.name] = replace(
            c,
            floor=0 if released else floor,
            tier=None if released else c.tier,
            static=False if released else c.static,
            raised_at=None,
            last_step_at=step.now,
        )
        gone = c.floor - (0 if released else floor)
        step.changes.append(
            Change(
                RELEASE_CAPACITY,
                c.name,
                f"-{gone} on {c.name}" + (" (floor released)" if released else ""),
            )
        )
        return


def advance_phase(step: Step, due: list[str]) -> None:
    any_short = any(r is not None and r.needed > 0 for r in step.usable.values())
    if due:
        if step.phase == PHASE_STEADY:
            for name, c in step.clusters.items():
                step.clusters[name] = replace(c, steady_weight=c.weight)
        step.phase = PHASE_ESCALATED
        step.calm_since = None
        step.last_return_at = None
        return
    if step.phase == PHASE_STEADY:
        return
    if any_short:
        step.calm_since = None
        return
    if step.calm_since is None:
        step.calm_since = step.now
    if step.phase == PHASE_ESCALATED and step.now - step.calm_since >= step.calm_for:
        step.phase = PHASE_RECOVERING


def settle(step: Step) -> None:
    if step.phase != PHASE_RECOVERING:
        return
    floors_left = any(c.tier is not None and c.floor > 0 for c in step.clusters.values())
    weights_back = all(
        c.steady_weight is None or c.weight == c.steady_weight for c in step.clusters.values()
    )
    if not floors_left and weights_back:
        step.phase = PHASE_STEADY
        step.calm_since = step.last_return_at = None
        for name, c in step.clusters.items():
            step.clusters[name] = replace(c, steady_weight=None)


def held_events(step: Step) -> None:
    if step.held and tuple(step.held) != step.state.fleet.held:
        step.events.append(
            HubEvent(
                EVENT_RELEASE_HELD,
                "Warning",
                "keeping the floor on "
                + ", ".join(step.held)
                + ": no usable report (stale, out of sync, or none)",
            )
        )
