"""What placement counts, read from the clusters' capacity ledgers
(functions/common/ledger.py) instead of every ModelReplica in the fleet.

Placement takes what everyone holds out of each pool, oldest first, this deployment's
own at its own age (placement.count_holdings). In a pool where this deployment holds
nothing, that is the same room for every deployment: the room left after every holder
in the ledger, replayed once per ledger (memoized with the cluster's parse, by its uid
and resourceVersion) and copied into each placement. Only the pools this deployment
holds in (its own ModelReplicas as observed, and any ledger line naming it) are replayed
holder by holder, with its own replicas in place. Placement from the ledger is then
placement from the full list: the same rooms, the same holders where order matters
(tests/unit/test_ledger.py checks it on random fleets).

A CPU-only pool has no room to memoize: each CPU deployment counts it in its own slots
(cpu.py), so its holders (each line's CPU requests) are always listed, holder by holder,
and translated with the rest of the deployment's holdings.

A cluster whose ledger cannot be read is not read at all (fleet.py freezes this
deployment's replicas there). A cluster without a ledger yet (compose-serving-stack
has not summarized it) offers its pools as nothing holds them: if something does, the
pool is over-committed until the ledger is written, and then the younger holder yields
(docs/placement.md, "Concurrency").
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from functions.common.ledger import LedgerError, read_ledger
from functions.compose_model_deployment.model import (
    CLUSTER_FIELDS,
    Cluster,
    Footprint,
    Holding,
    InputError,
    read_cluster,
)
from functions.compose_model_deployment.placement import PoolRoom

# What read_view reads: the cluster as read_cluster reads it, and its ledger.
LEDGER_FIELDS: Final = {
    **CLUSTER_FIELDS,
    "status": {**CLUSTER_FIELDS["status"], "ledger": None},
}


@dataclass(frozen=True)
class LedgerView:
    cluster: Cluster
    holders: dict[str, tuple[Holding, ...]]  # by pool, oldest first
    owners: dict[tuple[str, str], frozenset[str]]  # (namespace, deployment) -> pools
    rooms: dict[str, PoolRoom]  # by pool: the room left after every holder (not CPU-only)


def replay(pool_room: PoolRoom, holders: Iterable[Holding]) -> PoolRoom:
    """Take out what each holder holds, oldest first; a holder that no longer fits
    beside older ones takes what fits and yields the rest (as count_holdings does)."""
    for h in sorted(holders, key=lambda h: h.order):
        for _ in range(h.replicas):
            if not pool_room.take(h.footprint):
                break
    return pool_room


def read_view(ic: dict) -> LedgerView:
    """An InferenceCluster and its ledger; InputError naming the field."""
    cluster = read_cluster(ic)
    raw = (ic.get("status") or {}).get("ledger") if isinstance(ic.get("status"), dict) else None
    try:
        entries = read_ledger(raw) if raw is not None else []
    except LedgerError as err:
        raise InputError(f"InferenceCluster {cluster.name}: {err.path}", err.rule) from None
    by_pool: dict[str, list[Holding]] = {}
    owners: dict[tuple[str, str], set[str]] = {}
    for e in entries:
        by_pool.setdefault(e.pool, []).append(
            Holding(
                namespace=e.namespace,
                name=e.name,
                deployment=e.deployment,
                cluster=cluster.name,
                pool=e.pool,
                replicas=e.replicas,
                footprint=Footprint(e.gangs, e.pods, e.requests),
                order=e.order,
            )
        )
        owners.setdefault((e.namespace, e.deployment), set()).add(e.pool)
    holders = {pool: tuple(sorted(hs, key=lambda h: h.order)) for pool, hs in by_pool.items()}
    rooms = {}
    for pool_name, held in holders.items():
        pool = cluster.pool(pool_name)
        if pool is not None and not pool.cpu_only:
            rooms[pool_name] = replay(PoolRoom(pool), held)
    return LedgerView(cluster, holders, {k: frozenset(v) for k, v in owners.items()}, rooms)


@dataclass(frozen=True)
class Counted:
    """What placement counts for one deployment."""

    listed: list[Holding]  # every holder of the pools it holds in, its own included
    rooms: dict[tuple[str, str], PoolRoom]  # (cluster, pool) -> room, every other pool


def counted(
    views: Iterable[LedgerView], own: Iterable[Holding], namespace: str, deployment: str
) -> Counted:
    """The holders of the pools this deployment holds in and of every CPU-only pool, and
    the rooms of the rest."""
    touched = {(h.cluster, h.pool) for h in own}
    listed: list[Holding] = []
    rooms: dict[tuple[str, str], PoolRoom] = {}
    for view in views:
        name = view.cluster.name
        mine = view.owners.get((namespace, deployment), frozenset())
        for pool, held in view.holders.items():
            if (name, pool) in touched or pool in mine:
                listed.extend(held)
            elif pool in view.rooms:
                rooms[(name, pool)] = view.rooms[pool]
            elif (found := view.cluster.pool(pool)) is not None and found.cpu_only:
                listed.extend(held)
    return Counted(listed, rooms)
