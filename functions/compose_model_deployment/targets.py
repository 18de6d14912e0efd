"""Where a model's ModelReplicas go, given what already exists and what was decided.

Placement (`placement.py`) and parking (`parking.py`) decide how many replicas run where;
this module decides the rest of what the shell used to decide inline:

- **ownership**: the ModelReplicas this deployment composed are its own as observed,
  whatever their fields say (the composed copy is authoritative); the fleet's list adds
  everyone else's.
- **what exists where**: the deployment's ModelReplicas on a cluster that still exists,
  in a pool it still has, and that the clusterSelector still selects.
- **answering why**: a parked model, or one that fits nowhere, runs nothing but keeps a
  ModelReplica at 0 on every cluster the clusterSelector selects (in the pool it has
  there; elsewhere the pool closest to fitting, else the first by name: no pod runs, so
  the pool only names it), so a request that reaches any selected cluster's gateway is
  told why at once (a 503 with the reason) instead of being routed to nothing. Its
  ModelReplicas on clusters no longer selected (or gone) are removed, and the shell
  says so.
- **the activator's clusters**: an on-demand model's route leads to the member's
  activator wherever no replica of it is ready.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from functions.compose_model_deployment.model import Cluster, Deployment, Holding
from functions.compose_model_deployment.ondemand import Activity
from functions.compose_model_deployment.parking import Decision
from functions.compose_model_deployment.placement import PlacementPlan
from functions.compose_model_deployment.status import parked_message

REASON_PARKED = "Parked"
REASON_UNPLACEABLE = "Unplaceable"
# A ModelReplica's spec.unavailable.message is bounded by its XRD.
UNAVAILABLE_MESSAGE_LIMIT = 1024


def merge_ownership(
    observed_own: Iterable[Holding], listed: Iterable[Holding], deployment: Deployment
) -> list[Holding]:
    """Every ModelReplica: ours as observed (stamped ours), then the fleet's others."""
    mine = [
        replace(h, namespace=deployment.namespace, deployment=deployment.name) for h in observed_own
    ]
    ids = {(h.namespace, h.name) for h in mine}
    return mine + [h for h in listed if (h.namespace, h.name) not in ids]


def own_holdings(holdings: Iterable[Holding], deployment: Deployment) -> list[Holding]:
    return [
        h
        for h in holdings
        if h.namespace == deployment.namespace and h.deployment == deployment.name
    ]


def existing_at(
    own: Iterable[Holding], by_name: dict[str, Cluster], deployment: Deployment
) -> list[tuple[Cluster, str]]:
    """(cluster, pool) of each own ModelReplica on a selected cluster and existing pool,
    by cluster name."""
    return [
        (by_name[h.cluster], h.pool)
        for h in sorted(own, key=lambda h: h.cluster)
        if h.cluster in by_name
        and by_name[h.cluster].pool(h.pool) is not None
        and deployment.cluster_selector.matches(by_name[h.cluster].labels)
    ]


def removed_when_parked(
    own: Iterable[Holding], answering: Iterable[tuple[Cluster, str]]
) -> list[Holding]:
    """A parked model's ModelReplicas that go: on a cluster gone or no longer selected."""
    kept = {c.name for c, _pool in answering}
    return [h for h in own if h.cluster not in kept]


def answering_at(
    kept_at: list[tuple[Cluster, str]],
    clusters: Iterable[Cluster],
    deployment: Deployment,
    nearest: tuple[str, str] | None = None,
) -> list[tuple[Cluster, str]]:
    """Where a model that runs nothing answers why: every selected cluster with a pool,
    in the pool its ModelReplica has there, else the pool closest to fitting, else the
    first by name; by cluster name."""
    at = {c.name: (c, pool) for c, pool in kept_at}
    for cluster in clusters:
        if cluster.name in at or not cluster.pools:
            continue
        if not deployment.cluster_selector.matches(cluster.labels):
            continue
        if nearest is not None and nearest[0] == cluster.name and cluster.pool(nearest[1]):
            at[cluster.name] = (cluster, nearest[1])
        else:
            at[cluster.name] = (cluster, min(p.name for p in cluster.pools))
    return [at[name] for name in sorted(at)]


@dataclass(frozen=True)
class Targets:
    """One ModelReplica per (cluster, pool, replicas); `unavailable` when it answers why."""

    replicas: tuple[tuple[Cluster, str, int], ...]
    unavailable: dict | None = None
    fabrics: dict[str, tuple[str, ...]] = field(default_factory=dict)  # by cluster name


def replica_targets(
    plan: PlacementPlan,
    parking: Decision,
    answering: list[tuple[Cluster, str]],
    by_name: dict[str, Cluster],
) -> Targets:
    """The plan's placements; a parked model, or one that fits nowhere, answers at 0
    wherever a request may arrive (`answering`, see answering_at)."""
    if parking.parked:
        return _unavailable(
            [(c, pool, 0) for c, pool in answering], REASON_PARKED, parked_message(parking.parked)
        )
    if not plan.placements and plan.unplaceable and answering:
        at = [(c, pool, 0) for c, pool in answering]
        return _unavailable(at, REASON_UNPLACEABLE, plan.reason)
    return Targets(
        tuple((by_name[p.cluster], p.pool, p.replicas) for p in plan.placements),
        fabrics={p.cluster: p.fabrics for p in plan.placements if p.fabrics},
    )


def _unavailable(at: list[tuple[Cluster, str, int]], reason: str, message: str) -> Targets:
    return Targets(tuple(at), {"reason": reason, "message": message[:UNAVAILABLE_MESSAGE_LIMIT]})


def idle_targets(
    kept_at: list[tuple[Cluster, str]], clusters: Iterable[Cluster], deployment: Deployment
) -> Targets:
    """An idle on-demand model holds nothing but keeps a ModelReplica at 0 where a request
    can arrive (its route leads to that member's activator): where it ran, else on every
    selected cluster, in the first pool by name (no pod runs, so the pool only names it)."""
    if kept_at:
        return Targets(tuple((c, pool, 0) for c, pool in kept_at))
    selected = sorted(
        (c for c in clusters if c.pools and deployment.cluster_selector.matches(c.labels)),
        key=lambda c: c.name,
    )
    return Targets(tuple((c, min(p.name for p in c.pools), 0) for c in selected))


def keep_anchors(decided: Targets, kept_at: list[tuple[Cluster, str]]) -> Targets:
    """An active on-demand model keeps its ModelReplicas at 0 where it runs nothing: a
    request may arrive at any member its route was on, and must reach an activator."""
    used = {c.name for c, _, _ in decided.replicas}
    extra = tuple((c, pool, 0) for c, pool in kept_at if c.name not in used)
    return replace(decided, replicas=decided.replicas + extra) if extra else decided


def on_demand_targets(
    decided: Targets,
    kept_at: list[tuple[Cluster, str]],
    clusters: Iterable[Cluster],
    deployment: Deployment,
    *,
    idle: bool,
) -> Targets:
    """An on-demand model's ModelReplicas: at 0 where a request can arrive while idle,
    and the placements plus those anchors while active."""
    return idle_targets(kept_at, clusters, deployment) if idle else keep_anchors(decided, kept_at)


def activator_at(
    activity: Activity | None, decided: Targets, own: Iterable[Holding]
) -> set[str] | None:
    """For an on-demand model, the clusters whose route leads to the member's activator:
    those with no ready replica. None for any other model."""
    if activity is None:
        return None
    ready = {h.cluster: h.ready_replicas for h in own}
    return {c.name for c, _, _ in decided.replicas if not ready.get(c.name)}
