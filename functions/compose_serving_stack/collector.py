"""The cluster-tier OpenTelemetry collector's config: what it scrapes, how every engine's
metrics become the vocabulary, what is aggregated away, and where it all goes.

The pipeline, in order, and why each step sits where it does:

1. `prometheus` discovers pods (Kubernetes service discovery) and keeps only those
   labelled `modelplane.ai/serving`, scraping their container port named `http`; plus
   the endpoint pickers, the gateway's Envoy proxies and the stack's substrate, and (with
   a destination) the member runtime's agent, scaler and activator, whose own metrics
   (hub, leadership, model health, certificate expiry, the cost of each model's GPUs,
   on-demand models' held requests and activations) reach
   the destination like any other series. The
   receiver itself sets `k8s.pod.name`, `k8s.pod.uid` and `k8s.namespace.name` on each
   target's resource from the discovery labels, and each job's relabel rules name the
   pod on every series as the target labels `pod` and `pod_uid`. Each mapping's label
   renames are its engine's jobs' `metric_relabel_configs` (the shared engines job gates
   them on the pod's engine type, carried as a scratch target label the last rule drops):
   the receiver relabels a series once, when it first appears, and reuses the result on
   every later scrape, where a statement would run on every point of every scrape.
2. `memory_limiter` first, so a scrape storm is refused before anything is buffered.
3. `k8s_attributes` finds each pod by uid and lifts its `modelplane.ai/engine`,
   `deployment` and `serving` labels onto resource attributes; `transform/components`
   gives each substrate component's series its job name (`kube-scheduler`,
   `cert-manager`, ...) as the engine type, so a MetricMapping can map them too;
   `resource/cluster` adds the cluster's name; `attributes/scrape-reports` takes the
   scratch label off the receiver's own series (`up`, `scrape_*`), which get target
   labels but skip the relabel rules (it matches them by metric name, so no other
   point is looked at).
4. `transform/normalize` renames each source metric to its vocabulary name. A plain
   rename is a table lookup: once per scrape the resource gets its engine's table
   (source -> target), release rules take the sources they refuse off it, and one
   statement renames whatever the table still names, so a metric costs one lookup
   however many renames its engine has. A rename that scales (histogram bounds and
   sums included, by `scale_metric`) or selects is a statement group gated on the
   engine resource attribute, run before the table's pass. `filter/select` drops the
   points a selecting mapping does not take (reading each selected label under the name
   the receiver renamed it to).
5. `transform/instance` sets each vocabulary metric's base unit, moves the scrape
   instance off the resource onto a data-point label
   (beside `pod` and `pod_uid`, step 1) and drops every other per-pod resource
   attribute, so series of one deployment differ only by labels the next steps can
   aggregate over.
6. `interval` at the scrape interval forwards, on a fixed tick, the latest point of
   every series it received since the last tick, so each pod counts once per tick.
   It keeps its points by resource and metric identity, so a tick has one resource for
   the now-identical resources of a deployment's pods and one metric for all their
   points (their units agree: step 5). (A `batch` closed by its timeout held two
   scrapes of a pod whenever a scrape landed on its edge, and its timer restarts after
   each send, so every pod's scrape drifted across that edge in turn; two scrapes
   summed as two pods.)
   A pod whose answer lands after the tick, or whose scrape fails, is missing from
   that tick. A sum of the pods' totals would then dip by that pod's total, and every
   reader of a cumulative counter (Prometheus' rate(), the fleet roll-up) reads a dip
   as a reset and counts the other pods' totals again. So counters and histograms are
   merged as increases: `cumulative_to_delta/pods` turns each pod's vocabulary counters
   and histograms (bucket by bucket) into the increase since that pod's previous point
   (its first point is all of its total; an engine restart that publishes a new start
   time is a new stream; a point below the last one is a reset and is dropped, never
   a dip; its stale markers after a failed scrape are dropped too), and step 7 sums
   the increases and accumulates them again. A missing pod's increase then arrives with
   its next point: the merged total never goes down. Gauges pass unchanged (a level,
   where a missing pod is missing from that tick's level only, not a reset).
   `transform/align` stamps the vocabulary's points of the tick with one time, read
   from the clock once per resource (aggregation only merges points of equal time), and
   each increase with one span ending then (it merges increases only of equal span).
   Both run on `interval`'s tick itself, before `batch/tick` (which drops the empty
   requests `interval` passes on at every scrape and sends each tick whole), so the
   stamp is the tick's own time, not one shifted by the batch timer, and every tick's
   is later than the last (delta_to_cumulative drops an increase that is not).
   The runtime's cost series is aligned too, and merged over the agent replicas (max):
   one series per model and pool, whichever replica exports it.
7. `metrics_transform/aggregate` merges each vocabulary metric's points over every label
   but the ones the vocabulary keeps (`model`, and `finish_reason` on requests): sums
   for counters, counts and histograms (bucket by bucket), the mean for the KV-cache
   ratio. It aggregates rather than deleting labels: deleting `pod` would leave two
   pods' points as colliding duplicates of one series. Metrics outside the vocabulary
   are not aggregated, because without a mapping nothing says whether a sum or a mean
   is right; they keep their per-pod labels.
   `delta_to_cumulative/merged` then adds each merged increase to the series' running
   total, so what leaves is cumulative again, one series per model, starting at the
   pods' sum when the collector starts. It carries no start time, so a collector restart
   continues it for every reader (the fleet roll-up tells series apart by start time).
   `transform/finish` then turns `:` into `_` in whatever no mapping renamed (all an
   unmapped engine gets): after the merge, a metric is one pass here, not one per pod
   and scrape.
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

With a destination, three more pipelines run beside the metrics one, all ending at the
same gateway exporter:

- `metrics/cluster-state` (with the node tier, `cluster_state`): the `k8s_cluster`
  receiver's workload and pod state (in place of kube-state-metrics), straight to the
  gateway: its series are already named by the OpenTelemetry Kubernetes conventions, so
  nothing here renames or merges them.
- `traces` and `logs` (when the destination carries them: OTLP does, Prometheus remote
  write does not): the `otlp` receiver takes what engines send (vLLM's
  `--otlp-traces-endpoint`; SGLang's `--enable-trace` where the user adds it),
  `k8s_attributes` finds the sending pod (by the `k8s.pod.uid` the engine's resource
  names, else by the connection's address) and lifts the same model labels as for
  metrics, and `resource/cluster` names the cluster.

The node tier (render_node_collector_config) adds engine container logs: `filelog` tails
the kubelet's pod log files, the `container` operator parses the runtime's line format
and the pod's namespace, name and uid from the file's path, `k8s_attributes` lifts the
model labels, and `filter/engine-logs` drops every line from a pod that is not an engine
of ours (no `modelplane.serving`).

Every name that comes from a MetricMapping was checked by mappings.py before it gets
here; `_ottl_string` checks again, so a caller that skipped parsing still cannot put a
quote into a statement.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from functions.common import contracts, vocabulary
from functions.common import cost as cost_contract
from functions.common.exposition import prometheus_label
from functions.common.metricmapping import MetricMapping, MetricRename
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
# Scratch resource attributes (maps) of each scrape: its engine's source names still to
# rename (source -> target), and those a release rule guards (_normalize_processor).
SOURCES_TABLE: Final = "modelplane.mapping.sources"
GUARDED_TABLE: Final = "modelplane.mapping.guarded"

# Component ids in the rendered config (a key rename is a config change, keep them).
RECEIVER: Final = "prometheus"
OTLP_RECEIVER: Final = "otlp"
CLUSTER_STATE_RECEIVER: Final = "k8s_cluster"
LOGS_RECEIVER: Final = "filelog"
EXPORTER: Final = "otlp_grpc/gateway"
SIGNALS_EXPORTER: Final = "prometheus/signals"
# The in-cluster page the runtime agent reads (port name `signals` on the collector).
SIGNALS_PORT: Final = contracts.COLLECTOR_SIGNALS_PORT
# A series not refreshed for this many scrape intervals leaves the signals page.
SIGNALS_EXPIRY_INTERVALS: Final = 3
AUTHENTICATOR: Final = "bearertokenauth"
HEALTH_CHECK: Final = "health_check"
COMPONENTS: Final = "transform/components"
INTERVAL: Final = "interval"
# After `interval`: drops the empty requests it passes on at every scrape and sends each
# tick's points whole (no size limit splits them); far shorter than any scrape interval,
# so it never holds two ticks.
TICK_BATCH: Final = "batch/tick"
TICK_BATCH_TIMEOUT: Final = "200ms"
# Around the merge (_to_delta_processor): each pod's counters and histograms become the
# increase since its previous point, the merge sums increases, and the merged increases
# accumulate again into a cumulative series, so a pod missing from a tick delays its
# increase to the next tick instead of dipping the merged total.
TO_DELTA: Final = "cumulative_to_delta/pods"
TO_CUMULATIVE: Final = "delta_to_cumulative/merged"
# How long each side remembers a series it no longer sees. The per-pod side must outlast
# the merged side: a pod it forgot that comes back is counted from zero again (its whole
# total, once more), while a merged series forgotten first only restarts, with a new start
# time, from the increases that follow (never counted twice).
POD_STATE_STALENESS: Final = "1h"
MERGED_STATE_STALENESS: Final = "5m"
# The engine type on the shared engines job's series while the receiver relabels them
# (label_relabels); dropped by the last rule.
SCRAPE_ENGINE_LABEL: Final = contracts.SCRAPE_ENGINE_LABEL
# The receiver's own series for each target (health, scrape duration, sample counts):
# they carry the target's labels but skip its metric_relabel_configs, so this processor
# takes the engine scratch label off them (by metric name, never looking at other points).
SCRAPE_REPORTS_PROCESSOR: Final = "attributes/scrape-reports"
SCRAPE_REPORT_SERIES: Final = (
    "up",
    "scrape_duration_seconds",
    "scrape_samples_scraped",
    "scrape_samples_post_metric_relabeling",
    "scrape_series_added",
    "scrape_timeout_seconds",
    "scrape_sample_limit",
    "scrape_body_size_bytes",
)
# After the merge: the colon rename, once per merged metric (_finish_processor).
FINISH: Final = "transform/finish"
COLON_STATEMENT: Final = 'replace_pattern(metric.name, ":", "_") where IsMatch(metric.name, ":")'
PROCESSORS: Final = (
    "memory_limiter",
    "k8s_attributes",
    COMPONENTS,
    "resource/cluster",
    SCRAPE_REPORTS_PROCESSOR,
    "transform/normalize",
    "filter/select",
    "transform/instance",
    INTERVAL,
    TO_DELTA,
    "transform/align",
    TICK_BATCH,
    "metrics_transform/aggregate",
    TO_CUMULATIVE,
    FINISH,
)

# Traces and logs: small batches, sent soon (the metrics batch waits a scrape interval).
OTLP_BATCH: Final = "batch/otlp"
OTLP_BATCH_TIMEOUT: Final = "5s"
OTLP_PROCESSORS: Final = ("memory_limiter", "k8s_attributes", "resource/cluster", OTLP_BATCH)
CLUSTER_STATE_PROCESSORS: Final = ("memory_limiter", "resource/cluster", "batch")
ENGINE_LOGS_FILTER: Final = "filter/engine-logs"
NODE_LOGS_PROCESSORS: Final = (
    "memory_limiter",
    "k8s_attributes",
    ENGINE_LOGS_FILTER,
    "resource/cluster",
    OTLP_BATCH,
)
# The kubelet's pod log files: <namespace>_<pod>_<uid>/<container>/<restart>.log.
POD_LOGS_DIR: Final = "/var/log/pods"
# Node conditions and allocatable resources k8s_cluster reports per node.
NODE_CONDITIONS: Final = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
ALLOCATABLE_TYPES: Final = ("cpu", "memory", "ephemeral-storage", "pods")

# Per-instance identity on every data point, two ways. The pod's name and uid are target
# labels: each scrape job relabels them from discovery, and the receiver puts a target's
# labels on every series it scrapes from it, once per series rather than as a pipeline
# statement on every data point of every scrape. The scrape instance the receiver keeps
# on the resource only (as service.instance.id), so transform/instance moves it.
# (k8s_attributes extracts no container id.)
POD_TARGET_LABELS: Final = (
    ("__meta_kubernetes_pod_name", "pod"),
    ("__meta_kubernetes_pod_uid", "pod_uid"),
)
MOVED_INSTANCE_LABELS: Final = (("service.instance.id", "instance"),)
# Every per-instance label, by where its value comes from.
INSTANCE_LABELS: Final = (*POD_TARGET_LABELS, *MOVED_INSTANCE_LABELS)

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
_HELP_SAFE = re.compile(r"^[A-Za-z0-9 _,-]+$")
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
    # The destination's exporter carries traces and logs (OTLP), not metrics only.
    traces_and_logs: bool = True
    # Workload and pod state (k8s_cluster): with the node tier, whose Kubernetes-state
    # receivers the test collector's build does not hold yet (hack/tools/otelcol).
    cluster_state: bool = False


# The name extract_sum_metric gives a histogram's sum: the source's name with the
# Prometheus exposition's own suffix for it.
HISTOGRAM_SUM_SUFFIX: Final = "_sum"


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


def _ottl_help(text: str) -> str:
    """HELP text a mapping matches (plain words, commas and dashes) as a regex literal."""
    if not _HELP_SAFE.fullmatch(text):
        raise UnsafeValue(f"help text {text!r} may not enter an OTTL statement")
    return f'"{text}"'


def _resource_attribute(name: str) -> str:
    """The OTTL path of a resource attribute with a checked name."""
    return f"resource.attributes[{_ottl_string(name)}]"


def _engine_condition(engine: str) -> str:
    return f"{_resource_attribute(contracts.RESOURCE_ATTR_ENGINE)} == {_ottl_string(engine)}"


def _any_name(names: Sequence[str]) -> str:
    return " or ".join(f"metric.name == {_ottl_string(n)}" for n in names)


def _present_marker(target: str, index: int) -> str:
    return _resource_attribute(f"{PRESENT_MARKER}.{target}.{index}")


def _is_table_rename(rename: MetricRename) -> bool:
    """A rename the sources table does alone: no scale to apply, no label to select by,
    no histogram's sum to take."""
    return not rename.select and rename.scale == 1.0 and not rename.histogram_sum


