"""The cluster-tier collector as it runs on a member: a Deployment with its ConfigMap,
ServiceAccount and least-privilege RBAC, the gateway token copied in as a Secret (with a
destination), the signals page's Service and a NetworkPolicy that admits only the
runtime agent to it (with replicas that autoscale from vocabulary signals), and (behind
`spec.telemetry.nodeTier`) the node-tier DaemonSet.

The token never passes through this function: the Secret's manifest carries no data,
and provider-kubernetes copies the key from the TelemetryDestination's Secret on the
control plane (`references.patchesFrom`), so the Object copying it lives in that
Secret's namespace. The collector mounts it as a file the bearer-token authenticator
reads; the ConfigMap names only the path.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from functions.common import contracts, sizing
from functions.common.limits import check_config_map
from functions.common.naming import stable_hash
from functions.compose_serving_stack import collector
from functions.compose_serving_stack.envelope import Composed, Target, object_

COLLECTOR: Final = contracts.COLLECTOR_SERVICE_NAME
NODE_COLLECTOR: Final = "modelplane-node-collector"
CONFIG_KEY: Final = "config.yaml"
CONFIG_DIR: Final = "/etc/otelcol"
REPLICAS: Final = 1
MEMORY_LIMIT: Final = contracts.COLLECTOR_MEMORY_LIMIT
# The Go runtime's settings (name, value): why these, contracts.COLLECTOR_RUNTIME_ENV.
RUNTIME_ENV: Final = contracts.COLLECTOR_RUNTIME_ENV

# Keys of the composed resources a status reads back.
DEPLOYMENT_KEY: Final = "collector-deployment"


class _PlainDumper(yaml.SafeDumper):
    """A ConfigMap a person reads: no &anchors for repeated blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def config_text(config: dict[str, Any]) -> str:
    return yaml.dump(config, Dumper=_PlainDumper, sort_keys=False, width=120)


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "modelplane"}


def _rbac(target: Target, name: str, rules: list[dict[str, Any]]) -> list[Composed]:
    return [
        object_(
            target,
            f"{name}-serviceaccount",
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": name,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": _labels(name),
                },
            },
        ),
        object_(
            target,
            f"{name}-clusterrole",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": name, "labels": _labels(name)},
                "rules": rules,
            },
        ),
        object_(
            target,
            f"{name}-clusterrolebinding",
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name, "labels": _labels(name)},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "ClusterRole",
                    "name": name,
                },
                "subjects": [
                    {
                        "kind": "ServiceAccount",
                        "name": name,
                        "namespace": contracts.SYSTEM_NAMESPACE,
                    }
                ],
            },
        ),
    ]


