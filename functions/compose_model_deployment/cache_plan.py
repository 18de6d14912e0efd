"""What one ModelCache reconcile composes, keeps and removes, and the status it reports.

Per cluster the cache is staged on (by name): the tenant's Namespace (never deleted
with the cache: a namespace outlives any one cache in it), the ReadWriteMany volume and
the download Job (modelcache.py builds both), each wrapped in an Object that reaches
the member. An observed object this reconcile does not compose is *kept* when it
belongs to a cluster that cannot be read (never read as "not selected": that would
delete its weights), and *removed* otherwise (the cluster left the selector, or the
source changed and named a new Job) — deliberately, and the shell says so.

A cluster the cache's selector picks is staged on only where a ModelDeployment that
references the cache could be placed (modelcache.staging_clusters): downloading hundreds
of GiB where the model can never run costs storage and egress for nothing. Each selected
cluster left out is kept with why, for the CacheReady condition. When a referencing
deployment cannot be read, nothing is taken away: it might run anywhere.

Pure: typed values and observed dicts in, plain values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from functions.common import contracts
from functions.common.naming import dns_label, label_value
from functions.common.objects import provider_object
from functions.compose_model_deployment import modelcache
from functions.compose_model_deployment.manifests import member_provider_config
from functions.compose_model_deployment.model import Cluster, Deployment


@dataclass(frozen=True)
class Composed:
    key: str
    body: dict
    ready: bool = False  # the Job's weights are complete there (readiness set by us)


@dataclass(frozen=True)
class CachePlan:
    selected: list[Cluster]  # the clusters it is staged on
    phases: list[modelcache.ClusterPhase]  # one per selected cluster, in its order
    composed: list[Composed]
    kept: list[str] = field(default_factory=list)  # observed keys kept exactly as they are
    removed: list[str] = field(default_factory=list)  # observed keys no longer composed
    # Selected by the cache's clusterSelector but not staged on: cluster name -> why.
    skipped: dict[str, str] = field(default_factory=dict)

    @property
    def ready(self) -> list[modelcache.ClusterPhase]:
        return [p for p in self.phases if p.phase == modelcache.PHASE_READY]

    @property
    def all_ready(self) -> bool:
        """Ready on every selected cluster (and at least one is selected)."""
        return bool(self.phases) and len(self.ready) == len(self.phases)

    def status(self, cache: modelcache.ModelCache) -> dict:
        return {
            "selectedClusters": len(self.selected),
            "readyClusters": len(self.ready),
            "clusters": [p.to_status(cache) for p in self.phases],
        }


def _cluster_objects(
    cache: modelcache.ModelCache, cluster: Cluster, phase: modelcache.ClusterPhase
) -> list[Composed]:
    provider = member_provider_config(cluster)
    job_key = modelcache.job_key(cache, cluster.name)
    composed = []
    for key, manifest, extra in (
        (
            modelcache.namespace_key(cluster.name),
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                # The same Pod Security labels as a ModelReplica's Namespace there.
                "metadata": {
                    "name": cache.namespace,
                    "labels": cluster.pod_policy.namespace_labels(),
                },
            },
            {"management_policies": modelcache.KEEP_ON_DELETE},
        ),
        # Watched: its phase says why a pending download waits (modelcache.py).
        (modelcache.volume_key(cluster.name), modelcache.volume_claim(cache), {"watch": True}),
        (job_key, modelcache.download_job(cache), {"ready_cel": modelcache.JOB_READY_CEL}),
    ):
        body = provider_object(
            name=dns_label("modelcache", cache.name, key),
            namespace=cache.namespace,
            labels={
                contracts.LABEL_MODEL_CACHE: label_value(cache.name),
                contracts.LABEL_CLUSTER: label_value(cluster.name),
            },
            manifest=manifest,
            provider_config_ref=provider,
            **extra,
        )
        ready = key == job_key and phase.phase == modelcache.PHASE_READY
        composed.append(Composed(key, body, ready))
    return composed


def _owner(observed_object: Mapping) -> object:
    """The cluster an observed object was composed for (its label), if it says."""
    meta = observed_object.get("metadata")
    labels = meta.get("labels") if isinstance(meta, dict) else None
    return labels.get(contracts.LABEL_CLUSTER) if isinstance(labels, dict) else None


def plan_cache(
    cache: modelcache.ModelCache,
    clusters: Iterable[Cluster],
    unreadable: set[str],
    observed: Mapping[str, dict],
    referencing: list[Deployment] | None,
) -> CachePlan:
    """`clusters`: every InferenceCluster that could be read; `unreadable`: the names of
    those that could not; `observed`: what this cache composed before, by key;
    `referencing`: the ModelDeployments that reference the cache, or None when one of
    them cannot be read."""
    by_selector = sorted(
        (c for c in clusters if cache.cluster_selector.matches(c.labels)), key=lambda c: c.name
    )
    if referencing is None:
        selected, skipped = by_selector, {}
    else:
        selected, skipped = modelcache.staging_clusters(by_selector, referencing)
    phases = []
    composed: list[Composed] = []
    for cluster in selected:
        phase = modelcache.observe_cluster(
            cluster.name,
            observed.get(modelcache.job_key(cache, cluster.name)),
            observed.get(modelcache.volume_key(cluster.name)),
        )
        phases.append(phase)
        composed += _cluster_objects(cache, cluster, phase)
    desired = {c.key for c in composed}
    kept, removed = [], []
    for key, obj in sorted(observed.items()):
        if key not in desired:
            (kept if _owner(obj) in unreadable else removed).append(key)
    return CachePlan(selected, phases, composed, kept, removed, skipped)
