"""The fleet gateway's CPU for a fixed OTLP load: the gateway compose-telemetry renders,
with its fleet roll-up, against a pass-through gateway on the same load.

    .venv/bin/python tests/bench/bench_gateway.py [--runs 3] [--seconds 30]
        [--clusters 50] [--models 10] [--push-interval 10]

The load is what cluster collectors push: `--clusters` OTLP/gRPC clients (the
OpenTelemetry SDK's OTLP exporter, one channel each, gzip, the fleet's bearer token), each
pushing every `--push-interval` seconds, spread over the interval as independent clusters
are, one resource per model (`--models` ModelReplicas per cluster, with the resource
attributes the cluster tier keeps) holding the cluster tier's output for it: every
vocabulary metric once per model, already merged over pods — gauges, cumulative counters
(requests by two finish reasons) and cumulative histograms with vLLM's buckets — stamped
with one second-aligned time per push. Counters and histograms grow at every push, so the
roll-up's delta conversions always have work. Only vocabulary series are pushed: every
sample is one the roll-up must handle, the costliest case for it (a cluster also pushes
its non-vocabulary series, which the roll-up's first filter drops).

Two gateways, each the real collector (hack/tools/otelcol) on loopback, exporting OTLP/HTTP
to a loopback sink that discards:

- ours: `render_gateway_config` for a destination with the roll-up on (its default): the
  clusters' series onward, plus the snapshot and fleet pipelines (snapshot scraped every
  `rollup.SNAPSHOT_SCRAPE_INTERVAL`, as rendered);
- pass-through: the same destination with `rollup.enabled: false`, which renders the
  gateway without the roll-up: receiver, memory_limiter, batch, exporter.

The gateway listens without TLS: in a cluster the endpoint is TLS-terminated in front of
the Service, so the collector itself receives plain gRPC.

From a warm-up after the first export (a push interval and a snapshot interval: the
roll-up's first points are baselines), the collector's own CPU time (user + system, from
/proc) is measured over `--seconds` (keep it a multiple of the snapshot interval, so each
run holds the same number of roll-ups). The table shows the median of `--runs` runs: cores
used, samples pushed per second (a histogram point counts its buckets plus sum and count,
as on a Prometheus page; the pushes the gateway acknowledged in the window), CPU
millicores per 1,000 samples/s, and resident memory (at the end and its peak). Not a
test: pytest does not collect bench_*.py.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
    Compression,
    OTLPMetricExporter,
)
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

import render  # noqa: E402
from functions.common import contracts, vocabulary  # noqa: E402
from functions.common.telemetrydestination import parse_destination  # noqa: E402
from functions.compose_serving_stack import collector  # noqa: E402
from functions.compose_telemetry import gateway, rollup  # noqa: E402
from tests.bench import unwind_on_sigterm  # noqa: E402
from tests.bench.bench_collector import cpu_seconds, rss_mib  # noqa: E402
from tests.collector import engines, harness  # noqa: E402

TOKEN = "bench-fleet-token"
STARTUP_TIMEOUT = 120
# What the cluster tier's resource carries: the prometheus receiver's scope.
SCOPE = InstrumentationScope(
    "github.com/open-telemetry/opentelemetry-collector-contrib/receiver/prometheusreceiver",
    "0.161.0",
)
FINISH_REASONS = ("stop", "length")
# vLLM's buckets: its TTFT ones for time to first token, the latency set for the rest.
LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 60.0)


def _seconds(text: str) -> float:
    assert text.endswith("s"), text
    return float(text[:-1])


SNAPSHOT_SECONDS = _seconds(rollup.SNAPSHOT_SCRAPE_INTERVAL)


def bounds(metric: vocabulary.VocabularyMetric) -> tuple[float, ...]:
    if metric.name == "modelplane_time_to_first_token":
        return engines.VLLM_TTFT_BUCKETS
    return LATENCY_BUCKETS


def samples_per_model() -> int:
    """Samples one model's resource carries per push, counted as on a Prometheus page."""
    total = 0
    for metric in vocabulary.VOCABULARY:
        points = len(FINISH_REASONS) if "finish_reason" in metric.labels else 1
        if metric.type is vocabulary.MetricType.HISTOGRAM:
            total += points * (len(bounds(metric)) + 1 + 2)
        else:
            total += points
    return total


