"""A live fleet: two cluster-tier collectors push to the rendered gateway, which rolls the
fleet up and remote-writes into a real Prometheus; PromQL checks what users rely on.

    engine page A ──▶ cluster collector A ─┐ OTLP + bearer token
                                           ├──▶ gateway ──▶ Prometheus (remote-write receiver)
    engine page B ──▶ cluster collector B ─┘

Real parts: the collector from hack/tools.sh (three processes), Prometheus (Debian's
package, loopback only, temporary storage, started and stopped here), the gateway config
from compose-telemetry and the cluster-tier configs from compose-serving-stack's
`render_cluster_collector_config` with the built-in vLLM MetricMapping.

What the test substitutes, because there is no Kubernetes here (TEST-SIDE, marked
`# test substitution` below): the cluster collectors' Kubernetes pod discovery is
replaced by a static scrape of this process's fake engine page, and the `k8s_attributes`
processor by a `resource` processor that sets the same attributes (engine, deployment,
serving, namespace, pod name) k8sattributes would lift from the pod. Everything after
that — the mapping's renames, the cluster's aggregation, the push, the whole gateway —
runs as rendered.

The engines are prometheus_client registries served over HTTP, with vLLM's metric names
(`vllm:*`) and `_created` series as vLLM (which uses prometheus_client) publishes them.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

import prometheus_client
import pytest
import yaml

from fleetbox.process import Process
from functions.common import contracts
from functions.common.exposition import prometheus_label
from functions.common.metricmapping import parse_mappings
from functions.common.telemetrydestination import parse_destination
from functions.common.vocabulary import VOCABULARY_BY_NAME
from functions.compose_serving_stack.collector import (
    ENGINES_JOB,
    SCRAPE_ENGINE_LABEL,
    CollectorCluster,
    CollectorDestination,
    render_cluster_collector_config,
)
from functions.compose_telemetry import gateway, rollup
from tests.conftest import REPO, require_tool
from tests.ports import free_port

TOKEN = "fleet-token-for-the-live-test"
TTFT = "modelplane_time_to_first_token"
TOKENS = "modelplane_generation_tokens_total"
RUNNING = "modelplane_requests_running"
KV_CACHE = "modelplane_kv_cache_usage"
# Seconds a collector, gateway or Prometheus gets between SIGTERM and SIGKILL: these
# tests' own, longer than the box's default (fleetbox.process.Process.stop).
STOP_GRACE_SECONDS = 15.0
# vLLM's own time-to-first-token buckets (0.5 among them, the SLO target below).
VLLM_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5)
# Time per output token deliberately without 0.05, the SLO target below: the gateway
# cannot add that boundary, and must say so.
TPOT_BUCKETS_WITHOUT_TARGET = (0.01, 0.025, 0.075, 0.1, 0.5)
TPOT = "modelplane_time_per_output_token"
MODEL = "llama-3-1-8b"
SETTLE_SECONDS = 90  # upper bound for a change to reach Prometheus; typically ~15 s
FLEET = 'modelplane_scope="fleet"'
CLUSTER_LABEL = prometheus_label(contracts.RESOURCE_ATTRIBUTE_CLUSTER)


# --- A fake engine ------------------------------------------------------------------------


class _Quiet(WSGIRequestHandler):
    def log_message(self, *_args) -> None:
        pass


class FakeEngine:
    """One vLLM pod's /metrics page. `restart()` is the engine process restarting: every
    counter starts again from zero with a new creation time."""

    def __init__(self) -> None:
        self.port = free_port()
        self._lock = threading.Lock()
        self.restart()
        self._server = make_server("127.0.0.1", self.port, self._app, handler_class=_Quiet)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def restart(self) -> None:
        registry = prometheus_client.CollectorRegistry()
        labels = ["model_name"]
        running = prometheus_client.Gauge(
            "vllm:num_requests_running", "Running", labels, registry=registry
        )
        ttft = prometheus_client.Histogram(
            "vllm:time_to_first_token_seconds",
            "TTFT",
            labels,
            buckets=VLLM_TTFT_BUCKETS,
            registry=registry,
        )
        tpot = prometheus_client.Histogram(
            "vllm:request_time_per_output_token_seconds",
            "TPOT",
            labels,
            buckets=TPOT_BUCKETS_WITHOUT_TARGET,
            registry=registry,
        )
        tokens = prometheus_client.Counter(
            "vllm:generation_tokens", "Generated", labels, registry=registry
        )
        # vLLM's own name (0.9 on) for the KV-cache occupancy, a 0-1 ratio despite "perc".
        kv_cache = prometheus_client.Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage", labels, registry=registry
        )
        # The rest of what vLLM 0.32 serves that the dashboards read (names and HELP from
        # its vllm/v1/metrics/loggers.py; the prefix-cache HELP says tokens, which the
        # built-in mapping's guard requires).
        waiting = prometheus_client.Gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            labels,
            registry=registry,
        )
        prompt = prometheus_client.Counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=registry
        )
        finished = prometheus_client.Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*labels, "finished_reason"],
            registry=registry,
        )
        e2e = prometheus_client.Histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            labels,
            buckets=(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0),
            registry=registry,
        )
        prefix_queries = prometheus_client.Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            labels,
            registry=registry,
        )
        prefix_hits = prometheus_client.Counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            labels,
            registry=registry,
        )
        with self._lock:
            self.waiting = waiting.labels(MODEL)
            self.prompt = prompt.labels(MODEL)
            self.finished = finished
            self.e2e = e2e.labels(MODEL)
            self.prefix_queries = prefix_queries.labels(MODEL)
            self.prefix_hits = prefix_hits.labels(MODEL)
            self.registry = registry
            self.running = running.labels(MODEL)
            self.ttft = ttft.labels(MODEL)
            self.tpot = tpot.labels(MODEL)
            self.tokens = tokens.labels(MODEL)
            self.kv_cache = kv_cache.labels(MODEL)
            self.app = prometheus_client.make_wsgi_app(registry)

    def _app(self, environ, start_response):
        with self._lock:
            app = self.app
        return app(environ, start_response)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- Processes ----------------------------------------------------------------------------


def wait_for(what: str, check: Callable[[], bool], timeout: float, logs: Callable[[], str]):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, KeyError, IndexError):
            if check():
                return
        time.sleep(1)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what}\n{logs()}")


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:
        return answer.status == 200


# --- The fleet ------------------------------------------------------------------------------


@dataclass
class Fleet:
    workdir: Path
    prometheus_port: int
    engines: dict[str, FakeEngine]
    collectors: dict[str, Process]
    gateway: Process
    prometheus: Process
    listen: gateway.Listen
    # A second gateway replica, as the Deployment runs two: clusters connect to one.
    second_gateway: Process
    second_listen: gateway.Listen
    token: Path
    ca: Path

    def snapshot(self) -> str:
        """The gateway's in-memory snapshot of every source, as the roll-up scrapes it."""
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.listen.snapshot_port}/metrics",
            headers={"Accept": "application/openmetrics-text;version=1.0.0"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.read().decode()
        except OSError as err:
            return f"(no snapshot: {err})"

    def logs(self) -> str:
        parts = [f"--- gateway snapshot\n{self.snapshot()}"]
        for process in [
            self.gateway,
            self.second_gateway,
            *self.collectors.values(),
            self.prometheus,
        ]:
            text = process.log.read_text(errors="replace") if process.log.exists() else ""
            parts.append(
                f"--- {process.name} (last 40 lines)\n" + "\n".join(text.splitlines()[-40:])
            )
        return "\n".join(parts)

    def query(self, promql: str, at: float | None = None) -> list[dict]:
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        url = f"http://127.0.0.1:{self.prometheus_port}/api/v1/query?" + urllib.parse.urlencode(
            params
        )
        with urllib.request.urlopen(url, timeout=5) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def value(self, promql: str, at: float | None = None) -> float | None:
        result = self.query(promql, at)
        if not result:
            return None
        assert len(result) == 1, f"{promql} returned {len(result)} series: {result}"
        return float(result[0]["value"][1])

    def settle(self, what: str, promql: str, expected: float) -> None:
        wait_for(
            f"{what}: {promql} == {expected} (last {self.value(promql)!r})",
            lambda: self.value(promql) == expected,
            SETTLE_SECONDS,
            self.logs,
        )


def write_yaml(path: Path, document: dict) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def gateway_destination(prometheus_port: int) -> dict:
    return {
        "metadata": {"name": "fleet", "creationTimestamp": "2026-11-02T09:00:00Z"},
        "spec": {
            "gateway": {
                "providerConfigRef": {"name": "control-plane"},
                "endpoint": "127.0.0.1:4317",
                "tokenSecretRef": {"name": "t", "namespace": "crossplane-system", "key": "token"},
            },
            "exporter": {
                "type": "PrometheusRemoteWrite",
                "endpoint": f"http://127.0.0.1:{prometheus_port}/api/v1/write",
                "tls": {"insecure": True},
            },
            "slo": {"timeToFirstToken": 0.5, "timePerOutputToken": 0.05},
        },
    }


def self_signed_certificate(workdir: Path) -> tuple[Path, Path]:
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl is needed to make the gateway's test certificate")
    cert, key = workdir / "gateway.crt", workdir / "gateway.key"
    subprocess.run(
        [
            openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=modelplane-telemetry-gateway",
            "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


def cluster_collector_config(
    name: str,
    engine: FakeEngine | list[FakeEngine],
    listen: gateway.Listen,
    token: Path,
    ca: Path,
    *,
    runtime_targets: Mapping[str, dict] | None = None,
) -> dict:
    """`runtime_targets`: a static target for each rendered runtime job named (the agent,
    the activator: what discovery would offer for the member's pod), scraped beside the
    engines."""
    pods = engine if isinstance(engine, list) else [engine]
    vllm = yaml.safe_load((REPO / "functions/common/builtin_mappings/vllm.yaml").read_text())
    config = render_cluster_collector_config(
        CollectorCluster(name),
        parse_mappings([vllm]).accepted,
        # The destination remote-writes to Prometheus: metrics only, as compose renders it.
        CollectorDestination(
            endpoint=f"127.0.0.1:{listen.grpc_port}", token_file=str(token), traces_and_logs=False
        ),
        scrape_interval_seconds=2,
    )
    # test substitution: a static scrape of the fake engine instead of pod discovery,
    # with the rendered job's label renames; the engine type they are gated on is the
    # target label the job's relabel rules would set from the pod's engine label.
    (rendered,) = [
        job
        for job in config["receivers"]["prometheus"]["config"]["scrape_configs"]
        if job["job_name"] == ENGINES_JOB
    ]
    config["receivers"]["prometheus"]["config"]["scrape_configs"] = [
        {
            "job_name": ENGINES_JOB,
            "scrape_interval": "2s",
            # One target per pod: the scrape instance tells a cluster's pods apart.
            "static_configs": [
                {
                    "targets": [f"127.0.0.1:{pod.port}" for pod in pods],
                    "labels": {SCRAPE_ENGINE_LABEL: "vllm"},
                }
            ],
            "metric_relabel_configs": rendered["metric_relabel_configs"],
        }
    ]
    pod_attributes = (
        (contracts.RESOURCE_ATTR_ENGINE, "vllm"),
        (contracts.RESOURCE_ATTR_DEPLOYMENT, MODEL),
        (contracts.RESOURCE_ATTR_SERVING, f"{MODEL}-{name}"),
        (contracts.RESOURCE_ATTR_NAMESPACE, "ml-team"),
        ("k8s.pod.name", f"{MODEL}-{name}-0"),
    )
    processors = config["service"]["pipelines"]["metrics"]["processors"]
    del config["processors"]["k8s_attributes"]
    if not runtime_targets:
        # test substitution: the attributes k8s_attributes would lift from the pod.
        processors[processors.index("k8s_attributes")] = "resource/pod"
        config["processors"]["resource/pod"] = {
            "attributes": [
                {"key": key, "value": value, "action": "upsert"} for key, value in pod_attributes
            ]
        }
    else:
        # test substitution: the runtime's pods as discovery would offer them (the
        # rendered relabel rules still pick them), and the engine pod's attributes on the
        # engines' series only (k8s_attributes finds nothing to lift on the runtime's pods,
        # not model pods).
        rendered_jobs = {
            job["job_name"]: job
            for job in render_cluster_collector_config(
                CollectorCluster(name),
                (),
                CollectorDestination(endpoint="127.0.0.1:4317", traces_and_logs=False),
                scrape_interval_seconds=2,
            )["receivers"]["prometheus"]["config"]["scrape_configs"]
        }
        for job_name, target in runtime_targets.items():
            job = rendered_jobs[job_name]
            del job["kubernetes_sd_configs"]
            job["static_configs"] = [target]
            job["scrape_interval"] = job["scrape_timeout"] = "2s"
            config["receivers"]["prometheus"]["config"]["scrape_configs"].append(job)
        processors[processors.index("k8s_attributes")] = "transform/pod"
        engines_job = f'resource.attributes["service.name"] == "{ENGINES_JOB}"'
        config["processors"]["transform/pod"] = {
            "metric_statements": [
                {
                    "statements": [
                        f'set(resource.attributes["{key}"], "{value}") where {engines_job}'
                        for key, value in pod_attributes
                    ]
                }
            ]
        }
    # test substitution: trust the test's self-signed gateway certificate (in a fleet the
    # endpoint presents a certificate the cluster already trusts).
    config["exporters"]["otlp_grpc/gateway"]["tls"] = {"ca_file": str(ca)}
    # test substitution: several collectors share this host, so give each its own ports.
    config["extensions"]["health_check"]["endpoint"] = f"127.0.0.1:{free_port()}"
    config["service"]["telemetry"] = {"metrics": {"level": "none"}}
    return config


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Iterator[Fleet]:
    otelcol = require_tool("otelcol")
    prometheus_binary = require_tool("prometheus")
    workdir = tmp_path_factory.mktemp("fleet")
    token = workdir / "token"
    token.write_text(TOKEN)
    cert, key = self_signed_certificate(workdir)
    processes: list[Process] = []
    engines: dict[str, FakeEngine] = {}
    try:
        prometheus_port = free_port()
        prometheus_config = write_yaml(workdir / "prometheus.yml", {"global": {}})
        prometheus = Process(
            "prometheus",
            [
                str(prometheus_binary),
                f"--config.file={prometheus_config}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
                "--web.enable-remote-write-receiver",
                "--storage.tsdb.retention.time=1h",
            ],
            workdir / "prometheus.log",
        )
        processes.append(prometheus)
        prometheus.start()

        def replica(name: str) -> tuple[Process, gateway.Listen]:
            listen = gateway.Listen(
                host="127.0.0.1",
                grpc_port=free_port(),
                http_port=free_port(),
                health_port=free_port(),
                telemetry_port=free_port(),
                snapshot_port=free_port(),
                snapshot_scrape_interval="2s",
                token_file=str(token),
                tls_cert_file=str(cert),
                tls_key_file=str(key),
            )
            config = gateway.render_gateway_config(
                parse_destination(gateway_destination(prometheus_port)), listen
            )
            process = Process(
                name,
                [str(otelcol), f"--config={write_yaml(workdir / f'{name}.yaml', config)}"],
                workdir / f"{name}.log",
                env={rollup.POD_NAME_ENV: name},
            )
            processes.append(process)
            return process, listen

        gateway_process, listen = replica("gateway-0")
        second_process, second_listen = replica("gateway-1")
        collectors: dict[str, Process] = {}
        fleet = Fleet(
            workdir,
            prometheus_port,
            engines,
            collectors,
            gateway_process,
            prometheus,
            listen,
            second_process,
            second_listen,
            token,
            cert,
        )
        wait_for(
            "Prometheus to be ready",
            lambda: http_ok(f"http://127.0.0.1:{prometheus_port}/-/ready"),
            60,
            fleet.logs,
        )
        for process, replica_listen in ((gateway_process, listen), (second_process, second_listen)):
            process.start()
            wait_for(
                f"{process.name} to be healthy",
                lambda port=replica_listen.health_port: http_ok(f"http://127.0.0.1:{port}/"),
                60,
                fleet.logs,
            )
        # Every cluster pushes to gateway-0 until a test moves one.
        for name in ("a", "b"):
            engines[name] = FakeEngine()
            config = cluster_collector_config(name, engines[name], listen, token, cert)
            collectors[name] = Process(
                f"collector-{name}",
                [str(otelcol), f"--config={write_yaml(workdir / f'cluster-{name}.yaml', config)}"],
                workdir / f"collector-{name}.log",
            )
            processes.append(collectors[name])
        yield fleet
    finally:
        for process in reversed(processes):
            process.stop(grace=STOP_GRACE_SECONDS)
        for engine in engines.values():
            engine.close()
        shutil.rmtree(workdir / "tsdb", ignore_errors=True)


def post_otlp(listen: gateway.Listen, authorization: str | None) -> int:
    context = ssl.create_default_context(cafile=listen.tls_cert_file)
    request = urllib.request.Request(
        f"https://127.0.0.1:{listen.http_port}/v1/metrics",
        data=b"{}",
        headers={"Content-Type": "application/json"}
        | ({"Authorization": authorization} if authorization else {}),
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=5, context=context) as answer:
            return answer.status
    except urllib.error.HTTPError as err:
        return err.code


# --- The checks, in the order a fleet lives them -------------------------------------------


def test_the_gateway_refuses_a_push_without_the_fleet_token(fleet):
    assert post_otlp(fleet.listen, None) == 401
    assert post_otlp(fleet.listen, "Bearer not-the-token") == 401
    assert post_otlp(fleet.listen, f"Bearer {TOKEN}") == 200


def test_fleet_series_are_the_sum_of_the_clusters(fleet):
    for collector in fleet.collectors.values():
        collector.start()
    # A source's first point is the gateway's baseline: fleet counters count what
    # happens after the gateway first sees each source.
    fleet.settle("the baseline", f'count({RUNNING}{{{CLUSTER_LABEL}!=""}})', 2)
    fleet.settle("the baseline", rollup.fleet_value_query(TOKENS), 0)
    a, b = fleet.engines["a"], fleet.engines["b"]
    a.running.set(3)
    b.running.set(5)
    a.tokens.inc(100)
    b.tokens.inc(250)
    for seconds in (0.1, 0.3, 0.7, 1.2):
        a.ttft.observe(seconds)
    for seconds in (0.2, 0.4, 0.45, 2.0, 0.6):
        b.ttft.observe(seconds)

    fleet.settle("fleet running requests", rollup.fleet_value_query(RUNNING), 8)
    fleet.settle("fleet generated tokens", rollup.fleet_value_query(TOKENS), 350)
    fleet.settle("fleet TTFT count", f"sum({TTFT}_count{{{FLEET}}})", 9)
    # Per-cluster series stay beside the fleet series.
    assert fleet.value(f'sum({RUNNING}{{{CLUSTER_LABEL}="a"}})') == 3
    assert fleet.value(f'sum({RUNNING}{{{CLUSTER_LABEL}="b"}})') == 5
    # Fleet series carry no cluster and keep what describes the metric.
    fleet_series = fleet.query(f"{RUNNING}{{{FLEET}}}")
    assert all(CLUSTER_LABEL not in s["metric"] for s in fleet_series)
    assert {s["metric"].get("model") for s in fleet_series} == {MODEL}


def test_the_fleet_kv_cache_ratio_is_a_ratio_not_a_sum(fleet):
    # Summed, two clusters at 0.6 and 0.9 were a fleet at 1.5.
    fleet.engines["a"].kv_cache.set(0.6)
    fleet.engines["b"].kv_cache.set(0.9)
    fleet.settle("cluster a's KV ratio", f'sum({KV_CACHE}{{{CLUSTER_LABEL}="a"}})', 0.6)
    fleet.settle("cluster b's KV ratio", f'sum({KV_CACHE}{{{CLUSTER_LABEL}="b"}})', 0.9)
    fleet.settle("the fleet KV ratio", rollup.fleet_ratio_query(KV_CACHE), 0.75)
    fleet.settle("the mean of the clusters' ratios", f"sum({KV_CACHE}{{{FLEET}}})", 0.75)
    for series in fleet.query(f"{KV_CACHE}{{{FLEET}}}"):
        assert 0 <= float(series["value"][1]) <= 1
    sources = rollup.sources_metric(KV_CACHE)
    assert fleet.value(f"sum({sources}{{{FLEET}}})") == 2


def test_the_fleet_kv_cache_ratio_weighs_each_cluster_by_its_size(fleet):
    # A third, larger cluster joins: three pods with a quarter of their KV cache in use.
    # A mean of the clusters' ratios would say (0.5 + 0.75 + 0.25) / 3 = 0.5; the fleet's
    # cache is (0.5 + 0.75 + 3 x 0.25) / 5 pods = 0.4 full.
    fleet.engines["a"].kv_cache.set(0.5)
    fleet.engines["b"].kv_cache.set(0.75)
    pods = [FakeEngine() for _ in range(3)]
    for index, pod in enumerate(pods):
        fleet.engines[f"c-{index}"] = pod  # closed with the others
        pod.kv_cache.set(0.25)
    config = cluster_collector_config("c", pods, fleet.listen, fleet.token, fleet.ca)
    collector = Process(
        "collector-c",
        [
            str(require_tool("otelcol")),
            f"--config={write_yaml(fleet.workdir / 'cluster-c.yaml', config)}",
        ],
        fleet.workdir / "collector-c.log",
    )
    fleet.collectors["c"] = collector
    collector.start()
    try:
        used, capacity = VOCABULARY_BY_NAME[KV_CACHE].weighted_by
        fleet.settle("cluster c's pods", f'sum({capacity}{{{CLUSTER_LABEL}="c"}})', 3)
        fleet.settle("cluster c's KV in use", f'sum({used}{{{CLUSTER_LABEL}="c"}})', 0.75)
        fleet.settle("cluster c's mean ratio", f'sum({KV_CACHE}{{{CLUSTER_LABEL}="c"}})', 0.25)
        fleet.settle("the fleet KV capacity", f"sum({capacity}{{{FLEET}}})", 5)
        fleet.settle("the fleet KV in use", f"sum({used}{{{FLEET}}})", 2)
        fleet.settle("the weighted fleet KV ratio", rollup.fleet_ratio_query(KV_CACHE), 0.4)
        assert 0 <= fleet.value(rollup.fleet_ratio_query(KV_CACHE)) <= 1
    finally:
        collector.stop(grace=STOP_GRACE_SECONDS)
        del fleet.collectors["c"]


def test_a_merged_histogram_is_the_bucket_by_bucket_sum(fleet):
    fleet.settle("fleet TTFT count", f"sum({TTFT}_count{{{FLEET}}})", 9)
    per_cluster = {
        s["metric"]["le"]: float(s["value"][1])
        for s in fleet.query(f'sum by (le) ({TTFT}_bucket{{modelplane_scope=""}})')
    }
    fleet_buckets = {
        s["metric"]["le"]: float(s["value"][1])
        for s in fleet.query(f"sum by (le) ({TTFT}_bucket{{{FLEET}}})")
    }
    assert fleet_buckets == per_cluster
    # And the values the test's observations imply, not just agreement.
    assert fleet_buckets["0.5"] == 5
    assert fleet_buckets["0.25"] == 2
    assert fleet_buckets["+Inf"] == 9
    assert fleet.value(f"sum({TTFT}_sum{{{FLEET}}})") == pytest.approx(2.3 + 3.65)


def test_slo_attainment_is_the_exact_fraction_of_the_window(fleet):
    fleet.settle("fleet TTFT count", f"sum({TTFT}_count{{{FLEET}}})", 9)
    time.sleep(5)  # a few fleet samples at the settled value open the window
    start = time.time()
    a, b = fleet.engines["a"], fleet.engines["b"]
    for seconds in (0.2, 0.9):
        a.ttft.observe(seconds)
    for seconds in (0.3, 0.35, 3.0, 0.5):
        b.ttft.observe(seconds)
    fleet.settle("fleet TTFT count", f"sum({TTFT}_count{{{FLEET}}})", 15)
    end = time.time()
    window = f"{int(end - start) + 5}s"
    query = rollup.attainment_query(TTFT, 0.5, window=window)
    # 4 of the 6 new observations are at or under 0.5 s (le is inclusive).
    assert fleet.value(query, at=end) == pytest.approx(4 / 6, rel=1e-9)
    assert fleet.value(rollup.quantile_query(TTFT, 0.5, window=window), at=end) is not None


def test_histograms_without_the_slo_boundary_are_marked_and_get_no_attainment(fleet):
    fleet.engines["a"].tpot.observe(0.02)
    fleet.engines["b"].tpot.observe(0.09)
    fleet.settle("fleet TPOT count", f"sum({TPOT}_count{{{FLEET}}})", 2)
    marked = fleet.query(f"{TPOT}_count{{{FLEET}}}")
    assert {s["metric"].get(rollup.SLO_BOUNDARY_LABEL) for s in marked} == {"missing"}
    # The TTFT histograms record the 0.5 s target and are not marked.
    ttft = fleet.query(f"{TTFT}_count{{{FLEET}}}")
    assert {s["metric"].get(rollup.SLO_BOUNDARY_LABEL) for s in ttft} == {None}
    # No boundary, no answer: the attainment query returns nothing rather than a guess.
    assert fleet.query(rollup.attainment_query(TPOT, 0.05)) == []


def test_a_cluster_collector_restart_counts_nothing_twice(fleet):
    fleet.settle("fleet generated tokens", rollup.fleet_value_query(TOKENS), 350)
    collector = fleet.collectors["a"]
    collector.stop(grace=STOP_GRACE_SECONDS)
    time.sleep(3)
    collector.start()
    fleet.engines["a"].tokens.inc(10)
    fleet.settle("fleet generated tokens", rollup.fleet_value_query(TOKENS), 360)
    # Stays there: the restarted collector's first push is not added again.
    time.sleep(10)
    assert fleet.value(rollup.fleet_value_query(TOKENS)) == 360
    assert fleet.value(f"sum({TTFT}_count{{{FLEET}}})") == 15


def test_an_engine_restart_keeps_the_fleet_counter_monotonic(fleet):
    fleet.settle("fleet generated tokens", rollup.fleet_value_query(TOKENS), 360)
    engine = fleet.engines["b"]
    engine.restart()
    engine.tokens.inc(40)
    engine.running.set(2)
    # The new process (a new creation time) is a new stream in the cluster collector,
    # counted from zero: the cluster's own series goes on from the 250 the old process
    # counted, and the fleet adds the 40 new tokens, instead of either dropping by 250.
    fleet.settle("cluster b's tokens", f'sum({TOKENS}{{{CLUSTER_LABEL}="b"}})', 290)
    fleet.settle("fleet generated tokens", rollup.fleet_value_query(TOKENS), 400)
    fleet.settle("fleet running requests", rollup.fleet_value_query(RUNNING), 5)
    # Prometheus never read a reset in cluster b's counter.
    assert fleet.value(f'sum(resets({TOKENS}{{{CLUSTER_LABEL}="b"}}[10m]))') == 0


def test_a_cluster_moving_to_the_other_gateway_replica_counts_nothing_twice(fleet):
    fleet.settle("fleet generated tokens", rollup.fleet_value_query(TOKENS), 400)
    collector = fleet.collectors["a"]
    collector.stop(grace=STOP_GRACE_SECONDS)
    config = cluster_collector_config(
        "a", fleet.engines["a"], fleet.second_listen, fleet.token, fleet.ca
    )
    write_yaml(Path(collector.args[-1].removeprefix("--config=")), config)
    collector.start()
    on_second = f'{RUNNING}{{{FLEET},{prometheus_label("modelplane.gateway")}="gateway-1"}}'
    fleet.settle("cluster a at gateway-1", f"sum({on_second})", 3)
    fleet.engines["a"].tokens.inc(10)
    # gateway-0 keeps what it counted for cluster a; gateway-1 adds only the new 10.
    fleet.settle("fleet generated tokens", rollup.fleet_value_query(TOKENS), 410)
    time.sleep(10)
    assert fleet.value(rollup.fleet_value_query(TOKENS)) == 410
