"""The fleet roll-up: how the gateway adds one fleet series per vocabulary metric.

A fleet series is the sum over every source (cluster, scrape target) of that source's
*latest* value — for gauges the latest level, for counters and histograms the latest
cumulative total. Two facts shape the pipeline:

1. Sources push at their own times, so no single batch holds every source's latest
   value; summing a batch would count one cluster twice and another not at all. The
   gateway therefore keeps the latest value of every source in memory — the collector's
   `prometheus` exporter, bound to loopback, with an expiry so a vanished source drops
   out — and scrapes that snapshot back with a `prometheus` receiver. Each scrape is one
   consistent view of every source at one timestamp.
2. A sum of cumulative counters is not a counter: when one cluster's engine restarts, its
   total drops and a reader of the sum treats the whole fleet as reset. So before the
   snapshot each source's counters and histograms are made monotonic on their own:
   `cumulative_to_delta` (a stream per source *and start time*; the cluster collector
   merges its pods' increases, so an engine restart does not reset its series, and
   leaves the start time unset, so a cluster collector restart is the same stream
   continuing) followed by
   `delta_to_cumulative` (a stream per source, whatever the start time). After the
   snapshot the same pair runs across sources: per-source deltas, source attributes
   stripped, deltas summed (`aggregate_on_attributes`, histograms bucket by bucket),
   accumulated into the fleet series. Gauges are summed as they are.

Fleet counters are therefore "counted since this gateway replica first saw each source":
read them with rate()/increase(), never as absolute totals. The first point of every
source stream is only a baseline (`initial_value: drop`): a cluster that reconnects to the
other replica, or a replica that restarts, never adds a total counted before; the price is
what a cluster counts before its first push to a replica.

Each gateway replica rolls up the clusters connected to it and stamps its own name
(`modelplane.gateway`), so two replicas never overwrite one another's fleet series;
read-time queries sum over replicas (`sum without (modelplane_gateway)` or any `sum by`).

Beside the vocabulary, one runtime series is rolled up: the cost of each model's devices
per hour (`modelplane_model_cost_per_hour`, exported by each member's active agent from
its priced node pools; functions/common/cost.py). A gauge, summed over clusters like any
other, with the pool dropped, so the fleet series is one per model (namespace,
deployment); the per-cluster series arrive beside it with `modelplane_cluster` and `pool`.

Ratios (the vocabulary's `mean` metrics, the KV-cache usage) are never summed: two
clusters at 0.8 are a fleet at 0.8, not 1.6. The KV-cache ratio is read as a ratio of two
sums the cluster tier emits beside it (`modelplane_kv_cache_used`, the sum of its pods'
ratios, and `modelplane_kv_cache_pods`, how many pods reported one): both are summed
like any gauge, so the fleet ratio is sum(used) / sum(capacity), a cluster of ten pods
weighing ten times a cluster of one (fleet_ratio_query). Each replica's fleet series is
also the mean of
its sources' ratios, beside a `<name>_sources` gauge counting them, so the fleet ratio
over replicas is `sum(ratio * sources) / sum(sources)` (fleet_ratio_query): each source
(a ModelReplica, one deployment on one cluster, already averaged over its pods by the
cluster tier) weighs the same; kept for dashboards that read it, but it is not the
fleet ratio. Capacity is counted in pods, not tokens: exact for pods of equal KV
capacity, which one deployment's pods on one node pool are; the engines do not all
expose their KV capacity as a sample (vLLM only as a label of cache_config_info).

SLO targets: attainment is exact only when the target is a bucket boundary the engine
recorded. The gateway cannot invent a boundary the engine did not record (nor can any
re-bucketing after the fact: the counts between two recorded boundaries are gone). What it
does: the read-time query matches `le` exactly, so it returns no data rather than an
interpolated guess, and every fleet histogram whose buckets lack the target carries
`modelplane_slo_boundary="missing"`, so the engines and models to fix (a MetricMapping
cannot add buckets either: the engine's own histogram configuration must) are one query
away.
"""

from __future__ import annotations

from typing import Any, Final

from functions.common.contracts import (
    FLEET_SCOPE,
    RESOURCE_ATTR_SERVING,
    RESOURCE_ATTRIBUTE_CLUSTER,
    RESOURCE_ATTRIBUTE_GATEWAY,
    RESOURCE_ATTRIBUTE_SCOPE,
)
from functions.common.cost import FLEET_DROPPED_LABELS, MODEL_COST_PER_HOUR
from functions.common.exposition import ottl_float, plain_decimal, prometheus_label
from functions.common.telemetrydestination import SloTargets
from functions.common.vocabulary import (
    SLO_HISTOGRAMS,
    VOCABULARY,
    VOCABULARY_BY_NAME,
    Aggregation,
    MetricType,
)