def _sources_lookup(table: str) -> str:
    return f"{_resource_attribute(table)}[metric.name]"


def _map_literal(entries: Mapping[str, str]) -> str:
    """An OTTL map literal of checked names, sorted so a set renders one config."""
    pairs = ", ".join(f"{_ottl_string(k)}: {entries[k]}" for k in sorted(entries))
    return "{" + pairs + "}"


@dataclass(frozen=True)
class MappingTables:
    """One MetricMapping's plain renames as tables and the statements of its release
    rules (mapping_tables)."""

    # Source name -> target literal, and the guarded sources -> true (map literals).
    sources: dict[str, str]
    guarded: dict[str, str]
    # Metric context, on a guarded metric: the marks and the HELP refusals.
    guards: list[str]
    # Resource context, after the guards: later names of a marked target off the table.
    supersede: list[str]


def mapping_tables(mapping: MetricMapping) -> MappingTables:
    """One MetricMapping's plain renames as tables, and the statements that take a
    source off the scrape's sources table when a release rule says it is not taken.

    Several `from` names for one target are one metric across engine releases, and some
    releases expose the old name beside the new one. Only the first name present in a
    scrape is renamed (the others pass through under their own names), so a release
    that exposes both is not counted twice. The guards mark, on the scrape's resource,
    which names (all but a target's last) are present; then, once per scrape, a name
    leaves the table when the name before it is marked, and passes its mark on, so one
    mark takes every later name off (statements linear in the names, not quadratic). A
    source whose HELP must contain some text leaves the table when it does not (the
    engine's own definition says which releases a source is taken from), unmarked. Each
    guard also tests its engine, since another engine's guarded table may hold the
    same name.
    """
    condition = _engine_condition(mapping.engine)
    table = _resource_attribute(SOURCES_TABLE)
    tables = MappingTables({}, {}, [], [])
    for rename in mapping.metrics:
        if not _is_table_rename(rename):
            continue
        help_is = (
            f"IsMatch(metric.description, {_ottl_help(rename.help_contains)})"
            if rename.help_contains is not None
            else None
        )
        for index, source in enumerate(rename.sources):
            tables.sources[source] = _ottl_string(rename.target)
            name_is = f"metric.name == {_ottl_string(source)}"
            if help_is is not None:
                tables.guarded[source] = "true"
                tables.guards.append(
                    f"delete_key({table}, {_ottl_string(source)}) "
                    f"where {name_is} and not {help_is} and {condition}"
                )
            if index < len(rename.sources) - 1:
                tables.guarded[source] = "true"
                taken = " and ".join(n for n in (name_is, help_is) if n is not None)
                tables.guards.append(
                    f"set({_present_marker(rename.target, index)}, true) "
                    f"where {taken} and {condition}"
                )
            if index > 0:
                earlier = f"{_present_marker(rename.target, index - 1)} != nil"
                if index < len(rename.sources) - 1:
                    tables.supersede.append(
                        f"set({_present_marker(rename.target, index)}, true) where {earlier}"
                    )
                tables.supersede.append(
                    f"delete_key({table}, {_ottl_string(source)}) where {earlier}"
                )
    return tables


