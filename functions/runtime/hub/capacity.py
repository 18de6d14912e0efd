"""Capacity, phases 2 to 5 of a hub step: waiting replicas, missing replicas, candidates,
allocation.

Waiting: a floor the hub raised that is not ready after `readyTimeout` is taken back if
its replicas never reached a node (the member is then skipped as a helper for another
`readyTimeout`), or kept with `ReplicasNotReady` if they are on nodes but not ready.
Missing: a member short for `after` (or `earlyAfter` when its own NodePools have no
headroom) is due; the shortage is what the due members need minus what the hub has
already lent them. LocalFirst (the default): until then the member scales alone.
StaticFirst: while another member has static room, `earlyAfter` applies even if home's
NodePools could launch (idle nodes before new ones). Candidates: other members with a
usable report, not skipped, not short, below `maxReplicas`, with room (less what other
policies reserved there): static room first (cheapest `costRank`, then most room), then
NodePool headroom, preferring regions other than the short member's (same-region pools
share the cloud capacity the short member could not get), then the cheapest.
Allocation: at most `step` replicas per member per `cooldown`, never past `maxReplicas`;
each new helper gets the next tier (released highest first).
"""

from dataclasses import replace

from functions.runtime.hub.decision import (
    ADD_CAPACITY,
    EVENT_REPLICAS_NOT_READY,
    RELEASE_CAPACITY,
    SOURCE_MODEL,
    Change,
    HubEvent,
)
from functions.runtime.hub.step import Step
from functions.runtime.shared.policy import PLACEMENT_STATIC_FIRST, format_duration


def waiting_replicas(step: Step) -> None:
    timeout = step.spec.escalation.ready_timeout
    for name, c in sorted(step.clusters.items()):
        report = step.usable[name]
        if c.raised_at is None or report is None:
            continue
        if report.ready >= c.floor:
            step.clusters[name] = replace(c, raised_at=None, not_ready_warned=False)
            continue
        if step.now - c.raised_at < timeout:
            continue
        if report.scheduled >= c.floor:
            if not c.not_ready_warned:
                step.events.append(
                    HubEvent(
                        EVENT_REPLICAS_NOT_READY,
                        "Warning",
                        f"{c.floor - report.ready} replicas on {name} are on nodes but not"
                        f" ready after {format_duration(timeout)}; the floor stays",
                    )
                )
                step.clusters[name] = replace(c, not_ready_warned=True)
            continue
        taken = c.floor - max(report.scheduled, c.raised_from)
        floor = c.floor - taken
        released = floor <= c.base
        step.clusters[name] = replace(
            c,
            floor=0 if released else floor,
            tier=None if released else c.tier,
            static=False if released else c.static,
            raised_at=None,
            skipped_until=step.now + timeout,
            last_step_at=step.now,
        )
        step.changes.append(
            Change(
                RELEASE_CAPACITY,
                name,
                f"-{taken} on {name}: not on a node after {format_duration(timeout)}",
            )
        )


def _with_static_room(step: Step) -> set[str]:
    """Members with a usable report and static room to lend now."""
    return {n for n in step.clusters if step.usable[n] is not None and step.room(n)[0] > 0}


def missing_replicas(step: Step) -> tuple[list[str], int]:
    esc = step.spec.escalation
    static_first = step.spec.placement == PLACEMENT_STATIC_FIRST
    lenders: set[str] | None = None
    due: list[str] = []
    for name, c in sorted(step.clusters.items()):
        report = step.usable[name]
        if report is None:
            continue
        if report.needed <= 0:
            if c.short_since is not None:
                step.clusters[name] = replace(c, short_since=None)
            continue
        since = c.short_since if c.short_since is not None else step.now
        if c.short_since is None:
            step.clusters[name] = replace(c, short_since=since)
        # LocalFirst: a member whose own NodePools can launch waits `after` for them.
        # StaticFirst: idle nodes elsewhere go before launching new ones at home.
        early = report.node_pool_headroom <= 0
        if static_first and not early:
            if lenders is None:
                lenders = _with_static_room(step)
            early = bool(lenders - {name})
        wait = esc.early_after if early else esc.after
        if step.now - since >= wait:
            due.append(name)
    needed = sum(step.usable[n].needed for n in due)
    lent = sum(
        c.floor - c.base for c in step.clusters.values() if c.tier is not None and c.tier > 0
    )
    return due, max(0, needed - lent)


