"""A ModelReplica bound to its InferenceCluster: what the cluster decides, not the replica.

A ModelReplica is written by compose-model-deployment, but nothing stops a person with
write access from writing one directly, naming any `providerConfigRef` (another
cluster's, the platform's own `control-plane`) or a lower Pod Security level. The
cluster is the authority on both:

- `spec.cluster.providerConfigRef` must be the provider config the cluster reaches its
  members through: its own `spec.providerConfigRef`, or, with `kubeconfigSecretRef`, the
  ClusterProviderConfig compose-serving-stack composes under the cluster's name.
  Anything else is refused naming the field and the rule.
- The tenant Namespace's Pod Security labels come from the cluster's `spec.podSecurity`
  (functions/common/pod_policy.py), whatever `spec.cluster.podSecurity` says.

A cluster that does not exist is refused too: nothing composed for it can reach it.
"""

from __future__ import annotations

from typing import Any, Final

from functions.common.pod_policy import read_policy
from functions.common.reader import InputError
from functions.compose_model_replica.model import InvalidReplica, ModelReplica, PodSecurity

REQUIRED_CLUSTER: Final = "inference-cluster"
DEFAULT_KIND: Final = "ClusterProviderConfig"


def provider_config_of(cluster: dict) -> tuple[str, str]:
    """(kind, name) of the provider config a cluster's resources go through."""
    spec = cluster.get("spec") if isinstance(cluster.get("spec"), dict) else {}
    ref = spec.get("providerConfigRef")
    if isinstance(ref, dict) and ref.get("name"):
        return str(ref.get("kind") or DEFAULT_KIND), str(ref["name"])
    meta = cluster.get("metadata") if isinstance(cluster.get("metadata"), dict) else {}
    return DEFAULT_KIND, str(meta.get("name", ""))


def bind_to_cluster(replica: ModelReplica, cluster: Any) -> ModelReplica:
    """The replica with its cluster's pod policy; InvalidReplica if the cluster does not
    exist or the replica names another provider config than the cluster's."""
    name = replica.cluster.name
    if not isinstance(cluster, dict):
        raise InvalidReplica(
            "spec.cluster.name",
            f"InferenceCluster {name[:80]!r} does not exist; a replica is composed only for "
            "a cluster of the fleet",
        )
    kind, expected = provider_config_of(cluster)
    ref = replica.cluster.provider_config_ref
    if (ref.kind, ref.name) != (kind, expected):
        raise InvalidReplica(
            "spec.cluster.providerConfigRef",
            f"must be the provider config InferenceCluster {name[:80]!r} reaches its members "
            f"through ({kind} {expected[:80]!r}), not {ref.kind} {ref.name[:80]!r}",
        )
    spec = cluster.get("spec") if isinstance(cluster.get("spec"), dict) else {}
    try:
        policy = read_policy(spec.get("podSecurity"))
    except InputError as err:
        raise InvalidReplica(f"InferenceCluster {name[:80]}: {err.path}", err.rule) from None
    pod_security = PodSecurity(level=policy.level, enforce=policy.enforced_level)
    if pod_security == replica.cluster.pod_security:
        return replica
    return replica.model_copy(
        update={"cluster": replica.cluster.model_copy(update={"pod_security": pod_security})}
    )