def mapping_statements(mapping: MetricMapping) -> tuple[list[str], dict[str, Any] | None]:
    """One MetricMapping's renames that scale or select: their marks, each gated on its
    engine, and their group (None when the tables do every rename of the mapping).

    The same release rules as the tables' (mapping_tables), by marks: a first group
    (every mapping's marks) marks, on the scrape's resource (one per pod and scrape),
    which names are present; the group reads the marks; transform/instance drops them
    with every other per-scrape attribute.

    Scaling matches the engine's own name under the same condition as the rename, so a
    scale never applies to a metric that is not renamed, or to one another engine
    already named the same.
    """
    condition = _engine_condition(mapping.engine)
    markers: list[str] = []
    metric_statements: list[str] = []
    for rename in mapping.metrics:
        if _is_table_rename(rename):
            continue
        # A custom target keeps the engine's unit; a vocabulary one gets the base unit
        # (here only where a scale converts it; transform/instance sets it on every one).
        known = vocabulary.VOCABULARY_BY_NAME.get(rename.target)
        unit = known.unit if known else None
        target = _ottl_string(rename.target)
        help_is = (
            [f"IsMatch(metric.description, {_ottl_help(rename.help_contains)})"]
            if rename.help_contains is not None
            else []
        )
        for index, source in enumerate(rename.sources):
            name_is = " and ".join([f"metric.name == {_ottl_string(source)}", *help_is])
            if index < len(rename.sources) - 1:
                # Tested on every metric of every engine (one group for all mappings'
                # marks): the name first, so another engine's metric fails at once.
                markers.append(
                    f"set({_present_marker(rename.target, index)}, true) "
                    f"where {name_is} and {condition}"
                )
            earlier_absent = [f"{_present_marker(rename.target, j)} == nil" for j in range(index)]
            where = " and ".join([name_is, *earlier_absent])
            if rename.histogram_sum:
                # The histogram's running sum as a monotonic counter, appended under the
                # source's name with the exposition's `_sum` suffix (so the statements
                # below see it when the pass reaches it) and renamed to the target there;
                # the histogram itself passes on under its own name. filter/select then
                # keeps the selected points of the target, as for a copy.
                summed = _ottl_string(source + HISTOGRAM_SUM_SUFFIX)
                metric_statements.append(
                    f"extract_sum_metric(true, {_ottl_string(HISTOGRAM_SUM_SUFFIX)}) where {where}"
                )
                metric_statements.append(
                    f"set(metric.name, {target}) where metric.name == {summed}"
                )
                if rename.scale != 1.0:
                    unit_argument = f", {_ottl_unit(unit)}" if unit is not None else ""
                    metric_statements.append(
                        f"scale_metric({rename.scale_literal}{unit_argument}) "
                        f"where metric.name == {target}"
                    )
                continue
            if rename.select:
                # One source split by a label feeds several targets: each takes a copy
                # (appended, so the statements below see it under the target's name),
                # and filter/select keeps only the copy's points with the selected values.
                metric_statements.append(f"copy_metric(name={target}) where {where}")
                where = f"metric.name == {target}"
            if rename.scale != 1.0:
                unit_argument = f", {_ottl_unit(unit)}" if unit is not None else ""
                metric_statements.append(
                    f"scale_metric({rename.scale_literal}{unit_argument}) where {where}"
                )
            if not rename.select:
                metric_statements.append(f"set(metric.name, {target}) where {where}")
    group = {"conditions": [condition], "statements": metric_statements}
    return markers, group if metric_statements else None