@dataclass(frozen=True)
class Replica:
    """One model on one cluster: the resource the cluster tier pushes for it."""

    cluster: str
    model: str

    def resource(self) -> Resource:
        return Resource(
            {
                contracts.RESOURCE_ATTRIBUTE_CLUSTER: self.cluster,
                contracts.RESOURCE_ATTR_NAMESPACE: "ml-team",
                contracts.RESOURCE_ATTR_ENGINE: "vllm",
                contracts.RESOURCE_ATTR_DEPLOYMENT: self.model,
                contracts.RESOURCE_ATTR_SERVING: f"{self.model}-{self.cluster}",
                "service.name": collector.ENGINES_JOB,
            }
        )


def _metric(
    metric: vocabulary.VocabularyMetric, model: str, push: int, start: int, now: int
) -> Metric:
    def attributes(reason: str | None) -> dict[str, str]:
        labels = {vocabulary.MODEL_LABEL: model}
        if reason is not None:
            labels[vocabulary.FINISH_REASON_LABEL] = reason
        return labels

    reasons: tuple[str | None, ...] = (
        FINISH_REASONS if vocabulary.FINISH_REASON_LABEL in metric.labels else (None,)
    )
    if metric.type is vocabulary.MetricType.GAUGE:
        value = 0.5 if metric.unit == "1" else float(push % 7 + 1)
        data = Gauge([NumberDataPoint(attributes(r), 0, now, value) for r in reasons])
    elif metric.type is vocabulary.MetricType.COUNTER:
        data = Sum(
            [
                NumberDataPoint(attributes(r), start, now, float(100 * push + i))
                for i, r in enumerate(reasons)
            ],
            AggregationTemporality.CUMULATIVE,
            is_monotonic=True,
        )
    else:
        edges = bounds(metric)
        # Every push adds one observation to each bucket: cumulative and growing.
        per_bucket = [push] * (len(edges) + 1)
        points = []
        for r in reasons:
            count = sum(per_bucket)
            points.append(
                HistogramDataPoint(
                    attributes(r),
                    start,
                    now,
                    count,
                    0.7 * count,
                    per_bucket,
                    edges,
                    min=edges[0] / 2,
                    max=edges[-1],
                )
            )
        data = Histogram(points, AggregationTemporality.CUMULATIVE)
    return Metric(metric.name, metric.description, metric.unit, data)


def cluster_push(replicas: list[Replica], push: int, start: int) -> MetricsData:
    """One cluster collector's push: a resource per model, every vocabulary metric."""
    now = int(time.time()) * 1_000_000_000
    return MetricsData(
        [
            ResourceMetrics(
                replica.resource(),
                [
                    ScopeMetrics(
                        SCOPE,
                        [
                            _metric(m, replica.model, push, start, now)
                            for m in vocabulary.VOCABULARY
                        ],
                        "",
                    )
                ],
                "",
            )
            for replica in replicas
        ]
    )


