"""The fleet runtime every member hosts: the AdaptivePolicy CRD, the agent (two replicas,
one active through the agent Lease), the KEDA scaler and its Service, least-privilege
RBAC for each, and one ClusterProfile per peer member.

RBAC is split by who needs what, and holds exactly the calls the runtime's code makes
(tests/unit/test_runtime_rbac.py reads them from the code). The agent lists
AdaptivePolicies and patches their status, lists pods, nodes and the DRA and Karpenter
objects, applies its inventory record (by name, in modelplane-system) and each replica's
health record (by name, in that replica's namespace only), and holds the hub Lease. The
scaler only lists and watches AdaptivePolicies and this member's hub Lease. A peer's
agent reaches this member as the `modelplane-peer` ServiceAccount, which may do only what
hub election and the hub's decisions do on other members: the hub Lease, the policy
copies and their status, Events, and route weights.

Peers are reached with a kubeconfig the platform team provides per member on the control
plane (Secret PEER_SECRET_PREFIX + member, key `kubeconfig`, in the composed namespace,
built for that member's `modelplane-peer` ServiceAccount). It is copied to each other
member by provider-kubernetes `references`, so no credential passes through this
function; each ClusterProfile names its copy, and the agent gets each mounted as a file
(`--member NAME=PATH`), so it needs no RBAC on Secrets at all.

KEDA reaches the scaler over TLS with a client certificate, the same way: the scaler's
certificate and the CA it accepts clients from (Secret SCALER_TLS_SECRET-<member>), and
KEDA's client certificate (SCALER_CLIENT_SECRET-<member>) are copied from the control
plane to the member; the scaler mounts the first, a ClusterTriggerAuthentication hands
the second to KEDA (keys in `contracts`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from functions.common import contracts, sizing
from functions.common.cost import PoolPrice, format_pool_price
from functions.common.health import health_record_name
from functions.common.inventory import (
    INVENTORY_RECORD_API_VERSION,
    INVENTORY_RECORD_KIND,
    INVENTORY_RECORD_NAME,
    INVENTORY_RECORD_NAMESPACE,
    LABEL_FABRIC,
    CpuPool,
    FabricLabel,
    format_cpu_pool,
    format_fabric_label,
)
from functions.common.naming import volume_name
from functions.compose_serving_stack import adaptivepolicy_crd
from functions.compose_serving_stack.envelope import COMPOSED_NAMESPACE, Composed, Target, object_
from functions.compose_serving_stack.substrate_targets import NAMESPACE_ENVOY_GATEWAY

AGENT: Final = contracts.AGENT_SERVICE_NAME
SCALER: Final = contracts.SCALER_SERVICE_NAME
PEER: Final = "modelplane-peer"
ACTIVATOR: Final = contracts.ACTIVATOR_SERVICE_NAME
ACTIVATOR_REPLICAS: Final = 2
ACTIVATOR_MOUNT: Final = "/etc/modelplane/control-plane"
AGENT_REPLICAS: Final = 2
SCALER_REPLICAS: Final = 2

CLUSTER_PROFILE_API_VERSION: Final = "multicluster.x-k8s.io/v1alpha1"
CLUSTER_MANAGER: Final = "modelplane"
LABEL_CLUSTER_MANAGER: Final = "x-k8s.io/cluster-manager"
PEER_SECRET_PREFIX: Final = "modelplane-peer-"
PEER_SECRET_KEY: Final = "kubeconfig"
PEER_MOUNT_ROOT: Final = "/etc/modelplane/peers"
# The ClusterProfile annotation naming the Secret (in its namespace) with the peer's kubeconfig.
ANNOTATION_CREDENTIALS: Final = "modelplane.ai/credentials-secret"

ENV_CLUSTER: Final = "MODELPLANE_CLUSTER"
RBAC: Final = "rbac.authorization.k8s.io/v1"
AUTOSCALING_RESOURCES: Final = ["adaptivepolicies"]
# The Observe-only Object that reads the agent's inventory record back (status.inventory).
INVENTORY_KEY: Final = "runtime-inventory"
OBSERVE_ONLY: Final = ("Observe",)


SCALER_TLS_MOUNT: Final = "/etc/modelplane/scaler-tls"
TLS_KEYS: Final = ("ca.crt", "tls.crt", "tls.key")
CLUSTER_TRIGGER_AUTHENTICATION: Final = "ClusterTriggerAuthentication"


def scaler_tls_source(member: str) -> str:
    """The control plane's Secret with this member's scaler certificate."""
    return f"{contracts.SCALER_TLS_SECRET}-{member}"


def scaler_client_source(member: str) -> str:
    """The control plane's Secret with KEDA's client certificate for this member."""
    return f"{contracts.SCALER_CLIENT_SECRET}-{member}"


def peer_secret_name(member: str) -> str:
    return f"{PEER_SECRET_PREFIX}{member}"


def peer_mount_dir(member: str) -> str:
    return f"{PEER_MOUNT_ROOT}/{member}"


def peer_kubeconfig_path(member: str) -> str:
    return f"{peer_mount_dir(member)}/{PEER_SECRET_KEY}"


def _labels(component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": component, "app.kubernetes.io/part-of": "modelplane"}


def _service_account(target: Target, name: str) -> Composed:
    return object_(
        target,
        f"runtime-serviceaccount-{name}",
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": name,
                "namespace": contracts.SYSTEM_NAMESPACE,
                "labels": _labels(name),
            },
        },
    )


def _role(
    target: Target,
    name: str,
    rules: list[dict[str, Any]],
    *,
    cluster: bool,
    role_name: str = "",
) -> list[Composed]:
    """A Role (or ClusterRole) and its binding to the ServiceAccount `name`; the role is
    named `role_name` when given, else after the ServiceAccount."""
    kind = "ClusterRole" if cluster else "Role"
    role = role_name or name
    metadata: dict[str, Any] = {"name": role, "labels": _labels(name)}
    if not cluster:
        metadata["namespace"] = contracts.SYSTEM_NAMESPACE
    binding_metadata = dict(metadata)
    suffix = "clusterrole" if cluster else "role"
    return [
        object_(
            target,
            f"runtime-{suffix}-{role}",
            {"apiVersion": RBAC, "kind": kind, "metadata": metadata, "rules": rules},
        ),
        object_(
            target,
            f"runtime-{suffix}binding-{role}",
            {
                "apiVersion": RBAC,
                "kind": f"{kind}Binding",
                "metadata": binding_metadata,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
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


def _rule(
    groups: list[str], resources: list[str], verbs: list[str], names: Sequence[str] = ()
) -> dict:
    rule: dict[str, Any] = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = list(names)
    return rule


# The scale targets a policy's ScaledObject may name (collect.py reads the workload and
# its scale subresource by kind): the workloads compose-model-replica composes.
SCALE_TARGETS: Final = (
    ("apps", "deployments"),
    ("leaderworkerset.x-k8s.io", "leaderworkersets"),
    ("grove.io", "podcliquesets"),
)
HEALTH_ROLE: Final = f"{AGENT}-health"


def _rbac(target: Target, health_records: Sequence[tuple[str, str]]) -> list[Composed]:
    """Exactly the calls runtime code makes (tests/unit/test_runtime_rbac.py compares
    them): verbs the code never uses are not granted, and writes are scoped to the
    namespace or the object names they touch where RBAC can say so."""
    autoscaling = contracts.AUTOSCALING_GROUP
    lease = ["coordination.k8s.io"]
    # The election's compare-and-swap (read, create once, replace): the same calls on
    # this member (the agent) and on a peer (modelplane-peer). Create cannot be
    # restricted by name (RBAC sees no name on a create), get and update can.
    election = [
        _rule(lease, ["leases"], ["get", "update"], [contracts.HUB_LEASE_NAME]),
        _rule(lease, ["leases"], ["create"]),
    ]
    # Read and written on every member by the hub: the policy copies (list, get, the
    # report and the intent in status by merge patch), the decisions as core Events
    # (POST), the route weights (get, then patch spec.rules).
    hub = [
        _rule([autoscaling], AUTOSCALING_RESOURCES, ["get", "list"]),
        _rule([autoscaling], ["adaptivepolicies/status"], ["patch"]),
        _rule([""], ["events"], ["create"]),
        _rule(["gateway.networking.k8s.io"], ["httproutes"], ["get", "patch"]),
    ]
    composed = [
        *_role(
            target,
            AGENT,
            [
                *election,
                # The inventory record: read back, then server-side applied.
                _rule([""], ["configmaps"], ["get", "patch"], [INVENTORY_RECORD_NAME]),
            ],
            cluster=False,
        ),
        *_role(
            target,
            AGENT,
            [
                *hub,
                # Start failures counted from pods; static room on nodes; the inventory's
                # ResourceSlices and ResourceClaims; NodePool headroom; DRA claims and
                # device classes for what a pod takes. Lists only: nothing is watched.
                _rule([""], ["pods", "nodes"], ["list"]),
                # LoRA adapters: the readiness gate of a base's engine pods is set once
                # its staged adapters are loaded (functions/runtime/agent/adapters.py).
                _rule([""], ["pods/status"], ["patch"]),
                _rule(
                    ["resource.k8s.io"],
                    ["resourceslices", "resourceclaims", "resourceclaimtemplates", "deviceclasses"],
                    ["list"],
                ),
                _rule(["karpenter.sh"], ["nodepools", "nodeclaims"], ["list"]),
                # The ScaledObject a policy names, the workload behind it and its scale
                # subresource.
                _rule(["keda.sh"], ["scaledobjects"], ["get"]),
                *(_rule([g], [r, f"{r}/scale"], ["get"]) for g, r in SCALE_TARGETS),
                # Health records: listed by label in every namespace; written only in the
                # namespaces of the replicas here, by name (HEALTH_ROLE below).
                _rule([""], ["configmaps"], ["list"]),
            ],
            cluster=True,
        ),
        *_role(
            target,
            SCALER,
            [_rule(lease, ["leases"], ["list", "watch"], [contracts.HUB_LEASE_NAME])],
            cluster=False,
        ),
        *_role(
            target,
            SCALER,
            [_rule([autoscaling], AUTOSCALING_RESOURCES, ["list", "watch"])],
            cluster=True,
        ),
        # What a peer's agent does here: the election on this member's hub Lease, and the
        # hub's reads and writes.
        *_role(target, PEER, election, cluster=False),
        *_role(target, PEER, hub, cluster=True),
    ]
    composed += _health_roles(target, health_records)
    return composed


def _health_roles(target: Target, records: Sequence[tuple[str, str]]) -> list[Composed]:
    """Per namespace with replicas here: a Role that may server-side apply (patch) only
    those replicas' health records, bound to the agent. An apply that creates the record
    is authorized as that patch."""
    by_namespace: dict[str, list[str]] = {}
    for namespace, replica in records:
        by_namespace.setdefault(namespace, []).append(health_record_name(replica))
    composed = []
    for namespace, names in sorted(by_namespace.items()):
        metadata = {"name": HEALTH_ROLE, "namespace": namespace, "labels": _labels(AGENT)}
        composed += [
            object_(
                target,
                f"runtime-role-{HEALTH_ROLE}-{namespace}",
                {
                    "apiVersion": RBAC,
                    "kind": "Role",
                    "metadata": metadata,
                    "rules": [_rule([""], ["configmaps"], ["patch"], sorted(names))],
                },
            ),
            object_(
                target,
                f"runtime-rolebinding-{HEALTH_ROLE}-{namespace}",
                {
                    "apiVersion": RBAC,
                    "kind": "RoleBinding",
                    "metadata": dict(metadata),
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": HEALTH_ROLE,
                    },
                    "subjects": [
                        {
                            "kind": "ServiceAccount",
                            "name": AGENT,
                            "namespace": contracts.SYSTEM_NAMESPACE,
                        }
                    ],
                },
            ),
        ]
    return composed


def _pod_env(cluster: str) -> list[dict[str, Any]]:
    return [
        {"name": ENV_CLUSTER, "value": cluster},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
    ]


def _deployment(
    target: Target,
    name: str,
    image: str,
    *,
    command: str,
    replicas: int,
    ports: list[dict[str, Any]],
    extra_args: Sequence[str] = (),
    volumes: Sequence[tuple[str, str]] = (),
    probes: dict[str, Any] | None = None,
    size: str,
) -> Composed:
    """`volumes` are (Secret name, mount path) pairs, mounted read-only; `probes` are the
    container's readinessProbe / livenessProbe."""
    labels = _labels(name)
    return object_(
        target,
        f"runtime-deployment-{name}",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": contracts.SYSTEM_NAMESPACE, "labels": labels},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": name,
                        "securityContext": {"runAsNonRoot": True},
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "kubernetes.io/hostname",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": labels},
                            }
                        ],
                        "volumes": [
                            {"name": volume_name(secret), "secret": {"secretName": secret}}
                            for secret, _ in volumes
                        ],
                        "containers": [
                            {
                                "name": name.removeprefix("modelplane-"),
                                "image": image,
                                "args": ["runtime", command, *extra_args],
                                "env": _pod_env(target.cluster),
                                "ports": ports,
                                "volumeMounts": [
                                    {
                                        "name": volume_name(secret),
                                        "mountPath": path,
                                        "readOnly": True,
                                    }
                                    for secret, path in volumes
                                ],
                                **(probes or {}),
                                "resources": sizing.resources(size),
                                "securityContext": {
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
        ready_cel="object.status.availableReplicas >= 1",
    )


def _copied_secret(
    target: Target,
    key: str,
    *,
    name: str,
    namespace: str,
    source: str,
    keys: Sequence[str],
    labels: dict[str, str],
) -> Composed:
    """A Secret on the member whose `keys` arrive from the control plane's Secret
    `source` (in the composed namespace); the manifest carries no data."""
    return object_(
        target,
        key,
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "type": "Opaque",
        },
        references=[
            {
                "patchesFrom": {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "name": source,
                    "namespace": COMPOSED_NAMESPACE,
                    "fieldPath": f"data[{data_key}]",
                },
                "toFieldPath": f"data[{data_key}]",
            }
            for data_key in keys
        ],
    )


def _scaler_authentication(target: Target) -> list[Composed]:
    """The scaler's certificate on the member, KEDA's client certificate in KEDA's
    namespace, and the ClusterTriggerAuthentication every ScaledObject's trigger names."""
    return [
        _copied_secret(
            target,
            "scaler-tls",
            name=contracts.SCALER_TLS_SECRET,
            namespace=contracts.SYSTEM_NAMESPACE,
            source=scaler_tls_source(target.cluster),
            keys=TLS_KEYS,
            labels=_labels(SCALER),
        ),
        _copied_secret(
            target,
            "scaler-client-tls",
            name=contracts.SCALER_CLIENT_SECRET,
            namespace=contracts.KEDA_NAMESPACE,
            source=scaler_client_source(target.cluster),
            keys=TLS_KEYS,
            labels=_labels(SCALER),
        ),
        object_(
            target,
            "scaler-trigger-authentication",
            {
                "apiVersion": contracts.SCALED_OBJECT_API_VERSION,
                "kind": CLUSTER_TRIGGER_AUTHENTICATION,
                "metadata": {
                    "name": contracts.SCALER_TRIGGER_AUTHENTICATION,
                    "labels": _labels(SCALER),
                },
                # KEDA v2.21 external(-push) auth parameters (pkg/scalers/external_scaler.go).
                "spec": {
                    "secretTargetRef": [
                        {"parameter": parameter, "name": contracts.SCALER_CLIENT_SECRET, "key": k}
                        for parameter, k in (
                            ("caCert", "ca.crt"),
                            ("tlsClientCert", "tls.crt"),
                            ("tlsClientKey", "tls.key"),
                        )
                    ]
                },
            },
        ),
    ]


def activator_secret_source(member: str) -> str:
    """The control plane's Secret with this member's activator credentials."""
    return f"{contracts.ACTIVATOR_SECRET_PREFIX}{member}"


# The gateway's proxies, the only pods that may reach the activator's serving port:
# Envoy Gateway runs them in its own namespace and labels each with the Gateway it
# serves (its owning-gateway labels), so only our inference Gateway's proxies match.
GATEWAY_PROXY_NAMESPACE: Final = NAMESPACE_ENVOY_GATEWAY
GATEWAY_PROXY_LABELS: Final = {
    "gateway.envoyproxy.io/owning-gateway-name": contracts.INFERENCE_GATEWAY_NAME,
    "gateway.envoyproxy.io/owning-gateway-namespace": contracts.INFERENCE_GATEWAY_NAMESPACE,
}
# The cluster's collector (collector_objects.py, in the same namespace), the only pods
# that may reach the activator's metrics port.
COLLECTOR_POD_LABELS: Final = {"app.kubernetes.io/name": contracts.COLLECTOR_SERVICE_NAME}
# The activator's Role on the member is named apart from its ServiceAccount: a control
# plane that is also a member holds the activator's control-plane ClusterRole under the
# ServiceAccount's name (contracts.ACTIVATOR_CLUSTER_ROLE).
ACTIVATOR_MEMBER_ROLE: Final = f"{ACTIVATOR}-routes"


def _activator(target: Target, image: str) -> list[Composed]:
    """The on-demand activator: on-demand models' routes lead to it while they have no
    ready replica here. On the member it may only list HTTPRoutes (which identities the
    routes vouch for, runtime/activator/core.py); on the control plane only get and
    patch ModelDeployments (the activate annotation), through a kubeconfig copied from
    the control plane. A NetworkPolicy admits only the inference gateway's proxies to
    its serving port and only the cluster's collector to its metrics port (held
    requests, activations, time to first byte: activator/metrics.py); the kubelet's
    probes use a port of their own."""
    secret = f"{ACTIVATOR}-control-plane"
    labels = _labels(ACTIVATOR)
    return [
        _service_account(target, ACTIVATOR),
        *_role(
            target,
            ACTIVATOR,
            [_rule(["gateway.networking.k8s.io"], ["httproutes"], ["list"])],
            cluster=True,
            role_name=ACTIVATOR_MEMBER_ROLE,
        ),
        _copied_secret(
            target,
            "activator-credentials",
            name=secret,
            namespace=contracts.SYSTEM_NAMESPACE,
            source=activator_secret_source(target.cluster),
            keys=[contracts.ACTIVATOR_SECRET_KEY],
            labels=labels,
        ),
        _deployment(
            target,
            ACTIVATOR,
            image,
            command="activator",
            size=sizing.ACTIVATOR,
            replicas=ACTIVATOR_REPLICAS,
            extra_args=[
                "--control-plane",
                f"{ACTIVATOR_MOUNT}/{contracts.ACTIVATOR_SECRET_KEY}",
                "--listen",
                f"0.0.0.0:{contracts.ACTIVATOR_PORT}",
                "--health-listen",
                f"0.0.0.0:{contracts.ACTIVATOR_HEALTH_PORT}",
            ],
            volumes=[(secret, ACTIVATOR_MOUNT)],
            ports=[
                {"name": "http", "containerPort": contracts.ACTIVATOR_PORT},
                {"name": "health", "containerPort": contracts.ACTIVATOR_HEALTH_PORT},
                # `--metrics-port`'s default; the collector scrapes it by this name.
                {"name": contracts.PORT_NAME_METRICS, "containerPort": contracts.METRICS_PORT},
            ],
            probes={
                "readinessProbe": {
                    "httpGet": {"path": contracts.READYZ_PATH, "port": "health"},
                    "periodSeconds": 5,
                },
                "livenessProbe": {
                    "httpGet": {"path": contracts.HEALTHZ_PATH, "port": "health"},
                    "periodSeconds": 20,
                    "failureThreshold": 3,
                },
            },
        ),
        object_(
            target,
            "runtime-service-activator",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": contracts.ACTIVATOR_SERVICE_NAME,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": labels,
                },
                "spec": {
                    "selector": labels,
                    "ports": [
                        {"name": "http", "port": contracts.ACTIVATOR_PORT, "targetPort": "http"}
                    ],
                },
            },
        ),
        object_(
            target,
            "runtime-networkpolicy-activator",
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": {
                    "name": ACTIVATOR,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": labels,
                },
                "spec": {
                    "podSelector": {"matchLabels": labels},
                    "policyTypes": ["Ingress"],
                    "ingress": [
                        {
                            "from": [
                                {
                                    "namespaceSelector": {
                                        "matchLabels": {
                                            "kubernetes.io/metadata.name": GATEWAY_PROXY_NAMESPACE
                                        }
                                    },
                                    "podSelector": {"matchLabels": GATEWAY_PROXY_LABELS},
                                }
                            ],
                            "ports": [{"protocol": "TCP", "port": "http"}],
                        },
                        # The cluster's collector scrapes the activator's own metrics
                        # (substrate_targets.RUNTIME_TARGETS), and nothing else does.
                        {
                            "from": [{"podSelector": {"matchLabels": COLLECTOR_POD_LABELS}}],
                            "ports": [{"protocol": "TCP", "port": contracts.PORT_NAME_METRICS}],
                        },
                        # The kubelet's probes: the health port serves nothing else.
                        {"ports": [{"protocol": "TCP", "port": "health"}]},
                    ],
                },
            },
        ),
    ]