# Where each replica keeps its snapshot of every source's latest value (loopback only).
SNAPSHOT_PORT: Final = 9465
SNAPSHOT_SCRAPE_INTERVAL: Final = "15s"
# A source that has not pushed for this long leaves the fleet gauges; a few push
# intervals, so one slow push does not make the fleet dip.
SNAPSHOT_EXPIRATION: Final = "2m"
# Per-source state in cumulative_to_delta / delta_to_cumulative is forgotten after this.
STATE_STALENESS: Final = "10m"
POD_NAME_ENV: Final = "POD_NAME"
FLEET_SCOPE_NAME: Final = "modelplane.fleet"

# Component ids in the gateway config.
RECEIVER_SNAPSHOT: Final = "prometheus/fleet"
EXPORTER_SNAPSHOT: Final = "prometheus/fleet"
FILTER_VOCABULARY: Final = "filter/vocabulary"
SOURCE_TO_DELTA: Final = "cumulative_to_delta/sources"
SOURCE_TO_CUMULATIVE: Final = "delta_to_cumulative/sources"
TRANSFORM_SNAPSHOT: Final = "transform/snapshot"
CUMULATIVE_TO_DELTA: Final = "cumulative_to_delta/fleet"
TRANSFORM_STRIP: Final = "transform/fleet_strip"
GROUP_FLEET: Final = "groupbyattrs/fleet"
TRANSFORM_AGGREGATE: Final = "transform/fleet_sum"
DELTA_TO_CUMULATIVE: Final = "delta_to_cumulative/fleet"


# What identifies a source rather than describing what it measures: dropped from the
# fleet series (as attributes, and as the labels the snapshot turned resource attributes
# into). The ModelReplica (`serving`) is one deployment on one cluster, so it is the
# cluster dimension too. Everything else (engine, deployment, namespace, model, ...) is
# kept.
_SOURCE_ATTRIBUTES: Final = (
    RESOURCE_ATTRIBUTE_CLUSTER,
    RESOURCE_ATTR_SERVING,
    "service.name",
    "service.namespace",
    "service.instance.id",
)
SOURCE_LABELS: Final = frozenset(
    {*_SOURCE_ATTRIBUTES, "job", "instance"} | {prometheus_label(a) for a in _SOURCE_ATTRIBUTES}
)

SLO_BOUNDARY_LABEL: Final = "modelplane_slo_boundary"
SLO_BOUNDARY_MISSING: Final = "missing"


# How many sources a ratio's fleet mean is over (a suffix on the ratio's own name).
SOURCES_SUFFIX: Final = "_sources"
RATIOS: Final = tuple(sorted(m.name for m in VOCABULARY if m.aggregation == Aggregation.MEAN))


def sources_metric(ratio: str) -> str:
    return ratio + SOURCES_SUFFIX


def _fleet_aggregation_statements() -> list[str]:
    """Sum everything but the ratios; average each ratio and count what it averaged."""
    ratios_and_counts = sorted({*RATIOS, *(sources_metric(r) for r in RATIOS)})
    summed = 'aggregate_on_attributes("sum")'
    if ratios_and_counts:
        summed += " where " + " and ".join(f'metric.name != "{n}"' for n in ratios_and_counts)
    statements = [summed]
    for ratio in RATIOS:
        statements += [
            f'aggregate_on_attributes("mean") where metric.name == "{ratio}"',
            f'aggregate_on_attributes("count") where metric.name == "{sources_metric(ratio)}"',
        ]
    return statements


# Rolled up beside the vocabulary: the runtime's cost gauge (functions/common/cost.py),
# summed per model over clusters and pools like any gauge.
RUNTIME_ROLLED_UP: Final = (MODEL_COST_PER_HOUR,)


def rolled_up_names() -> tuple[str, ...]:
    return tuple(sorted({*(m.name for m in VOCABULARY), *RUNTIME_ROLLED_UP}))


def vocabulary_regex() -> str:
    # Every name is a constant matching ^modelplane_[a-z][a-z0-9_]*$: nothing to escape.
    return "^(" + "|".join(rolled_up_names()) + ")$"


def cost_statements() -> list[str]:
    """The fleet cost is per model: a pool is named per cluster, so pools do not add up
    into anything; the per-cluster series keep it."""
    return [
        f'delete_key(datapoint.attributes, "{label}") where metric.name == "{MODEL_COST_PER_HOUR}"'
        for label in FLEET_DROPPED_LABELS
    ]


