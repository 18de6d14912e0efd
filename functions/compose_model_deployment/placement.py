"""Where a deployment's replicas go: clusters, one node pool each, counted in devices.

Capacity is counted per (cluster, pool) in whole nodes and devices: a pool has `maxNodes`
nodes (or `nodes` if it cannot grow) of `perNode` devices, grouped into fabrics. What
every ModelReplica already holds is taken out first, oldest first, so two deployments
racing for the last node never both give way: the younger one yields.

- A single-node pod takes devices on one node (best fit among partly used nodes, then a
  fresh node from outside the fabrics, then from the fabric with the fewest free nodes, so
  large free blocks stay whole for multi-node replicas).
- A multi-node replica (Leader + Workers) takes `worker.nodes + 1` whole free nodes of
  one fabric of one pool (the fabric with the fewest free nodes that still fits).
- The fabrics a deployment's multi-node replicas take are recorded per cluster: the
  ModelReplica pins their pods there (see the pool's `fabricNodeLabel`), so the scheduler
  cannot split a gang across fabrics that placement counted as one.
- One pool per cluster per deployment: its ModelReplica is per cluster.
- Existing placements are kept while they still fit, their pool still matches, and no
  untolerated NoExecute taint moves them; NoSchedule only keeps new replicas off.
- Scale-down takes from the cluster with the most replicas (ties: the last by name).
- An autoscaled deployment uses at most 100 clusters: each of its ModelReplicas carries
  the AdaptivePolicy member list, which holds no more.
- A pool whose claims would name a DeviceClass the member does not have (its
  InferenceCluster's status says Missing) takes no new replica: its pods would stay
  pending; the unplaceable reason names the class and the cluster.
- A deployment that names a ModelCache goes only to clusters the cache's selector picks
  (its weights can exist nowhere else), and new replicas go to clusters where the cache
  is Ready before any other (an engine elsewhere waits for its weights); among those,
  and then among the rest, the rules below apply.
- New replicas spread before they pack: each goes to the cluster with the fewest of the
  deployment's replicas that still has room. Ties go to a cluster it is already on, then
  to the lowest declared `costRank` of the pool it would use, then to best fit (the pool
  with the fewest free devices that still fits, so large pools stay whole), and only
  then to the first by name. Within a cluster the first replica's pool is chosen the
  same way (rank, then best fit).

Pure and deterministic: inputs are sorted, nothing reads the clock, and the same input
gives the same plan.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from functions.common import contracts
from functions.compose_model_deployment import cpu
from functions.compose_model_deployment.cel_env import DeviceProfile
from functions.compose_model_deployment.devices import (
    ProfileMatch,
    describe_mismatch,
    match_pool,
)
from functions.compose_model_deployment.model import (
    Cluster,
    Deployment,
    Footprint,
    Holding,
    Pool,
    footprint_of,
)

if TYPE_CHECKING:
    # modelcache stages a cache by placeable_pool, so it imports this module.
    from functions.compose_model_deployment.modelcache import CacheView


@dataclass(frozen=True)
class Placement:
    cluster: str
    pool: str
    replicas: int
    # The fabrics its multi-node replicas took (sorted; empty for single-node replicas
    # or a pool without declared fabrics): what their pods are pinned to.
    fabrics: tuple[str, ...] = ()


@dataclass(frozen=True)
class Dropped:
    """An existing placement that is not kept, and why (its replicas move)."""

    cluster: str
    pool: str
    replicas: int
    reason: str


@dataclass(frozen=True)
class PlacementPlan:
    placements: tuple[Placement, ...]  # by cluster name; replicas > 0
    unplaceable: int
    reason: str  # what was missing where ("" when everything is placed)
    dropped: tuple[Dropped, ...] = ()
    # Where an entirely unplaceable model is represented (to answer requests with why):
    # the matching pool closest to fitting.
    nearest: tuple[str, str] | None = None

    @property
    def placed(self) -> int:
        return sum(p.replicas for p in self.placements)


# --- Room in one pool ---------------------------------------------------------------------


class PoolRoom:
    """Free whole nodes per fabric, nodes outside fabrics, and partly used nodes."""

    __slots__ = ("fabric_free", "last_fabrics", "loose", "partial", "per_node")

    def __init__(self, pool: Pool) -> None:
        self.per_node = pool.per_node
        if pool.fabrics:
            self.fabric_free = {f.name: f.nodes for f in pool.fabrics}
            # Nodes the pool may grow to beyond its declared fabrics: good for single-node
            # pods, never for a multi-node replica (no interconnect is promised).
            self.loose = max(0, pool.nodes - sum(f.nodes for f in pool.fabrics))
        else:
            self.fabric_free = {"": pool.nodes}
            self.loose = 0
        # partial[f]: nodes with f free devices, 0 < f < per_node.
        self.partial = [0] * (self.per_node + 1)
        # The fabric each gang of the last successful take went to ("" for an undeclared one).
        self.last_fabrics: tuple[str, ...] = ()

    def take(self, footprint: Footprint) -> bool:
        """Allocate one replica; False (and nothing taken) if it does not fit."""
        fabric_free = dict(self.fabric_free)
        loose = self.loose
        partial = self.partial[:]
        per_node = self.per_node
        gang_fabrics = []
        for nodes in footprint.gangs:
            fits = [(free, name) for name, free in fabric_free.items() if free >= nodes]
            if not fits:
                return False
            _free, name = min(fits)
            fabric_free[name] -= nodes
            gang_fabrics.append(name)
        for devices in footprint.pods:
            if devices > per_node:
                return False
            for free in range(devices, per_node):
                if partial[free]:
                    partial[free] -= 1
                    partial[free - devices] += 1
                    break
            else:
                if loose:
                    loose -= 1
                else:
                    opened = [(free, name) for name, free in fabric_free.items() if free > 0]
                    if not opened:
                        return False
                    _free, name = min(opened)
                    fabric_free[name] -= 1
                partial[per_node - devices] += 1
        self.fabric_free, self.loose, self.partial = fabric_free, loose, partial
        self.last_fabrics = tuple(gang_fabrics)
        return True

    def copy(self) -> PoolRoom:
        """The same room, to take from without changing this one."""
        twin = PoolRoom.__new__(PoolRoom)
        twin.per_node, twin.loose, twin.partial = self.per_node, self.loose, self.partial[:]
        twin.fabric_free, twin.last_fabrics = dict(self.fabric_free), self.last_fabrics
        return twin

    def fitting(self, footprint: Footprint, limit: int) -> int:
        """How many more replicas would fit (at most `limit`), taking nothing."""
        trial = PoolRoom.__new__(PoolRoom)
        trial.per_node, trial.loose, trial.partial = self.per_node, self.loose, self.partial[:]
        trial.fabric_free, trial.last_fabrics = dict(self.fabric_free), ()
        count = 0
        while count < limit and trial.take(footprint):
            count += 1
        return count

    def state(self) -> tuple:
        """What `fitting` and `free_devices` depend on: rooms alike in it answer alike (a
        large fleet's untouched pools are mostly alike)."""
        return (self.per_node, self.loose, tuple(self.partial), tuple(self.fabric_free.items()))

    def free_devices(self) -> int:
        whole = sum(self.fabric_free.values()) + self.loose
        return whole * self.per_node + sum(f * n for f, n in enumerate(self.partial[:-1]))

    def largest_block(self) -> tuple[int, str]:
        """The most whole free nodes in one fabric, and which fabric."""
        if not self.fabric_free:
            return 0, ""
        name = min(self.fabric_free, key=lambda n: (-self.fabric_free[n], n))
        return self.fabric_free[name], name


# --- Eligibility ----------------------------------------------------------------------------


def _structural_problem(pool: Pool, footprint: Footprint) -> str:
    """Why no replica could ever fit this pool, however empty; "" if one could."""
    if footprint.requests or pool.cpu_only:
        return cpu.structural_problem(pool, footprint)
    biggest_pod = max(footprint.pods, default=0)
    if biggest_pod > pool.per_node:
        return f"a pod needs {biggest_pod} devices on one node, {pool.per_node} per node"
    if footprint.gangs:
        room = PoolRoom(pool)
        block, _ = room.largest_block()
        if max(footprint.gangs) > block:
            return f"needs {max(footprint.gangs)} whole nodes on one fabric, largest fabric {block}"
    return ""


def _untolerated(deployment: Deployment, pool: Pool, effects: Iterable[str]) -> str:
    for taint in pool.taints:
        if taint.effect in effects and not deployment.tolerates(taint):
            return str(taint)
    return ""


def claimed_device_classes(deployment: Deployment, pool: Pool) -> tuple[str, ...]:
    """The DeviceClasses the deployment's pods would claim in this pool: the pool's
    driver for its accelerators, and each class a request names beside them."""
    names = set()
    for engine in deployment.engines:
        for member in engine.members:
            for request in member.devices:
                names.add(request.device_class or pool.driver)
    return tuple(sorted(n for n in names if n))


def missing_device_classes(deployment: Deployment, cluster: Cluster, pool: Pool) -> list[str]:
    return [
        n for n in claimed_device_classes(deployment, pool) if n in cluster.missing_device_classes
    ]


def placeable_pool(deployment: Deployment, cluster: Cluster) -> str:
    """A pool on `cluster` where a replica of `deployment` could ever run (selected by
    its clusterSelector, devices that match, big enough, no untolerated taint), whatever
    is free now; "" if none. What a ModelCache is staged by."""
    if not deployment.cluster_selector.matches(cluster.labels):
        return ""
    footprint = footprint_of(deployment.engines)
    for pool in cluster.pools:
        if not match_pool(deployment, pool).matched:
            continue
        if _structural_problem(pool, footprint):
            continue
        if _untolerated(deployment, pool, ("NoSchedule", "NoExecute")):
            continue
        if missing_device_classes(deployment, cluster, pool):
            continue
        return pool.name
    return ""


# --- The plan -----------------------------------------------------------------------------------


def place(
    deployment: Deployment,
    clusters: list[Cluster],
    holdings: list[Holding],
    desired: int,
    *,
    matches: dict[tuple, ProfileMatch] | None = None,
    cache: CacheView | None = None,
    base_rooms: dict[tuple[str, str], PoolRoom] | None = None,
) -> PlacementPlan:
    """Keep what still fits, then fill the rest, spreading before packing.

    `clusters` are every InferenceCluster there is (the selector is applied here);
    `holdings` every ModelReplica, this deployment's included. `matches` may carry
    device-profile answers across calls for the same deployment. `base_rooms`, by
    (cluster, pool): the room left after every holder of a pool whose holders are not
    in `holdings` (read from the clusters' capacity ledgers, ledger_view.py; copied,
    never changed).
    """
    if deployment.cpu_only:
        # CPU pools counted in this deployment's slots (cpu.py), in the same rooms.
        clusters, holdings = cpu.in_slots(
            footprint_of(deployment.engines).requests, clusters, holdings
        )
    planner = _Planner(deployment, clusters, matches if matches is not None else {}, cache)
    for key, room in (base_rooms or {}).items():
        planner.rooms[key] = room.copy()
    own = [h for h in holdings if planner.owns(h)]
    kept, dropped = planner.keep(own)
    keep_counts = _scale_down({name: h.replicas for name, h in kept.items()}, desired)
    placed, dropped_late = planner.count_holdings(holdings, kept, keep_counts)
    need = planner.fill(desired - sum(placed.values()), placed)
    placements = tuple(
        Placement(name, planner.placed_pool[name], n, planner.fabrics_of(name))
        for name, n in sorted(placed.items())
        if n
    )
    reason, nearest = ("", None) if need <= 0 else planner.diagnose()
    # A selector written as a YAML block keeps its line ends; a reason is one line.
    reason = " ".join(reason.split())
    return PlacementPlan(placements, max(0, need), reason, tuple(dropped + dropped_late), nearest)


def _scale_down(counts: dict[str, int], desired: int) -> dict[str, int]:
    """Take the excess from the cluster with the most replicas, ties from the last name."""
    counts = dict(counts)
    excess = sum(counts.values()) - desired
    heap = [(-n, _reverse(name), name) for name, n in counts.items() if n > 0]
    heapq.heapify(heap)
    while excess > 0 and heap:
        negative, rname, name = heapq.heappop(heap)
        counts[name] -= 1
        excess -= 1
        if counts[name] > 0:
            heapq.heappush(heap, (negative + 1, rname, name))
    return counts


class _Planner:
    """The state of one placement: which pools fit, and the room left in each."""

    def __init__(
        self,
        deployment: Deployment,
        clusters: list[Cluster],
        matches: dict[tuple, ProfileMatch],
        cache: CacheView | None = None,
    ) -> None:
        self.deployment = deployment
        self.cache = cache
        self.footprint = footprint_of(deployment.engines)
        self.matches = matches
        self.clusters = clusters
        self.by_name = {c.name: c for c in clusters}
        self.selected = sorted(
            (
                c
                for c in clusters
                if deployment.cluster_selector.matches(c.labels)
                and (cache is None or cache.allows(c.labels))
            ),
            key=lambda c: c.name,
        )
        self.selected_names = {c.name for c in self.selected}
        self.rooms: dict[tuple[str, str], PoolRoom] = {}
        self.placed_pool: dict[str, str] = {}
        self.placed_fabrics: dict[str, set[str]] = {}
        # Every ModelReplica of an autoscaled deployment lists all its clusters for the
        # AdaptivePolicy, which holds at most ADAPTIVE_POLICY_MAX_CLUSTERS of them.
        self.max_clusters = (
            contracts.ADAPTIVE_POLICY_MAX_CLUSTERS if deployment.autoscaling else len(clusters)
        )
        self.capped = False
        # Answers by room state (see PoolRoom.state) and by pool shape: the footprint is
        # this deployment's throughout, so pools and rooms alike answer alike.
        self.fits: dict[tuple, tuple[int, int]] = {}
        self.structural: dict[tuple, str] = {}
        self.pool_matches: dict[int, ProfileMatch] = {}  # by id(pool); pools outlive it

    def took(self, cluster: str, room: PoolRoom) -> None:
        """Remember the fabrics one of our replicas just took on `cluster`."""
        self.placed_fabrics.setdefault(cluster, set()).update(f for f in room.last_fabrics if f)

    def uncached(self, cluster: str) -> bool:
        """Whether the referenced ModelCache is not Ready there (False without a cache)."""
        return self.cache is not None and cluster not in self.cache.ready

    def fabrics_of(self, cluster: str) -> tuple[str, ...]:
        return tuple(sorted(self.placed_fabrics.get(cluster, ())))

    def owns(self, h: Holding) -> bool:
        return h.namespace == self.deployment.namespace and h.deployment == self.deployment.name

    def profile_match(self, pool: Pool) -> ProfileMatch:
        # By the pool object first: hashing a match key hashes its whole device profile.
        found = self.pool_matches.get(id(pool))
        if found is None:
            found = self.matches.get(pool.match_key)
            if found is None:
                found = self.matches[pool.match_key] = match_pool(self.deployment, pool)
            self.pool_matches[id(pool)] = found
        return found

    def structural_problem(self, pool: Pool) -> str:
        key = pool.shape
        found = self.structural.get(key)
        if found is None:
            found = self.structural[key] = _structural_problem(pool, self.footprint)
        return found

    def fit_and_free(self, room: PoolRoom, limit: int) -> tuple[int, int]:
        """How many more replicas fit the room (at most `limit`), and its free devices."""
        key = (room.state(), limit)
        found = self.fits.get(key)
        if found is None:
            found = self.fits[key] = (room.fitting(self.footprint, limit), room.free_devices())
        return found

    def fresh_fit_and_free(self, pool: Pool, limit: int) -> tuple[int, int]:
        """fit_and_free for a pool nothing was taken from yet."""
        key = (pool.shape, limit)
        found = self.fits.get(key)
        if found is None:
            found = self.fits[key] = self.fit_and_free(PoolRoom(pool), limit)
        return found

    def room(self, cluster: Cluster, pool: Pool) -> PoolRoom:
        key = (cluster.name, pool.name)
        room = self.rooms.get(key)
        if room is None:
            room = self.rooms[key] = PoolRoom(pool)
        return room

    def keep(self, own: list[Holding]) -> tuple[dict[str, Holding], list[Dropped]]:
        """Which existing placements may stay, before room is counted."""
        kept: dict[str, Holding] = {}
        dropped: list[Dropped] = []
        for h in sorted(own, key=lambda h: (h.cluster, h.pool)):
            reason = self.keep_problem(h)
            if not reason and h.cluster in kept:
                reason = f"a second pool on {h.cluster} (one pool per cluster per deployment)"
            if reason:
                if h.replicas:
                    dropped.append(Dropped(h.cluster, h.pool, h.replicas, reason))
                continue
            kept[h.cluster] = h
        in_use = sorted(
            (h for h in kept.values() if h.replicas), key=lambda h: (-h.replicas, h.cluster)
        )
        for h in in_use[self.max_clusters :]:
            reason = (
                f"an autoscaled deployment runs on at most {self.max_clusters} clusters "
                "(the AdaptivePolicy's member limit)"
            )
            dropped.append(Dropped(h.cluster, h.pool, h.replicas, reason))
            del kept[h.cluster]
        return kept, dropped

    def keep_problem(self, h: Holding) -> str:
        cluster = self.by_name.get(h.cluster)
        if cluster is None:
            return f"InferenceCluster {h.cluster} no longer exists"
        if not self.deployment.cluster_selector.matches(cluster.labels):
            return f"InferenceCluster {h.cluster} no longer matches the clusterSelector"
        if h.cluster not in self.selected_names and self.cache is not None:
            return (
                f"InferenceCluster {h.cluster} is outside ModelCache {self.cache.name}'s "
                "clusterSelector (its weights are not staged there)"
            )
        pool = cluster.pool(h.pool)
        where = f"node pool {h.cluster}/{h.pool}"
        if pool is None:
            return f"{where} no longer exists"
        if not self.profile_match(pool).matched:
            return f"{where} no longer has matching devices"
        problem = self.structural_problem(pool)
        if problem:
            return f"{where}: {problem}"
        taint = _untolerated(self.deployment, pool, ("NoExecute",))
        if taint:
            return f"{where} has taint {taint}, not tolerated"
        return ""

    def count_holdings(
        self, holdings: list[Holding], kept: dict[str, Holding], keep_counts: dict[str, int]
    ) -> tuple[dict[str, int], list[Dropped]]:
        """Take out what everyone holds, oldest first; ours at our own age."""
        placed: dict[str, int] = {}
        dropped: list[Dropped] = []
        for h in sorted(holdings, key=lambda h: h.order):
            cluster = self.by_name.get(h.cluster)
            pool = cluster.pool(h.pool) if cluster else None
            if pool is None:
                continue
            room = self.room(cluster, pool)
            if not self.owns(h):
                for _ in range(h.replicas):
                    if not room.take(h.footprint):
                        break  # overcommitted by a younger holder: that one yields
                continue
            if kept.get(h.cluster) is not h:
                continue
            want = keep_counts.get(h.cluster, 0)
            got = 0
            while got < want and room.take(self.footprint):
                self.took(h.cluster, room)
                got += 1
            self.placed_pool[h.cluster] = h.pool
            placed[h.cluster] = got
            if got < want:
                reason = "no longer fits beside older holders"
                dropped.append(Dropped(h.cluster, h.pool, want - got, reason))
        return placed, dropped

    def candidate_pools(self, cluster: Cluster) -> list[Pool]:
        """Pools new replicas may go to: the deployment's pool there, or any that fits."""
        pools = []
        for pool in cluster.pools:
            if self.placed_pool.get(cluster.name) not in (None, pool.name):
                continue
            if not self.profile_match(pool).matched:
                continue
            if self.structural_problem(pool):
                continue
            if _untolerated(self.deployment, pool, ("NoSchedule", "NoExecute")):
                continue
            if missing_device_classes(self.deployment, cluster, pool):
                continue
            pools.append(pool)
        return pools

    def fill(self, need: int, placed: dict[str, int]) -> int:
        """Place `need` more, each on the cluster with the fewest of ours."""
        candidates = {}
        for cluster in self.selected:
            pools = self.candidate_pools(cluster)
            if pools:
                candidates[cluster.name] = (cluster, pools)
        # Ties go to a cluster the deployment is already on (its ModelReplica stays
        # rather than one being deleted and another created), then to the cheaper and
        # tighter pool, and only then by name.
        # Spreading comes first, so a cluster's share of what is left is what its pool
        # must hold (and all a best-fit check needs to count).
        share = -(-need // max(1, len(candidates)))
        heap = []
        for name, (cluster, pools) in candidates.items():
            preference = self.preference(cluster, pools, share)
            if preference is not None:
                heap.append(
                    (
                        self.uncached(name),
                        placed.get(name, 0),
                        name not in placed,
                        *preference,
                        name,
                    )
                )
        heapq.heapify(heap)
        in_use = {name for name, n in placed.items() if n}
        while need > 0 and heap:
            uncached, count, _fresh, _rank, _free, name = heapq.heappop(heap)
            if name not in in_use and len(in_use) >= self.max_clusters:
                self.capped = True
                continue  # an autoscaled deployment's member list is full
            cluster, pools = candidates[name]
            if not self.take_one(cluster, pools, share):
                continue  # full: the cluster leaves the heap
            in_use.add(name)
            placed[name] = count + 1
            need -= 1
            preference = self.preference(cluster, pools, share)
            if preference is not None:
                heapq.heappush(heap, (uncached, count + 1, False, *preference, name))
        return need

    def usable_pools(
        self, cluster: Cluster, pools: list[Pool], need: int
    ) -> list[tuple[Pool, int]]:
        """The pools one more replica could go to on this cluster, best first: the
        deployment's pool there once it has one. Else by cost rank, then best fit: the
        smallest pool that holds this cluster's share (`need`) of the replicas still to
        place (one pool per cluster per deployment, so a pool that fits only the first
        would cap the rest), else the one that holds the most. Each with its free devices."""
        chosen = self.placed_pool.get(cluster.name)
        if chosen is not None:
            pools = [p for p in pools if p.name == chosen]
            need = 1  # the pool is decided: all that matters is whether one more fits
        ranked = []
        for pool in pools:
            room = self.rooms.get((cluster.name, pool.name))
            if room is None:
                # Nobody holds anything there: answered by the pool's shape alone,
                # without building a room for every pool of a large fleet.
                fit, free = self.fresh_fit_and_free(pool, max(1, need))
            else:
                fit, free = self.fit_and_free(room, max(1, need))
            if fit:
                holds_all = fit >= need
                key = (pool.cost_rank, not holds_all, free if holds_all else -free, pool.name)
                ranked.append((key, free, pool))
        return [(pool, free) for _key, free, pool in sorted(ranked, key=lambda kp: kp[0])]

    def preference(self, cluster: Cluster, pools: list[Pool], need: int) -> tuple[int, int] | None:
        """(cost rank, free devices) of the pool the next replica would use; None: full."""
        chosen = cluster.pool(self.placed_pool.get(cluster.name, ""))
        if chosen is not None:
            # Decided already: no trial take (a full pool fails its take and leaves then).
            return chosen.cost_rank, self.room(cluster, chosen).free_devices()
        usable = self.usable_pools(cluster, pools, need)
        if not usable:
            return None
        best, free = usable[0]
        return best.cost_rank, free

    def take_one(self, cluster: Cluster, pools: list[Pool], need: int) -> bool:
        chosen = self.placed_pool.get(cluster.name)
        if chosen is not None:
            pool = cluster.pool(chosen)
            if pool is None or not self.room(cluster, pool).take(self.footprint):
                return False
            self.took(cluster.name, self.room(cluster, pool))
            return True
        for pool, _free in self.usable_pools(cluster, pools, need):
            if self.room(cluster, pool).take(self.footprint):
                self.placed_pool[cluster.name] = pool.name
                self.took(cluster.name, self.room(cluster, pool))
                return True
        return False

    def diagnose(self) -> tuple[str, tuple[str, str] | None]:
        return _diagnose(self)


def _reverse(name: str) -> tuple[int, ...]:
    """A key that sorts names in reverse, for ties broken toward the last name."""
    return (*(-ord(ch) for ch in name), 1)


def _missing_classes_reason(deployment: Deployment, matching: list[tuple[Cluster, Pool]]) -> str:
    """Why every pool that matches would leave the pods pending: the classes, by cluster."""
    by_cluster: dict[str, list[str]] = {}
    for cluster, pool in matching:
        names = by_cluster.setdefault(cluster.name, [])
        names += [n for n in missing_device_classes(deployment, cluster, pool) if n not in names]
    where = "; ".join(f"DeviceClass {', '.join(n)} on {c}" for c, n in by_cluster.items())
    return (
        "every matching pool's devices are claimed by a DeviceClass its cluster does not "
        f"have ({where}): its pods would stay pending; the InferenceCluster's "
        "status.deviceClasses says which"
    )


def _diagnose(planner: _Planner) -> tuple[str, tuple[str, str] | None]:
    """One reason naming what was missing where, and the pool closest to fitting."""
    deployment, footprint = planner.deployment, planner.footprint
    if planner.capped:
        return (
            f"an autoscaled deployment runs on at most {planner.max_clusters} clusters (the "
            f"AdaptivePolicy's member limit), and those it uses are full",
            None,
        )
    clusters, selected = planner.clusters, planner.selected
    profile_match, room_of, placed_pool = planner.profile_match, planner.room, planner.placed_pool
    if not clusters:
        return "no InferenceClusters exist", None
    if not selected:
        if planner.cache is not None and not planner.cache.exists:
            return (
                f"ModelCache {planner.cache.name} (spec.modelCacheRef.name) does not exist: "
                "its weights are on no cluster",
                None,
            )
        if planner.cache is not None:
            by_deployment = sum(deployment.cluster_selector.matches(c.labels) for c in clusters)
            by_cache = sum(planner.cache.selector.matches(c.labels) for c in clusters)
            return (
                f"no InferenceCluster matches both spec.template.spec.clusterSelector "
                f"({by_deployment} of {len(clusters)} do) and ModelCache "
                f"{planner.cache.name}'s spec.clusterSelector ({by_cache} do)",
                None,
            )
        return (
            f"no InferenceCluster matches spec.template.spec.clusterSelector "
            f"({len(clusters)} exist)",
            None,
        )
    matching: list[tuple[Cluster, Pool]] = []
    mismatches = []
    profiles: dict[DeviceProfile, None] = {}
    for cluster in selected:
        for pool in cluster.pools:
            if placed_pool.get(cluster.name) not in (None, pool.name):
                continue
            profiles[pool.profile] = None
            profiles.update((e.profile, None) for e in pool.extra_devices)
            result = profile_match(pool)
            if result.matched:
                matching.append((cluster, pool))
            elif result.mismatch:
                mismatches.append((result.matched_requests, result.mismatch))
    # Where a model that fits nowhere answers requests with why when no pool comes close:
    # the first selected cluster's first pool (a ModelReplica needs one).
    fallback = next(((c.name, c.pools[0].name) for c in selected if c.pools), None)
    if not matching:
        reason = f"no node pool on the {len(selected)} selected clusters has matching devices"
        if mismatches:
            # Explain the pool that came closest (the most requests matched): what blocks
            # there is what the user would change, not the first selector of any pool.
            _closest, first = min(
                mismatches,
                key=lambda cm: (-cm[0], not cm[1].missing_name, not cm[1].error, cm[1].path),
            )
            reason += ": " + describe_mismatch(first, list(profiles))
        return reason, fallback
    with_classes = [(c, p) for c, p in matching if not missing_device_classes(deployment, c, p)]
    if not with_classes:
        c, p = matching[0]
        return _missing_classes_reason(deployment, matching), (c.name, p.name)
    matching = with_classes
    structural = [(c, p, _structural_problem(p, footprint)) for c, p in matching]
    sized = [(c, p) for c, p, problem in structural if not problem]
    if not sized:
        c, p, problem = structural[0]
        return f"no matching pool is big enough: {c.name}/{p.name} {problem}", (c.name, p.name)
    schedulable = [
        (c, p) for c, p in sized if not _untolerated(deployment, p, ("NoSchedule", "NoExecute"))
    ]
    if not schedulable:
        c, p = sized[0]
        taint = _untolerated(deployment, p, ("NoSchedule", "NoExecute"))
        return (
            f"every matching pool has a taint the deployment does not tolerate "
            f"({c.name}/{p.name} {taint})",
            (c.name, p.name),
        )
    if footprint.multi_node:
        nodes = max(footprint.gangs)
        best = max(
            schedulable,
            key=lambda cp: (
                room_of(*cp).largest_block()[0],
                _reverse(cp[0].name + "/" + cp[1].name),
            ),
        )
        block, fabric = room_of(*best).largest_block()
        where = f"{best[0].name}/{best[1].name}" + (f" {fabric}" if fabric else "")
        per_node, label = best[1].per_node, best[1].device_label
        return (
            f"needs {nodes} free whole nodes ({nodes * per_node} {label}) on one fabric; "
            f"largest free block: {where} {block}",
            (best[0].name, best[1].name),
        )
    if footprint.requests:
        return _cpu_pools_full(planner, schedulable)
    devices = sum(footprint.pods)
    best = max(
        schedulable,
        key=lambda cp: (room_of(*cp).free_devices(), _reverse(cp[0].name + "/" + cp[1].name)),
    )
    return (
        f"needs {devices} free {best[1].device_label} per replica"
        + (f" ({len(footprint.pods)} pods)" if len(footprint.pods) > 1 else "")
        + f"; most free: {best[0].name}/{best[1].name} {room_of(*best).free_devices()}",
        (best[0].name, best[1].name),
    )


def _cpu_pools_full(
    planner: _Planner, schedulable: list[tuple[Cluster, Pool]]
) -> tuple[str, tuple[str, str]]:
    """Every CPU pool that could take a CPU deployment is full: what a replica needs and
    the pool with the most room left (in the deployment's slots)."""
    room_of, footprint = planner.room, planner.footprint
    best = max(
        schedulable,
        key=lambda cp: (room_of(*cp).free_devices(), _reverse(cp[0].name + "/" + cp[1].name)),
    )
    where = (best[0].name, best[1].name)
    free = room_of(*best).free_devices()
    return cpu.full_reason(footprint, where, free, cpu.unit_of(footprint.requests)), where
