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
   what the hub has already lent them. LocalFirst: until then the member scales alone;
   StaticFirst: `earlyAfter` while another member has static room to lend.
4. **Candidates**: other members with a usable report, not skipped, not short, below
   `maxReplicas`, with room (less what other policies' floors reserved there): static
   room first (cheapest `costRank`, then most room), then NodePool headroom, preferring
   regions other than the short member's (same-region pools share the cloud capacity
   the short member could not get), then the cheapest.
5. **Allocation**: at most `step` replicas per member per `cooldown`, never past
   `maxReplicas`; each new helper gets the next tier (released highest first).
6. **Traffic** (with `traffic.routes` or `route`): weights always sum to 100 and stay
   within each member's `minWeight`/`maxWeight`. Steady: toward the configured
   `clusters[].weight`, `stepPercent` per `cooldown`. While escalated, at most
   `stepPercent` per `cooldown` moves from the busiest member to the least busy one below
   its ready share, never to a member over its latency or error SLO or saturated.
   While recovering, one `stepPercent` per `calmFor` returns toward the Steady weights,
   only if home's pressure afterwards stays within `safePressure`; otherwise home's
   floor is raised first (tier -1).
7. **Release**: after `calmFor` without shortage, one member per step, highest tier
   first, `step` replicas at a time, a helper only once its weight is back at Steady,
   home's floor last; a member without a usable report is held (`ReleaseHeld`).

Phases: Steady -> Escalated (a due shortage) -> Recovering (calm for `calmFor`) ->
Steady (no hub floor left and weights back).

This module is only the order. Each step lives in a module named for what it decides:
`hub_step` (the working copy and step 1), `hub_capacity` (steps 2 to 5), `hub_traffic`
(step 6), `hub_release` (step 7 and the phase machine); `hub_decision` holds what a step
takes and returns, and `hub_fleet` the `status.fleet` codec.
"""

from functions.runtime.hub import capacity as hub_capacity
from functions.runtime.hub import release as hub_release
from functions.runtime.hub import traffic as hub_traffic
from functions.runtime.hub.decision import Decision, HubState
from functions.runtime.hub.step import Step
from functions.runtime.shared.policy import PolicySpec


def plan(state: HubState, spec: PolicySpec, now: float) -> Decision:
    """One hub step for one policy (see the module docstring for the order)."""
    step = Step(state, spec, now)
    step.read_reports()
    hub_capacity.waiting_replicas(step)
    due, missing = hub_capacity.missing_replicas(step)
    hub_release.advance_phase(step, due)
    hub_capacity.allocate(step, due, missing)
    hub_traffic.shift_traffic(step)
    hub_release.release(step)
    hub_release.held_events(step)
    hub_release.settle(step)
    return step.result()
