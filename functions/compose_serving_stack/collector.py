"""The cluster-tier OpenTelemetry collector's config: what it scrapes, how every engine's
metrics become the vocabulary, what is aggregated away, and where it all goes.

The pipeline, in order, and why each step sits where it does:

1. `prometheus` discovers pods (Kubernetes service discovery) and keeps only those
   labelled `modelplane.ai/serving`, scraping their container port named `http`; plus
   the endpoint pickers, the gateway's Envoy proxies and the stack's substrate. The
   receiver itself sets `k8s.pod.name`, `k8s.pod.uid` and `k8s.namespace.name` on each
   target's resource from the discovery labels.
2. `memory_limiter` first, so a scrape storm is refused before anything is buffered.
3. `k8s_attributes` finds each pod by uid and lifts its `modelplane.ai/engine`,
   `deployment` and `serving` labels onto resource attributes; `resource/cluster` adds
   the cluster's name.
4. `transform/normalize`: one statement group per MetricMapping, gated on the engine
   resource attribute, scales (histogram bounds and sums included, by `scale_metric`)
   then renames each source metric to its vocabulary name and renames labels. A last
   group turns `:` into `_` in whatever is left, which is all an unmapped engine gets.
5. `transform/instance` moves the per-instance identity (pod, pod uid, container,
   scrape instance) off the resource onto data-point labels, so series of one
   deployment differ only by labels the next steps can aggregate over.
6. `batch` with its timeout at the scrape interval, so one batch holds one scrape of
   every pod; `transform/align` stamps the vocabulary's points of the batch with one
   time (aggregation only merges points of equal timestamp); `groupbyattrs` compacts
   the now-identical resources into one.
7. `metrics_transform/aggregate` merges each vocabulary metric's points over every label
   but the ones the vocabulary keeps (`model`, and `finish_reason` on requests): sums
   for counters, counts and histograms (bucket by bucket), the mean for the KV-cache
   ratio. It aggregates rather than deleting labels: deleting `pod` would leave two
   pods' points as colliding duplicates of one series. Metrics outside the vocabulary
   are not aggregated, because without a mapping nothing says whether a sum or a mean
   is right; they keep their per-pod labels.
8. `otlp_grpc/gateway` pushes to the TelemetryDestination's gateway, authenticated by
   `bearertokenauth` reading the token from a file mounted from a Secret, so the
   credential is never in this config.
9. `prometheus/signals` (when a replica on the cluster autoscales from vocabulary
   signals) serves the same merged series as Prometheus text on `SIGNALS_PORT`, for the
   member's runtime agent only (a NetworkPolicy admits nothing else). It is a page, not
   a store: the agent samples it and computes rates and quantiles over its own window.
   Each series keeps its resource attributes as labels (`modelplane_deployment`,
   `k8s_namespace_name`, ...) so the agent scopes to one deployment, carries the batch
   timestamp so the agent can tell a fresh point from a held one, and expires after
   `SIGNALS_EXPIRY_INTERVALS` scrape intervals so a vanished source vanishes from the
   page instead of repeating its last value.

Every name that comes from a MetricMapping was checked by mappings.py before it gets
here; `_ottl_string` checks again, so a caller that skipped parsing still cannot put a
quote into a statement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from functions.common import contracts, vocabulary
from functions.common.exposition import prometheus_label
from functions.common.metricmapping import MetricMapping
from functions.compose_serving_stack import substrate_targets
from functions.compose_serving_stack.substrate_targets import ScrapeTarget

# Where the collector reads the gateway token: a Secret volume mounted at this path.
TOKEN_MOUNT_DIR: Final = "/etc/modelplane/telemetry"
TOKEN_KEY: Final = contracts.TELEMETRY_TOKEN_SECRET_KEY
TOKEN_FILE: Final = f"{TOKEN_MOUNT_DIR}/{TOKEN_KEY}"
SERVICE_ACCOUNT_TOKEN_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/token"
SERVICE_ACCOUNT_CA_FILE: Final = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
HEALTH_PORT: Final = 13133

DEFAULT_SCRAPE_INTERVAL_SECONDS: Final = 30
# Data points that close a batch early: far above one interval's scrape of a large
# cluster (1,000 pods x 300 series), so the timeout closes it.
BATCH_TRIGGER_POINTS: Final = 1_000_000
# Scratch resource attributes marking which of a target's source names a scrape has.
PRESENT_MARKER: Final = "modelplane.mapping.present"

# Component ids in the rendered config (a key rename is a config change, keep them).
RECEIVER: Final = "prometheus"
EXPORTER: Final = "otlp_grpc/gateway"
SIGNALS_EXPORTER: Final = "prometheus/signals"
# The in-cluster page the runtime agent reads (port name `signals` on the collector).
SIGNALS_PORT: Final = contracts.COLLECTOR_SIGNALS_PORT
# A series not refreshed for this many scrape intervals leaves the signals page.
SIGNALS_EXPIRY_INTERVALS: Final = 3
AUTHENTICATOR: Final = "bearertokenauth"
HEALTH_CHECK: Final = "health_check"
PROCESSORS: Final = (
    "memory_limiter",
    "k8s_attributes",
    "resource/cluster",
    "transform/normalize",
    "transform/instance",
    "batch",
    "transform/align",
    "groupbyattrs/compact",
    "metrics_transform/aggregate",
)

# Per-instance identity: resource attribute -> the data-point label it becomes.
INSTANCE_LABELS: Final = (
    ("k8s.pod.name", "pod"),
    ("k8s.pod.uid", "pod_uid"),
    ("container.id", "container_id"),
    ("service.instance.id", "instance"),
)

# What stays on the resource: the dimensions the fleet rolls up and dashboards group by.
KEPT_RESOURCE_ATTRIBUTES: Final = (
    contracts.RESOURCE_ATTRIBUTE_CLUSTER,
    contracts.RESOURCE_ATTR_NAMESPACE,
    contracts.RESOURCE_ATTR_ENGINE,
    contracts.RESOURCE_ATTR_DEPLOYMENT,
    contracts.RESOURCE_ATTR_SERVING,
    "service.name",  # the scrape job: engines, endpoint pickers, envoy proxies, substrate
)


ENGINES_JOB: Final = "modelplane-engines"
ENDPOINT_PICKERS_JOB: Final = "modelplane-endpoint-pickers"
# The extension's own picker (Unified) and llm-d's (PrefillDecode), by image.
ENDPOINT_PICKER_IMAGE: Final = (
    r".*/(gateway-api-inference-extension/epp|llm-d-inference-scheduler)(@|:).*"
)

_OTTL_SAFE = re.compile(r"^[A-Za-z0-9_:./-]+$")
_UNIT = re.compile(r"^[A-Za-z0-9{}/_.]+$")
_ENDPOINT = re.compile(r"^[A-Za-z0-9.-]+(:[0-9]{1,5})?$")


class UnsafeValue(ValueError):
    """A value that may not enter a generated expression (it should have been refused)."""


@dataclass(frozen=True)
class CollectorCluster:
    """The cluster a collector runs in: its name (a resource attribute) and stack."""

    name: str
    stack: str = contracts.STACK_STANDARD


@dataclass(frozen=True)
class CollectorDestination:
    """The gateway the collector pushes OTLP gRPC to.

    `token_file` is where the bearer token is mounted; `insecure` turns TLS off and is
    for tests against a loopback receiver only (the TelemetryDestination has no such
    field, so the function never sets it).
    """

    endpoint: str
    token_file: str = TOKEN_FILE
    insecure: bool = False


def _ottl_string(value: str) -> str:
    """A double-quoted OTTL string literal of a checked name."""
    if not _OTTL_SAFE.fullmatch(value):
        raise UnsafeValue(f"{value!r} may not enter an OTTL statement")
    return f'"{value}"'


def _ottl_unit(unit: str) -> str:
    """A vocabulary unit (ours, UCUM with annotations such as `{token}`) as a literal."""
    if not _UNIT.fullmatch(unit):
        raise UnsafeValue(f"unit {unit!r} may not enter an OTTL statement")
    return f'"{unit}"'


def _engine_condition(engine: str) -> str:
    attribute = _ottl_string(contracts.RESOURCE_ATTR_ENGINE)
    return f"resource.attributes[{attribute}] == {_ottl_string(engine)}"


def _any_name(names: Sequence[str]) -> str:
    return " or ".join(f"metric.name == {_ottl_string(n)}" for n in names)


def _present_marker(target: str, index: int) -> str:
    return f"resource.attributes[{_ottl_string(f'{PRESENT_MARKER}.{target}.{index}')}]"


def mapping_statement_groups(mapping: MetricMapping) -> list[dict[str, Any]]:
    """The transform processor groups of one MetricMapping: markers, metrics, labels.

    Several `from` names for one target are one metric across engine releases, and some
    releases expose the old name beside the new one. Only the first name present in a
    scrape is renamed (the others pass through under their own names), so a release
    that exposes both is not counted twice. A first group marks, on the scrape's
    resource (one per pod and scrape), which names are present; the rename group reads
    the marks; transform/instance drops them with every other per-scrape attribute.

    Scaling matches the engine's own name under the same condition as the rename, so a
    scale never applies to a metric that is not renamed, or to one another engine
    already named the same.
    """
    condition = _engine_condition(mapping.engine)
    markers: list[str] = []
    metric_statements: list[str] = []
    for rename in mapping.metrics:
        # A custom target keeps the engine's unit; a vocabulary one gets the base unit.
        known = vocabulary.VOCABULARY_BY_NAME.get(rename.target)
        unit = known.unit if known else None
        target = _ottl_string(rename.target)
        for index, source in enumerate(rename.sources):
            name_is = f"metric.name == {_ottl_string(source)}"
            if index < len(rename.sources) - 1:
                markers.append(
                    f"set({_present_marker(rename.target, index)}, true) where {name_is}"
                )
            earlier_absent = [f"{_present_marker(rename.target, j)} == nil" for j in range(index)]
            where = " and ".join([name_is, *earlier_absent])
            if rename.scale != 1.0:
                unit_argument = f", {_ottl_unit(unit)}" if unit is not None else ""
                metric_statements.append(
                    f"scale_metric({rename.scale_literal}{unit_argument}) where {where}"
                )
            metric_statements.append(f"set(metric.name, {target}) where {where}")
        if unit is not None:
            metric_statements.append(
                f"set(metric.unit, {_ottl_unit(unit)}) where metric.name == {target}"
            )
    groups: list[dict[str, Any]] = []
    if markers:
        groups.append({"conditions": [condition], "statements": markers})
    groups.append({"conditions": [condition], "statements": metric_statements})
    if mapping.labels:
        label_statements: list[str] = []
        for label in mapping.labels:
            source = f"datapoint.attributes[{_ottl_string(label.source)}]"
            label_statements.append(
                f"set(datapoint.attributes[{_ottl_string(label.target)}], {source}) "
                f"where {source} != nil"
            )
            label_statements.append(
                f"delete_key(datapoint.attributes, {_ottl_string(label.source)})"
            )
        groups.append({"conditions": [condition], "statements": label_statements})
    return groups


def _normalize_processor(mappings: Sequence[MetricMapping]) -> dict[str, Any]:
    groups: list[dict[str, Any]] = []
    for mapping in sorted(mappings, key=lambda m: m.engine):
        groups.extend(mapping_statement_groups(mapping))
    # Whatever no mapping renamed keeps its name, made a valid OTel/Prometheus-safe name.
    groups.append(
        {"statements": ['replace_pattern(metric.name, ":", "_") where IsMatch(metric.name, ":")']}
    )
    return {"error_mode": "ignore", "metric_statements": groups}


def _instance_processor() -> dict[str, Any]:
    moves = []
    for attr, label in INSTANCE_LABELS:
        source = f"resource.attributes[{_ottl_string(attr)}]"
        moves.append(
            f"set(datapoint.attributes[{_ottl_string(label)}], {source}) where {source} != nil"
        )
    kept = ", ".join(_ottl_string(a) for a in KEPT_RESOURCE_ATTRIBUTES)
    return {
        "error_mode": "ignore",
        "metric_statements": [
            {"statements": moves},
            {"statements": [f"keep_keys(resource.attributes, [{kept}])"]},
        ],
    }


def _vocabulary_condition() -> str:
    return _any_name([m.name for m in vocabulary.VOCABULARY])


def _align_processor() -> dict[str, Any]:
    return {
        "error_mode": "ignore",
        "metric_statements": [
            {
                "conditions": [_vocabulary_condition()],
                "statements": ['set(datapoint.time, TruncateTime(Now(), Duration("1s")))'],
            }
        ],
    }


def _aggregate_processor() -> dict[str, Any]:
    transforms = []
    for metric in vocabulary.VOCABULARY:
        transforms.append(
            {
                "include": metric.name,
                "match_type": "strict",
                "action": "update",
                "operations": [
                    {
                        "action": "aggregate_labels",
                        "label_set": list(metric.labels),
                        "aggregation_type": str(metric.aggregation),
                    }
                ],
            }
        )
    return {"transforms": transforms}


def _k8s_attributes_processor() -> dict[str, Any]:
    lifted = (
        (contracts.RESOURCE_ATTR_ENGINE, contracts.LABEL_ENGINE),
        (contracts.RESOURCE_ATTR_DEPLOYMENT, contracts.LABEL_DEPLOYMENT),
        (contracts.RESOURCE_ATTR_SERVING, contracts.LABEL_SERVING),
    )
    return {
        "auth_type": "serviceAccount",
        "passthrough": False,
        # The receiver sets the pod's uid (and name and namespace) from discovery; the
        # scrape connection's address would be the collector's own.
        "pod_association": [
            {"sources": [{"from": "resource_attribute", "name": "k8s.pod.uid"}]},
            {
                "sources": [
                    {"from": "resource_attribute", "name": "k8s.pod.name"},
                    {"from": "resource_attribute", "name": contracts.RESOURCE_ATTR_NAMESPACE},
                ]
            },
        ],
        "extract": {
            "metadata": ["k8s.pod.name", "k8s.pod.uid", contracts.RESOURCE_ATTR_NAMESPACE],
            "labels": [{"tag_name": tag, "key": key, "from": "pod"} for tag, key in lifted],
        },
    }


def _interval(seconds: int) -> str:
    return f"{seconds}s"


def _keep_label_present(label: str) -> dict[str, Any]:
    return {
        "action": "keep",
        "source_labels": [f"__meta_kubernetes_pod_labelpresent_{prometheus_label(label)}"],
        "regex": "true",
    }


def _keep_running() -> dict[str, Any]:
    return {
        "action": "drop",
        "source_labels": ["__meta_kubernetes_pod_phase"],
        "regex": "Pending|Succeeded|Failed",
    }


def _token_auth() -> dict[str, Any]:
    return {
        "authorization": {"type": "Bearer", "credentials_file": SERVICE_ACCOUNT_TOKEN_FILE},
    }


def _engine_jobs(interval: int) -> list[dict[str, Any]]:
    def common() -> dict[str, Any]:
        # A fresh copy per job: shared lists would print as YAML anchors.
        return {
            "scrape_interval": _interval(interval),
            "scrape_timeout": _interval(min(10, interval)),
            "metrics_path": "/metrics",
            "kubernetes_sd_configs": [{"role": "pod"}],
        }

    engines = {
        "job_name": ENGINES_JOB,
        **common(),
        "relabel_configs": [
            _keep_label_present(contracts.LABEL_SERVING),
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": contracts.PORT_NAME_HTTP,
            },
            _keep_running(),
        ],
    }
    pickers = {
        "job_name": ENDPOINT_PICKERS_JOB,
        **common(),
        **_token_auth(),
        "relabel_configs": [
            # The Inference Extension's endpoint picker, whoever composed it: by its image,
            # since its pods carry only their own app label.
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_pod_container_image"],
                "regex": ENDPOINT_PICKER_IMAGE,
            },
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": contracts.PORT_NAME_METRICS,
            },
            _keep_running(),
        ],
    }
    return [engines, pickers]


def _substrate_job(target: ScrapeTarget, interval: int) -> dict[str, Any]:
    relabel: list[dict[str, Any]] = []
    for key, value in target.pod_labels:
        relabel.append(
            {
                "action": "keep",
                "source_labels": [f"__meta_kubernetes_pod_label_{prometheus_label(key)}"],
                "regex": re.escape(value),
            }
        )
    if target.port_name:
        relabel.append(
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_pod_container_port_name"],
                "regex": target.port_name,
            }
        )
    else:
        relabel.append(
            {
                "action": "keep",
                "source_labels": ["__meta_kubernetes_pod_container_port_number"],
                "regex": str(target.port_number),
            }
        )
    relabel.append(_keep_running())
    job: dict[str, Any] = {
        "job_name": target.job,
        "scrape_interval": _interval(interval),
        "scrape_timeout": _interval(min(10, interval)),
        "metrics_path": target.path,
        "scheme": target.scheme,
        "kubernetes_sd_configs": [{"role": "pod", "namespaces": {"names": [target.namespace]}}],
        "relabel_configs": relabel,
    }
    if target.service_account_token:
        job.update(_token_auth())
    if target.scheme == "https":
        # In-cluster controllers serve self-signed metrics certificates.
        job["tls_config"] = {"ca_file": SERVICE_ACCOUNT_CA_FILE, "insecure_skip_verify": True}
    if target.keep_series:
        label, regex = target.keep_series
        job["metric_relabel_configs"] = [
            {"action": "keep", "source_labels": [label], "regex": regex}
        ]
    return job


def scrape_configs(
    stack: str, interval: int = DEFAULT_SCRAPE_INTERVAL_SECONDS
) -> list[dict[str, Any]]:
    """The prometheus receiver's scrape jobs for a cluster of this stack."""
    jobs = _engine_jobs(interval)
    jobs += [_substrate_job(t, interval) for t in substrate_targets.SUBSTRATE_TARGETS[stack]]
    return jobs