def slo_boundary_statements(slo: SloTargets) -> list[str]:
    """Mark fleet histograms whose buckets lack the SLO target as a boundary.

    The gateway cannot add a boundary an engine did not record; it can say so. The mark
    is a label on the fleet series (`modelplane_slo_boundary="missing"`), so an operator
    finds every engine and model whose attainment query has no data, and series with
    and without the boundary are never merged into one histogram.
    """
    statements = []
    for field, histogram in SLO_HISTOGRAMS.items():
        target = getattr(slo, field)
        if target is None:
            continue
        statements.append(
            f'set(datapoint.attributes["{SLO_BOUNDARY_LABEL}"], "{SLO_BOUNDARY_MISSING}") '
            f'where metric.name == "{histogram}" and '
            f"not ContainsValue(datapoint.explicit_bounds, {ottl_float(target)})"
        )
    return statements


def processors(slo: SloTargets | None = None) -> dict[str, Any]:
    """The roll-up's processors, by component id."""
    slo = slo or SloTargets()
    units = [
        f'set(metric.unit, "{m.unit}") where metric.name == "{m.name}"'
        for m in sorted(VOCABULARY, key=lambda m: m.name)
    ]
    source_labels = "^(" + "|".join(sorted(SOURCE_LABELS)) + ")$"
    return {
        FILTER_VOCABULARY: {
            "error_mode": "ignore",
            "metrics": {"metric": [f'not IsMatch(metric.name, "{vocabulary_regex()}")']},
        },
        SOURCE_TO_DELTA: {
            # drop: a source's first point is a baseline. `auto` would keep it whenever
            # the source started after this replica did — which double counts an engine
            # that started after both replicas and whose cluster then moves from one
            # replica to the other.
            "initial_value": "drop",
            "max_staleness": STATE_STALENESS,
        },
        SOURCE_TO_CUMULATIVE: {"max_stale": STATE_STALENESS},
        TRANSFORM_SNAPSHOT: {
            "error_mode": "ignore",
            "metric_statements": [
                {
                    # Units would otherwise become name suffixes in the snapshot; the
                    # fleet side sets them back from the vocabulary.
                    "context": "metric",
                    "statements": ['set(metric.unit, "")'],
                },
            ],
        },
        CUMULATIVE_TO_DELTA: {
            # keep: the snapshot's per-source totals are already this replica's own
            # (see SOURCE_TO_DELTA); the first sight of one is all of it.
            "initial_value": "keep",
            "max_staleness": STATE_STALENESS,
        },
        TRANSFORM_STRIP: {
            "error_mode": "ignore",
            "metric_statements": [
                {
                    "context": "resource",
                    "statements": [
                        'delete_matching_keys(resource.attributes, ".*")',
                        f'set(resource.attributes["{RESOURCE_ATTRIBUTE_SCOPE}"], "{FLEET_SCOPE}")',
                        f'set(resource.attributes["{RESOURCE_ATTRIBUTE_GATEWAY}"], '
                        f'"${{env:{POD_NAME_ENV}}}")',
                    ],
                },
                {
                    "context": "scope",
                    "statements": [
                        f'set(scope.name, "{FLEET_SCOPE_NAME}")',
                        'set(scope.version, "")',
                    ],
                },
                {
                    "context": "datapoint",
                    "statements": [
                        # The cluster dimension and the per-source identity, whether the
                        # cluster tier put them on the resource (they arrive here as
                        # labels) or on the data points.
                        f'delete_matching_keys(datapoint.attributes, "{source_labels}")',
                        # Every source's delta covers its own interval; one start per
                        # scrape lets the sum merge them and keeps delta_to_cumulative's
                        # order checks satisfied.
                        "set(datapoint.start_time_unix_nano, datapoint.time_unix_nano - 1) "
                        "where metric.aggregation_temporality == AGGREGATION_TEMPORALITY_DELTA",
                        *slo_boundary_statements(slo),
                        *cost_statements(),
                    ],
                },
                {
                    # A copy of each ratio, to be counted rather than averaged (its own
                    # statement group: a copy is then seen by the next processor only).
                    "context": "metric",
                    "statements": [
                        f'copy_metric(name="{sources_metric(r)}") where metric.name == "{r}"'
                        for r in RATIOS
                    ],
                },
            ],
        },
        GROUP_FLEET: {},  # no keys: merge the now-identical resources into one
        TRANSFORM_AGGREGATE: {
            "error_mode": "ignore",
            "metric_statements": [
                {
                    "context": "metric",
                    "statements": [
                        *_fleet_aggregation_statements(),
                        *units,
                        *(
                            f'set(metric.unit, "{{source}}") where metric.name == '
                            f'"{sources_metric(r)}"'
                            for r in RATIOS
                        ),
                    ],
                }
            ],
        },
        DELTA_TO_CUMULATIVE: {"max_stale": STATE_STALENESS},
    }