class Clusters:
    """`clusters` cluster collectors pushing to the gateway, each every `interval` seconds
    at its own offset; counts the samples of the pushes the gateway acknowledged."""

    def __init__(self, endpoint: str, clusters: int, models: int, interval: float) -> None:
        self.interval = interval
        self.fleet = [
            [Replica(f"cluster-{c:03d}", f"model-{m:02d}") for m in range(models)]
            for c in range(clusters)
        ]
        self.exporters = [
            OTLPMetricExporter(
                endpoint=endpoint,
                insecure=True,
                headers={"authorization": f"Bearer {TOKEN}"},
                compression=Compression.Gzip,
                timeout=10,
            )
            for _ in self.fleet
        ]
        self.per_push = models * samples_per_model()
        self.acknowledged = 0
        self.failed = 0
        self.late = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Clusters:
        self._thread.start()
        return self

    def __exit__(self, *_exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for exporter in self.exporters:
            exporter.shutdown(timeout_millis=1000)

    def _run(self) -> None:
        # The engines started an hour ago (a start time before every point's time).
        start = (int(time.time()) - 3600) * 1_000_000_000
        began = time.monotonic()
        step = self.interval / len(self.fleet)
        push = 0
        while not self._stop.is_set():
            push += 1
            for index, (replicas, exporter) in enumerate(
                zip(self.fleet, self.exporters, strict=True)
            ):
                due = began + (push - 1) * self.interval + index * step
                wait = due - time.monotonic()
                if wait > 0 and self._stop.wait(wait):
                    return
                if wait < -step:
                    self.late += 1
                result = exporter.export(cluster_push(replicas, push, start))
                if result is MetricExportResult.SUCCESS:
                    self.acknowledged += self.per_push
                else:
                    self.failed += 1


class DiscardingSink:
    """A loopback OTLP/HTTP endpoint that acknowledges and discards what it is sent."""

    def __init__(self) -> None:
        self.requests = 0

    def __enter__(self) -> DiscardingSink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sink.requests += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"


def destination(sink: str, *, rollup_enabled: bool) -> dict:
    return {
        "metadata": {"name": "fleet", "creationTimestamp": "2026-11-02T09:00:00Z"},
        "spec": {
            "gateway": {
                "providerConfigRef": {"name": "control-plane"},
                "endpoint": "127.0.0.1:4317",
                "tokenSecretRef": {"name": "t", "namespace": "crossplane-system", "key": "token"},
            },
            "exporter": {"type": "OTLPHTTP", "endpoint": sink, "tls": {"insecure": True}},
            "slo": {"timeToFirstToken": 0.5, "timePerOutputToken": 0.05},
            "rollup": {"enabled": rollup_enabled},
        },
    }


def gateway_config(sink: str, folder: Path, *, rollup_enabled: bool) -> tuple[dict, int]:
    """The rendered gateway on free loopback ports, and its OTLP gRPC port."""
    token = folder / "token"
    token.write_text(TOKEN)
    listen = gateway.Listen(
        host="127.0.0.1",
        grpc_port=harness.free_port(),
        http_port=harness.free_port(),
        health_port=harness.free_port(),
        telemetry_port=harness.free_port(),
        snapshot_port=harness.free_port(),
        token_file=str(token),
    )
    parsed = parse_destination(destination(sink, rollup_enabled=rollup_enabled))
    return gateway.render_gateway_config(parsed, listen), listen.grpc_port


@contextlib.contextmanager
def pod_name(name: str) -> Iterator[None]:
    """The gateway stamps its pod's name on fleet series (`${env:POD_NAME}`)."""
    previous = os.environ.get(rollup.POD_NAME_ENV)
    os.environ[rollup.POD_NAME_ENV] = name
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(rollup.POD_NAME_ENV, None)
        else:
            os.environ[rollup.POD_NAME_ENV] = previous


def gateway_pid(folder: Path) -> int:
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmdline = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if (
                cmdline
                and cmdline[0].endswith(b"otelcol")
                and str(folder).encode() in b" ".join(cmdline)
            ):
                return int(proc.name)
    raise RuntimeError("gateway process not found")


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass(frozen=True)
class Run:
    cpu_seconds: float
    samples: int
    rss_mib: float
    peak_mib: float
    failed_pushes: int
    late_pushes: int


def run_once(otelcol: Path, args: argparse.Namespace, *, rollup_enabled: bool) -> Run:
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        folder = Path(tmp)
        with DiscardingSink() as sink, pod_name("gateway-0"):
            config, grpc_port = gateway_config(sink.endpoint, folder, rollup_enabled=rollup_enabled)
            config["service"]["telemetry"] = {"metrics": {"level": "none"}}
            with (
                harness.running_collector(otelcol, config, folder) as log,
                Clusters(
                    f"127.0.0.1:{grpc_port}", args.clusters, args.models, args.push_interval
                ) as clusters,
            ):
                started = time.monotonic()
                while not sink.requests and time.monotonic() - started < STARTUP_TIMEOUT:
                    time.sleep(0.2)
                if not sink.requests:
                    raise RuntimeError(f"nothing exported:\n{log.read_text()[-3000:]}")
                time.sleep(args.push_interval + SNAPSHOT_SECONDS)
                pid = gateway_pid(folder)
                start, pushed = cpu_seconds(pid), clusters.acknowledged
                failed, late = clusters.failed, clusters.late
                time.sleep(args.seconds)
                used, samples = cpu_seconds(pid) - start, clusters.acknowledged - pushed
                failed, late = clusters.failed - failed, clusters.late - late
                rss, peak = rss_mib(pid), peak_rss_mib(pid)
    return Run(used, samples, rss, peak, failed, late)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=2 * SNAPSHOT_SECONDS)
    parser.add_argument("--clusters", type=int, default=50)
    parser.add_argument("--models", type=int, default=10)
    parser.add_argument(
        "--push-interval",
        type=float,
        default=10,
        help="seconds between one cluster's pushes (a cluster pushes once per scrape "
        "interval; the cluster tier's default is "
        f"{collector.DEFAULT_SCRAPE_INTERVAL_SECONDS} s)",
    )
    args = parser.parse_args()
    unwind_on_sigterm()
    otelcol = render.tools_bin() / "otelcol"
    if not otelcol.exists():
        print(f"otelcol is not installed at {otelcol}: run 'bash hack/tools.sh otelcol'")
        return 2
    per_model = samples_per_model()
    offered = args.clusters * args.models * per_model / args.push_interval
    print(f"gateway: {otelcol.resolve()}")
    print(
        f"load: {args.clusters} clusters x {args.models} models, {per_model} samples per model "
        f"({len(vocabulary.VOCABULARY)} vocabulary metrics), a push per cluster every "
        f"{args.push_interval:g} s: {offered:.0f} samples/s offered"
    )
    print(
        f"median of {args.runs} runs of {args.seconds:.0f} s; roll-up snapshot every "
        f"{rollup.SNAPSHOT_SCRAPE_INTERVAL}\n"
    )
    header = (
        f"{'config':<12} {'cores':>7} {'samples/s':>10} {'mcores/1k/s':>12} "
        f"{'RSS MiB':>8} {'peak MiB':>9} {'failed':>7}"
    )
    print(header)
    print("-" * len(header))
    per_thousand = {}
    for label, rollup_enabled in (("pass-through", False), ("ours", True)):
        runs = [run_once(otelcol, args, rollup_enabled=rollup_enabled) for _ in range(args.runs)]
        cores = statistics.median(r.cpu_seconds for r in runs) / args.seconds
        rate = statistics.median(r.samples for r in runs) / args.seconds
        per_thousand[label] = statistics.median(
            1e6 * r.cpu_seconds / r.samples if r.samples else float("nan") for r in runs
        )
        print(
            f"{label:<12} {cores:>7.3f} {rate:>10.0f} {per_thousand[label]:>12.2f} "
            f"{statistics.median(r.rss_mib for r in runs):>8.0f} "
            f"{statistics.median(r.peak_mib for r in runs):>9.0f} "
            f"{sum(r.failed_pushes for r in runs):>7}",
            flush=True,
        )
        late = sum(r.late_pushes for r in runs)
        if late:
            print(f"{'':<12} ({late} pushes started late: the load generator fell behind)")
    ratio = per_thousand["ours"] / per_thousand["pass-through"]
    print(f"{'ours/pass':<12} {ratio:>7.2f}x  (CPU per 1,000 samples/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