def signals_exporter(scrape_interval_seconds: int) -> dict[str, Any]:
    """The agent's page: vocabulary names as written (no unit or `_total` suffixes
    added), resource attributes as labels, timestamps, and a short expiry."""
    return {
        "endpoint": f"0.0.0.0:{SIGNALS_PORT}",
        "send_timestamps": True,
        "metric_expiration": _interval(scrape_interval_seconds * SIGNALS_EXPIRY_INTERVALS),
        "resource_to_telemetry_conversion": {"enabled": True},
        "translation_strategy": "UnderscoreEscapingWithoutSuffixes",
    }


def render_cluster_collector_config(
    cluster: CollectorCluster,
    mappings: Sequence[MetricMapping],
    destination: CollectorDestination | None,
    *,
    signals: bool = False,
    scrape_interval_seconds: int = DEFAULT_SCRAPE_INTERVAL_SECONDS,
) -> dict[str, Any]:
    """The cluster-tier collector's whole config, as the dict its ConfigMap holds.

    `mappings` are parsed, accepted MetricMappings (mappings.parse_mappings); the same
    inputs always give the same dict. `destination` None: nothing is pushed, and the
    collector runs only for the agent's signals page (`signals`); one of the two must
    be asked for, since a collector nothing reads is not composed.
    """
    if destination is None and not signals:
        raise ValueError("a collector needs a destination or the signals page")
    if destination is not None and not _ENDPOINT.fullmatch(destination.endpoint):
        raise UnsafeValue(f"gateway endpoint {destination.endpoint!r} is not host[:port]")
    if not _OTTL_SAFE.fullmatch(cluster.name):
        raise UnsafeValue(f"cluster name {cluster.name!r} is not a DNS name")
    if scrape_interval_seconds < 1:
        raise ValueError("scrape_interval_seconds must be at least 1")

    extensions: dict[str, Any] = {HEALTH_CHECK: {"endpoint": f"0.0.0.0:{HEALTH_PORT}"}}
    exporters: dict[str, Any] = {}
    if destination is not None:
        gateway: dict[str, Any] = {
            "endpoint": destination.endpoint,
            "auth": {"authenticator": AUTHENTICATOR},
        }
        if destination.insecure:
            gateway["tls"] = {"insecure": True}
        extensions[AUTHENTICATOR] = {"filename": destination.token_file}
        exporters[EXPORTER] = gateway
    if signals:
        exporters[SIGNALS_EXPORTER] = signals_exporter(scrape_interval_seconds)

    return {
        "extensions": extensions,
        "receivers": {
            RECEIVER: {
                "config": {"scrape_configs": scrape_configs(cluster.stack, scrape_interval_seconds)}
            }
        },
        "processors": {
            "memory_limiter": {
                "check_interval": "1s",
                "limit_percentage": 80,
                "spike_limit_percentage": 20,
            },
            "k8s_attributes": _k8s_attributes_processor(),
            "resource/cluster": {
                "attributes": [
                    {
                        "key": contracts.RESOURCE_ATTRIBUTE_CLUSTER,
                        "value": cluster.name,
                        "action": "upsert",
                    }
                ]
            },
            "transform/normalize": _normalize_processor(mappings),
            "transform/instance": _instance_processor(),
            # The timeout, not the size, should close a batch: one scrape of every pod
            # per batch is what lets their points merge. memory_limiter bounds it.
            "batch": {
                "timeout": _interval(scrape_interval_seconds),
                "send_batch_size": BATCH_TRIGGER_POINTS,
            },
            "transform/align": _align_processor(),
            "groupbyattrs/compact": {},
            "metrics_transform/aggregate": _aggregate_processor(),
        },
        "exporters": exporters,
        "service": {
            "extensions": list(extensions),
            "pipelines": {
                "metrics": {
                    "receivers": [RECEIVER],
                    "processors": list(PROCESSORS),
                    "exporters": list(exporters),
                }
            },
        },
    }