def _label_pairs(mapping: MetricMapping) -> tuple[tuple[str, str], ...]:
    return tuple((_label_name(label.source), _label_name(label.target)) for label in mapping.labels)


def _label_name(name: str) -> str:
    if not vocabulary.LABEL_NAME_RE.match(name):
        raise UnsafeValue(f"{name!r} is not a Prometheus label name")
    return name


def label_relabels(
    labels: Sequence[tuple[str, str]], engines: Sequence[str] | None = None
) -> list[dict[str, Any]]:
    """Label renames (source, target) as a scrape job's metric_relabel_configs: each
    target set from its source, then the source removed (a label set to the empty value
    is removed). With `engines`, only on the series of those engine types (read from
    SCRAPE_ENGINE_LABEL, which the job's relabel_configs set), else on every series of
    the job. The receiver relabels a series once, when it first appears, and keeps the
    result for every later scrape, so a rename costs nothing per point."""
    engine_is = ""
    if engines is not None:
        engine_is = f"(?:{'|'.join(re.escape(e) for e in engines)});"
    rules: list[dict[str, Any]] = []
    for source, target in labels:
        read = [source] if engines is None else [SCRAPE_ENGINE_LABEL, source]
        rules.append(
            {
                "action": "replace",
                "source_labels": read,
                "regex": f"{engine_is}(.+)",
                "target_label": target,
                # `$$`: the collector expands `$` in its config; the receiver sees `${1}`.
                "replacement": "$${1}",
            }
        )
        rules.append(
            {
                "action": "replace",
                "source_labels": list(read),
                "regex": f"{engine_is}.+",
                "target_label": source,
                "replacement": "",
            }
        )
    return rules


def _engines_job_relabels(mappings: Sequence[MetricMapping]) -> list[dict[str, Any]]:
    """The shared engines job's label renames: mappings that rename labels alike (vLLM
    and TensorRT-LLM turn `model_name` into `model` and `finished_reason` into
    `finish_reason`) share rules gated on any of their engines; then the engine scratch
    label goes, so no series leaves the receiver with it (SCRAPE_REPORTS_PROCESSOR takes
    it off the receiver's own per-target series, which skip these rules)."""
    alike: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for mapping in sorted(mappings, key=lambda m: m.engine):
        if mapping.labels:
            alike.setdefault(_label_pairs(mapping), []).append(mapping.engine)
    if not alike:
        return []
    rules = [r for pairs, engines in alike.items() for r in label_relabels(pairs, engines)]
    return [*rules, {"action": "labeldrop", "regex": SCRAPE_ENGINE_LABEL}]


def _selected_label(mapping: MetricMapping, label: str) -> str:
    """Where a selected label is read: under its renamed name, since the renames run in
    the receiver (the parser refuses selects a rename would make ambiguous)."""
    for rename in mapping.labels:
        if rename.source == label:
            return rename.target
    return label


def select_conditions(mapping: MetricMapping) -> list[str]:
    """filter/select's drop condition for one mapping (none if it selects nothing): a
    selecting target's points whose labels lack a selected value. A mapping names the
    engine's own labels; the receiver has renamed them by then, so each is read under
    its renamed name (`_selected_label`).

    One condition per mapping, its engine tested first: the filter evaluates every
    condition on every data point of the cluster, so one engine test per point (rather
    than one per selecting target) is what a point of another engine costs."""
    targets = []
    for rename in mapping.metrics:
        if not rename.select:
            continue
        matches = " and ".join(
            f"datapoint.attributes[{_ottl_string(_selected_label(mapping, label))}]"
            f" == {_ottl_string(value)}"
            for label, value in rename.select
        )
        targets.append(f"(metric.name == {_ottl_string(rename.target)} and not ({matches}))")
    if not targets:
        return []
    return [f"{_engine_condition(mapping.engine)} and ({' or '.join(targets)})"]


def _select_processor(mappings: Sequence[MetricMapping]) -> dict[str, Any]:
    conditions = [c for m in sorted(mappings, key=lambda m: m.engine) for c in select_conditions(m)]
    # A condition that never holds keeps the processor's shape fixed with no selects.
    return {
        "error_mode": "ignore",
        "metrics": {"datapoint": conditions or ['metric.name == "" and false']},
    }


def component_types(stack: str) -> tuple[str, ...]:
    """The substrate components a collector on this stack scrapes, each a type a
    MetricMapping can name as its `engine` (its scrape job's name)."""
    return tuple(sorted(t.job for t in substrate_targets.SUBSTRATE_TARGETS[stack]))


