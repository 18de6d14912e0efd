"""Names ML teams may not take: the platform's namespaces and provider config names.

Reserved namespaces. A ModelDeployment, ModelCache or ModelReplica in a namespace the
platform or the suite uses would compose its objects there on every member it lands on
(a Service named like KEDA's operator in `keda`, a Deployment in `kube-system`). These
are always reserved: every `kube-*` namespace, the suite's own (`modelplane-system`,
`modelplane-telemetry`), Crossplane's (`crossplane-system`), KEDA's (`keda`) and every
namespace the serving substrate installs into. The platform adds its own in the
functions' MODELPLANE_RESERVED_NAMESPACES (a comma-separated list, set in the
DeploymentRuntimeConfig of compose-model-deployment and compose-model-replica).

Platform Secret namespaces. An InferenceCluster's `kubeconfigSecretRef` must name a
Secret in one of the platform's Secret namespaces: the same list a TelemetryDestination's
Secrets are confined to (MODELPLANE_SECRET_NAMESPACES; `crossplane-system` and
`modelplane-system` by default).

Reserved provider config names. An InferenceCluster with `kubeconfigSecretRef` composes
two ClusterProviderConfigs named after itself; one named `default` would become the
provider config of every managed resource that names none, and one named like a provider
config that already exists (`control-plane`, the example gateway's) would take it over.
`default` is always refused; the platform adds names in
MODELPLANE_RESERVED_PROVIDER_CONFIGS; and compose-serving-stack refuses a name a
ClusterProviderConfig it did not compose already has (compose_serving_stack/fn.py).
"""

from __future__ import annotations

import os
from typing import Final

from functions.common import contracts
from functions.common.reader import InputError
from functions.common.telemetrydestination import ENV_SECRET_NAMESPACES, secret_namespaces_from

ENV_RESERVED_NAMESPACES: Final = "MODELPLANE_RESERVED_NAMESPACES"
ENV_RESERVED_PROVIDER_CONFIGS: Final = "MODELPLANE_RESERVED_PROVIDER_CONFIGS"

# Kubernetes' own prefix: kube-system, kube-public, kube-node-lease and any to come.
KUBE_PREFIX: Final = "kube-"
# The substrate's namespaces (compose_serving_stack/substrate_targets.py), kept here as
# names so this module imports nothing from one function into another.
SUBSTRATE_NAMESPACES: Final = frozenset(
    {
        "cert-manager",
        "envoy-gateway-system",
        "lws-system",
        "nvidia-dra-driver-gpu",
        "grove-system",
        "kai-scheduler",
        "modelexpress-system",
    }
)
ALWAYS_RESERVED: Final = frozenset(
    {
        contracts.SYSTEM_NAMESPACE,
        "modelplane-telemetry",
        "crossplane-system",
        contracts.KEDA_NAMESPACE,
        *SUBSTRATE_NAMESPACES,
    }
)
ALWAYS_RESERVED_PROVIDER_CONFIGS: Final = frozenset({"default"})


def _listed(setting: str | None) -> frozenset[str]:
    return frozenset(n.strip() for n in (setting or "").split(",") if n.strip())


def reserved_namespaces(setting: str | None = None) -> frozenset[str]:
    """The reserved namespaces (besides every `kube-*`): always-reserved ones and the
    platform's (the environment variable's value, read now when not given)."""
    if setting is None:
        setting = os.environ.get(ENV_RESERVED_NAMESPACES)
    return ALWAYS_RESERVED | _listed(setting)


def namespace_problem(namespace: str, what: str, setting: str | None = None) -> str | None:
    """Why a tenant kind may not live in `namespace` (None if it may): the rule, naming
    what to do instead."""
    if namespace == contracts.SYSTEM_NAMESPACE:
        return (
            f"{contracts.SYSTEM_NAMESPACE} is the suite's own namespace on every member; "
            f"{what} in a tenant namespace"
        )
    if namespace.startswith(KUBE_PREFIX) or namespace in reserved_namespaces(setting):
        return (
            f"{namespace!r} is reserved for the platform (kube-*, the suite's, Crossplane's, "
            f"KEDA's, the serving substrate's and {ENV_RESERVED_NAMESPACES}); "
            f"{what} in a tenant namespace"
        )
    return None


def refuse_reserved_namespace(namespace: str, what: str) -> None:
    problem = namespace_problem(namespace, what)
    if problem is not None:
        raise InputError("metadata.namespace", problem)


def secret_namespaces() -> frozenset[str]:
    return secret_namespaces_from(os.environ.get(ENV_SECRET_NAMESPACES))


def reserved_provider_configs(setting: str | None = None) -> frozenset[str]:
    if setting is None:
        setting = os.environ.get(ENV_RESERVED_PROVIDER_CONFIGS)
    return ALWAYS_RESERVED_PROVIDER_CONFIGS | _listed(setting)
