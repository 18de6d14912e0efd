"""Run the real collector on a rendered config: make its file paths local, stand in for
what only a cluster provides, and receive what it exports.

Nothing here changes what the collector does to metrics. Every overlay replaces one
thing a loopback test cannot have and says which:

- file paths (the service-account token and CA, the mounted gateway token) point into
  the test's temporary folder, because the collector checks that they exist;
- discovery: the engines job keeps its relabel rules but gets `static_configs` targets
  whose labels are the `__meta_kubernetes_*` labels Kubernetes discovery would attach
  to each pod (so the rendered keep/drop rules and the receiver's own
  pod-name/uid/namespace resource attributes are exercised as rendered);
- `k8s_attributes` (which needs an API server) is replaced by a transform that does
  what it would do: find the pod by `k8s.pod.uid` and copy its modelplane.ai/engine,
  deployment and serving labels onto the resource attributes it would set;
- the gateway exporter becomes OTLP/HTTP with JSON encoding to a loopback receiver,
  keeping the same bearer-token authenticator (OTLP/gRPC needs TLS for a bearer token,
  and JSON needs no generated protobuf code to read);
- the agent's signals page (when rendered) listens on a free loopback port instead of
  0.0.0.0:SIGNALS_PORT (`signals_url` says where).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import yaml

from functions.common import contracts
from functions.common.exposition import prometheus_label
from functions.compose_serving_stack import collector
from tests.collector.engines import Pod
from tests.ports import free_port

STANDIN_PROCESSOR = "transform/k8s_attributes_stand_in"
TEST_EXPORTER = "otlp_http/gateway"


def localize_paths(config: dict[str, Any], folder: Path) -> dict[str, Any]:
    """The config with every in-cluster file path pointed at a file in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    token = folder / "gateway-token"
    token.write_text("test-gateway-token\n")
    sa_token = folder / "sa-token"
    sa_token.write_text("test-service-account-token\n")
    ca = folder / "ca.crt"
    ca.write_text("")
    text = yaml.safe_dump(config, sort_keys=False)
    text = text.replace(collector.SERVICE_ACCOUNT_TOKEN_FILE, str(sa_token))
    text = text.replace(collector.SERVICE_ACCOUNT_CA_FILE, str(ca))
    text = text.replace(collector.TOKEN_FILE, str(token))
    localized = yaml.safe_load(text)
    localized.setdefault("service", {})["telemetry"] = {"metrics": {"level": "none"}}
    localized["extensions"][collector.HEALTH_CHECK]["endpoint"] = f"127.0.0.1:{free_port()}"
    return localized


def _static_target(pod: Pod, port_name: str, port: int) -> dict[str, Any]:
    labels = {
        "__meta_kubernetes_namespace": pod.namespace,
        "__meta_kubernetes_pod_name": pod.name,
        "__meta_kubernetes_pod_uid": pod.uid,
        "__meta_kubernetes_pod_phase": "Running",
        "__meta_kubernetes_pod_container_port_name": port_name,
        "__meta_kubernetes_pod_ip": pod.ip,
        f"__meta_kubernetes_pod_label_{prometheus_label(contracts.LABEL_ENGINE)}": pod.engine,
    }
    if pod.labelled:
        serving = prometheus_label(contracts.LABEL_SERVING)
        labels[f"__meta_kubernetes_pod_labelpresent_{serving}"] = "true"
        labels[f"__meta_kubernetes_pod_label_{serving}"] = pod.serving
    return {"targets": [f"{pod.ip}:{port}"], "labels": labels}


def _standin_groups(pods: list[Pod]) -> list[dict[str, Any]]:
    """One statement group per labelled pod: its uid is compared once per resource, as
    k8s_attributes looks a pod up once (three `where`s per pod made the stand-in's cost
    grow with three times the pods, a cost the real processor does not have)."""
    return [
        {
            "conditions": [f'resource.attributes["k8s.pod.uid"] == "{pod.uid}"'],
            "statements": [
                f'set(resource.attributes["{attribute}"], "{value}")'
                for attribute, value in (
                    (contracts.RESOURCE_ATTR_ENGINE, pod.engine),
                    (contracts.RESOURCE_ATTR_DEPLOYMENT, pod.deployment),
                    (contracts.RESOURCE_ATTR_SERVING, pod.serving),
                )
            ],
        }
        for pod in pods
        if pod.labelled
    ]