# Discovery and k8s_attributes read pods (and the namespaces and ReplicaSets behind
# them); scraping a secured /metrics endpoint needs GET on that path; nothing else.
CLUSTER_TIER_RULES: Final = [
    {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
    {"nonResourceURLs": ["/metrics"], "verbs": ["get"]},
]
# k8s_cluster (with a destination) reads the state of every workload kind it reports.
CLUSTER_STATE_RULES: Final = [
    {
        "apiGroups": [""],
        "resources": [
            "events",
            "namespaces",
            "namespaces/status",
            "nodes",
            "nodes/spec",
            "pods",
            "pods/status",
            "replicationcontrollers",
            "replicationcontrollers/status",
            "resourcequotas",
            "services",
        ],
        "verbs": ["get", "list", "watch"],
    },
    {
        "apiGroups": ["apps"],
        "resources": ["daemonsets", "deployments", "replicasets", "statefulsets"],
        "verbs": ["get", "list", "watch"],
    },
    {"apiGroups": ["batch"], "resources": ["jobs", "cronjobs"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["autoscaling"],
        "resources": ["horizontalpodautoscalers"],
        "verbs": ["get", "list", "watch"],
    },
]
NODE_TIER_RULES: Final = [
    {"apiGroups": [""], "resources": ["nodes/stats", "nodes/proxy"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
]
# The node tier's k8s_attributes (with engine logs) finds each log file's pod.
NODE_LOGS_RULES: Final = [
    {"apiGroups": [""], "resources": ["pods", "namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["apps"], "resources": ["replicasets"], "verbs": ["get", "list", "watch"]},
]


def token_secret(
    target: Target, source_namespace: str, source_name: str, source_key: str
) -> Composed:
    """The gateway token, copied from the control plane into the collector's namespace."""
    return object_(
        target,
        "collector-token",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": contracts.TELEMETRY_TOKEN_SECRET_NAME,
                "namespace": contracts.SYSTEM_NAMESPACE,
                "labels": _labels(COLLECTOR),
            },
            "type": "Opaque",
        },
        references=[
            {
                "patchesFrom": {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "name": source_name,
                    "namespace": source_namespace,
                    "fieldPath": f"data[{source_key}]",
                },
                "toFieldPath": f"data[{contracts.TELEMETRY_TOKEN_SECRET_KEY}]",
            }
        ],
        namespace=source_namespace,
    )


def _pod_spec(
    name: str,
    config_map: str,
    *,
    host_metrics: bool = False,
    gateway: bool = True,
    signals: bool = False,
    otlp: bool = False,
    pod_logs: bool = False,
) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [{"name": "config", "configMap": {"name": config_map}}]
    mounts: list[dict[str, Any]] = [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}]
    if gateway:
        volumes.append(
            {
                "name": "gateway-token",
                "secret": {
                    "secretName": contracts.TELEMETRY_TOKEN_SECRET_NAME,
                    "items": [
                        {"key": contracts.TELEMETRY_TOKEN_SECRET_KEY, "path": collector.TOKEN_KEY}
                    ],
                },
            }
        )
        mounts.append(
            {"name": "gateway-token", "mountPath": collector.TOKEN_MOUNT_DIR, "readOnly": True}
        )
    ports = [{"name": "health", "containerPort": collector.HEALTH_PORT}]
    if signals:
        ports.append({"name": contracts.PORT_NAME_SIGNALS, "containerPort": collector.SIGNALS_PORT})
    if otlp:
        ports += [
            {"name": name, "containerPort": port}
            for name, port in (
                (contracts.PORT_NAME_OTLP_GRPC, contracts.COLLECTOR_OTLP_GRPC_PORT),
                (contracts.PORT_NAME_OTLP_HTTP, contracts.COLLECTOR_OTLP_HTTP_PORT),
            )
        ]
    env: list[dict[str, Any]] = [
        *({"name": name, "value": value} for name, value in RUNTIME_ENV),
        {"name": "K8S_NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    if host_metrics:
        volumes.append({"name": "hostfs", "hostPath": {"path": "/"}})
        mounts.append(
            {
                "name": "hostfs",
                "mountPath": "/hostfs",
                "readOnly": True,
                "mountPropagation": "HostToContainer",
            }
        )
    security: dict[str, Any] = {"runAsNonRoot": True, "runAsUser": 10001}
    if pod_logs:
        volumes.append({"name": "pod-logs", "hostPath": {"path": collector.POD_LOGS_DIR}})
        mounts.append({"name": "pod-logs", "mountPath": collector.POD_LOGS_DIR, "readOnly": True})
        # The kubelet writes pod logs as root, mode 0640: only root reads them. Still no
        # capabilities and a read-only root filesystem.
        security = {"runAsNonRoot": False, "runAsUser": 0, "runAsGroup": 0}
    return {
        "serviceAccountName": name,
        "securityContext": security,
        "containers": [
            {
                "name": "otelcol",
                "image": contracts.COLLECTOR_IMAGE,
                "args": [f"--config={CONFIG_DIR}/{CONFIG_KEY}"],
                "env": env,
                "ports": ports,
                "readinessProbe": {"httpGet": {"path": "/", "port": "health"}},
                "livenessProbe": {"httpGet": {"path": "/", "port": "health"}},
                "resources": sizing.resources(sizing.COLLECTOR),
                "volumeMounts": mounts,
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "volumes": volumes,
    }


# The inputs a collector's config grows with, named when it is over a size limit.
SHRINK_CLUSTER_CONFIG: Final = (
    "the MetricMappings in effect (fewer engines, or fewer metrics, `from` names and labels "
    "per mapping)"
)
SHRINK_NODE_CONFIG: Final = "the TelemetryDestination's endpoint"


def _config_map(target: Target, key: str, name: str, text: str, shrink: str) -> Composed:
    manifest = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": contracts.SYSTEM_NAMESPACE,
            "labels": _labels(name),
        },
        "data": {CONFIG_KEY: text},
    }
    check_config_map(f"ConfigMap {name} (the collector's config)", manifest, shrink)
    return object_(target, key, manifest)


def _access(target: Target, *, signals: bool, otlp: bool) -> list[Composed]:
    """The collector's Service, and a NetworkPolicy: only the agent reads the signals
    page, only engine pods send it OTLP.

    The page carries every deployment's series on the cluster; tenants' own pods have no
    business reading it, and it is no store anyone else should come to depend on. The
    OTLP receiver takes what it is sent without a credential (as the scrape of an engine
    takes its page), so it admits the pods that carry `modelplane.ai/serving`, in any
    namespace, and nothing else.
    """
    labels = _labels(COLLECTOR)
    ports: list[dict[str, Any]] = []
    ingress: list[dict[str, Any]] = []
    if signals:
        ports.append(
            {
                "name": contracts.PORT_NAME_SIGNALS,
                "port": collector.SIGNALS_PORT,
                "targetPort": contracts.PORT_NAME_SIGNALS,
            }
        )
        agent = {"app.kubernetes.io/name": contracts.AGENT_SERVICE_NAME}
        ingress.append(
            {
                "from": [{"podSelector": {"matchLabels": agent}}],
                "ports": [{"protocol": "TCP", "port": contracts.PORT_NAME_SIGNALS}],
            }
        )
    if otlp:
        otlp_ports = (
            (contracts.PORT_NAME_OTLP_GRPC, contracts.COLLECTOR_OTLP_GRPC_PORT),
            (contracts.PORT_NAME_OTLP_HTTP, contracts.COLLECTOR_OTLP_HTTP_PORT),
        )
        ports += [{"name": n, "port": p, "targetPort": n} for n, p in otlp_ports]
        engines = {"matchExpressions": [{"key": contracts.LABEL_SERVING, "operator": "Exists"}]}
        ingress.append(
            {
                "from": [{"namespaceSelector": {}, "podSelector": engines}],
                "ports": [{"protocol": "TCP", "port": n} for n, _ in otlp_ports],
            }
        )
    # The kubelet's probes reach the health port.
    ingress.append({"ports": [{"protocol": "TCP", "port": collector.HEALTH_PORT}]})
    return [
        object_(
            target,
            "collector-service",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": COLLECTOR,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": labels,
                },
                "spec": {"selector": labels, "ports": ports},
            },
        ),
        object_(
            target,
            "collector-networkpolicy",
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {
                    "name": COLLECTOR,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": labels,
                },
                "spec": {
                    "podSelector": {"matchLabels": labels},
                    "policyTypes": ["Ingress"],
                    "ingress": ingress,
                },
            },
        ),
    ]


def cluster_tier(
    target: Target, config: dict[str, Any], *, gateway: bool = True, signals: bool = False
) -> list[Composed]:
    """The Deployment, its ConfigMap and RBAC; the pods roll when the config changes."""
    text = config_text(config)
    labels = _labels(COLLECTOR)
    otlp = collector.OTLP_RECEIVER in config["receivers"]
    rules = list(CLUSTER_TIER_RULES)
    if collector.CLUSTER_STATE_RECEIVER in config["receivers"]:
        rules += CLUSTER_STATE_RULES
    return [
        *(_access(target, signals=signals, otlp=otlp) if signals or otlp else []),
        *_rbac(target, COLLECTOR, rules),
        _config_map(target, "collector-config", COLLECTOR, text, SHRINK_CLUSTER_CONFIG),
        object_(
            target,
            DEPLOYMENT_KEY,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": COLLECTOR,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": labels,
                },
                "spec": {
                    "replicas": REPLICAS,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {
                            "labels": labels,
                            "annotations": {contracts.ANNOTATION_CONFIG_HASH: stable_hash(text)},
                        },
                        "spec": _pod_spec(
                            COLLECTOR, COLLECTOR, gateway=gateway, signals=signals, otlp=otlp
                        ),
                    },
                },
            },
            ready_cel="object.status.availableReplicas >= 1",
        ),
    ]


def node_tier(target: Target, config: dict[str, Any]) -> list[Composed]:
    """The node tier: a DaemonSet reading the kubelet and the host on every node."""
    text = config_text(config)
    labels = _labels(NODE_COLLECTOR)
    pod_logs = collector.LOGS_RECEIVER in config["receivers"]
    pod = _pod_spec(NODE_COLLECTOR, NODE_COLLECTOR, host_metrics=True, pod_logs=pod_logs)
    pod["tolerations"] = [{"operator": "Exists"}]  # GPU nodes are usually tainted
    rules = NODE_TIER_RULES + (NODE_LOGS_RULES if pod_logs else [])
    return [
        *_rbac(target, NODE_COLLECTOR, rules),
        _config_map(target, "node-collector-config", NODE_COLLECTOR, text, SHRINK_NODE_CONFIG),
        object_(
            target,
            "node-collector-daemonset",
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "metadata": {
                    "name": NODE_COLLECTOR,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": labels,
                },
                "spec": {
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {
                            "labels": labels,
                            "annotations": {contracts.ANNOTATION_CONFIG_HASH: stable_hash(text)},
                        },
                        "spec": pod,
                    },
                },
            },
        ),
    ]