def render_node_collector_config(
    cluster: CollectorCluster,
    destination: CollectorDestination,
    *,
    interval_seconds: int = DEFAULT_SCRAPE_INTERVAL_SECONDS,
) -> dict[str, Any]:
    """The node tier's config: the kubelet's pod and container stats and the host's own,
    from every node, pushed to the same gateway. Nothing engine-specific happens here."""
    base = render_cluster_collector_config(
        cluster, (), destination, scrape_interval_seconds=interval_seconds
    )
    processors = ("memory_limiter", "resource/cluster", "batch")
    return {
        "extensions": base["extensions"],
        "receivers": {
            "kubeletstats": {
                "collection_interval": _interval(interval_seconds),
                "auth_type": "serviceAccount",
                # The node's own kubelet; the collector expands the variable at start.
                "endpoint": "https://${env:K8S_NODE_NAME}:10250",
                "insecure_skip_verify": True,
                "metric_groups": ["node", "pod", "container"],
            },
            "hostmetrics": {
                "collection_interval": _interval(interval_seconds),
                "root_path": "/hostfs",
                "scrapers": {"cpu": {}, "memory": {}, "load": {}, "filesystem": {}, "network": {}},
            },
        },
        "processors": {name: base["processors"][name] for name in processors},
        "exporters": base["exporters"],
        "service": {
            "extensions": base["service"]["extensions"],
            "pipelines": {
                "metrics": {
                    "receivers": ["kubeletstats", "hostmetrics"],
                    "processors": list(processors),
                    "exporters": [EXPORTER],
                }
            },
        },
    }
