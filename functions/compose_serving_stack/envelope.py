"""How everything reaches a member cluster: provider-kubernetes namespaced Objects and
provider-helm namespaced Releases, aimed at the InferenceCluster's provider config.

An InferenceCluster is cluster-scoped and composes namespaced managed resources, so each
must name a namespace on the control plane: COMPOSED_NAMESPACE, where Crossplane and its
providers run. The one exception is the Object that copies the gateway token, which lives
beside the token's Secret so its `references` stay in its own namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from functions.common import contracts
from functions.common.naming import dns_label, resource_key
from functions.common.objects import provider_object

COMPOSED_NAMESPACE: Final = "crossplane-system"
RELEASE_API_VERSION: Final = "helm.m.crossplane.io/v1beta1"
RELEASE_KIND: Final = "Release"


@dataclass(frozen=True)
class Target:
    """The member cluster resources are sent to."""

    cluster: str
    provider_config_name: str
    provider_config_kind: str = "ClusterProviderConfig"

    def provider_config_ref(self) -> dict[str, str]:
        return {"name": self.provider_config_name, "kind": self.provider_config_kind}


@dataclass(frozen=True)
class Composed:
    """One composed resource: its key (its identity) and the resource."""

    key: str
    resource: dict[str, Any]


def _metadata(target: Target, key: str, namespace: str) -> dict[str, Any]:
    return {
        "name": dns_label(target.cluster, key),
        "namespace": namespace,
        "labels": {contracts.LABEL_CLUSTER: target.cluster},
    }


def object_(
    target: Target,
    key: str,
    manifest: dict[str, Any],
    *,
    ready_cel: str = "",
    derive_readiness: bool = False,
    references: list[dict[str, Any]] | None = None,
    namespace: str = COMPOSED_NAMESPACE,
    management_policies: tuple[str, ...] = (),
) -> Composed:
    key = resource_key(key)
    meta = _metadata(target, key, namespace)
    return Composed(
        key,
        provider_object(
            name=meta["name"],
            namespace=meta["namespace"],
            labels=meta["labels"],
            manifest=manifest,
            provider_config_ref=target.provider_config_ref(),
            ready_cel=ready_cel,
            derive_readiness=derive_readiness,
            references=references,
            management_policies=management_policies,
        ),
    )


@dataclass(frozen=True)
class Chart:
    """A pinned Helm chart: its repository (https:// or an oci:// registry path) and name."""

    repository: str
    name: str
    version: str


def release(
    target: Target,
    key: str,
    chart: Chart,
    namespace: str,
    values: dict[str, Any] | None = None,
) -> Composed:
    key = resource_key(key)
    chart_spec = {"repository": chart.repository, "name": chart.name, "version": chart.version}
    for_provider: dict[str, Any] = {"chart": chart_spec, "namespace": namespace, "wait": True}
    if values:
        for_provider["values"] = values
    return Composed(
        key,
        {
            "apiVersion": RELEASE_API_VERSION,
            "kind": RELEASE_KIND,
            "metadata": _metadata(target, key, COMPOSED_NAMESPACE),
            "spec": {
                "forProvider": for_provider,
                "providerConfigRef": target.provider_config_ref(),
            },
        },
    )