def _cluster_profile(target: Target, peer: str) -> list[Composed]:
    secret = peer_secret_name(peer)
    labels = {LABEL_CLUSTER_MANAGER: CLUSTER_MANAGER, contracts.LABEL_CLUSTER: peer}
    return [
        _copied_secret(
            target,
            f"peer-credentials-{peer}",
            name=secret,
            namespace=contracts.SYSTEM_NAMESPACE,
            source=secret,
            keys=[PEER_SECRET_KEY],
            labels=labels,
        ),
        object_(
            target,
            f"peer-clusterprofile-{peer}",
            {
                "apiVersion": CLUSTER_PROFILE_API_VERSION,
                "kind": "ClusterProfile",
                "metadata": {
                    "name": peer,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": labels,
                    "annotations": {ANNOTATION_CREDENTIALS: secret},
                },
                "spec": {"displayName": peer, "clusterManager": {"name": CLUSTER_MANAGER}},
            },
        ),
    ]


def inventory_record(target: Target) -> Composed:
    """The agent's inventory record, observed only: the agent writes it, this reads it."""
    return object_(
        target,
        INVENTORY_KEY,
        {
            "apiVersion": INVENTORY_RECORD_API_VERSION,
            "kind": INVENTORY_RECORD_KIND,
            "metadata": {"name": INVENTORY_RECORD_NAME, "namespace": INVENTORY_RECORD_NAMESPACE},
        },
        management_policies=OBSERVE_ONLY,
    )


