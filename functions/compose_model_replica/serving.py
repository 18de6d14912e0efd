"""The serving endpoint: a Service, an InferencePool with its endpoint picker, and the
route that either sends requests to them or answers at once why it cannot.

The Service is `<deployment>-serving` (naming.serving_service_name), not the
deployment's name, which the workload's controller needs for its own headless Service
(the LeaderWorkerSet's pods' subdomain; see backends/lws.py). The InferencePool and the
route keep the deployment's name: they are not Services, and the hub weights the route
by that name.

Every shape routes through an InferencePool (Gateway API Inference Extension v1.3.0), so
the endpoint picker balances on each engine's queue and KV-cache; it needs its own
picker Deployment, Service and read-only RBAC, composed here per model. Unified uses the
extension's own picker. PrefillDecode uses llm-d's (llm-d-inference-scheduler v0.5.0,
built on the same extension release) configured for prefill/decode: its pool holds both
roles, a prefill profile and a decode profile pick one pod each, and the request goes to
the decode pod with the prefill pod in `x-prefiller-host-port` for the routing sidecar
(see backends/prefill_decode.py). Both pickers serve metrics on 9090, port `metrics`,
which the cluster collector's picker job scrapes.

With managed traffic (the deployment names `autoscaling.traffic.routes`) the route
carries a backend per cluster that serves the model, so the hub's weights have somewhere
to land: this member's own InferencePool (its picker keeps balancing the local share),
and for every other cluster a ServiceImport named `<deployment>-at-<cluster>` — the
name the policy's `clusters[].backendRef` gives the hub. Each member exports its
serving pods under that name (a Service and a ServiceExport, Multi-Cluster Services
API); the ClusterSet's MCS controller imports it into every member. Remote shares
reach the other cluster's pods directly (the MCS data plane balances them), not its
gateway: a gateway would split them again by the same weights. Every member's route
starts from the same weights, the policy's Steady shares (`clusters[].weight`, else
equal shares, within the bounds): exactly what the hub assumes on its first step, so
the routes and the hub's memory agree before it ever writes, and a shadow hub leaves
the declared split in place.

A parked or unplaceable model has no pods, and neither has a model whose ModelCache is
not Ready on this cluster yet. Rather than let the Gateway return "no healthy upstream"
(which clients retry forever), the route drops its backends and applies an Envoy
Gateway HTTPRouteFilter whose direct response is a 503 with a JSON body saying why: the
message compose-model-deployment wrote (or that the weights are not here yet),
JSON-encoded here, so no text a user controls can break out of the body.
"""

from __future__ import annotations

import hashlib
import json

from functions.common import answers, sizing
from functions.common.adaptivepolicy import cluster_backend_name, manages_traffic, steady_shares
from functions.common.adaptivepolicy import endpoint_name as model_endpoint_name
from functions.common.contracts import (
    ACTIVATOR_PORT,
    ACTIVATOR_SERVICE_NAME,
    ENVOY_GATEWAY_GROUP,
    HEADER_DEPLOYMENT,
    HEADER_MODEL_NAME,
    HEADER_ROUTE_TOKEN,
    INFERENCE_GATEWAY_NAME,
    INFERENCE_GATEWAY_NAMESPACE,
    INFERENCE_POOL_GROUP,
    KIND_INFERENCE_POOL,
    KIND_SERVICE_EXPORT,
    KIND_SERVICE_IMPORT,
    LABEL_ROLE,
    LABEL_SERVING,
    MULTICLUSTER_GROUP,
    MULTICLUSTER_VERSION,
    PORT_NAME_HTTP,
    PORT_SERVING,
    ROLE_DECODE,
    ROLE_LEADER,
    ROLE_PREFILL,
    ROLE_STANDALONE,
    SYSTEM_NAMESPACE,
)
from functions.common.naming import dns_label, service_name, serving_service_name
from functions.common.served_name import container_served_names
from functions.compose_model_replica.backends.prefill_decode import (
    PD_ROLE_VALUES,
    ROUTING_PORT_NAME,
)
from functions.compose_model_replica.model import ModelReplica, Shape, engine_container_index

EPP_IMAGE = "registry.k8s.io/gateway-api-inference-extension/epp:v1.3.0"
PD_EPP_IMAGE = "ghcr.io/llm-d/llm-d-inference-scheduler:v0.5.0"
PD_EPP_CONFIG_DIR = "/etc/epp"
PD_EPP_CONFIG_FILE = "epp-config.yaml"
EPP_GRPC_PORT = 9002
EPP_HEALTH_PORT = 9003
EPP_METRICS_PORT = 9090
# Kubernetes' bootstrap ClusterRole: create TokenReviews and SubjectAccessReviews.
AUTH_DELEGATOR_ROLE = "system:auth-delegator"
POOL_GROUP = INFERENCE_POOL_GROUP
UNAVAILABLE_STATUS = answers.UNAVAILABLE_STATUS