def _components_processor(stack: str) -> dict[str, Any]:
    """A substrate component's series get its job name as their engine type, so a
    MetricMapping maps a scheduler's or a controller's metrics as it maps an engine's."""
    engine = f"resource.attributes[{_ottl_string(contracts.RESOURCE_ATTR_ENGINE)}]"
    job = f"resource.attributes[{_ottl_string('service.name')}]"
    return {
        "error_mode": "ignore",
        "metric_statements": [
            {
                "statements": [
                    f"set({engine}, {_ottl_string(name)}) where {job} == {_ottl_string(name)}"
                    for name in component_types(stack)
                ]
            }
        ],
    }


def _normalize_processor(mappings: Sequence[MetricMapping]) -> dict[str, Any]:
    """Each engine's plain renames by table lookup; those that scale or select by
    statement groups.

    Each group in the metric context is a pass over every metric of every pod's scrape,
    and a statement costs a test of the metric on every one of them, so the plain
    renames (every built-in one but Triton's) are tables instead. Once per scrape (a
    resource group, gated on the engine) the scrape's resource gets its engine's sources
    table (source -> target) and guarded table. The guards' pass, only on a metric the
    guarded table names, marks the names present and refuses by HELP; a resource group
    per engine takes the names the marks supersede off the table; the rename pass
    renames a metric the table still holds to its target: one lookup a metric whatever
    the number of renames (mapping_tables). The statement groups (marks first, then one
    group per engine in engine order) run before the rename pass, so a copy of a source
    a table also renames is taken under the source's name. Label renames are not here
    but in the receiver's relabel rules (label_relabels)."""
    tables: list[dict[str, Any]] = []
    markers: list[str] = []
    groups: list[dict[str, Any]] = []
    guards: list[str] = []
    supersede: list[dict[str, Any]] = []
    for mapping in sorted(mappings, key=lambda m: m.engine):
        engine_is = _engine_condition(mapping.engine)
        mapped = mapping_tables(mapping)
        if mapped.sources:
            statements = [
                f"set({_resource_attribute(SOURCES_TABLE)}, {_map_literal(mapped.sources)})"
            ]
            if mapped.guarded:
                statements.append(
                    f"set({_resource_attribute(GUARDED_TABLE)}, {_map_literal(mapped.guarded)})"
                )
            tables.append({"conditions": [engine_is], "statements": statements})
        guards.extend(mapped.guards)
        if mapped.supersede:
            supersede.append({"conditions": [engine_is], "statements": mapped.supersede})
        marks, group = mapping_statements(mapping)
        markers.extend(marks)
        if group is not None:
            groups.append(group)
    passes: list[dict[str, Any]] = [*tables]
    if markers:
        passes.append({"statements": markers})
    passes.extend(groups)
    if guards:
        passes.append(
            {
                "conditions": [f"{_sources_lookup(GUARDED_TABLE)} != nil"],
                "statements": guards,
            }
        )
    passes.extend(supersede)
    if tables:
        passes.append(
            {
                "conditions": [f"{_sources_lookup(SOURCES_TABLE)} != nil"],
                "statements": [f"set(metric.name, {_sources_lookup(SOURCES_TABLE)})"],
            }
        )
    return {"error_mode": "ignore", "metric_statements": passes}


def _scrape_reports_processor() -> dict[str, Any]:
    return {
        "include": {"match_type": "strict", "metric_names": list(SCRAPE_REPORT_SERIES)},
        "actions": [{"key": SCRAPE_ENGINE_LABEL, "action": "delete"}],
    }


def _finish_processor() -> dict[str, Any]:
    """Whatever no mapping renamed keeps its name, made a valid OTel/Prometheus name
    (all an unmapped engine gets). Done after the merge, where `interval` has put a
    deployment's pods on one resource, so a metric is one pass here rather than one per
    pod and scrape; nothing before it reads a colon (every step matches vocabulary
    names, which have none)."""
    return {"error_mode": "ignore", "metric_statements": [{"statements": [COLON_STATEMENT]}]}


def _vocabulary_group() -> dict[str, Any]:
    """The weighted ratios' copies, then every vocabulary metric's base unit, whichever
    engine and mapping it came from; one pass, gated on the vocabulary's prefix so that
    an engine's own series pass with one test. A copy is appended to the metrics this
    pass walks, so it gets its own unit further on. Before `interval`, which merges a
    metric of many pods only where they agree on the unit.

    A weighted ratio's two sums come from every pod's ratio before pods merge: the ratio
    itself as the numerator, 1 per pod as the denominator (set in the identity moves'
    pass over the data points, _instance_processor). Here, after filter/select, so only
    the ratio's selected points count; aggregation then sums both over pods, and the
    gateway over clusters, so the fleet ratio is sum(used) / sum(capacity)."""
    copies: list[str] = []
    for metric in vocabulary.VOCABULARY:
        for part in metric.weighted_by or ():
            copies.append(
                f"copy_metric(name={_ottl_string(part)}) "
                f"where metric.name == {_ottl_string(metric.name)}"
            )
    by_unit: dict[str, list[str]] = {}
    for metric in vocabulary.VOCABULARY:
        by_unit.setdefault(metric.unit, []).append(metric.name)
    units = [
        f"set(metric.unit, {_ottl_unit(unit)}) where {_any_name(names)}"
        for unit, names in by_unit.items()
    ]
    prefix = _ottl_string(vocabulary.VOCABULARY_PREFIX)
    return {"conditions": [f"HasPrefix(metric.name, {prefix})"], "statements": [*copies, *units]}


def _denominator_ones() -> list[str]:
    """Each weighted ratio's denominator is 1 per pod, on every point."""
    return [
        f"set(datapoint.value_double, 1.0) where metric.name == {_ottl_string(denominator)}"
        for metric in vocabulary.VOCABULARY
        if metric.weighted_by is not None
        for denominator in metric.weighted_by[1:]
    ]


def _instance_processor() -> dict[str, Any]:
    moves = []
    for attr, label in MOVED_INSTANCE_LABELS:
        source = f"resource.attributes[{_ottl_string(attr)}]"
        moves.append(
            f"set(datapoint.attributes[{_ottl_string(label)}], {source}) where {source} != nil"
        )
    kept = ", ".join(_ottl_string(a) for a in KEPT_RESOURCE_ATTRIBUTES)
    # The runtime's pods always run in the system namespace: on its series a namespace
    # label would only be mistaken for the model's (the cost series names it `namespace`).
    runtime_jobs = " or ".join(
        f"resource.attributes[{_ottl_string('service.name')}] == {_ottl_string(t.job)}"
        for t in substrate_targets.RUNTIME_TARGETS
    )
    namespace = _ottl_string(contracts.RESOURCE_ATTR_NAMESPACE)
    return {
        "error_mode": "ignore",
        "metric_statements": [
            _vocabulary_group(),
            # One pass over the data points: the denominators and the moves.
            {"statements": [*_denominator_ones(), *moves]},
            {
                "statements": [
                    f"delete_key(resource.attributes, {namespace}) where {runtime_jobs}",
                    f"keep_keys(resource.attributes, [{kept}])",
                ]
            },
        ],
    }


