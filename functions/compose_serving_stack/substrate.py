"""What a member cluster must run before a ModelReplica can serve on it, per stack.

Every cluster gets the routing path (cert-manager for the webhooks' certificates, Envoy
Gateway, the Gateway API Inference Extension's CRDs and the cluster's one Gateway) and
the NVIDIA DRA driver that publishes the GPUs the node pools describe. A Standard
cluster adds LeaderWorkerSet; a Dynamo cluster adds Grove, the KAI scheduler with the
`modelplane-root` / `modelplane` queues its PodCliqueSets are gang-scheduled from, and
ModelExpress.

Requests name their model in the body (OpenAI's `"model"`), so every cluster also runs
the Inference Extension's Body-Based Router (its `body-based-routing` chart, v1.3.0): an
ext-proc server that copies the body's `model` into the `X-Gateway-Model-Name` header and
clears the route cache, so each model's HTTPRoute (which matches that header) is chosen
by the name in the request. The chart wires itself into GKE and Istio only; for Envoy
Gateway an EnvoyExtensionPolicy on the Gateway sends every request through it, via a
Backend that accepts its self-signed certificate (the router always serves TLS), in
full-duplex streamed body mode (the chart always starts it with `--streaming`).

Charts are provider-helm Releases pinned to one version each, so an upgrade is a change
here that a reviewer sees. The Inference Extension publishes its CRDs only as a release
manifest, not a chart, so a Job applies that pinned manifest; the queues and the Gateway
are plain Objects.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from functions.common import contracts, sizing
from functions.compose_serving_stack import substrate_targets as targets
from functions.compose_serving_stack.envelope import Chart, Composed, Target, object_, release

CERT_MANAGER: Final = Chart("https://charts.jetstack.io", "cert-manager", "v1.18.2")
ENVOY_GATEWAY: Final = Chart("oci://docker.io/envoyproxy", "gateway-helm", "v1.5.0")
LEADER_WORKER_SET: Final = Chart("oci://registry.k8s.io/lws/charts", "lws", "0.7.0")
NVIDIA_DRA_DRIVER: Final = Chart(
    "https://helm.ngc.nvidia.com/nvidia", "nvidia-dra-driver-gpu", "25.3.2"
)
GROVE: Final = Chart("oci://ghcr.io/ai-dynamo/grove", "grove-charts", "v0.1.0-alpha.3")
KAI_SCHEDULER: Final = Chart("oci://ghcr.io/nvidia/kai-scheduler", "kai-scheduler", "v0.9.2")
MODEL_EXPRESS: Final = Chart("oci://ghcr.io/ai-dynamo/modelexpress", "modelexpress", "0.2.0")

BODY_BASED_ROUTER: Final = Chart(
    "oci://registry.k8s.io/gateway-api-inference-extension/charts", "body-based-routing", "v1.3.0"
)
BODY_BASED_ROUTER_NAME: Final = "body-based-router"  # the chart's bbr.name: its Service
BODY_BASED_ROUTER_PORT: Final = 9004
ENVOY_GATEWAY_API: Final = "gateway.envoyproxy.io/v1alpha1"

INFERENCE_EXTENSION_VERSION: Final = "v1.0.1"
INFERENCE_EXTENSION_MANIFEST: Final = (
    "https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/"
    f"{INFERENCE_EXTENSION_VERSION}/manifests.yaml"
)
KUBECTL_IMAGE: Final = "registry.k8s.io/kubectl:v1.34.1"
CRD_INSTALLER: Final = "modelplane-inference-extension-crds"

GATEWAY_CLASS: Final = "modelplane"
ENVOY_GATEWAY_CONTROLLER: Final = "gateway.envoyproxy.io/gatewayclass-controller"
GATEWAY_HTTP_PORT: Final = 80

KAI_QUEUE_API_VERSION: Final = "scheduling.run.ai/v2"

# Keys of the composed resources that decide whether the stack is ready.
GATEWAY_KEY: Final = "gateway"


def _namespace(target: Target, name: str) -> Composed:
    return object_(
        target,
        f"namespace-{name}",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
    )


def _inference_extension_crds(target: Target) -> list[Composed]:
    """A Job that applies the Inference Extension's pinned CRD manifest, with just the
    RBAC to manage CRDs. Its name carries the version, so a bump runs a new Job."""
    ns = contracts.SYSTEM_NAMESPACE
    name = f"{CRD_INSTALLER}-{INFERENCE_EXTENSION_VERSION.replace('.', '-')}"
    labels = {"app.kubernetes.io/name": CRD_INSTALLER}
    return [
        object_(
            target,
            "inference-extension-crds-serviceaccount",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": CRD_INSTALLER, "namespace": ns, "labels": labels},
            },
        ),
        object_(
            target,
            "inference-extension-crds-clusterrole",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": CRD_INSTALLER, "labels": labels},
                "rules": [
                    {
                        "apiGroups": ["apiextensions.k8s.io"],
                        "resources": ["customresourcedefinitions"],
                        "verbs": ["get", "list", "create", "patch", "update"],
                    }
                ],
            },
        ),
        object_(
            target,
            "inference-extension-crds-clusterrolebinding",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": CRD_INSTALLER, "labels": labels},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": CRD_INSTALLER,
                },
                "subjects": [{"kind": "ServiceAccount", "name": CRD_INSTALLER, "namespace": ns}],
            },
        ),
        object_(
            target,
            "inference-extension-crds-job",
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": name, "namespace": ns, "labels": labels},
                "spec": {
                    "backoffLimit": 6,
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "serviceAccountName": CRD_INSTALLER,
                            "restartPolicy": "OnFailure",
                            "containers": [
                                {
                                    "name": "apply",
                                    "image": KUBECTL_IMAGE,
                                    "args": [
                                        "apply",
                                        "--server-side",
                                        "--force-conflicts",
                                        "-f",
                                        INFERENCE_EXTENSION_MANIFEST,
                                    ],
                                    "resources": sizing.resources(sizing.CRD_APPLY),
                                    "securityContext": {
                                        "runAsNonRoot": True,
                                        "allowPrivilegeEscalation": False,
                                        "readOnlyRootFilesystem": True,
                                        "capabilities": {"drop": ["ALL"]},
                                    },
                                }
                            ],
                        },
                    },
                },
            },
            ready_cel="object.status.succeeded >= 1",
        ),
    ]


def _gateway(target: Target) -> list[Composed]:
    return [
        object_(
            target,
            "gatewayclass",
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "GatewayClass",
                "metadata": {"name": GATEWAY_CLASS},
                "spec": {"controllerName": ENVOY_GATEWAY_CONTROLLER},
            },
        ),
        object_(
            target,
            GATEWAY_KEY,
            {
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "Gateway",
                "metadata": {
                    "name": contracts.INFERENCE_GATEWAY_NAME,
                    "namespace": contracts.INFERENCE_GATEWAY_NAMESPACE,
                },
                "spec": {
                    "gatewayClassName": GATEWAY_CLASS,
                    "listeners": [
                        {
                            "name": "http",
                            "protocol": "HTTP",
                            "port": GATEWAY_HTTP_PORT,
                            # Every model's HTTPRoute lives in its own namespace.
                            "allowedRoutes": {"namespaces": {"from": "All"}},
                        }
                    ],
                },
            },
            ready_cel=(
                "object.status.conditions.exists(c, c.type == 'Programmed' && c.status == 'True')"
            ),
        ),
    ]


def _body_based_routing(target: Target) -> list[Composed]:
    namespace = contracts.INFERENCE_GATEWAY_NAMESPACE
    return [
        release(
            target,
            "body-based-router",
            BODY_BASED_ROUTER,
            namespace,
            {"provider": {"name": "none"}, "bbr": {"name": BODY_BASED_ROUTER_NAME}},
        ),
        object_(
            target,
            "body-based-router-backend",
            {
                "apiVersion": ENVOY_GATEWAY_API,
                "kind": "Backend",
                "metadata": {"name": BODY_BASED_ROUTER_NAME, "namespace": namespace},
                "spec": {
                    "endpoints": [
                        {
                            "fqdn": {
                                "hostname": (
                                    f"{BODY_BASED_ROUTER_NAME}.{namespace}.svc.cluster.local"
                                ),
                                "port": BODY_BASED_ROUTER_PORT,
                            }
                        }
                    ],
                    # In-cluster, to a server whose certificate is generated at start.
                    "tls": {"insecureSkipVerify": True},
                },
            },
        ),
        object_(
            target,
            "body-based-router-policy",
            {
                "apiVersion": ENVOY_GATEWAY_API,
                "kind": "EnvoyExtensionPolicy",
                "metadata": {"name": BODY_BASED_ROUTER_NAME, "namespace": namespace},
                "spec": {
                    "targetRefs": [
                        {
                            "group": "gateway.networking.k8s.io",
                            "kind": "Gateway",
                            "name": contracts.INFERENCE_GATEWAY_NAME,
                        }
                    ],
                    "extProc": [
                        {
                            "backendRefs": [
                                {
                                    "group": "gateway.envoyproxy.io",
                                    "kind": "Backend",
                                    "name": BODY_BASED_ROUTER_NAME,
                                    "port": BODY_BASED_ROUTER_PORT,
                                }
                            ],
                            "processingMode": {"request": {"body": "FullDuplexStreamed"}},
                            # Without the model name no route matches: fail closed.
                            "failOpen": False,
                        }
                    ],
                },
            },
        ),
    ]


def _kai_queues(target: Target) -> list[Composed]:
    unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    resources = {"gpu": unlimited, "cpu": unlimited, "memory": unlimited}

    def queue(name: str, parent: str = "") -> dict[str, Any]:
        spec: dict[str, Any] = {"resources": resources}
        if parent:
            spec["parentQueue"] = parent
        return {
            "apiVersion": KAI_QUEUE_API_VERSION,
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": spec,
        }

    return [
        object_(target, "kai-queue-root", queue(targets.KAI_ROOT_QUEUE)),
        object_(target, "kai-queue", queue(targets.KAI_QUEUE, targets.KAI_ROOT_QUEUE)),
    ]


# A composed resource only one stack has: which one the cluster was installed as.
_STACK_MARKERS: Final = {
    "leaderworkerset": contracts.STACK_STANDARD,
    "grove": contracts.STACK_DYNAMO,
}


def installed_stack(observed_keys: Iterable[str]) -> str | None:
    """The stack the observed resources were composed for; None before the first install
    (or when both or neither marker is observed)."""
    found = {stack for key, stack in _STACK_MARKERS.items() if key in set(observed_keys)}
    return found.pop() if len(found) == 1 else None


def stack_change_refused(observed_keys: Iterable[str], stack: str) -> str:
    """Why a cluster installed as one stack must not be composed as another ("" when it
    may be composed). The XRD says so too (self == oldSelf), but an older XRD or a
    replaced object must not make this function swap one stack's releases for the
    other's."""
    installed = installed_stack(observed_keys)
    if installed is None or installed == stack:
        return ""
    return (
        f"spec.stack is immutable: the cluster was installed as {installed}, not "
        f"{stack}; set it back, or delete and recreate the InferenceCluster "
        "to change its stack"
    )