def _meta(replica: ModelReplica, name: str) -> dict:
    return {
        "name": name,
        "namespace": replica.namespace,
        "labels": replica.labels(),
    }


def serving_role(replica: ModelReplica) -> str:
    """The pods that answer requests."""
    return {
        Shape.STANDALONE: ROLE_STANDALONE,
        Shape.LEADER_WORKER: ROLE_LEADER,
        Shape.PREFILL_DECODE: ROLE_DECODE,
    }[replica.shape]


def served_names(replica: ModelReplica) -> tuple[str, ...]:
    """The model names clients send: the user's `--served-model-name` on the serving
    engine, else the deployment's name (which the engine is then told to serve as)."""
    for engine in replica.engines:
        member = engine.member(serving_role(replica))
        if member is None:
            continue
        containers = (member.template.get("spec") or {}).get("containers") or []
        if containers:
            container = containers[engine_container_index(containers)]
            names = container_served_names(engine.type, container)
            if names:
                return names
    return (replica.deployment,)


def _serving_port(replica: ModelReplica) -> int:
    engine = replica.engines[0]
    member = engine.member(serving_role(replica))
    assert member is not None  # model.parse checked the shape
    return replica.member_port(engine, member)


def endpoint_name(replica: ModelReplica) -> str:
    return model_endpoint_name(replica.deployment)


def service(replica: ModelReplica, name: str | None = None) -> dict:
    pd = replica.shape is Shape.PREFILL_DECODE
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(replica, name or serving_service_name(replica.deployment)),
        "spec": {
            "selector": {
                LABEL_SERVING: replica.serving_label,
                LABEL_ROLE: serving_role(replica),
            },
            "ports": [
                {
                    "name": PORT_NAME_HTTP,
                    "port": PORT_SERVING,
                    "protocol": "TCP",
                    "targetPort": ROUTING_PORT_NAME if pd else PORT_NAME_HTTP,
                }
            ],
        },
    }


def epp_name(replica: ModelReplica) -> str:
    return service_name(replica.deployment, "epp")


def epp_auth_binding_name(replica: ModelReplica) -> str:
    """Cluster-scoped, so the namespace is part of the name."""
    return dns_label(replica.namespace, replica.deployment, "epp-auth")


def _pool_selector(replica: ModelReplica) -> dict[str, str]:
    if replica.shape is Shape.PREFILL_DECODE:
        # Both roles: the picker chooses a prefill pod and a decode pod from one pool.
        return {LABEL_SERVING: replica.serving_label}
    return {LABEL_SERVING: replica.serving_label, LABEL_ROLE: serving_role(replica)}


def inference_pool(replica: ModelReplica) -> dict:
    # PrefillDecode: prefill engines and decode sidecars both listen on 8000.
    port = PORT_SERVING if replica.shape is Shape.PREFILL_DECODE else _serving_port(replica)
    return {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": _meta(replica, endpoint_name(replica)),
        "spec": {
            "selector": {"matchLabels": _pool_selector(replica)},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {
                "kind": "Service",
                "name": epp_name(replica),
                "port": {"number": EPP_GRPC_PORT},
                # A picker outage degrades to plain balancing, not an outage of the model.
                "failureMode": "FailOpen",
            },
        },
    }


def pd_picker_config() -> str:
    """llm-d's EndpointPickerConfig for prefill/decode: always disaggregate (threshold
    0), each profile filtered to its role and scored on prefix-cache hits."""
    plugins = [
        {"type": "prefill-header-handler"},
        {"type": "prefix-cache-scorer"},
        {"type": "prefill-filter"},
        {"type": "decode-filter"},
        {"type": "max-score-picker"},
        {"type": "pd-profile-handler", "parameters": {"threshold": 0}},
    ]
    profiles = [
        {
            "name": PD_ROLE_VALUES[role],
            "plugins": [
                {"pluginRef": f"{PD_ROLE_VALUES[role]}-filter"},
                {"pluginRef": "max-score-picker"},
                {"pluginRef": "prefix-cache-scorer", "weight": 2},
            ],
        }
        for role in (ROLE_PREFILL, ROLE_DECODE)
    ]
    config = {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha1",
        "kind": "EndpointPickerConfig",
        "plugins": plugins,
        "schedulingProfiles": profiles,
    }
    return json.dumps(config, indent=2, sort_keys=False) + "\n"