def _vocabulary_condition() -> str:
    """True for a vocabulary metric or the cost series the runtime exports. Evaluated on
    every data point of a batch: a point outside them (most of an engine's own series)
    fails on the shared prefix with one test, instead of a test per name."""
    names = [*(m.name for m in vocabulary.VOCABULARY), cost_contract.MODEL_COST_PER_HOUR]
    prefix = vocabulary.VOCABULARY_PREFIX
    if not all(n.startswith(prefix) for n in names):
        raise ValueError(f"every vocabulary name must start with {prefix!r}")
    return f"HasPrefix(metric.name, {_ottl_string(prefix)}) and ({_any_name(names)})"


def _summed_metrics() -> list[str]:
    """The vocabulary metrics whose points are increases (counters and histograms): the
    ones merged as increases rather than as totals (_to_delta_processor)."""
    return [
        m.name
        for m in vocabulary.VOCABULARY
        if m.type in (vocabulary.MetricType.COUNTER, vocabulary.MetricType.HISTOGRAM)
    ]


def _to_delta_processor() -> dict[str, Any]:
    """Each pod's vocabulary counters and histograms (bucket by bucket) as the increase
    since that pod's previous point. After `interval`, so a pod's point of each tick is
    compared with its point of the last tick it was in, however many it missed.

    `keep`: a pod's first point is all of its total, so the merged series starts at the
    pods' sum, as a plain sum of totals would. A stream is a pod's series *and start
    time*: an engine that publishes its start (`_created`, as vLLM and SGLang do) and
    restarts is a new stream, counted from zero; a point below the last one of the same
    stream is a reset and is dropped (its increase is lost, never a dip). Gauges (the
    KV-cache ratio, requests running) are levels: they pass unchanged, and a pod missing
    from a tick is missing from that tick's level only."""
    return {
        "include": {"match_type": "strict", "metrics": _summed_metrics()},
        "initial_value": "keep",
        "max_staleness": POD_STATE_STALENESS,
    }


# The tick's time, taken once per resource (one resource per deployment after `interval`)
# and set on each of its vocabulary points (_align_processor); removed after.
TICK_ATTRIBUTE: Final = "modelplane.tick"
# Set on every vocabulary point (_align_processor): the start of every increase, and so
# of every merged series. (A gauge's start means nothing; leaving gauges out would cost a
# condition on every point.)
UNSET_START_STATEMENT: Final = "set(datapoint.start_time_unix_nano, 0)"


def _align_processor() -> dict[str, Any]:
    """The tick's vocabulary points at one time, and the increases (the counters and
    histograms _to_delta_processor turned) with one start: aggregation merges points
    only of equal time, increases only of equal start and time.

    The time is read once per resource (the clock, to the nanosecond) and copied to each
    of its points, so a tick's points share it exactly and the next tick's are later. (A
    clock read per point, truncated to its second, split a tick whose processing crossed
    a second into two partial merges, and gave two ticks less than a second apart, a
    late one and the next on time, one time, which drops the later tick's increase as
    out of order.)

    The start is left unset (0, what the receiver gives a series whose engine publishes
    no `_created`), and delta_to_cumulative keeps its first increase's start for the
    merged series, so the merged series carries no start time: a collector restart
    continues it rather than starting a new series, as the fleet roll-up, which tells
    series apart by start time, expects (its first point after a restart is the pods'
    totals then, measured against the last one before)."""
    tick = f"resource.attributes[{_ottl_string(TICK_ATTRIBUTE)}]"
    return {
        "error_mode": "ignore",
        "metric_statements": [
            {"context": "resource", "statements": [f"set({tick}, UnixNano(Now()))"]},
            {
                "conditions": [_vocabulary_condition()],
                "statements": [
                    f"set(datapoint.time_unix_nano, {tick})",
                    UNSET_START_STATEMENT,
                ],
            },
            {
                "context": "resource",
                "statements": [f"delete_key(resource.attributes, {_ottl_string(TICK_ATTRIBUTE)})"],
            },
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
    # The cost series is one per model and pool whichever agent replica is active: merged
    # over the replicas' identity, a failover continues the series instead of starting a
    # second one that the gateway's snapshot would add to the first until it expires; the
    # maximum, not the sum, should both replicas briefly export the same facts.
    transforms.append(
        {
            "include": cost_contract.MODEL_COST_PER_HOUR,
            "match_type": "strict",
            "action": "update",
            "operations": [
                {
                    "action": "aggregate_labels",
                    "label_set": [
                        cost_contract.LABEL_NAMESPACE,
                        cost_contract.LABEL_DEPLOYMENT,
                        cost_contract.LABEL_POOL,
                    ],
                    "aggregation_type": "max",
                }
            ],
        }
    )
    return {"transforms": transforms}


def _k8s_attributes_processor(*, node_local: bool = False) -> dict[str, Any]:
    lifted = (
        (contracts.RESOURCE_ATTR_ENGINE, contracts.LABEL_ENGINE),
        (contracts.RESOURCE_ATTR_DEPLOYMENT, contracts.LABEL_DEPLOYMENT),
        (contracts.RESOURCE_ATTR_SERVING, contracts.LABEL_SERVING),
    )
    config: dict[str, Any] = {
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
            # An engine's OTLP push that names no pod: the sender's address is the pod's.
            {"sources": [{"from": "connection"}]},
        ],
        "extract": {
            "metadata": ["k8s.pod.name", "k8s.pod.uid", contracts.RESOURCE_ATTR_NAMESPACE],
            "labels": [{"tag_name": tag, "key": key, "from": "pod"} for tag, key in lifted],
        },
    }
    if node_local:
        # A DaemonSet pod watches the pods of its own node only.
        config["filter"] = {"node_from_env_var": "K8S_NODE_NAME"}
    return config


def _interval(seconds: int) -> str:
    return f"{seconds}s"


def _keep_label_present(label: str) -> dict[str, Any]:
    return {
        "action": "keep",
        "source_labels": [f"__meta_kubernetes_pod_labelpresent_{prometheus_label(label)}"],
        "regex": "true",
    }


def _running_pods_named() -> list[dict[str, Any]]:
    """A job's last rules: drop pods that are not running, then name the pod on every
    series scraped from it (POD_TARGET_LABELS; an empty value sets no label)."""
    return [
        {
            "action": "drop",
            "source_labels": ["__meta_kubernetes_pod_phase"],
            "regex": "Pending|Succeeded|Failed",
        },
        *(
            {"action": "replace", "source_labels": [source], "target_label": label}
            for source, label in POD_TARGET_LABELS
        ),
    ]


def _token_auth() -> dict[str, Any]:
    return {
        "authorization": {"type": "Bearer", "credentials_file": SERVICE_ACCOUNT_TOKEN_FILE},
    }


_ENGINE_LABEL_SOURCE: Final = [
    f"__meta_kubernetes_pod_label_{prometheus_label(contracts.LABEL_ENGINE)}"
]


def _own_endpoint_job(mapping: MetricMapping, interval: int) -> dict[str, Any]:
    """The scrape job of one engine type whose mapping names where it serves Prometheus
    text: its path, and its own port on the pod's address when it has one. One target
    per pod: the `http` port's, its address rewritten to the engine's metrics port. The
    mapping's label renames apply to every series of the job."""
    engine, endpoint = mapping.engine, mapping.scrape
    relabel: list[dict[str, Any]] = [
        _keep_label_present(contracts.LABEL_SERVING),
        {"action": "keep", "source_labels": list(_ENGINE_LABEL_SOURCE), "regex": re.escape(engine)},
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_pod_container_port_name"],
            "regex": contracts.PORT_NAME_HTTP,
        },
    ]
    if endpoint.port is not None:
        relabel.append(
            {
                "action": "replace",
                "source_labels": ["__meta_kubernetes_pod_ip"],
                "regex": "(.+)",
                "target_label": "__address__",
                # `$$`: the collector expands `$` in its config; the receiver sees `$1`.
                "replacement": f"$${{1}}:{endpoint.port}",
            }
        )
    relabel.extend(_running_pods_named())
    job: dict[str, Any] = {
        "job_name": f"{ENGINES_JOB}-{engine}",
        "scrape_interval": _interval(interval),
        "scrape_timeout": _interval(min(10, interval)),
        "metrics_path": endpoint.path,
        "kubernetes_sd_configs": [{"role": "pod"}],
        "relabel_configs": relabel,
    }
    if mapping.labels:
        job["metric_relabel_configs"] = label_relabels(_label_pairs(mapping))
    return job


