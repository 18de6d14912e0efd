"""What of the fleet a deployment may place with, and what it must leave exactly as it is.

A cluster that cannot be read is never "gone": reading it as gone would move the
replicas there, which deletes a running workload. So this deployment's ModelReplica on
such a cluster (or a ModelReplica of its own that cannot itself be read) is *frozen*:
kept exactly as observed, counted against the desired replicas, and nothing new is
placed there until it can be read again. A malformed cluster elsewhere only offers no
room.

The shell parses (it memoizes on the request's Structs) and hands over what parsed and
what did not; the messages returned here are the warnings it emits, in order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from functions.compose_model_deployment import manifests, targets
from functions.compose_model_deployment.model import Cluster, Deployment, Holding


@dataclass(frozen=True)
class Fleet:
    clusters: list[Cluster]
    holdings: list[Holding]  # every readable ModelReplica but the frozen ones
    frozen: list[Holding]  # this deployment's, on a cluster (or in a replica) not readable
    frozen_keys: set[str]  # their composed-resource keys, kept exactly as observed
    warnings: list[str]  # what is kept and where nothing is placed, for a person


def freeze(
    deployment: Deployment,
    *,
    clusters: list[Cluster],
    unreadable_clusters: Mapping[str, str],
    own: Iterable[Holding],
    unreadable_own: Iterable[str],
    listed: Iterable[Holding],
) -> Fleet:
    """`unreadable_clusters`: cluster name -> why it cannot be read; `own`: this
    deployment's observed ModelReplicas that could be read, `unreadable_own` the keys of
    those that could not; `listed`: the fleet's ModelReplicas that could be read."""
    unreadable = {name: why for name, why in unreadable_clusters.items() if name}
    # A cluster that cannot be read down to its name may be any cluster not read: every
    # replica of ours on a cluster not read is kept as it is while one exists.
    nameless = next((why for name, why in unreadable_clusters.items() if not name), None)
    read = {c.name for c in clusters}
    frozen_keys = set(unreadable_own)
    holdings = targets.merge_ownership(own, listed, deployment)
    frozen = [
        h
        for h in targets.own_holdings(holdings, deployment)
        if h.cluster in unreadable
        or manifests.replica_key(h.cluster) in frozen_keys
        or (nameless is not None and h.cluster not in read)
    ]
    warnings = []
    for h in frozen:
        frozen_keys.add(manifests.replica_key(h.cluster))
        if h.cluster not in unreadable and nameless is not None and h.cluster not in read:
            warnings.append(
                f"keeping {h.replicas} replicas on {h.cluster} as they are: an "
                f"InferenceCluster that cannot be read down to its name may be it: {nameless}"
            )
        elif h.cluster in unreadable:
            warnings.append(
                f"keeping {h.replicas} replicas on {h.cluster} as they are, placing "
                f"nothing new there until it can be read: {unreadable[h.cluster]}"
            )
    for cluster, why in sorted(unreadable.items()):
        if all(h.cluster != cluster for h in frozen):
            warnings.append(f"placing nothing on {cluster}: {why}")
    return Fleet(
        clusters,
        [h for h in holdings if h not in frozen],
        frozen,
        frozen_keys,
        warnings,
    )
