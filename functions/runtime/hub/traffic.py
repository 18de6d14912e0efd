"""Traffic, phase 6 of a hub step (with `traffic.routes` or `route`): spread while
escalated, return while recovering, toward the configured weights while steady.

Always: the weights sum to 100 and each stays within its member's `minWeight` and
`maxWeight` (out-of-bounds weights, after the bounds changed, are fitted at once).
Steady: one `stepPercent` per `cooldown` toward `clusters[].weight`, to a member that
serves. A member over `saturationThreshold` on the `saturation` signal counts as over
its SLO: under strain, and never given traffic.

Escalated: at most `stepPercent` per `cooldown` moves from the busiest member under
strain to the least busy one below its ready share, never to a member over its latency
or error SLO. Recovering: one `stepPercent` per `calmFor` returns toward the Steady
weights, only if home's pressure afterwards stays within `safePressure` (the higher of
home's and the donor's: a replica serves alike in either); otherwise home's floor is
raised first (tier -1) and the return waits for it to become ready.
"""

import math
from dataclasses import replace

from functions.runtime.hub.decision import ADD_CAPACITY, SHIFT_TRAFFIC, Change
from functions.runtime.hub.fleet import (
    HOME_TIER,
    PHASE_ESCALATED,
    PHASE_RECOVERING,
    PHASE_STEADY,
)
from functions.runtime.hub.step import Step, configured_weights, fit_weights
from functions.runtime.shared.report import Report


def _over_slo(step: Step, report: Report) -> bool:
    """Over its latency or error SLO, or saturated: such a member never gains traffic."""
    lat, err = step.spec.latency_slo, step.spec.error_rate_slo
    if lat is not None and report.latency is not None and report.latency > lat:
        return True
    sat = report.saturation
    if step.spec.signals.saturation and sat is not None and sat >= step.spec.saturation_threshold:
        return True
    return err is not None and report.error_rate is not None and report.error_rate > err


def shift_traffic(step: Step) -> None:
    if not step.spec.manages_traffic:
        return
    _conform(step)
    if step.phase == PHASE_ESCALATED:
        _spread(step)
    elif step.phase == PHASE_RECOVERING:
        _return(step)
    elif step.phase == PHASE_STEADY:
        _toward_configured(step)


def _bounds(step: Step, name: str) -> tuple[int, int]:
    entry = step.spec.cluster(name)
    return entry.min_weight, entry.max_weight


def _conform(step: Step) -> None:
    """Weights outside minWeight/maxWeight (the bounds changed, or the route was edited)
    or not summing to 100 are brought to the nearest that fit, at once: bounds are not
    paced. The Steady weights traffic returns to are fitted alike."""
    steady = {n: c.steady_weight for n, c in step.clusters.items()}
    if all(w is not None for w in steady.values()):
        steady_fit = fit_weights(steady, step.spec)
        for n in steady_fit:
            if steady_fit[n] != steady[n]:
                step.clusters[n] = replace(step.clusters[n], steady_weight=steady_fit[n])
    weights = {n: c.weight or 0 for n, c in step.clusters.items()}
    fitted = fit_weights(weights, step.spec)
    if fitted == weights:
        return
    moved = [n for n in sorted(weights) if fitted[n] != weights[n]]
    for n in moved:
        step.clusters[n] = replace(step.clusters[n], weight=fitted[n])
    step.changes.append(
        Change(
            SHIFT_TRAFFIC,
            moved[0],
            "weights brought within minWeight/maxWeight: "
            + ", ".join(f"{n} {weights[n]}->{fitted[n]}" for n in moved),
        )
    )


def _toward_configured(step: Step) -> None:
    """Steady: one `stepPercent` per `cooldown` toward `clusters[].weight`, only to a
    member that serves (ready, usable report, within its SLOs)."""
    target = configured_weights(step.spec)
    if target is None:
        return
    if step.last_traffic_at is not None and step.now - step.last_traffic_at < step.cooldown:
        return
    weight = {n: c.weight or 0 for n, c in step.clusters.items()}
    above = {n: weight[n] - target[n] for n in weight if weight[n] > target[n]}
    below = {
        n: target[n] - weight[n]
        for n in weight
        if weight[n] < target[n]
        and step.usable[n] is not None
        and step.usable[n].ready > 0
        and not _over_slo(step, step.usable[n])
    }
    if not above or not below:
        return
    donor = max(above, key=lambda n: (above[n], n))
    taker = max(below, key=lambda n: (below[n], n))
    move = min(step.spec.traffic.step_percent, above[donor], below[taker])
    _move(step, donor, taker, move, "toward the configured weights")


