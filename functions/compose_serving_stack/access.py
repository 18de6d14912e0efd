"""How the control plane reaches a member cluster given only its kubeconfig.

An InferenceCluster names either provider configs someone made by hand
(`providerConfigRef`) or a Secret holding a kubeconfig (`kubeconfigSecretRef`). With the
Secret, this module composes the two cluster-scoped provider configs everything else is
sent through — provider-kubernetes' (Objects) and provider-helm's (Releases) — both named
after the cluster and both reading the kubeconfig from the Secret by reference, so the
kubeconfig never enters a composed manifest. ModelReplicas reach the cluster the same
way: compose-model-deployment aims them at the cluster's name when no providerConfigRef
is set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from functions.compose_serving_stack.envelope import Composed

KUBERNETES_PROVIDER_CONFIG_API: Final = "kubernetes.m.crossplane.io/v1alpha1"
HELM_PROVIDER_CONFIG_API: Final = "helm.m.crossplane.io/v1beta1"
PROVIDER_CONFIG_KIND: Final = "ClusterProviderConfig"
KUBERNETES_KEY: Final = "providerconfig-kubernetes"
HELM_KEY: Final = "providerconfig-helm"


@dataclass(frozen=True)
class KubeconfigSecret:
    namespace: str
    name: str
    key: str


def provider_configs(cluster: str, kubeconfig: KubeconfigSecret) -> list[Composed]:
    """provider-kubernetes' and provider-helm's ClusterProviderConfig for the cluster."""
    credentials = {
        "source": "Secret",
        "secretRef": {
            "namespace": kubeconfig.namespace,
            "name": kubeconfig.name,
            "key": kubeconfig.key,
        },
    }
    return [
        Composed(
            key,
            {
                "apiVersion": api_version,
                "kind": PROVIDER_CONFIG_KIND,
                "metadata": {"name": cluster},
                "spec": {"credentials": credentials},
            },
        )
        for key, api_version in (
            (HELM_KEY, HELM_PROVIDER_CONFIG_API),
            (KUBERNETES_KEY, KUBERNETES_PROVIDER_CONFIG_API),
        )
    ]