def substrate(target: Target, stack: str) -> list[Composed]:
    """Every substrate resource of a cluster of this stack, in a stable order."""
    composed: list[Composed] = [
        _namespace(target, contracts.SYSTEM_NAMESPACE),
        release(
            target,
            "cert-manager",
            CERT_MANAGER,
            targets.NAMESPACE_CERT_MANAGER,
            {"crds": {"enabled": True}},
        ),
        release(
            target,
            "envoy-gateway",
            ENVOY_GATEWAY,
            targets.NAMESPACE_ENVOY_GATEWAY,
            # The Inference Extension's InferencePool is routed to as a Backend.
            {"config": {"envoyGateway": {"extensionApis": {"enableBackend": True}}}},
        ),
        *_inference_extension_crds(target),
        *_gateway(target),
        *_body_based_routing(target),
        release(
            target,
            "nvidia-dra-driver",
            NVIDIA_DRA_DRIVER,
            targets.NAMESPACE_DRA_DRIVER,
            # GPUs are requested through DRA only; the classic device plugin stays off.
            {"resources": {"gpus": {"enabled": True}}, "gpuResourcesEnabledOverride": True},
        ),
    ]
    if stack == contracts.STACK_STANDARD:
        composed.append(
            release(target, "leaderworkerset", LEADER_WORKER_SET, targets.NAMESPACE_LWS)
        )
    else:
        composed += [
            release(target, "grove", GROVE, targets.NAMESPACE_GROVE),
            release(target, "kai-scheduler", KAI_SCHEDULER, targets.NAMESPACE_KAI),
            *_kai_queues(target),
            release(target, "modelexpress", MODEL_EXPRESS, targets.NAMESPACE_MODEL_EXPRESS),
        ]
    return composed