def snapshot_receiver(
    port: int = SNAPSHOT_PORT, interval: str = SNAPSHOT_SCRAPE_INTERVAL
) -> dict[str, Any]:
    return {
        "config": {
            "scrape_configs": [
                {
                    "job_name": "modelplane-fleet-snapshot",
                    "scrape_interval": interval,
                    # Keep each source's job and instance: they are what keeps sources apart.
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                }
            ]
        }
    }


def snapshot_exporter(port: int = SNAPSHOT_PORT) -> dict[str, Any]:
    return {
        "endpoint": f"127.0.0.1:{port}",
        "metric_expiration": SNAPSHOT_EXPIRATION,
        # OpenMetrics carries each source's start time through as _created, and the
        # fleet side's streams are keyed by it: with the plain text format the start
        # times churn and the live test's fleet counters came out several times too high.
        "enable_open_metrics": True,
        "translation_strategy": "UnderscoreEscapingWithoutSuffixes",
        "without_scope_info": True,
        # Every resource attribute becomes a label, so two sources that differ in any of
        # them (cluster, namespace, deployment, ...) stay two series in the snapshot.
        "resource_constant_labels": {"included": ["*"]},
    }


def snapshot_pipeline_processors() -> list[str]:
    return [FILTER_VOCABULARY, SOURCE_TO_DELTA, SOURCE_TO_CUMULATIVE, TRANSFORM_SNAPSHOT]


def fleet_pipeline_processors() -> list[str]:
    return [
        FILTER_VOCABULARY,
        CUMULATIVE_TO_DELTA,
        TRANSFORM_STRIP,
        GROUP_FLEET,
        TRANSFORM_AGGREGATE,
        DELTA_TO_CUMULATIVE,
    ]


# --- Read time ----------------------------------------------------------------------------


def le_label(bound: float) -> str:
    """A bucket boundary as the `le` label Prometheus stores (Go's shortest 'f' format)."""
    return plain_decimal(bound)


def fleet_selector(extra: str = "") -> str:
    scope = f'{prometheus_label(RESOURCE_ATTRIBUTE_SCOPE)}="{FLEET_SCOPE}"'
    return "{" + scope + (f",{extra}" if extra else "") + "}"


def attainment_query(histogram: str, target_seconds: float, window: str = "5m") -> str:
    """The fraction of observations at or under the target over the window, fleet-wide.

    Exact (a ratio of counts) because `le` matches the target exactly; where an engine
    did not record that boundary the numerator has no series and the query returns no
    data instead of an interpolated guess.
    """
    bucket = histogram + "_bucket" + fleet_selector('le="' + le_label(target_seconds) + '"')
    count = histogram + "_count" + fleet_selector()
    return f"sum(rate({bucket}[{window}])) / sum(rate({count}[{window}]))"


def quantile_query(histogram: str, quantile: float = 0.95, window: str = "5m") -> str:
    """The fleet-wide quantile (interpolated within a bucket, as histogram_quantile is)."""
    return (
        f"histogram_quantile({quantile}, sum by (le) "
        f"(rate({histogram}_bucket{fleet_selector()}[{window}])))"
    )


def fleet_value_query(metric: str) -> str:
    """A gauge or counter's fleet value, summed over gateway replicas."""
    gateway = prometheus_label(RESOURCE_ATTRIBUTE_GATEWAY)
    return f"sum without ({gateway}) ({metric}{fleet_selector()})"


def fleet_ratio_query(ratio: str) -> str:
    """A ratio's fleet value. With the ratio's two sums in the vocabulary (the KV cache):
    sum(used) / sum(capacity) over every pod of every cluster, a cluster weighing by its
    size. Otherwise each replica's mean weighted by the sources it averaged."""
    gateway = prometheus_label(RESOURCE_ATTRIBUTE_GATEWAY)
    weighted = VOCABULARY_BY_NAME[ratio].weighted_by if ratio in VOCABULARY_BY_NAME else None
    if weighted is not None:
        numerator, denominator = (f"{m}{fleet_selector()}" for m in weighted)
        return f"sum without ({gateway}) ({numerator}) / sum without ({gateway}) ({denominator})"
    mean = f"{ratio}{fleet_selector()}"
    sources = f"{sources_metric(ratio)}{fleet_selector()}"
    return f"sum without ({gateway}) ({mean} * {sources}) / sum without ({gateway}) ({sources})"


def slo_queries(slo: SloTargets) -> dict[str, str]:
    """The attainment query for each SLO target the destination sets."""
    queries = {}
    for field, histogram in SLO_HISTOGRAMS.items():
        target = getattr(slo, field)
        if target is not None:
            queries[histogram] = attainment_query(histogram, target)
    return queries


def vocabulary_types() -> dict[str, MetricType]:
    return {m.name: m.type for m in VOCABULARY}