def candidates(step: Step, due: list[str]) -> list[str]:
    home = max(due, key=lambda n: (step.usable[n].needed, n)) if due else None
    home_region = step.usable[home].region if home else None
    found = []
    for name in sorted(step.clusters):
        report, c = step.usable[name], step.clusters[name]
        if report is None or name in due or report.needed > 0:
            continue
        if c.skipped_until is not None and step.now < c.skipped_until:
            continue
        static, total = step.room(name)
        if total <= 0:
            continue
        same_region = home_region is not None and report.region == home_region
        cost = step.spec.cluster(name).cost_rank  # cheaper first among equals
        found.append(
            ((0, cost, -static) if static > 0 else (1, int(same_region), cost, -total), name)
        )
    found.sort()
    ordered = [name for _, name in found]
    if step.state.ranker is None or step.spec.experimental.model is None or len(ordered) < 2:
        return ordered
    tier = {name: key[0] for key, name in found}  # 0: static room, 1: NodePool headroom
    return _ranked(step, due, ordered, tier)


def _ranked(step: Step, due: list[str], ordered: list[str], tier: dict[str, int]) -> list[str]:
    """The ranking model's order within each tier, when its top pick clears the
    confidence threshold and the model is in apply mode; recorded either way."""
    config = step.spec.experimental.model
    context = {
        "short": {n: step.usable[n].needed for n in due},
        "clusters": {
            n: {
                "tier": "static" if tier[n] == 0 else "nodePool",
                "room": step.room(n)[1],
                "region": step.usable[n].region,
                "costRank": step.spec.cluster(n).cost_rank,
                "pressure": step.usable[n].pressure,
                "ready": step.usable[n].ready,
            }
            for n in ordered
        },
    }
    ranking = step.state.ranker(tuple(ordered), context)
    probabilities = ranking.probabilities if ranking.error is None else {}
    top = max(probabilities.values(), default=0.0)
    accepted = bool(probabilities) and top * 100 >= config.confidence_threshold_percent
    shadow = config.mode == "shadow"
    step.model = {
        "probabilities": probabilities,
        "accepted": accepted,
        "shadow": shadow,
        "error": ranking.error,
    }
    if not accepted or shadow:
        return ordered
    position = {n: i for i, n in enumerate(ordered)}
    reordered = sorted(ordered, key=lambda n: (tier[n], -probabilities.get(n, 0.0), position[n]))
    if reordered != ordered:
        step.source = SOURCE_MODEL
    return reordered


def allocate(step: Step, due: list[str], missing: int) -> None:
    if not due:
        return
    short_on = ", ".join(due)
    if missing <= 0:
        return
    helpers = candidates(step, due)
    if not helpers:
        step.notes.append(f"{missing} replicas short and no other cluster has room")
        return
    left = missing
    top_tier = max((c.tier for c in step.clusters.values() if c.tier), default=0)
    for name in helpers:
        if left <= 0:
            break
        c, report = step.clusters[name], step.usable[name]
        if c.last_step_at is not None and step.now - c.last_step_at < step.cooldown:
            continue
        static, total = step.room(name)
        add = min(step.step, total, left)
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
        step.clusters[name] = replace(
            c,
            floor=current + add,
            tier=tier,
            base=base,
            static=uses_static if c.tier is None else (c.static and uses_static),
            raised_from=current,
            raised_at=step.now,
            not_ready_warned=False,
            last_step_at=step.now,
        )
        left -= add
        where = "static room" if uses_static else "NodePool headroom"
        step.changes.append(
            Change(ADD_CAPACITY, name, f"+{add} on {name} ({where}) for {short_on}")
        )
    if left == missing:
        step.notes.append(f"{missing} replicas short on {short_on}; helpers in cooldown")
