"""Signals from the vocabulary: what the agent computes from the collector's merged series.

The cluster collector serves its normalized, merged series (one series per deployment,
engine and model, never per pod) as Prometheus text on an in-cluster page only the
agent reads; nothing stores them. The agent reads that page every few seconds, keeps
the points of a window (`SignalHistory`), and computes each policy's signals from
them here, scoped to the policy's deployment by the labels the collector puts on every
series (`k8s_namespace_name`, `modelplane_deployment`). A policy names a vocabulary
metric and a function, never an engine's metric or a query, so one policy serves vLLM,
SGLang and TensorRT-LLM alike: their series all arrive under the same names.

Functions, by the metric types they accept:
- `rate` (counter; histogram: observations): per-second increase over the window,
  per series (a counter that went down restarted, and only its increase since counts),
  summed over the deployment's series;
- `gauge` (gauge): the newest value, summed (averaged for a vocabulary ratio such as
  the KV-cache usage) over the deployment's series;
- `perReadyReplica` (gauge, counter): `gauge` or `rate`, divided by the ready replicas
  (at least 1, so a deployment with none ready reads its whole load);
- `quantile` (histogram): the q-quantile of the observations in the window, linearly
  interpolated inside a bucket as Prometheus' histogram_quantile does;
- `fractionAbove` (histogram): the share of the window's observations above a
  threshold (an SLO ratio from buckets), interpolated the same way;
- `ratio` (counter): the rate of the series matching `where` over the rate of all.

A signal that cannot be computed says why (no series for the deployment, a stale
point, too few points, no observations) and has no value: it is never read as zero.
"""

from __future__ import annotations

import itertools
import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

from functions.common import contracts, vocabulary
from functions.common.exposition import prometheus_label
from functions.runtime.shared.policy import VocabularySignal, format_duration
from functions.runtime.shared.report import SignalResult

NAMESPACE_LABEL: Final = prometheus_label(contracts.RESOURCE_ATTR_NAMESPACE)
DEPLOYMENT_LABEL: Final = prometheus_label(contracts.RESOURCE_ATTR_DEPLOYMENT)
VOCABULARY_PREFIX: Final = "modelplane_"
# A point older than this many collector intervals is a source that stopped reporting
# (the collector also drops it from the page after SIGNALS_EXPIRY_INTERVALS).
STALE_INTERVALS: Final = 3

# sample name -> labels (sorted pairs, scope labels included) -> (value, point time)
SampleKey = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Scope:
    """The deployment a policy's signals are about: its namespace and name."""

    namespace: str
    deployment: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.deployment}"


@dataclass(frozen=True)
class Page:
    """One read of the collector's page: vocabulary samples by scope, and when."""

    read_at: float
    samples: Mapping[Scope, Mapping[SampleKey, tuple[float, float]]]


def parse_page(text: str, read_at: float) -> Page:
    """The page's vocabulary samples, grouped by deployment; other families are skipped.

    A sample without a timestamp is taken as read now (the collector sends them)."""
    by_scope: dict[Scope, dict[SampleKey, tuple[float, float]]] = {}
    relevant = "\n".join(
        line
        for line in text.splitlines()
        if line.startswith(VOCABULARY_PREFIX) or line.startswith("# TYPE " + VOCABULARY_PREFIX)
    )
    for family in text_string_to_metric_families(relevant):
        for sample in family.samples:
            labels = sample.labels
            namespace, deployment = labels.get(NAMESPACE_LABEL), labels.get(DEPLOYMENT_LABEL)
            if not namespace or not deployment:
                continue
            key = (sample.name, tuple(sorted(labels.items())))
            when = float(sample.timestamp) if sample.timestamp is not None else read_at
            by_scope.setdefault(Scope(namespace, deployment), {})[key] = (
                float(sample.value),
                when,
            )
    return Page(read_at, by_scope)


@dataclass
class SignalHistory:
    """The pages of the longest window any policy asks for, oldest first."""

    keep_seconds: float
    pages: deque[Page] = field(default_factory=deque)
    last_error: str | None = None  # why the newest read failed, if it did

    def add(self, page: Page) -> None:
        self.pages.append(page)
        self.last_error = None
        while self.pages and page.read_at - self.pages[0].read_at > self.keep_seconds:
            self.pages.popleft()

    def failed(self, why: str) -> None:
        self.last_error = why


# --- evaluation ---------------------------------------------------------------------------


def _series_points(
    pages: Iterable[Page], scope: Scope, names: set[str], since: float
) -> dict[SampleKey, list[tuple[float, float]]]:
    """Each series' distinct points (time, value) in the window, oldest first."""
    series: dict[SampleKey, dict[float, float]] = {}
    for page in pages:
        for key, (value, when) in (page.samples.get(scope) or {}).items():
            if key[0] in names and when >= since:
                series.setdefault(key, {})[when] = value
    return {k: sorted(points.items()) for k, points in series.items()}


def _matches(labels: tuple[tuple[str, str], ...], where: Mapping[str, tuple[str, ...]]) -> bool:
    have = dict(labels)
    return all(have.get(label) in values for label, values in where.items())


def _increase(points: list[tuple[float, float]]) -> float:
    """A counter's increase over its points. Only a counter that ends below where it
    started is read as restarted (summing each rise, a fall counting from 0): a merged
    point can briefly miss a pod when its scrape lands on the collector's tick, and
    reading that dip as a restart would count the whole counter again."""
    first, last = points[0][1], points[-1][1]
    if last >= first:
        return last - first
    total = 0.0
    for (_, before), (_, after) in itertools.pairwise(points):
        total += after - before if after >= before else after
    return total


