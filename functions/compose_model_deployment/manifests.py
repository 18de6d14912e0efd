"""The ModelReplicas a placement becomes: one per cluster used, fully resolved.

A ModelReplica carries everything compose-model-replica needs to build the workload on
its cluster without reading anything else: the cluster's stack and provider config, the
pool's node selector and driver, the engines with their ports and device requests, the
definition hash parking counts by, and — with autoscaling — the AdaptivePolicy spec with
the full member list. That list is the same in every ModelReplica of a deployment (sorted
by cluster name), so the AdaptivePolicy copies built from it are byte-identical.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from functions.common import contracts
from functions.common.adaptivepolicy import (
    CLUSTER_SETTINGS,
    PASSTHROUGH_FIELDS,
    cluster_backend_name,
    endpoint_name,
    fit_cluster_weights,
    manages_traffic,
    with_rollout_signals,
)
from functions.common.naming import dns_label, label_value, resource_key
from functions.common.pod_policy import DEFAULT_POLICY
from functions.compose_model_deployment.model import Cluster, Deployment, Pool
from functions.compose_model_deployment.rollout import Plan
from functions.compose_model_deployment.targets import Targets

# The only fields in which a deployment's ModelReplicas differ from one another; the
# shell writes the rest once and reuses it for the others (see fn.py), so a field that
# comes to depend on the cluster must be listed here.
PER_CLUSTER_FIELDS: Final = {
    "metadata": ("name", "labels"),
    "spec": ("cluster", "nodePool", "replicas"),
}
# The same, with what `model_replicas` sets per cluster besides (the cache's readiness
# there, and whether the route leads to the activator).
VARYING_FIELDS: Final = {
    section: (
        *fields,
        *(("modelCache", "activator") if section == "spec" else ()),
    )
    for section, fields in PER_CLUSTER_FIELDS.items()
}


def replica_key(cluster: str) -> str:
    """The composed resource key of the deployment's ModelReplica on a cluster."""
    return resource_key("modelreplica", cluster)


def replica_name(deployment: Deployment, cluster: str) -> str:
    return dns_label(deployment.name, cluster)


def member_provider_config(cluster: Cluster) -> dict:
    """The provider config that reaches a cluster, as an Object names it."""
    ref = cluster.provider_config_ref
    return {
        "kind": ref.get("kind") or "ClusterProviderConfig",
        "name": ref.get("name", cluster.name),
    }


def rollout_signal_names(deployment: Deployment) -> tuple[str, ...]:
    """The extra signals a deployment's rollout gates read (adaptivepolicy.ROLLOUT_SIGNALS)."""
    gates = deployment.rollout.gates
    names = []
    if gates.error_rate_max is not None or gates.error_rate_max_increase is not None:
        names.append("rolloutErrorRate")
    if gates.ttft_max_seconds is not None or gates.ttft_max_ratio is not None:
        names.append("rolloutTtftP95")
    return tuple(names)


def autoscaling_spec(deployment: Deployment, used: list[tuple[Cluster, str]]) -> dict | None:
    """AdaptivePolicy.spec without `workload`, for every cluster the deployment uses."""
    if not deployment.autoscaling:
        return None
    asked = rollout_signal_names(deployment)
    source = (
        with_rollout_signals(deployment.autoscaling, asked) if asked else deployment.autoscaling
    )
    spec = {k: source[k] for k in PASSTHROUGH_FIELDS if k in source}
    settings = {c["name"]: c for c in deployment.autoscaling.get("clusters") or []}
    spec["clusters"] = fit_cluster_weights(
        [
            {
                "name": cluster.name,
                **({"region": cluster.region} if cluster.region else {}),
                "maxReplicas": deployment.autoscaling["maxReplicas"],
                "nodePools": [pool],
                **{
                    k: settings[cluster.name][k]
                    for k in CLUSTER_SETTINGS
                    if k in settings.get(cluster.name, {})
                },
            }
            for cluster, pool in sorted(used, key=lambda cp: cp[0].name)
        ]
    )
    if manages_traffic(deployment.autoscaling):
        # Each cluster's backend on every member's route is composed under one name
        # (compose-model-replica); the policy names it so the hub's weights land there.
        for entry in spec["clusters"]:
            entry["backendRef"] = cluster_backend_name(deployment.name, entry["name"])
        spec["traffic"] = {**spec["traffic"], "routes": managed_routes(deployment)}
    return spec


def managed_routes(deployment: Deployment) -> list[dict]:
    """The routes the hub weights: the model's own composed route first (it carries a
    backend per cluster), then the others the deployment names, once each."""
    own = {"name": endpoint_name(deployment.name)}
    listed = [dict(r) for r in deployment.autoscaling["traffic"]["routes"]]
    same = [r for r in listed if r["name"] == own["name"]]
    if any(r.get("namespace", deployment.namespace) == deployment.namespace for r in same):
        return listed
    return [own, *listed]