def _engine_jobs(interval: int, mappings: Sequence[MetricMapping] = ()) -> list[dict[str, Any]]:
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
        ],
    }
    own = sorted((m for m in mappings if not m.scrape.is_default), key=lambda m: m.engine)
    if own:
        # Engine types scraped by a job of their own are not scraped here as well.
        engines["relabel_configs"].append(
            {
                "action": "drop",
                "source_labels": list(_ENGINE_LABEL_SOURCE),
                "regex": "|".join(re.escape(m.engine) for m in own),
            }
        )
    renames = _engines_job_relabels([m for m in mappings if m.scrape.is_default])
    if renames:
        # The pod's engine type on each of its series, for the renames to test.
        engines["relabel_configs"].append(
            {
                "action": "replace",
                "source_labels": list(_ENGINE_LABEL_SOURCE),
                "target_label": SCRAPE_ENGINE_LABEL,
            }
        )
        engines["metric_relabel_configs"] = renames
    engines["relabel_configs"].extend(_running_pods_named())
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
            *_running_pods_named(),
        ],
    }
    return [engines, *(_own_endpoint_job(m, interval) for m in own), pickers]


def _substrate_job(
    target: ScrapeTarget, interval: int, mappings: Sequence[MetricMapping] = ()
) -> dict[str, Any]:
    """One substrate component's job; the label renames of a mapping that names the
    component (its job) as its engine apply to every series of the job."""
    relabel: list[dict[str, Any]] = []
    for key, value in target.pod_labels:
        relabel.append(
            {
                "action": "keep",
                "source_labels": [f"__meta_kubernetes_pod_label_{prometheus_label(key)}"],
                "regex": re.escape(value),
            }
        )
    if target.undeclared_port:
        # One target per pod (the pod has no declared port): its address, at the port.
        # `$$` is the collector config's escape for the relabel rule's own `$`.
        relabel.append(
            {
                "action": "replace",
                "source_labels": ["__meta_kubernetes_pod_ip"],
                "target_label": "__address__",
                "regex": "(.+)",
                "replacement": f"$$1:{target.undeclared_port}",
            }
        )
    elif target.port_name:
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
    relabel.extend(_running_pods_named())
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
    metric_relabel: list[dict[str, Any]] = []
    if target.keep_series:
        label, regex = target.keep_series
        metric_relabel.append({"action": "keep", "source_labels": [label], "regex": regex})
    for mapping in mappings:
        if mapping.engine == target.job and mapping.labels:
            metric_relabel.extend(label_relabels(_label_pairs(mapping)))
    if metric_relabel:
        job["metric_relabel_configs"] = metric_relabel
    return job


def scrape_configs(
    stack: str,
    interval: int = DEFAULT_SCRAPE_INTERVAL_SECONDS,
    mappings: Sequence[MetricMapping] = (),
    *,
    runtime: bool = False,
) -> list[dict[str, Any]]:
    """The prometheus receiver's scrape jobs for a cluster of this stack: the engines
    (a job per engine type whose mapping names its own endpoint), pickers, substrate, and
    (`runtime`) the member runtime's agent, scaler and activator."""
    jobs = _engine_jobs(interval, mappings)
    jobs += [
        _substrate_job(t, interval, mappings) for t in substrate_targets.SUBSTRATE_TARGETS[stack]
    ]
    if runtime:
        jobs += [_substrate_job(t, interval) for t in substrate_targets.RUNTIME_TARGETS]
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