class SignalError(Exception):
    pass


def _rate(series: dict[SampleKey, list[tuple[float, float]]], label: str) -> float:
    """Summed per-second increase; needs two points of some series."""
    spans = [pts for pts in series.values() if len(pts) >= 2]
    if not spans:
        raise SignalError(f"{label}: needs 2 points in the window, has at most 1")
    return sum(_increase(p) / (p[-1][0] - p[0][0]) for p in spans)


def _bucket_increases(
    series: dict[SampleKey, list[tuple[float, float]]],
) -> list[tuple[float, float]]:
    """(upper bound, observations at or below it in the window), merged across series.

    Engines bucket differently (vLLM's TTFT bounds are not SGLang's), so each series'
    cumulative count is read at every bound any series has (interpolated inside its own
    buckets) before they are added: adding counts of unequal bounds would be wrong.
    """
    per_series: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    for (_, labels), points in series.items():
        bound = dict(labels).get("le")
        if bound is None or len(points) < 2:
            continue
        upper = math.inf if bound == "+Inf" else float(bound)
        rest = tuple(p for p in labels if p[0] != "le")
        per_series.setdefault(rest, {})[upper] = _increase(points)
    bounds = sorted({b for buckets in per_series.values() for b in buckets})
    merged = []
    for bound in bounds:
        total = 0.0
        for buckets in per_series.values():
            ordered = sorted(buckets.items())
            total += ordered[-1][1] if math.isinf(bound) else _cumulative_at(ordered, bound)
        merged.append((bound, total))
    return merged


def _cumulative_at(buckets: list[tuple[float, float]], value: float) -> float:
    """Observations at or below `value`, interpolated linearly within its bucket."""
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if value >= upper:
            lower, below = upper, count
            continue
        if math.isinf(upper):
            return below
        return below + (count - below) * (value - lower) / (upper - lower)
    return below


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower  # the highest finite bound, as histogram_quantile answers
            if count == below:
                return upper
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower


def evaluate(
    signal: VocabularySignal,
    history: SignalHistory,
    scope: Scope,
    *,
    ready_replicas: int,
    now: float,
    window: float,
    interval: float,
) -> SignalResult:
    """One signal's value for one deployment, or why there is none (never raises)."""
    try:
        value = _evaluate(
            signal,
            history,
            scope,
            ready_replicas=ready_replicas,
            now=now,
            window=window,
            interval=interval,
        )
        return SignalResult((value,))
    except SignalError as err:
        return SignalResult(error=str(err))


def _evaluate(
    signal: VocabularySignal,
    history: SignalHistory,
    scope: Scope,
    *,
    ready_replicas: int,
    now: float,
    window: float,
    interval: float,
) -> float:
    metric = vocabulary.VOCABULARY_BY_NAME[signal.metric]
    if history.last_error is not None:
        raise SignalError(f"the collector's page could not be read: {history.last_error}")
    if not history.pages:
        raise SignalError("the collector's page has not been read yet")
    newest = history.pages[-1]
    if metric.type is vocabulary.MetricType.HISTOGRAM:
        names = {f"{metric.name}_bucket"}
    else:
        names = {metric.name}
    current = [k for k in newest.samples.get(scope) or {} if k[0] in names]
    if not current:
        raise SignalError(
            f"no series of {metric.name} for deployment {scope} on the collector's page"
        )
    fresh_after = now - STALE_INTERVALS * interval
    newest_point = max(newest.samples[scope][k][1] for k in current)
    if newest_point < fresh_after:
        raise SignalError(
            f"{metric.name} for deployment {scope}: newest point is "
            f"{format_duration(round(now - newest_point))} old"
        )
    since = now - window
    series = {
        k: pts
        for k, pts in _series_points(history.pages, scope, names, since).items()
        if k in set(current) and _matches(k[1], signal.where)
    }
    if not series:
        raise SignalError(f"no series of {metric.name} for deployment {scope} matches `where`")
    label = f"{metric.name} for deployment {scope} over {format_duration(window)}"

    match signal.function:
        case "rate":
            if metric.type is vocabulary.MetricType.HISTOGRAM:
                # Observations per second: the +Inf bucket counts every one.
                series = {k: v for k, v in series.items() if dict(k[1]).get("le") == "+Inf"}
            return _rate(series, label)
        case "gauge" | "perReadyReplica":
            if metric.type is vocabulary.MetricType.COUNTER:
                value = _rate(series, label)
            else:
                newest_values = [pts[-1][1] for pts in series.values()]
                value = sum(newest_values)
                if metric.aggregation is vocabulary.Aggregation.MEAN:
                    value /= len(newest_values)
            if signal.function == "perReadyReplica":
                value /= max(1, ready_replicas)
            return value
        case "quantile" | "fractionAbove":
            buckets = _bucket_increases(series)
            if not buckets or buckets[-1][1] <= 0:
                raise SignalError(f"{label}: no observations in the window")
            if signal.function == "quantile":
                return _quantile(float(signal.quantile or 0.0), buckets)
            total = buckets[-1][1]
            return max(0.0, total - _cumulative_at(buckets, float(signal.threshold or 0))) / total
        case "ratio":
            everything = _series_points(history.pages, scope, names, since)
            everything = {k: v for k, v in everything.items() if k in set(current)}
            denominator = _rate(everything, label)
            if denominator <= 0:
                raise SignalError(f"{label}: no increase in the window")
            return _rate(series, label) / denominator
    raise SignalError(f"unknown function {signal.function!r}")