def runtime_hosting(
    target: Target,
    image: str,
    peers: Sequence[str],
    *,
    prometheus_url: str = "",
    fabric_labels: Sequence[FabricLabel] = (),
    pool_prices: Sequence[PoolPrice] = (),
    cpu_pools: Sequence[CpuPool] = (),
    health_records: Sequence[tuple[str, str]] = (),
) -> list[Composed]:
    """The runtime's resources on one member; `peers` are the other members' names;
    `fabric_labels` which node label names each pool's fabric (the agent's inventory);
    `pool_prices` the priced pools (the agent's cost series); `cpu_pools` the CPU-only
    pools (the inventory's CPU and memory)."""
    ordered_peers = sorted(set(peers) - {target.cluster})
    signals = ["--prometheus-url", prometheus_url] if prometheus_url else []
    # Only what differs from the default (every pool on modelplane.ai/fabric): the agent
    # of a cluster whose pools declare no label keeps its arguments as they were.
    fabrics = (
        [a for f in fabric_labels for a in ("--fabric-label", format_fabric_label(f))]
        if any(f.label != LABEL_FABRIC for f in fabric_labels)
        else []
    )
    composed = [
        object_(target, "adaptivepolicy-crd", adaptivepolicy_crd.crd()),
        _service_account(target, AGENT),
        _service_account(target, SCALER),
        _service_account(target, PEER),
        *_rbac(target, health_records),
        _deployment(
            target,
            AGENT,
            image,
            command="agent",
            size=sizing.AGENT,
            replicas=AGENT_REPLICAS,
            # Every configured member, this one included: the hub needs a majority of them.
            extra_args=[
                "--member",
                f"{target.cluster}=in-cluster",
                *(
                    arg
                    for peer in ordered_peers
                    for arg in ("--member", f"{peer}={peer_kubeconfig_path(peer)}")
                ),
                *signals,
                *fabrics,
                *(a for p in pool_prices for a in ("--pool-price", format_pool_price(p))),
                *(a for p in cpu_pools for a in ("--cpu-pool", format_cpu_pool(p))),
            ],
            volumes=[(peer_secret_name(p), peer_mount_dir(p)) for p in ordered_peers],
            ports=[{"name": "metrics", "containerPort": contracts.METRICS_PORT}],
            # Ready while it reads its own member; live while its loop turns. Both replicas
            # are ready (the standby too): readiness is not who is active.
            probes={
                "readinessProbe": {
                    "httpGet": {"path": contracts.READYZ_PATH, "port": "metrics"},
                    "periodSeconds": 10,
                },
                "livenessProbe": {
                    "httpGet": {"path": contracts.HEALTHZ_PATH, "port": "metrics"},
                    "periodSeconds": 20,
                    "failureThreshold": 3,
                },
            },
        ),
        _deployment(
            target,
            SCALER,
            image,
            command="scaler",
            size=sizing.SCALER,
            replicas=SCALER_REPLICAS,
            extra_args=["--tls-cert-dir", SCALER_TLS_MOUNT],
            volumes=[(contracts.SCALER_TLS_SECRET, SCALER_TLS_MOUNT)],
            ports=[
                {"name": "grpc", "containerPort": contracts.SCALER_PORT},
                {"name": "health", "containerPort": contracts.SCALER_HEALTH_PORT},
                {"name": "metrics", "containerPort": contracts.METRICS_PORT},
            ],
            # Ready once its cache of policies and the hub Lease is filled (before that
            # it can only answer UNAVAILABLE); live while it serves at all.
            probes={
                "readinessProbe": {
                    "grpc": {"port": contracts.SCALER_HEALTH_PORT},
                    "periodSeconds": 5,
                },
                "livenessProbe": {
                    "grpc": {
                        "port": contracts.SCALER_HEALTH_PORT,
                        "service": contracts.SCALER_LIVENESS_SERVICE,
                    },
                    "periodSeconds": 10,
                    "failureThreshold": 3,
                },
            },
        ),
        object_(
            target,
            "runtime-service-agent",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": contracts.AGENT_SERVICE_NAME,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": _labels(AGENT),
                },
                "spec": {
                    "selector": _labels(AGENT),
                    "ports": [
                        {"name": "metrics", "port": contracts.METRICS_PORT, "targetPort": "metrics"}
                    ],
                },
            },
        ),
        object_(
            target,
            "runtime-service-scaler",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": contracts.SCALER_SERVICE_NAME,
                    "namespace": contracts.SYSTEM_NAMESPACE,
                    "labels": _labels(SCALER),
                },
                "spec": {
                    "selector": _labels(SCALER),
                    "ports": [
                        {"name": "grpc", "port": contracts.SCALER_PORT, "targetPort": "grpc"},
                        {
                            "name": "metrics",
                            "port": contracts.METRICS_PORT,
                            "targetPort": "metrics",
                        },
                    ],
                },
            },
        ),
    ]
    composed += _activator(target, image)
    composed += _scaler_authentication(target)
    for peer in ordered_peers:
        composed += _cluster_profile(target, peer)
    # Read back, not run: the shell keeps it out of the stack's readiness.
    composed.append(inventory_record(target))
    return composed
