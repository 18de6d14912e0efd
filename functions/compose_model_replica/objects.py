"""The envelope: every manifest reaches its member cluster as a provider-kubernetes
namespaced Object, with the cluster's provider config.

Objects live in the ModelReplica's namespace on the control plane, next to the
ModelReplicas of the same deployment on other clusters, so their names carry the
ModelReplica's name; the manifests inside are named for the deployment, the same on
every member.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.common.contracts import (
    LABEL_CLUSTER,
    LABEL_DEPLOYMENT,
    LABEL_SERVING,
)
from functions.common.naming import dns_label, label_value, resource_key
from functions.common.objects import provider_object
from functions.compose_model_replica.model import ModelReplica

OBSERVE_ONLY = ("Observe",)
# Everything but Delete: a namespace outlives any one model in it.
KEEP_ON_DELETE = ("Observe", "Create", "Update", "LateInitialize")


@dataclass(frozen=True)
class Composed:
    key: str
    object: dict

    @property
    def manifest(self) -> dict:
        return self.object["spec"]["forProvider"]["manifest"]


def envelope(
    replica: ModelReplica,
    key: str,
    manifest: dict,
    *,
    ready_cel: str = "",
    management_policies: tuple[str, ...] = (),
    watch: bool = False,
) -> Composed:
    key = resource_key(key)
    return Composed(
        key,
        provider_object(
            name=dns_label(replica.name, key),
            namespace=replica.namespace,
            labels={
                LABEL_SERVING: replica.serving_label,
                LABEL_DEPLOYMENT: label_value(replica.deployment),
                LABEL_CLUSTER: label_value(replica.cluster.name),
            },
            manifest=manifest,
            provider_config_ref={
                "kind": replica.cluster.provider_config_ref.kind,
                "name": replica.cluster.provider_config_ref.name,
            },
            ready_cel=ready_cel,
            management_policies=management_policies,
            watch=watch,
        ),
    )