def endpoint_picker(replica: ModelReplica) -> dict[str, dict]:
    """The picker for this model's pool: ServiceAccount, Role, RoleBinding, Deployment,
    Service (and for PrefillDecode its config), by resource key."""
    name = epp_name(replica)
    selector = {"app.kubernetes.io/name": name}
    meta = _meta(replica, name)
    pd = replica.shape is Shape.PREFILL_DECODE
    args = [
        "--pool-name",
        endpoint_name(replica),
        "--pool-namespace",
        replica.namespace,
        "--zap-encoder",
        "json",
    ]
    container: dict = {"name": "epp", "image": PD_EPP_IMAGE if pd else EPP_IMAGE}
    pod_extra: dict = {}
    extra: dict[str, dict] = {}
    if pd:
        args += ["--config-file", f"{PD_EPP_CONFIG_DIR}/{PD_EPP_CONFIG_FILE}"]
        container["volumeMounts"] = [
            {"name": "config", "mountPath": PD_EPP_CONFIG_DIR, "readOnly": True}
        ]
        pod_extra["volumes"] = [{"name": "config", "configMap": {"name": name}}]
        extra["epp-config"] = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": meta,
            "data": {PD_EPP_CONFIG_FILE: pd_picker_config()},
        }
    container["args"] = args
    container["resources"] = sizing.resources(sizing.PICKER)
    return extra | {
        "epp-serviceaccount": {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta},
        "epp-role": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta,
            "rules": [
                {
                    "apiGroups": [POOL_GROUP],
                    "resources": ["inferencepools"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["inference.networking.x-k8s.io"],
                    "resources": ["inferenceobjectives", "inferencemodelrewrites"],
                    "verbs": ["get", "list", "watch"],
                },
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
            ],
        },
        "epp-rolebinding": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": replica.namespace}],
        },
        # The picker's /metrics authenticates every scrape (`--metrics-endpoint-auth`,
        # on by default): it asks the API server to review the caller's token
        # (TokenReview) and whether it may GET /metrics (SubjectAccessReview). Those are
        # the built-in auth-delegator role's two rights; the collector's own ClusterRole
        # grants it the GET.
        "epp-auth-delegator": {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {
                "name": epp_auth_binding_name(replica),
                "labels": replica.labels(),
            },
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": AUTH_DELEGATOR_ROLE,
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": replica.namespace}],
        },
        "epp-deployment": {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                # One active picker: its prefix-cache view is per process.
                "strategy": {"type": "Recreate"},
                "selector": {"matchLabels": selector},
                "template": {
                    "metadata": {"labels": dict(selector)},
                    "spec": {
                        "serviceAccountName": name,
                        **pod_extra,
                        "containers": [
                            {
                                **container,
                                "ports": [
                                    {"name": "grpc", "containerPort": EPP_GRPC_PORT},
                                    {"name": "grpc-health", "containerPort": EPP_HEALTH_PORT},
                                    {"name": "metrics", "containerPort": EPP_METRICS_PORT},
                                ],
                                "readinessProbe": {
                                    "grpc": {
                                        "port": EPP_HEALTH_PORT,
                                        "service": "inference-extension",
                                    },
                                    "periodSeconds": 5,
                                },
                            }
                        ],
                    },
                },
            },
        },
        "epp-service": {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "selector": dict(selector),
                "ports": [
                    {"name": "grpc-ext-proc", "port": EPP_GRPC_PORT, "protocol": "TCP"},
                    {"name": "http-metrics", "port": EPP_METRICS_PORT, "protocol": "TCP"},
                ],
            },
        },
    }


def unavailable_filter_name(replica: ModelReplica) -> str:
    return dns_label(replica.deployment, "unavailable")


def unavailable_body(replica: ModelReplica) -> str:
    """What a client is told (functions/common/answers.py): what it can do, never the
    operator's detail (other clusters, DeviceClasses, spec paths), which stays in the
    ModelReplica's and the deployment's status."""
    answer = replica.answer
    assert answer is not None
    return answers.body(
        UNAVAILABLE_STATUS, answer.reason, replica.deployment, answers.caller_message(answer.reason)
    )


def unavailable_filter(replica: ModelReplica) -> dict:
    return {
        "apiVersion": f"{ENVOY_GATEWAY_GROUP}/v1alpha1",
        "kind": "HTTPRouteFilter",
        "metadata": _meta(replica, unavailable_filter_name(replica)),
        "spec": {
            "directResponse": {
                "statusCode": UNAVAILABLE_STATUS,
                "contentType": "application/json",
                "body": {"type": "Inline", "inline": unavailable_body(replica)},
            }
        },
    }


def traffic_clusters(replica: ModelReplica) -> list[str]:
    """The clusters whose backends this member's route carries: every member of the
    policy with managed traffic (placement lists exactly the clusters it uses), else none."""
    if not manages_traffic(replica.autoscaling):
        return []
    return sorted(c["name"] for c in replica.autoscaling.get("clusters") or [])