def otlp_receiver(host: str = "0.0.0.0") -> dict[str, Any]:
    """Where engines send traces and logs: gRPC and HTTP, in-cluster, no auth (as the
    scrape of their /metrics has none); a NetworkPolicy admits only engine pods."""
    return {
        "protocols": {
            "grpc": {"endpoint": f"{host}:{contracts.COLLECTOR_OTLP_GRPC_PORT}"},
            "http": {"endpoint": f"{host}:{contracts.COLLECTOR_OTLP_HTTP_PORT}"},
        }
    }


def cluster_state_receiver(interval_seconds: int) -> dict[str, Any]:
    """Workload and pod state from the API server (kube-state-metrics' job)."""
    return {
        "auth_type": "serviceAccount",
        "collection_interval": _interval(interval_seconds),
        "node_conditions_to_report": list(NODE_CONDITIONS),
        "allocatable_types_to_report": list(ALLOCATABLE_TYPES),
    }


def pod_logs_receiver() -> dict[str, Any]:
    """Every container's log file on the node, from now on (not the backlog); our own
    namespace's are left out so the collectors never read their own output."""
    return {
        "include": [f"{POD_LOGS_DIR}/*/*/*.log"],
        "exclude": [f"{POD_LOGS_DIR}/{contracts.SYSTEM_NAMESPACE}_*/*/*.log"],
        "start_at": "end",
        # The container parser reads the pod from the file's path (log.file.path): without
        # it every line fails to parse ("add_metadata_from_filepath enabled, but ...").
        "include_file_path": True,
        "include_file_name": False,
        # Detects the runtime's line format (containerd, CRI-O, Docker) and sets
        # k8s.namespace.name, k8s.pod.name, k8s.pod.uid and k8s.container.name from the path.
        "operators": [{"type": "container", "id": "container-parser"}],
    }


def engine_logs_filter() -> dict[str, Any]:
    """Drop log lines of pods that are not engines of ours (k8s_attributes found no
    `modelplane.ai/serving` label on the pod)."""
    serving = _ottl_string(contracts.RESOURCE_ATTR_SERVING)
    return {
        "error_mode": "ignore",
        "logs": {"log_record": [f"resource.attributes[{serving}] == nil"]},
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

    receivers: dict[str, Any] = {
        RECEIVER: {
            "config": {
                "scrape_configs": scrape_configs(
                    cluster.stack,
                    scrape_interval_seconds,
                    mappings,
                    runtime=destination is not None,
                )
            }
        }
    }
    pipelines: dict[str, Any] = {
        "metrics": {
            "receivers": [RECEIVER],
            "processors": list(PROCESSORS),
            "exporters": list(exporters),
        }
    }
    extra_processors: dict[str, Any] = {}
    if destination is not None:
        if destination.cluster_state:
            receivers[CLUSTER_STATE_RECEIVER] = cluster_state_receiver(scrape_interval_seconds)
            pipelines["metrics/cluster-state"] = {
                "receivers": [CLUSTER_STATE_RECEIVER],
                "processors": list(CLUSTER_STATE_PROCESSORS),
                "exporters": [EXPORTER],
            }
        if destination.traces_and_logs:
            receivers[OTLP_RECEIVER] = otlp_receiver()
            extra_processors[OTLP_BATCH] = {"timeout": OTLP_BATCH_TIMEOUT}
            for signal in ("traces", "logs"):
                pipelines[signal] = {
                    "receivers": [OTLP_RECEIVER],
                    "processors": list(OTLP_PROCESSORS),
                    "exporters": [EXPORTER],
                }

    return {
        "extensions": extensions,
        "receivers": receivers,
        "processors": {
            "memory_limiter": contracts.memory_limiter(),
            "k8s_attributes": _k8s_attributes_processor(),
            COMPONENTS: _components_processor(cluster.stack),
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
            "filter/select": _select_processor(mappings),
            SCRAPE_REPORTS_PROCESSOR: _scrape_reports_processor(),
            "transform/instance": _instance_processor(),
            # The latest point of each series once per scrape interval, on a ticker
            # that does not drift: one point per pod is what lets their points merge.
            INTERVAL: {"interval": _interval(scrape_interval_seconds)},
            TICK_BATCH: {"timeout": TICK_BATCH_TIMEOUT, "send_batch_size": BATCH_TRIGGER_POINTS},
            # The cluster-state and node-tier pipelines' batches.
            "batch": {
                "timeout": _interval(scrape_interval_seconds),
                "send_batch_size": BATCH_TRIGGER_POINTS,
            },
            TO_DELTA: _to_delta_processor(),
            "transform/align": _align_processor(),
            "metrics_transform/aggregate": _aggregate_processor(),
            TO_CUMULATIVE: {"max_stale": MERGED_STATE_STALENESS},
            FINISH: _finish_processor(),
            **extra_processors,
        },
        "exporters": exporters,
        "service": {"extensions": list(extensions), "pipelines": pipelines},
    }


def render_node_collector_config(
    cluster: CollectorCluster,
    destination: CollectorDestination,
    *,
    interval_seconds: int = DEFAULT_SCRAPE_INTERVAL_SECONDS,
) -> dict[str, Any]:
    """The node tier's config: the kubelet's pod and container stats and the host's own,
    from every node, and (when the destination carries logs) the engines' container logs
    with their pods' model labels, pushed to the same gateway. Nothing engine-specific
    happens to metrics here."""
    base = render_cluster_collector_config(
        cluster, (), destination, scrape_interval_seconds=interval_seconds
    )
    processors = ("memory_limiter", "resource/cluster", "batch")
    receivers: dict[str, Any] = {
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
    }
    node_processors: dict[str, Any] = {name: base["processors"][name] for name in processors}
    pipelines: dict[str, Any] = {
        "metrics": {
            "receivers": ["kubeletstats", "hostmetrics"],
            "processors": list(processors),
            "exporters": [EXPORTER],
        }
    }
    if destination.traces_and_logs:
        receivers[LOGS_RECEIVER] = pod_logs_receiver()
        node_processors["k8s_attributes"] = _k8s_attributes_processor(node_local=True)
        node_processors[ENGINE_LOGS_FILTER] = engine_logs_filter()
        node_processors[OTLP_BATCH] = {"timeout": OTLP_BATCH_TIMEOUT}
        pipelines["logs"] = {
            "receivers": [LOGS_RECEIVER],
            "processors": list(NODE_LOGS_PROCESSORS),
            "exporters": [EXPORTER],
        }
    return {
        "extensions": base["extensions"],
        "receivers": receivers,
        "processors": node_processors,
        "exporters": base["exporters"],
        "service": {"extensions": base["service"]["extensions"], "pipelines": pipelines},
    }
