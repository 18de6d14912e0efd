"""The one metric vocabulary every engine's metrics are renamed into.

Base units only (seconds, ratio 0-1, counts); each series keeps engine and model as
attributes. MetricMapping validation, the collector's transform rules and aggregation,
and the fleet roll-up all read this table, so a new entry is added here and nowhere else:
how its points merge across pods (`labels`, `aggregation`) and whether the fleet reports
an SLO over it (`slo_target`) are properties of the entry, not lists kept elsewhere.
"""

import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

# Data-point labels a metric keeps when the collector merges its pods' points.
MODEL_LABEL: Final = "model"
FINISH_REASON_LABEL: Final = "finish_reason"


class Aggregation(StrEnum):
    """How the collector merges one metric's points across pods."""

    SUM = "sum"  # counts, sums and histograms of events add
    MEAN = "mean"  # a ratio is averaged


class MetricType(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"


@dataclass(frozen=True)
class VocabularyMetric:
    name: str
    type: MetricType
    unit: str
    description: str
    # The data-point labels kept through aggregation (every other label is merged away).
    labels: tuple[str, ...] = (MODEL_LABEL,)
    aggregation: Aggregation = Aggregation.SUM
    # The TelemetryDestination SLO (a field of its SloTargets) set over this histogram.
    slo_target: str | None = None
    # Derived by the cluster collector from another vocabulary metric, never an engine's
    # own: a MetricMapping may not target it.
    derived_from: str | None = None
    # A ratio whose fleet value is sum(numerator) / sum(denominator) over these two
    # vocabulary gauges, never a mean of ratios.
    weighted_by: tuple[str, str] | None = None


VOCABULARY: Final[tuple[VocabularyMetric, ...]] = (
    VocabularyMetric(
        "modelplane_requests_running", MetricType.GAUGE, "{request}", "Requests being decoded now."
    ),
    VocabularyMetric(
        "modelplane_requests_waiting",
        MetricType.GAUGE,
        "{request}",
        "Requests queued, not yet scheduled.",
    ),
    VocabularyMetric(
        "modelplane_kv_cache_usage",
        MetricType.GAUGE,
        "1",
        "KV-cache occupancy, ratio 0-1.",
        aggregation=Aggregation.MEAN,
        weighted_by=("modelplane_kv_cache_used", "modelplane_kv_cache_pods"),
    ),
    # The KV-cache ratio as the two sums a fleet ratio is made of, in units of one pod's
    # KV cache: `used` is the sum of the pods' ratios, `pods` how many pods reported one.
    # Summed over pods and clusters, used / pods is sum(used) / sum(capacity) for pods of
    # equal capacity (one deployment's pods on one node pool), so a cluster of ten pods
    # weighs ten times a cluster of one, and the ratio stays within 0-1.
    VocabularyMetric(
        "modelplane_kv_cache_used",
        MetricType.GAUGE,
        "{pod}",
        "KV cache in use, in pods' worth: the sum of the pods' KV-cache ratios.",
        derived_from="modelplane_kv_cache_usage",
    ),
    VocabularyMetric(
        "modelplane_kv_cache_pods",
        MetricType.GAUGE,
        "{pod}",
        "Pods reporting KV-cache usage: the capacity modelplane_kv_cache_used is out of.",
        derived_from="modelplane_kv_cache_usage",
    ),
    VocabularyMetric(
        "modelplane_time_to_first_token",
        MetricType.HISTOGRAM,
        "s",
        "Seconds from arrival to first token.",
        slo_target="time_to_first_token",
    ),
    VocabularyMetric(
        "modelplane_time_per_output_token",
        MetricType.HISTOGRAM,
        "s",
        "Seconds per output token after the first.",
        slo_target="time_per_output_token",
    ),
    VocabularyMetric(
        "modelplane_inter_token_latency",
        MetricType.HISTOGRAM,
        "s",
        "Seconds between consecutive tokens.",
    ),
    VocabularyMetric(
        "modelplane_request_duration", MetricType.HISTOGRAM, "s", "Seconds end to end."
    ),
    VocabularyMetric(
        "modelplane_request_queue_time",
        MetricType.HISTOGRAM,
        "s",
        "Seconds waiting before scheduling.",
    ),
    VocabularyMetric(
        "modelplane_prompt_tokens_total", MetricType.COUNTER, "{token}", "Prompt tokens processed."
    ),
    VocabularyMetric(
        "modelplane_generation_tokens_total", MetricType.COUNTER, "{token}", "Tokens generated."
    ),
    VocabularyMetric(
        "modelplane_requests_total",
        MetricType.COUNTER,
        "{request}",
        "Requests finished, by finish reason.",
        labels=(MODEL_LABEL, FINISH_REASON_LABEL),
    ),
    VocabularyMetric(
        "modelplane_prefix_cache_hits_total", MetricType.COUNTER, "{token}", "Prefix-cache hits."
    ),
    VocabularyMetric(
        "modelplane_prefix_cache_queries_total",
        MetricType.COUNTER,
        "{token}",
        "Prefix-cache lookups.",
    ),
)

VOCABULARY_BY_NAME: Final = {m.name: m for m in VOCABULARY}

# The SLO histograms, by the destination field that sets each one's target.
SLO_HISTOGRAMS: Final = {m.slo_target: m.name for m in VOCABULARY if m.slo_target}

# The patterns the XRDs enforce too (apis/metricmappings/definition.yaml): a name that
# matches them cannot carry a quote, a brace or whitespace into a generated OTTL or
# PromQL expression. Keep the two in step; tests/unit/test_contracts.py checks they are.
TARGET_NAME_PATTERN: Final = r"^modelplane_[a-z][a-z0-9_]*$"
# The prefix every vocabulary name (and every mapping target) starts with.
VOCABULARY_PREFIX: Final = "modelplane_"
SOURCE_NAME_PATTERN: Final = r"^[a-zA-Z_:][a-zA-Z0-9_:]*$"
LABEL_NAME_PATTERN: Final = r"^[a-zA-Z_][a-zA-Z0-9_]*$"

TARGET_NAME_RE: Final = re.compile(TARGET_NAME_PATTERN)
SOURCE_NAME_RE: Final = re.compile(SOURCE_NAME_PATTERN)
LABEL_NAME_RE: Final = re.compile(LABEL_NAME_PATTERN)