def replica_template(deployment: Deployment) -> dict:
    """The part of a ModelReplica's spec a revision is made of (rollout.TEMPLATE_FIELDS):
    the same on every cluster, and what a cluster not yet in a rollout's wave keeps from
    the last good revision."""
    template: dict = {
        "definitionHash": deployment.definition_hash,
        "source": deployment.source,
        "profile": deployment.profile,
        "servingMode": deployment.serving_mode,
        "engines": [
            {
                "name": engine.name,
                "type": engine.type,
                "port": engine.port,
                "members": [
                    {
                        "role": member.role,
                        **(
                            {"workerNodes": member.worker_nodes}
                            if member.role == contracts.ROLE_LEADER
                            else {}
                        ),
                        "devices": [
                            {
                                "name": d.name,
                                "count": d.count,
                                **({"deviceClassName": d.device_class} if d.device_class else {}),
                                "selectors": list(d.selectors),
                            }
                            for d in member.devices
                        ],
                        **({"cpu": member.cpu, "memory": member.memory} if member.cpu_only else {}),
                        "template": member.template,
                    }
                    for member in engine.members
                ],
            }
            for engine in deployment.engines
        ],
    }
    if deployment.raw_tolerations:
        template["tolerations"] = deployment.raw_tolerations
    if deployment.pod_metadata:
        template["podMetadata"] = deployment.pod_metadata
    return template


def model_replica(
    deployment: Deployment,
    cluster: Cluster,
    pool: Pool,
    replicas: int,
    *,
    autoscaling: dict | None,
    unavailable: dict | None = None,
    fabrics: tuple[str, ...] = (),
    model_cache: dict | None = None,
    template: Mapping[str, Any] | None = None,
    revision: str = "",
) -> dict:
    """`template`: the revision's part of the spec (replica_template of the deployment
    when None); `revision`: its name, in spec.revision and the revision label."""
    provider = {"name": cluster.provider_config_ref.get("name", cluster.name)}
    if cluster.provider_config_ref.get("kind"):
        provider["kind"] = cluster.provider_config_ref["kind"]
    spec: dict = {
        "deployment": deployment.name,
        "cluster": {
            "name": cluster.name,
            **({"region": cluster.region} if cluster.region else {}),
            "stack": cluster.stack,
            "providerConfigRef": provider,
            **({"tracesEndpoint": cluster.traces_endpoint} if cluster.traces_endpoint else {}),
            # The tenant Namespace's Pod Security labels (written only when the cluster's
            # policy is not the default, which a replica without the field reads as).
            **(
                {
                    "podSecurity": {
                        "level": cluster.pod_policy.level,
                        "enforce": cluster.pod_policy.enforced_level,
                    }
                }
                if cluster.pod_policy != DEFAULT_POLICY
                else {}
            ),
        },
        "nodePool": {
            "name": pool.name,
            **({"nodeSelector": dict(pool.node_selector)} if pool.node_selector else {}),
            "driver": pool.driver,
            # Only a labelled fabric can be pinned: naming a fabric no node label carries
            # would keep every pod pending.
            **(
                {"fabricNodeLabel": pool.fabric_label, "fabrics": list(fabrics)}
                if pool.fabric_label and fabrics
                else {}
            ),
        },
        "replicas": replicas,
        **(template if template is not None else replica_template(deployment)),
    }
    if revision:
        spec["revision"] = revision
    if autoscaling is not None:
        spec["autoscaling"] = autoscaling
    if unavailable is not None:
        spec["unavailable"] = unavailable
    if model_cache is not None:
        spec["modelCache"] = model_cache
    if deployment.adapters is not None:
        spec["adapters"] = deployment.adapters.to_spec()
    return {
        "apiVersion": contracts.API_GROUP_VERSION,
        "kind": contracts.KIND_MODEL_REPLICA,
        "metadata": {
            "name": replica_name(deployment, cluster.name),
            "labels": {
                contracts.LABEL_DEPLOYMENT: label_value(deployment.name),
                contracts.LABEL_CLUSTER: label_value(cluster.name),
                **({contracts.LABEL_REVISION: revision} if revision else {}),
            },
        },
        "spec": spec,
    }


def model_replicas(
    deployment: Deployment,
    decided: Targets,
    frozen_keys: set[str],
    *,
    cache_mount: dict | None,
    cache_ready_at: frozenset[str],
    activator_at: set[str] | None,
    rollout_plan: Plan | None = None,
    template: dict | None = None,
) -> Iterator[tuple[str, dict]]:
    """(composed-resource key, ModelReplica) for each decided target, but the frozen ones
    (kept as observed) and any whose pool is gone. `activator_at`: for an on-demand model,
    the clusters whose route goes through the member's activator (no ready replica
    there); None for any other model. `rollout_plan`: which revision each cluster runs
    (rollout.py); without one every cluster gets the deployment's template (`template`:
    replica_template of the deployment, when the caller has it already)."""
    new_template = template if template is not None else replica_template(deployment)
    autoscaling = autoscaling_spec(deployment, [(c, p) for c, p, _ in decided.replicas])
    for cluster, pool_name, replicas in decided.replicas:
        pool = cluster.pool(pool_name)
        key = replica_key(cluster.name)
        if pool is None or key in frozen_keys:
            continue
        body = model_replica(
            deployment,
            cluster,
            pool,
            replicas,
            autoscaling=autoscaling,
            unavailable=decided.unavailable,
            fabrics=decided.fabrics.get(cluster.name, ()),
            model_cache=(
                {**cache_mount, "ready": cluster.name in cache_ready_at}
                if cache_mount is not None
                else None
            ),
            template=(
                rollout_plan.template_for(cluster.name, new_template)
                if rollout_plan is not None
                else new_template
            ),
            revision=(
                rollout_plan.revision_at.get(cluster.name, rollout_plan.state.revision)
                if rollout_plan is not None
                else ""
            ),
        )
        if activator_at is not None:
            body["spec"]["activator"] = cluster.name in activator_at
        yield key, body