def backend_refs(replica: ModelReplica) -> list[dict]:
    local: dict = {"group": POOL_GROUP, "kind": KIND_INFERENCE_POOL, "name": endpoint_name(replica)}
    clusters = traffic_clusters(replica)
    if not clusters:
        return [local]
    shares = steady_shares(replica.autoscaling["clusters"])
    refs = [{**local, "weight": shares[replica.cluster.name]}]
    for cluster in clusters:
        if cluster != replica.cluster.name:
            refs.append(
                {
                    "group": MULTICLUSTER_GROUP,
                    "kind": KIND_SERVICE_IMPORT,
                    "name": cluster_backend_name(replica.deployment, cluster),
                    "port": PORT_SERVING,
                    "weight": shares[cluster],
                }
            )
    return refs


def exported_backend(replica: ModelReplica) -> dict[str, dict]:
    """This member's backend for the other members' routes (managed traffic only): a
    Service of its serving pods and the ServiceExport that offers it to the ClusterSet."""
    if not traffic_clusters(replica):
        return {}
    name = cluster_backend_name(replica.deployment, replica.cluster.name)
    return {
        "backend-service": service(replica, name),
        "backend-export": {
            "apiVersion": f"{MULTICLUSTER_GROUP}/{MULTICLUSTER_VERSION}",
            "kind": KIND_SERVICE_EXPORT,
            "metadata": _meta(replica, name),
        },
    }


def route_token(uid: str) -> str:
    """The on-demand route's HEADER_ROUTE_TOKEN: from the ModelReplica's uid, which a
    client outside the model's namespace cannot read (nor guess: it is random), so it
    cannot present it to the activator."""
    return hashlib.sha256(f"modelplane-route-token/{uid}".encode()).hexdigest()


def route(replica: ModelReplica) -> dict:
    # The body-based router sets the header from the request's `"model"`; one match per
    # name the engine answers to.
    rule: dict = {
        "matches": [
            {
                "path": {"type": "PathPrefix", "value": "/"},
                "headers": [{"type": "Exact", "name": HEADER_MODEL_NAME, "value": name}],
            }
            for name in served_names(replica)
        ],
    }
    if replica.activator:
        # The activator answers why (parked, fits nowhere) after a fresh attempt, so the
        # direct response is not used: it would repeat an answer that may be stale.
        rule["filters"] = [
            {
                "type": "RequestHeaderModifier",
                "requestHeaderModifier": {
                    "set": [
                        {
                            "name": HEADER_DEPLOYMENT,
                            "value": f"{replica.namespace}/{replica.deployment}",
                        },
                        # Without a uid (a render without one) no token: the activator
                        # then serves this identity to no one.
                        *(
                            [{"name": HEADER_ROUTE_TOKEN, "value": route_token(replica.uid)}]
                            if replica.uid
                            else []
                        ),
                    ]
                },
            }
        ]
        rule["backendRefs"] = [
            {
                "group": "",
                "kind": "Service",
                "name": ACTIVATOR_SERVICE_NAME,
                "namespace": SYSTEM_NAMESPACE,
                "port": ACTIVATOR_PORT,
            }
        ]
    elif replica.answer is not None:
        rule["filters"] = [
            {
                "type": "ExtensionRef",
                "extensionRef": {
                    "group": ENVOY_GATEWAY_GROUP,
                    "kind": "HTTPRouteFilter",
                    "name": unavailable_filter_name(replica),
                },
            }
        ]
    else:
        rule["backendRefs"] = backend_refs(replica)
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": _meta(replica, endpoint_name(replica)),
        "spec": {
            "parentRefs": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "Gateway",
                    "name": INFERENCE_GATEWAY_NAME,
                    "namespace": INFERENCE_GATEWAY_NAMESPACE,
                }
            ],
            "rules": [rule],
        },
    }


def activator_reference_grant(replica: ModelReplica) -> dict:
    """Lets this model's HTTPRoute name the activator's Service in the system namespace
    (a cross-namespace backendRef needs a ReferenceGrant there); one per model, so no two
    models share an object."""
    return {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {
            "name": dns_label("activator", replica.namespace, replica.deployment),
            "namespace": SYSTEM_NAMESPACE,
            "labels": replica.labels(),
        },
        "spec": {
            "from": [
                {
                    "group": "gateway.networking.k8s.io",
                    "kind": "HTTPRoute",
                    "namespace": replica.namespace,
                }
            ],
            "to": [{"group": "", "kind": "Service", "name": ACTIVATOR_SERVICE_NAME}],
        },
    }