def _spread(step: Step) -> None:
    if step.last_traffic_at is not None and step.now - step.last_traffic_at < step.cooldown:
        return
    usable = {n: r for n, r in step.usable.items() if r is not None}
    total_ready = sum(r.ready for r in usable.values())
    if total_ready <= 0:
        return
    bounds = {n: _bounds(step, n) for n in usable}
    target = {
        n: min(bounds[n][1], max(bounds[n][0], 100 * r.ready / total_ready))
        for n, r in usable.items()
    }
    weight = {n: step.clusters[n].weight or 0 for n in usable}

    def busy(n: str) -> tuple:
        p = usable[n].pressure
        return (p if p is not None else -math.inf, weight[n] - target[n], n)

    # Only a member under strain gives traffic away: short, or over an SLO. Without
    # one, the fleet is calm and returning traffic is the recovery's job.
    donors = [
        n
        for n in usable
        if weight[n] > target[n]
        and weight[n] > bounds[n][0]
        and (usable[n].needed > 0 or _over_slo(step, usable[n]))
    ]
    takers = [
        n
        for n in usable
        if weight[n] < target[n]
        and weight[n] < bounds[n][1]
        and usable[n].ready > 0
        and not _over_slo(step, usable[n])
    ]
    if not donors or not takers:
        return
    donor = max(donors, key=busy)
    taker = min(takers, key=lambda n: (busy(n)[0], -(target[n] - weight[n]), n))
    p_d, p_t = usable[donor].pressure, usable[taker].pressure
    if p_d is not None and p_t is not None and p_t >= p_d:
        return
    move = min(
        step.spec.traffic.step_percent,
        math.floor(weight[donor] - target[donor] + 1e-9) or 1,
        math.floor(target[taker] - weight[taker] + 1e-9) or 1,
        weight[donor] - bounds[donor][0],
        bounds[taker][1] - weight[taker],
    )
    if move <= 0:
        return
    _move(step, donor, taker, move, "to the least busy member")


def _move(step: Step, donor: str, taker: str, move: int, why: str) -> None:
    d, t = step.clusters[donor], step.clusters[taker]
    step.clusters[donor] = replace(d, weight=(d.weight or 0) - move)
    step.clusters[taker] = replace(t, weight=(t.weight or 0) + move)
    step.last_traffic_at = step.now
    step.changes.append(
        Change(
            SHIFT_TRAFFIC,
            taker,
            f"{move}% from {donor} to {taker} {why}"
            f" ({donor} {d.weight}->{d.weight - move}, {taker} {t.weight}->{t.weight + move})",
        )
    )


def _return(step: Step) -> None:
    if step.last_return_at is not None and step.now - step.last_return_at < step.calm_for:
        return
    above = {
        n: (c.weight or 0) - c.steady_weight
        for n, c in step.clusters.items()
        if c.steady_weight is not None and (c.weight or 0) > c.steady_weight
    }
    below = {
        n: c.steady_weight - (c.weight or 0)
        for n, c in step.clusters.items()
        if c.steady_weight is not None and (c.weight or 0) < c.steady_weight
    }
    if not above or not below:
        return
    donor = max(above, key=lambda n: (above[n], n))
    home = max(below, key=lambda n: (below[n], n))
    move = min(
        step.spec.traffic.step_percent,
        above[donor],
        below[home],
        (step.clusters[donor].weight or 0) - _bounds(step, donor)[0],
        _bounds(step, home)[1] - (step.clusters[home].weight or 0),
    )
    if move <= 0:
        return
    home_c = step.clusters[home]
    home_report = step.usable[home]
    if home_report is not None and _over_slo(step, home_report):
        step.notes.append(f"return held: {home} is over its latency or error SLO")
        return
    if home_c.tier == HOME_TIER and home_c.raised_at is not None:
        step.notes.append(f"return waits for {home}'s raised floor to become ready")
        return
    blocked = _return_exceeds_safe(step, donor, home, move)
    if blocked is None:
        _move(step, donor, home, move, "back home (calm)")
        step.last_return_at = step.now
        return
    predicted, bound, total_load = blocked
    _raise_home(step, home, predicted=predicted, bound=bound, total_load=total_load, move=move)


def _return_exceeds_safe(
    step: Step, donor: str, home: str, move: int
) -> tuple[float, float, float] | None:
    """None when the return is safe (or cannot be judged: traffic returns on time)."""
    h, d = step.usable[home], step.usable[donor]
    if h is None or d is None or h.pressure is None or d.pressure is None:
        return None
    bounds = [s for s in (h.safe_pressure, d.safe_pressure) if s is not None]
    if not bounds:
        return None
    # A replica of the same model serves alike in either member: the higher bound is
    # what one has been seen to serve within the SLOs.
    bound = max(bounds)
    donor_weight = step.clusters[donor].weight or 0
    moved = d.pressure * d.ready * move / donor_weight if donor_weight else 0.0
    total_load = h.pressure * h.ready + moved
    predicted = total_load / h.ready if h.ready > 0 else math.inf
    return None if predicted <= bound else (predicted, bound, total_load)


def _raise_home(
    step: Step, home: str, *, predicted: float, bound: float, total_load: float, move: int
) -> None:
    report, c = step.usable[home], step.clusters[home]
    held = (
        f"returning {move}% to {home} would take its pressure to {predicted:.3g},"
        f" above safePressure {bound:.3g}"
    )
    skipped = c.skipped_until is not None and step.now < c.skipped_until
    cooling = c.last_step_at is not None and step.now - c.last_step_at < step.cooldown
    _, room = step.room(home)
    if report is None or skipped or cooling or room <= 0:
        step.notes.append(held)
        return
    wanted = max(1, math.ceil(total_load / bound - 1e-9) - report.ready)
    add = min(step.step, room, wanted)
    current = c.floor if c.floor else report.desired
    step.clusters[home] = replace(
        c,
        floor=current + add,
        tier=HOME_TIER,
        base=c.base if c.tier is not None else report.desired,
        static=add <= step.room(home)[0],
        raised_from=current,
        raised_at=step.now,
        not_ready_warned=False,
        last_step_at=step.now,
    )
    step.changes.append(Change(ADD_CAPACITY, home, f"+{add} on {home} first: {held}"))
