"""An InferenceCluster cannot take over a name or a Secret the platform uses.

With `kubeconfigSecretRef`, compose-serving-stack composes provider-kubernetes' and
provider-helm's ClusterProviderConfig named after the cluster (access.py). Three rules
keep that from reaching what is not the cluster's:

- The kubeconfig Secret must be in one of the platform's Secret namespaces
  (MODELPLANE_SECRET_NAMESPACES; `crossplane-system` and `modelplane-system` by
  default), never a tenant's namespace or `kube-system`.
- The cluster's name must not be a reserved provider config name: `default` (the
  provider config of every managed resource that names none) and the platform's
  MODELPLANE_RESERVED_PROVIDER_CONFIGS (functions/common/tenancy.py).
- A ClusterProviderConfig of that name that exists and that this cluster did not compose
  (it is not among the cluster's observed resources) is someone else's, for example the
  hand-made `control-plane` the example TelemetryDestination's gateway goes through:
  composing it would overwrite its credentials. Refused; the existing one is untouched.

Names are not prefixed: the provider configs keep the cluster's name, so clusters made
before these rules keep theirs (docs/upgrading.md).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

from functions.common import tenancy
from functions.compose_serving_stack import access

REQUIRED_KUBERNETES: Final = "existing-kubernetes-provider-config"
REQUIRED_HELM: Final = "existing-helm-provider-config"
# (required name, apiVersion, composed key) per provider config we compose.
PROVIDER_CONFIGS: Final = (
    (REQUIRED_KUBERNETES, access.KUBERNETES_PROVIDER_CONFIG_API, access.KUBERNETES_KEY),
    (REQUIRED_HELM, access.HELM_PROVIDER_CONFIG_API, access.HELM_KEY),
)


def secret_problem(kubeconfig: access.KubeconfigSecret | None) -> str | None:
    if kubeconfig is None:
        return None
    allowed = tenancy.secret_namespaces()
    if kubeconfig.namespace in allowed:
        return None
    return (
        "spec.kubeconfigSecretRef.namespace: must be one of the platform's Secret namespaces "
        f"({', '.join(sorted(allowed))}; {tenancy.ENV_SECRET_NAMESPACES}), "
        f"not {kubeconfig.namespace[:63]!r}"
    )


def reserved_name_problem(cluster: str, kubeconfig: access.KubeconfigSecret | None) -> str | None:
    if kubeconfig is None or cluster not in tenancy.reserved_provider_configs():
        return None
    return (
        f"metadata.name: {cluster!r} is a reserved provider config name (default and "
        f"{tenancy.ENV_RESERVED_PROVIDER_CONFIGS}); with kubeconfigSecretRef the cluster's "
        "provider configs take its name: name the cluster otherwise"
    )


def takeover_problem(
    cluster: str, existing: Iterable[tuple[str, bool]], observed_keys: Collection[str]
) -> str | None:
    """`existing`: (composed key, whether a provider config of the cluster's name exists)."""
    for key, exists in existing:
        if exists and key not in observed_keys:
            return (
                f"metadata.name: a ClusterProviderConfig named {cluster!r} already exists "
                f"({key.removeprefix('providerconfig-')}) and this InferenceCluster did not "
                "compose it; composing one of that name would take it over. Name the cluster "
                "otherwise, or set spec.providerConfigRef to use the existing one"
            )
    return None
