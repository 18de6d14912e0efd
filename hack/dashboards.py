"""The Grafana dashboards that ship with the package, built as code with Grafana's own
Python SDK (grafana-foundation-sdk), written to package/dashboards/*.json:

    .venv/bin/python hack/dashboards.py

Five dashboards over what the destination receives (docs/dashboards.md): the fleet at a
glance, one model across clusters, one cluster, the runtime, and cost. Every panel is a
`PanelSpec` first: its PromQL, the labels its series are grouped by and the metric names
it reads, so the tests can hold each query to the vocabulary and the runtime's metric
names (tests/unit/test_dashboards.py) and run it against the live fleet's Prometheus
(tests/telemetry/test_live_dashboards.py) without Grafana. The JSON is checked in and a
test fails when it is out of step with this file.

Queries use Grafana's `$__rate_interval` and the dashboards' own variables
(`$datasource`, `$deployment`, `$cluster`, `$ttft_slo`: the destination's
`slo.timeToFirstToken`); `substitute`
replaces them with concrete values where no Grafana runs.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from functions.common import contracts  # noqa: E402
from functions.common import cost as cost_contract  # noqa: E402
from functions.common.exposition import prometheus_label  # noqa: E402
from functions.runtime.activator import metrics as activator_metrics  # noqa: E402
from functions.runtime.hub import metrics as hub_metrics  # noqa: E402
from functions.runtime.operator import model_health  # noqa: E402
from functions.runtime.shared import cert_expiry  # noqa: E402
from functions.runtime.shared import metrics as runtime_metrics  # noqa: E402

OUT: Final = REPO / "package" / "dashboards"

# Labels the destination's series carry (Prometheus names of the resource attributes the
# cluster collector and the gateway set), from the contracts, so a rename shows here.
CLUSTER: Final = prometheus_label(contracts.RESOURCE_ATTRIBUTE_CLUSTER)
DEPLOYMENT: Final = prometheus_label(contracts.RESOURCE_ATTR_DEPLOYMENT)
NAMESPACE: Final = prometheus_label(contracts.RESOURCE_ATTR_NAMESPACE)
SCOPE: Final = prometheus_label(contracts.RESOURCE_ATTRIBUTE_SCOPE)
GATEWAY: Final = prometheus_label(contracts.RESOURCE_ATTRIBUTE_GATEWAY)
FLEET: Final = f'{SCOPE}="{contracts.FLEET_SCOPE}"'
PER_CLUSTER: Final = f'{SCOPE}=""'

# Grafana's variables and what the tests put in their place.
VARIABLES: Final = ("datasource", "deployment", "cluster", "ttft_slo")
RATE: Final = "$__rate_interval"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    # The labels each series of the result carries: what the panel groups by.
    by: tuple[str, ...] = ()


# Prices are currency-free (spec.nodePools[].pricePerGPUHour is in whatever unit the
# platform prices in): a cost panel shows plain numbers, never a currency sign.
PRICE_UNIT = "short"


@dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: str = "timeseries"  # or "stat"
    width: int = 12


@dataclass(frozen=True)
class DashboardSpec:
    uid: str
    title: str
    description: str
    rows: tuple[tuple[str, tuple[PanelSpec, ...]], ...]
    variables: tuple[str, ...] = ("datasource",)
    tags: tuple[str, ...] = field(default=("modelplane",))

    @property
    def panels(self) -> tuple[PanelSpec, ...]:
        return tuple(p for _, panels in self.rows for p in panels)


# --- PromQL pieces -----------------------------------------------------------------------


def _sum(by: tuple[str, ...], expr: str) -> str:
    return f"sum by ({', '.join(by)}) ({expr})"


def _rate(metric: str, selector: str) -> str:
    return f"rate({metric}{{{selector}}}[{RATE}])"


def _quantile(q: float, histogram: str, selector: str, by: tuple[str, ...]) -> str:
    return f"histogram_quantile({q}, {_sum(('le', *by), _rate(f'{histogram}_bucket', selector))})"


def _attainment(histogram: str, target: str, selector: str, by: tuple[str, ...]) -> str:
    """The exact fraction of observations at or under the SLO target (a bucket boundary;
    histograms without it are marked by the gateway and return nothing)."""
    bucket = f'{selector},le="{target}"'
    return (
        f"{_sum(by, _rate(f'{histogram}_bucket', bucket))} / "
        f"{_sum(by, _rate(f'{histogram}_count', selector))}"
    )


def _kv_ratio(selector: str, by: tuple[str, ...]) -> str:
    used, pods = ("modelplane_kv_cache_used", "modelplane_kv_cache_pods")
    return f"{_sum(by, f'{used}{{{selector}}}')} / {_sum(by, f'{pods}{{{selector}}}')}"


def _q(expr: str, by: tuple[str, ...], legend: str | None = None) -> Query:
    return Query(expr, legend or " ".join(f"{{{{{label}}}}}" for label in by), by)


BY_CLUSTER_MODEL: Final = (CLUSTER, DEPLOYMENT)
MODEL: Final = f'{DEPLOYMENT}="$deployment"'
# vLLM's finish reasons (FinishReason): `error` is a retryable internal error, `abort` the
# client gave up; SGLang and TensorRT-LLM count only finished requests.
ERRORS: Final = 'finish_reason=~"error|abort"'
IN_CLUSTER: Final = f'{CLUSTER}="$cluster"'
COST: Final = cost_contract.MODEL_COST_PER_HOUR
COST_BY: Final = (cost_contract.LABEL_NAMESPACE, cost_contract.LABEL_DEPLOYMENT)


def _cost_per_million_tokens() -> str:
    tokens = _sum(
        (NAMESPACE, DEPLOYMENT),
        f"rate(modelplane_generation_tokens_total{{{FLEET}}}[1h])",
    )
    relabelled = (
        f'label_replace(label_replace({tokens} * 3600 / 1e6, "{cost_contract.LABEL_NAMESPACE}", '
        f'"$1", "{NAMESPACE}", "(.*)"), "{cost_contract.LABEL_DEPLOYMENT}", "$1", '
        f'"{DEPLOYMENT}", "(.*)")'
    )
    return f"{_sum(COST_BY, f'{COST}{{{FLEET}}}')} / on ({', '.join(COST_BY)}) {relabelled}"


# --- The dashboards ----------------------------------------------------------------------


def _load(selector: str, by: tuple[str, ...]) -> tuple[PanelSpec, ...]:
    return (
        PanelSpec(
            "Requests running",
            "Requests being decoded now (modelplane_requests_running).",
            (_q(_sum(by, f"modelplane_requests_running{{{selector}}}"), by),),
        ),
        PanelSpec(
            "Requests waiting",
            "Requests queued, not yet scheduled (modelplane_requests_waiting).",
            (_q(_sum(by, f"modelplane_requests_waiting{{{selector}}}"), by),),
        ),
        PanelSpec(
            "Generated tokens per second",
            "rate(modelplane_generation_tokens_total).",
            (_q(_sum(by, _rate("modelplane_generation_tokens_total", selector)), by),),
        ),
        PanelSpec(
            "Prompt tokens per second",
            "rate(modelplane_prompt_tokens_total).",
            (_q(_sum(by, _rate("modelplane_prompt_tokens_total", selector)), by),),
        ),
    )


def _latency(selector: str, by: tuple[str, ...]) -> tuple[PanelSpec, ...]:
    return (
        PanelSpec(
            "Time to first token, p95",
            "histogram_quantile over modelplane_time_to_first_token (interpolated within"
            " a bucket).",
            (_q(_quantile(0.95, "modelplane_time_to_first_token", selector, by), by),),
            unit="s",
        ),
        PanelSpec(
            "Time to first token: SLO attainment",
            "The exact fraction of requests at or under $ttft_slo s: the target must be a"
            " bucket boundary of the engine's histogram (else no data, never a guess).",
            (
                _q(
                    _attainment("modelplane_time_to_first_token", "$ttft_slo", selector, by),
                    by,
                ),
            ),
            unit="percentunit",
        ),
        PanelSpec(
            "Time per output token, p95",
            "histogram_quantile over modelplane_time_per_output_token.",
            (_q(_quantile(0.95, "modelplane_time_per_output_token", selector, by), by),),
            unit="s",
        ),
        PanelSpec(
            "Request duration, p95",
            "End to end (modelplane_request_duration).",
            (_q(_quantile(0.95, "modelplane_request_duration", selector, by), by),),
            unit="s",
        ),
    )


def _cache_and_errors(selector: str, by: tuple[str, ...]) -> tuple[PanelSpec, ...]:
    reasons = (*by, "finish_reason")
    return (
        PanelSpec(
            "KV cache in use",
            "sum(used) / sum(pods): the pods' KV-cache ratios weighted by pod, never a"
            " mean of means.",
            (_q(_kv_ratio(selector, by), by),),
            unit="percentunit",
        ),
        PanelSpec(
            "Prefix-cache hit ratio",
            "rate(modelplane_prefix_cache_hits_total) / rate(..._queries_total).",
            (
                _q(
                    f"{_sum(by, _rate('modelplane_prefix_cache_hits_total', selector))} / "
                    f"{_sum(by, _rate('modelplane_prefix_cache_queries_total', selector))}",
                    by,
                ),
            ),
            unit="percentunit",
        ),
        PanelSpec(
            "Errors and aborts per second",
            "Requests finished with finish_reason error or abort (modelplane_requests_total).",
            (
                _q(
                    _sum(
                        reasons,
                        _rate(
                            "modelplane_requests_total", f'{selector},finish_reason=~"error|abort"'
                        ),
                    ),
                    reasons,
                ),
            ),
            unit="reqps",
        ),
        PanelSpec(
            "Requests finished per second, by finish reason",
            "rate(modelplane_requests_total).",
            (_q(_sum(reasons, _rate("modelplane_requests_total", selector)), reasons),),
            unit="reqps",
        ),
    )


def fleet() -> DashboardSpec:
    fleet_by = (DEPLOYMENT,)
    return DashboardSpec(
        "modelplane-fleet",
        "modelplane / Fleet at a glance",
        "Load, latency against the SLOs, KV cache and errors per model and cluster.",
        (
            ("Load, per model and cluster", _load(PER_CLUSTER, BY_CLUSTER_MODEL)),
            ("Latency against the SLOs, per model (fleet roll-up)", _latency(FLEET, fleet_by)),
            (
                "KV cache and errors, per model and cluster",
                _cache_and_errors(PER_CLUSTER, BY_CLUSTER_MODEL),
            ),
        ),
        variables=("datasource", "ttft_slo"),
    )


def _rollout() -> tuple[PanelSpec, ...]:
    """Which revision each cluster runs (model-health on the control plane, from the
    ModelReplicas' spec.revision): a rollout is seen reaching the clusters wave by wave,
    and a rollback as the new revision's series ending."""
    revision = model_health.REVISION_INFO
    selector = 'deployment="$deployment"'
    per_cluster = ("cluster", "revision")
    return (
        PanelSpec(
            "Revision per cluster",
            f"{revision}: one series per cluster and the revision its ModelReplicas are"
            " composed with; during a rollout, the last good and the new one side by side.",
            (_q(f"max by (cluster, revision) ({revision}{{{selector}}})", per_cluster),),
        ),
        PanelSpec(
            "Clusters on each revision",
            f"count by (revision) ({revision}): how far the rollout has reached.",
            (_q(f"count by (revision) ({revision}{{{selector}}})", ("revision",)),),
        ),
    )


def model() -> DashboardSpec:
    selector = f"{PER_CLUSTER},{MODEL}"
    by = (CLUSTER,)
    return DashboardSpec(
        "modelplane-model",
        "modelplane / One model across clusters",
        "One ModelDeployment ($deployment), cluster by cluster.",
        (
            ("Load", _load(selector, by)),
            ("Latency", _latency(selector, by)),
            ("KV cache and errors", _cache_and_errors(selector, by)),
            ("Rollout", _rollout()),
            (
                "Cost",
                (
                    PanelSpec(
                        "Cost per hour, by cluster and pool",
                        "The model's GPUs x each pool's pricePerGPUHour.",
                        (
                            _q(
                                _sum(
                                    (CLUSTER, cost_contract.LABEL_POOL),
                                    f'{COST}{{{PER_CLUSTER},{cost_contract.LABEL_DEPLOYMENT}="$deployment"}}',
                                ),
                                (CLUSTER, cost_contract.LABEL_POOL),
                            ),
                        ),
                        unit=PRICE_UNIT,
                    ),
                ),
            ),
        ),
        variables=("datasource", "deployment", "ttft_slo"),
    )


def cluster() -> DashboardSpec:
    selector = f"{PER_CLUSTER},{IN_CLUSTER}"
    by = (DEPLOYMENT,)
    replica_by = (cost_contract.LABEL_NAMESPACE, "model_replica")
    return DashboardSpec(
        "modelplane-cluster",
        "modelplane / One cluster",
        "Every model on one InferenceCluster ($cluster).",
        (
            ("Load", _load(selector, by)),
            ("Latency", _latency(selector, by)),
            ("KV cache and errors", _cache_and_errors(selector, by)),
            (
                "Replicas and cost",
                (
                    PanelSpec(
                        "Ready replicas, per ModelReplica",
                        "Ready pods serving each ModelReplica here, as the member's agent"
                        f" sees them ({hub_metrics.MODEL_READY_REPLICAS}).",
                        (
                            _q(
                                _sum(
                                    replica_by,
                                    f"{hub_metrics.MODEL_READY_REPLICAS}{{{IN_CLUSTER}}}",
                                ),
                                replica_by,
                            ),
                        ),
                    ),
                    PanelSpec(
                        "Consecutive start failures, per ModelReplica",
                        f"{hub_metrics.MODEL_START_FAILURES}.",
                        (
                            _q(
                                _sum(
                                    replica_by,
                                    f"{hub_metrics.MODEL_START_FAILURES}{{{IN_CLUSTER}}}",
                                ),
                                replica_by,
                            ),
                        ),
                    ),
                    PanelSpec(
                        "Cost per hour, by model and pool",
                        "The cluster's GPUs held by each model x the pool's price.",
                        (
                            _q(
                                _sum(
                                    (*COST_BY, cost_contract.LABEL_POOL),
                                    f"{COST}{{{PER_CLUSTER},{IN_CLUSTER}}}",
                                ),
                                (*COST_BY, cost_contract.LABEL_POOL),
                            ),
                        ),
                        unit=PRICE_UNIT,
                    ),
                ),
            ),
        ),
        variables=("datasource", "cluster", "ttft_slo"),
    )


def _activations() -> tuple[PanelSpec, ...]:
    """The activator's own metrics (functions/runtime/activator/metrics.py), as each
    member's activator exports them: per cluster, and per model (`namespace`,
    `deployment`: the ModelDeployment) where a route vouched for the model."""
    names = activator_metrics
    model = ("namespace", "deployment")
    per_model = (CLUSTER, *model)
    held = (*model, "held")
    return (
        PanelSpec(
            "Requests held for an activation",
            f"{names.REQUESTS_HELD}: requests each member's activator holds while their"
            " on-demand model gets a replica (0 for every model a route leads to it).",
            (_q(_sum(per_model, names.REQUESTS_HELD), per_model),),
        ),
        PanelSpec(
            "Activations per second, by result",
            f"{names.ACTIVATIONS_TOTAL}: placement attempts the activator asked for; Ready,"
            " or the reason it was refused (Unplaceable, Parked, a timeout).",
            (
                _q(
                    _sum((*per_model, "result"), _rate(names.ACTIVATIONS_TOTAL, "")),
                    (*per_model, "result"),
                ),
            ),
        ),
        PanelSpec(
            "Time to first byte through the activator, p95",
            f"{names.TIME_TO_FIRST_BYTE}: held=true waited for an activation (node and"
            " model load), held=false found a ready replica.",
            (
                _q(
                    _quantile(0.95, names.TIME_TO_FIRST_BYTE, "", held),
                    held,
                    "{{namespace}}/{{deployment}} held={{held}}",
                ),
            ),
            unit="s",
        ),
        PanelSpec(
            "Requests through the activator per second, by outcome",
            f"{names.REQUESTS_TOTAL}: Proxied, or the activator's answer (NotRouted: no"
            " route vouches for the model; limits, timeouts, ClientClosed).",
            (
                _q(
                    _sum((CLUSTER, "outcome"), _rate(names.REQUESTS_TOTAL, "")),
                    (CLUSTER, "outcome"),
                ),
            ),
        ),
    )


def runtime() -> DashboardSpec:
    policy = ("policy",)
    # model-health's labels (model_health.samples): the ModelDeployment.
    health_by = ("namespace", "deployment")
    cert_by = (CLUSTER, "component", "subject")
    return DashboardSpec(
        "modelplane-runtime",
        "modelplane / Runtime",
        "The hub, the floors it asks of members, its decisions, model health, on-demand"
        " models' activations and the runtime's certificates.",
        (
            (
                "Hub",
                (
                    PanelSpec(
                        "Hubs in the fleet",
                        "sum(plumb_hub_leading): 1 when healthy, 0 or 2 is an incident.",
                        (_q(f"sum({runtime_metrics.HUB_LEADING})", (), "hubs"),),
                        kind="stat",
                        width=6,
                    ),
                    PanelSpec(
                        "Hub, by cluster",
                        "Which member's agent leads (1).",
                        (_q(_sum((CLUSTER,), runtime_metrics.HUB_LEADING), (CLUSTER,)),),
                        width=6,
                    ),
                    PanelSpec(
                        "Fleet members each agent counts",
                        f"{runtime_metrics.FLEET_MEMBERS}.",
                        (_q(_sum((CLUSTER,), runtime_metrics.FLEET_MEMBERS), (CLUSTER,)),),
                    ),
                    PanelSpec(
                        "Escalated policies and members out of sync",
                        f"{hub_metrics.FLEET_ESCALATED} and {hub_metrics.FLEET_MEMBERS_OUT_OF_SYNC}"
                        " (hub only).",
                        (
                            _q(
                                _sum(policy, hub_metrics.FLEET_ESCALATED),
                                policy,
                                "escalated {{policy}}",
                            ),
                            _q(
                                _sum(policy, hub_metrics.FLEET_MEMBERS_OUT_OF_SYNC),
                                policy,
                                "out of sync {{policy}}",
                            ),
                        ),
                    ),
                ),
            ),
            (
                "Floors and decisions",
                (
                    PanelSpec(
                        "Replicas each member needs beyond what it runs",
                        f"{hub_metrics.MEMBER_NEEDED_REPLICAS}: what the hub raises floors for.",
                        (
                            _q(
                                _sum((CLUSTER, *policy), hub_metrics.MEMBER_NEEDED_REPLICAS),
                                (CLUSTER, *policy),
                            ),
                        ),
                    ),
                    PanelSpec(
                        "Replicas that still fit on existing nodes",
                        f"{hub_metrics.MEMBER_STATIC_ROOM_REPLICAS}.",
                        (
                            _q(
                                _sum((CLUSTER, *policy), hub_metrics.MEMBER_STATIC_ROOM_REPLICAS),
                                (CLUSTER, *policy),
                            ),
                        ),
                    ),
                    PanelSpec(
                        "Hub decisions per second, by action",
                        "Decisions that changed something (floors, routes, traffic weights),"
                        " applied or not.",
                        (
                            _q(
                                _sum(
                                    ("action", "applied"),
                                    f"rate({hub_metrics.HUB_DECISIONS_TOTAL}[{RATE}])",
                                ),
                                ("action", "applied"),
                            ),
                        ),
                    ),
                    PanelSpec(
                        "Hub step errors per second",
                        f"{hub_metrics.HUB_STEP_ERRORS_TOTAL}.",
                        (
                            _q(
                                _sum(policy, f"rate({hub_metrics.HUB_STEP_ERRORS_TOTAL}[{RATE}])"),
                                policy,
                            ),
                        ),
                    ),
                    PanelSpec(
                        "From a raised floor to ready replicas, p95",
                        f"{hub_metrics.DECISION_TIME_TO_READY}: node launch plus model load.",
                        (
                            _q(
                                f"histogram_quantile(0.95, sum by (le, policy) (rate("
                                f"{hub_metrics.DECISION_TIME_TO_READY}_bucket[{RATE}])))",
                                policy,
                            ),
                        ),
                        unit="s",
                    ),
                ),
            ),
            (
                "Models: parked, unplaceable, on demand",
                (
                    PanelSpec(
                        "Desired and ready replicas, per model",
                        "From `modelplane-runtime model-health` on the control plane;"
                        " desired 0 is an on-demand model with nothing to serve.",
                        (
                            _q(
                                _sum(health_by, model_health.DESIRED_REPLICAS),
                                health_by,
                                "desired {{namespace}}/{{deployment}}",
                            ),
                            _q(
                                _sum(health_by, model_health.READY_REPLICAS),
                                health_by,
                                "ready {{namespace}}/{{deployment}}",
                            ),
                        ),
                    ),
                    PanelSpec(
                        "Parked models",
                        f"{model_health.PARKED}: 1 while parked after repeated start failures.",
                        (_q(_sum(health_by, model_health.PARKED), health_by),),
                    ),
                    PanelSpec(
                        "Unplaceable replicas",
                        f"{model_health.UNPLACEABLE_REPLICAS}: replicas that fit on no cluster.",
                        (_q(_sum(health_by, model_health.UNPLACEABLE_REPLICAS), health_by),),
                    ),
                    PanelSpec(
                        "On-demand models at zero",
                        "Models whose desired replicas are 0 (on demand, idle): the activator"
                        " holds their first request while a replica starts.",
                        (
                            _q(
                                f"count by ({', '.join(health_by)}) "
                                f"({model_health.DESIRED_REPLICAS} == 0)",
                                health_by,
                            ),
                        ),
                    ),
                ),
            ),
            ("On-demand activations", _activations()),
            (
                "Certificates",
                (
                    PanelSpec(
                        "Days until each runtime certificate expires",
                        f"({cert_expiry.CERTIFICATE_EXPIRY} - time()) / 86400.",
                        (
                            _q(
                                f"min by ({', '.join(cert_by)}) "
                                f"({cert_expiry.CERTIFICATE_EXPIRY} - time()) / 86400",
                                cert_by,
                            ),
                        ),
                        unit="d",
                        width=24,
                    ),
                ),
            ),
        ),
    )


def cost() -> DashboardSpec:
    return DashboardSpec(
        "modelplane-cost",
        "modelplane / Cost",
        "What each model's GPUs cost, per cluster and across the fleet.",
        (
            (
                "Cost",
                (
                    PanelSpec(
                        "Fleet cost per hour",
                        "Every model's GPUs, every cluster.",
                        (_q(f"sum({COST}{{{FLEET}}})", (), "fleet"),),
                        unit=PRICE_UNIT,
                        kind="stat",
                        width=6,
                    ),
                    PanelSpec(
                        "Cost per hour, per model",
                        "Summed over clusters (the fleet roll-up).",
                        (_q(_sum(COST_BY, f"{COST}{{{FLEET}}}"), COST_BY),),
                        unit=PRICE_UNIT,
                        width=18,
                    ),
                    PanelSpec(
                        "Cost per hour, per cluster and pool",
                        "Per cluster (pools are named per cluster).",
                        (
                            _q(
                                _sum(
                                    (CLUSTER, cost_contract.LABEL_POOL),
                                    f"{COST}{{{PER_CLUSTER}}}",
                                ),
                                (CLUSTER, cost_contract.LABEL_POOL),
                            ),
                        ),
                        unit=PRICE_UNIT,
                    ),
                    PanelSpec(
                        "Cost per model and cluster",
                        "Per cluster, per model.",
                        (
                            _q(
                                _sum((CLUSTER, *COST_BY), f"{COST}{{{PER_CLUSTER}}}"),
                                (CLUSTER, *COST_BY),
                            ),
                        ),
                        unit=PRICE_UNIT,
                    ),
                    PanelSpec(
                        "Cost per million generated tokens, per model",
                        "Cost per hour / generated tokens per hour (1 h window) x 1e6.",
                        (_q(_cost_per_million_tokens(), COST_BY),),
                        unit=PRICE_UNIT,
                        width=24,
                    ),
                ),
            ),
        ),
    )


DASHBOARDS: Final = (fleet, model, cluster, runtime, cost)


# --- Metric names a panel reads (for the tests) ------------------------------------------

_NAME = re.compile(r"\b((?:modelplane|plumb)_[a-z_]+)\b")
_SUFFIXES: Final = ("_bucket", "_count", "_sum")


def metrics_read(expr: str) -> set[str]:
    """The metric names in a query, histogram series suffixes taken off; label names
    that look like metric names (modelplane_cluster, ...) are left out."""
    labels = {CLUSTER, DEPLOYMENT, SCOPE, GATEWAY}
    names = set()
    for found in _NAME.findall(expr):
        if found in labels:
            continue
        name = found
        for suffix in _SUFFIXES:
            if name.endswith(suffix) and not name.endswith("_total"):
                name = name.removesuffix(suffix)
        names.add(name)
    return names


def substitute(expr: str, values: dict[str, str]) -> str:
    """A query with the dashboards' variables replaced (where no Grafana runs)."""
    for name in sorted(values, key=len, reverse=True):
        expr = expr.replace(f"${name}", values[name])
    return expr


# --- Grafana JSON ------------------------------------------------------------------------


def _variable(name: str):
    from grafana_foundation_sdk.builders import dashboard as d  # noqa: PLC0415
    from grafana_foundation_sdk.models.dashboard import (  # noqa: PLC0415
        DataSourceRef,
        VariableOption,
        VariableRefresh,
    )

    datasource = DataSourceRef(type_val="prometheus", uid="${datasource}")
    if name == "datasource":
        return d.DatasourceVariable("datasource").label("Prometheus").type("prometheus")
    if name == "ttft_slo":
        default = "0.5"
        return (
            d.CustomVariable(name)
            .label("TTFT SLO (s)")
            .values(default)
            .current(VariableOption(text=default, value=default, selected=True))
            .allow_custom_value(True)
        )
    label = DEPLOYMENT if name == "deployment" else CLUSTER
    return (
        d.QueryVariable(name)
        .label("Model" if name == "deployment" else "Cluster")
        .datasource(datasource)
        .query(f"label_values(modelplane_requests_running, {label})")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
    )


def _panel(spec: PanelSpec):
    from grafana_foundation_sdk.builders import prometheus, stat, timeseries  # noqa: PLC0415
    from grafana_foundation_sdk.models.dashboard import DataSourceRef  # noqa: PLC0415

    datasource = DataSourceRef(type_val="prometheus", uid="${datasource}")
    builder = stat.Panel() if spec.kind == "stat" else timeseries.Panel()
    builder = (
        builder.title(spec.title)
        .description(spec.description)
        .datasource(datasource)
        .unit(spec.unit)
        .height(8)
        .span(spec.width)
    )
    for index, query in enumerate(spec.queries):
        builder = builder.with_target(
            prometheus.Dataquery()
            .expr(query.expr)
            .legend_format(query.legend)
            .ref_id(chr(ord("A") + index))
            .datasource(datasource)
        )
    return builder


def build(spec: DashboardSpec) -> dict:
    from grafana_foundation_sdk.builders import dashboard as d  # noqa: PLC0415
    from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: PLC0415

    builder = (
        d.Dashboard(spec.title)
        .uid(spec.uid)
        .description(spec.description)
        .tags(list(spec.tags))
        .refresh("1m")
        .time("now-6h", "now")
        .timezone("browser")
    )
    for name in spec.variables:
        builder = builder.with_variable(_variable(name))
    for title, panels in spec.rows:
        builder = builder.with_row(d.Row(title))
        for panel in panels:
            builder = builder.with_panel(_panel(panel))
    return json.loads(json.dumps(builder.build(), cls=JSONEncoder))


def render_all() -> dict[str, str]:
    """File name -> JSON text, for every dashboard."""
    rendered = {}
    for make in DASHBOARDS:
        spec = make()
        rendered[f"{spec.uid}.json"] = json.dumps(build(spec), indent=2, sort_keys=True) + "\n"
    return rendered


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    files = render_all()
    for stale in OUT.glob("*.json"):
        if stale.name not in files:
            stale.unlink()
    for name, text in files.items():
        (OUT / name).write_text(text)
    print(f"wrote {len(files)} dashboards to {OUT.relative_to(REPO)}")