def live_overlay(
    config: dict[str, Any], pods: list[Pod], folder: Path, sink_endpoint: str
) -> dict[str, Any]:
    """The rendered config, runnable on loopback against `pods` (see the module doc)."""
    live = localize_paths(copy.deepcopy(config), folder)
    scrape = live["receivers"][collector.RECEIVER]["config"]["scrape_configs"]
    # The engines job and the jobs of engine types that serve metrics elsewhere: each is
    # offered every pod, and its rendered relabel rules pick.
    engine_jobs = [
        job
        for job in scrape
        if job["job_name"] == collector.ENGINES_JOB
        or job["job_name"].startswith(f"{collector.ENGINES_JOB}-")
    ]
    for job in engine_jobs:
        del job["kubernetes_sd_configs"]
        targets = []
        for pod in pods:
            targets.append(_static_target(pod, contracts.PORT_NAME_HTTP, pod.port))
            # The same pod's other ports, which the engines job must not scrape.
            targets += [_static_target(pod, name, port) for name, port in pod.extra_ports.items()]
        job["static_configs"] = targets
    live["receivers"][collector.RECEIVER]["config"]["scrape_configs"] = engine_jobs

    processors = live["processors"]
    del processors["k8s_attributes"]
    processors[STANDIN_PROCESSOR] = {
        "error_mode": "ignore",
        "metric_statements": _standin_groups(pods),
    }
    # Engines' traces and logs (the OTLP receiver's pipelines) are another test's
    # (tests/collector/test_live_traces.py): only the metrics pipeline runs here.
    pipelines = live["service"]["pipelines"]
    for name in [n for n in pipelines if n != "metrics"]:
        del pipelines[name]
    live["receivers"].pop(collector.OTLP_RECEIVER, None)
    pipeline = pipelines["metrics"]
    pipeline["processors"] = [
        STANDIN_PROCESSOR if p == "k8s_attributes" else p for p in pipeline["processors"]
    ]

    gateway = live["exporters"].pop(collector.EXPORTER, None)
    if gateway is not None:
        live["exporters"][TEST_EXPORTER] = {
            "endpoint": sink_endpoint,
            "encoding": "json",
            "compression": "none",
            "auth": gateway["auth"],
        }
    if collector.SIGNALS_EXPORTER in live["exporters"]:
        live["exporters"][collector.SIGNALS_EXPORTER]["endpoint"] = f"127.0.0.1:{free_port()}"
    pipeline["exporters"] = [
        TEST_EXPORTER if e == collector.EXPORTER else e for e in pipeline["exporters"]
    ]
    return live


def signals_url(live: dict[str, Any]) -> str:
    """Where a live overlay's signals page is served."""
    endpoint = live["exporters"][collector.SIGNALS_EXPORTER]["endpoint"]
    return f"http://{endpoint}/metrics"


@dataclass
class Export:
    authorization: str
    body: dict[str, Any]


@dataclass
class OtlpJsonSink:
    """A loopback OTLP/HTTP receiver that keeps every JSON export it is sent."""

    exports: list[Export] = field(default_factory=list)
    port: int = 0

    def __enter__(self) -> OtlpJsonSink:
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sink.exports.append(
                    Export(self.headers.get("Authorization", ""), json.loads(body or b"{}"))
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *_args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *_exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def running_collector(otelcol: Path, config: dict[str, Any], folder: Path) -> Iterator[Path]:
    """Start the collector on `config`; yields its log file; always stops it."""
    config_path = folder / "collector.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    log = folder / "collector.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(otelcol), f"--config={config_path}"],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield log
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def validate(otelcol: Path, config: dict[str, Any], folder: Path) -> subprocess.CompletedProcess:
    path = folder / "validate.yaml"
    path.write_text(yaml.safe_dump(localize_paths(config, folder), sort_keys=False))
    return subprocess.run(
        [str(otelcol), "validate", f"--config={path}"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


# --- reading OTLP JSON ---------------------------------------------------------------------


def _value(attribute_value: dict[str, Any]) -> Any:
    return next(iter(attribute_value.values())) if attribute_value else None


def _attributes(items: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {item["key"]: _value(item.get("value", {})) for item in items or []}


@dataclass(frozen=True)
class Point:
    metric: str
    unit: str
    kind: str
    resource: dict[str, Any]
    attributes: dict[str, Any]
    time: int
    value: float | None = None
    count: int | None = None
    total: float | None = None
    bounds: tuple[float, ...] = ()
    buckets: tuple[int, ...] = ()


def points(exports: list[Export]) -> list[Point]:
    """Every data point in every export, flattened, in arrival order."""
    found: list[Point] = []
    for export in exports:
        for resource_metrics in export.body.get("resourceMetrics", []):
            resource = _attributes(resource_metrics.get("resource", {}).get("attributes"))
            for scope in resource_metrics.get("scopeMetrics", []):
                for metric in scope.get("metrics", []):
                    for kind in ("gauge", "sum", "histogram"):
                        if kind not in metric:
                            continue
                        for dp in metric[kind].get("dataPoints", []):
                            common = {
                                "metric": metric["name"],
                                "unit": metric.get("unit", ""),
                                "kind": kind,
                                "resource": resource,
                                "attributes": _attributes(dp.get("attributes")),
                                "time": int(dp.get("timeUnixNano", 0)),
                            }
                            if kind == "histogram":
                                found.append(
                                    Point(
                                        **common,
                                        count=int(dp.get("count", 0)),
                                        total=float(dp.get("sum", 0.0)),
                                        bounds=tuple(
                                            float(b) for b in dp.get("explicitBounds", [])
                                        ),
                                        buckets=tuple(int(b) for b in dp.get("bucketCounts", [])),
                                    )
                                )
                            else:
                                # Protobuf JSON leaves a zero value out.
                                raw = dp.get("asDouble", dp.get("asInt", 0))
                                found.append(Point(**common, value=float(raw)))
    return found


def wait_for(predicate, timeout: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}\n{log.read_text()[-4000:]}"
    )
