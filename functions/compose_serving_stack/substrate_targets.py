"""Where each stack's substrate runs and where it serves metrics.

The substrate Releases (substrate.py) install each component into these namespaces, and
the collector (collector.py) scrapes the same namespaces, so both read this one table.
Selectors are by namespace and container port name, the way each chart names its
metrics port by default, so a chart upgrade that keeps its defaults keeps its scrape.
"""

from dataclasses import dataclass
from typing import Final

from functions.common import contracts


@dataclass(frozen=True)
class ScrapeTarget:
    """Pods to scrape: by namespace, pod labels that must all be present, and port."""

    job: str
    namespace: str
    port_name: str = ""  # regex on the container port name; empty: use port_number
    port_number: int = 0
    path: str = "/metrics"
    scheme: str = "http"
    # Send the collector's service-account token (controller-runtime's secure metrics
    # and the endpoint picker authorize a token that may GET /metrics).
    service_account_token: bool = False
    pod_labels: tuple[tuple[str, str], ...] = ()
    # Keep only series whose `label` matches `regex` (empty: keep everything).
    keep_series: tuple[str, str] | None = None
    # A static pod that declares no container port (kube-scheduler under kubeadm): scrape
    # the pod's address at this port instead of selecting a declared one.
    undeclared_port: int = 0


NAMESPACE_CERT_MANAGER: Final = "cert-manager"
NAMESPACE_ENVOY_GATEWAY: Final = "envoy-gateway-system"
NAMESPACE_LWS: Final = "lws-system"
NAMESPACE_DRA_DRIVER: Final = "nvidia-dra-driver-gpu"
NAMESPACE_GROVE: Final = "grove-system"
NAMESPACE_KAI: Final = "kai-scheduler"
NAMESPACE_MODEL_EXPRESS: Final = "modelexpress-system"

# KAI scheduler queues (functions/common/contracts.py): every modelplane workload is
# scheduled in KAI_QUEUE, a child of KAI_ROOT_QUEUE; other tenants' queues are not ours.
KAI_ROOT_QUEUE: Final = contracts.KAI_ROOT_QUEUE
KAI_QUEUE: Final = contracts.KAI_QUEUE

# Envoy Gateway's proxies serve Envoy's stats here (the gateway chart's default).
ENVOY_PROXY_STATS_PORT: Final = 19001

ENVOY_PROXIES: Final = ScrapeTarget(
    job="envoy-proxies",
    namespace=NAMESPACE_ENVOY_GATEWAY,
    port_number=ENVOY_PROXY_STATS_PORT,
    path="/stats/prometheus",
    pod_labels=(
        ("app.kubernetes.io/component", "proxy"),
        ("app.kubernetes.io/managed-by", "envoy-gateway"),
    ),
)

NAMESPACE_KUBE_SYSTEM: Final = "kube-system"
# kube-scheduler's secure port (the upstream default; kubeadm keeps it).
KUBE_SCHEDULER_PORT: Final = 10259

# Installed on both stacks (substrate.py): scraped on both.
COMMON_TARGETS: Final = (
    ENVOY_PROXIES,
    ScrapeTarget(job="nvidia-dra-driver", namespace=NAMESPACE_DRA_DRIVER, port_name="metrics"),
    # cert-manager's chart names its controller's metrics port (9402) `http-metrics`.
    ScrapeTarget(job="cert-manager", namespace=NAMESPACE_CERT_MANAGER, port_name="http-metrics"),
    # The cluster's default scheduler, where its pods are visible (kubeadm-style static
    # pods labelled component=kube-scheduler; a managed control plane hides them, and
    # then this job finds nothing). Its /metrics is https and authorizes a token that
    # may GET /metrics, as the collector's ClusterRole allows.
    ScrapeTarget(
        job="kube-scheduler",
        namespace=NAMESPACE_KUBE_SYSTEM,
        scheme="https",
        service_account_token=True,
        pod_labels=(("component", "kube-scheduler"),),
        undeclared_port=KUBE_SCHEDULER_PORT,
    ),
)

SUBSTRATE_TARGETS: Final[dict[str, tuple[ScrapeTarget, ...]]] = {
    contracts.STACK_STANDARD: (
        *COMMON_TARGETS,
        ScrapeTarget(
            job="leaderworkerset-controller",
            namespace=NAMESPACE_LWS,
            port_name="https|metrics",
            scheme="https",
            service_account_token=True,
        ),
    ),
    contracts.STACK_DYNAMO: (
        *COMMON_TARGETS,
        ScrapeTarget(job="grove-operator", namespace=NAMESPACE_GROVE, port_name="metrics"),
        ScrapeTarget(
            job="kai-scheduler",
            namespace=NAMESPACE_KAI,
            port_name="metrics|http-metrics",
            # Queue series of our queues only, plus every series without a queue label.
            keep_series=("queue_name", f"|{KAI_ROOT_QUEUE}|{KAI_QUEUE}"),
        ),
        ScrapeTarget(
            job="modelexpress", namespace=NAMESPACE_MODEL_EXPRESS, port_name="metrics|http"
        ),
    ),
}


# The member runtime this cluster hosts (runtime_hosting.py): the agent (hub, leadership,
# model health, cost, certificate expiry), the scaler and the on-demand activator (held
# requests, activations, time to first byte: runtime/activator/metrics.py, its names
# kept as it exports them, like the agent's) serve Prometheus text on their `metrics`
# port; the activator's NetworkPolicy admits the collector to it. Scraped only when the
# collector pushes to a destination (the agent's signals page has no use for the
# runtime's own metrics). Not substrate: no MetricMapping maps them, so they are not
# listed among a stack's mappable components.
RUNTIME_TARGETS: Final = tuple(
    ScrapeTarget(
        job=name,
        namespace=contracts.SYSTEM_NAMESPACE,
        port_name=contracts.PORT_NAME_METRICS,
        pod_labels=(("app.kubernetes.io/name", name),),
    )
    for name in (
        contracts.AGENT_SERVICE_NAME,
        contracts.SCALER_SERVICE_NAME,
        contracts.ACTIVATOR_SERVICE_NAME,
    )
)
