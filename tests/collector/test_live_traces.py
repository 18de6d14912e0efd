"""One pipeline for metrics and traces, live: an engine's trace reaches the destination
with the model and the cluster on it, through the rendered cluster collector and gateway.

    fake engine ──OTLP/HTTP span──▶ cluster collector ──OTLP + bearer token + TLS──▶
        gateway ──OTLP──▶ destination

Real parts: three collectors from hack/tools.sh; a real kube-apiserver (with etcd) whose
Pod objects `k8s_attributes` reads, as it would in a cluster; the configs from
`render_cluster_collector_config` and `render_gateway_config`. The destination is a
collector with an OTLP receiver that hands what it gets to a loopback JSON sink.

Test substitutions (nothing a cluster would do differently to the data): the collector
reaches the API server with a kubeconfig instead of an in-cluster service account; the
engine's Pod has `status.podIP` 127.0.0.1, because that is the address its OTLP push comes
from on this host (in a cluster, the pod's own address); listen addresses are loopback
ports; the cluster collector trusts the gateway's self-signed test certificate. The
prometheus pipeline is left out (tests/collector/test_live_pipeline.py runs it).

The node tier runs too, with its own collector build (hack/tools/otelcol-node, a release
of its own: see its manifest): `render_node_collector_config` as rendered, with
`hostmetrics` reading this host and `filelog` tailing a folder laid out as the kubelet
lays out /var/log/pods (`<namespace>_<pod>_<uid>/<container>/0.log`, CRI lines), through
`k8s_attributes` (the same API server) and the engine-logs filter to the same gateway.
Its test substitutions: `kubeletstats` is left out of the pipeline (there is no kubelet
to read: it stays rendered, and `otelcol validate` checks it), `hostmetrics` reads `/`
rather than the host's filesystem mounted at `/hostfs`, and the log folder is the test's.
`k8s_cluster` (the cluster collector's cluster state) needs a controller manager's
workloads to report and is not run.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from fleetbox.process import Process
from functions.common import contracts
from functions.common.telemetrydestination import parse_destination
from functions.compose_serving_stack import collector
from functions.compose_telemetry import gateway
from tests.collector.harness import OtlpJsonSink, free_port
from tests.conftest import require_tool
from tests.runtime.cluster import Member
from tests.telemetry.test_live_fleet import (
    STOP_GRACE_SECONDS,
    http_ok,
    self_signed_certificate,
    wait_for,
    write_yaml,
)

TOKEN = "fleet-token-for-the-traces-and-logs-test"
CLUSTER = "cluster-a"
NAMESPACE = "ml-team"
MODEL = "llama-3-1-8b"
SERVING = f"{MODEL}-{CLUSTER}"
ENGINE_POD = f"{MODEL}-0"
OTHER_POD = "someone-elses-app"
NODE = "gpu-node-1"
ARRIVAL_SECONDS = 90  # upper bound; typically a few seconds


@dataclass
class Pipeline:
    workdir: Path
    sink: OtlpJsonSink
    processes: list[Process]
    otlp_http_port: int
    engine_uid: str
    other_uid: str
    logs_dir: Path

    def logs(self) -> str:
        tails = []
        for process in self.processes:
            text = process.log.read_text(errors="replace") if process.log.exists() else ""
            tails.append(f"--- {process.name}\n" + "\n".join(text.splitlines()[-25:]))
        return "\n".join(tails)


def _pod(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "nodeName": NODE,
            "automountServiceAccountToken": False,
            "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}],
        },
    }


def _api_objects(member: Member) -> tuple[str, str]:
    """The model's engine pod (our labels, as compose-model-replica stamps them) and a
    pod that is not ours; returns their uids."""
    api = member.client()
    try:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})
        engine_labels = {
            contracts.LABEL_SERVING: SERVING,
            contracts.LABEL_DEPLOYMENT: MODEL,
            contracts.LABEL_ENGINE: "vllm",
            contracts.LABEL_ROLE: contracts.ROLE_STANDALONE,
        }
        engine = core.create_namespaced_pod(NAMESPACE, _pod(ENGINE_POD, engine_labels))
        other = core.create_namespaced_pod(NAMESPACE, _pod(OTHER_POD, {"app": "other"}))
        # Where the engine's OTLP connection comes from on this host (see the module doc).
        core.patch_namespaced_pod_status(
            ENGINE_POD,
            NAMESPACE,
            {"status": {"podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}]}},
        )
        return engine.metadata.uid, other.metadata.uid
    finally:
        api.close()


def _kubeconfig(member: Member, path: Path) -> Path:
    return write_yaml(path, member.kubeconfig())


def _use_kubeconfig(config: dict[str, Any]) -> None:
    # test substitution: a kubeconfig instead of the in-cluster service account.
    for section in ("processors", "receivers"):
        for component in config.get(section, {}).values():
            if isinstance(component, dict) and component.get("auth_type") == "serviceAccount":
                component["auth_type"] = "kubeConfig"


def _common(config: dict[str, Any], ca: Path) -> None:
    config["exporters"][collector.EXPORTER]["tls"] = {"ca_file": str(ca)}
    config["extensions"][collector.HEALTH_CHECK]["endpoint"] = f"127.0.0.1:{free_port()}"
    config["service"]["telemetry"] = {"metrics": {"level": "none"}}
    _use_kubeconfig(config)


def cluster_collector_config(gateway_port: int, token: Path, ca: Path) -> tuple[dict, int]:
    config = collector.render_cluster_collector_config(
        collector.CollectorCluster(CLUSTER),
        (),
        collector.CollectorDestination(f"127.0.0.1:{gateway_port}", token_file=str(token)),
        scrape_interval_seconds=2,
    )
    _common(config, ca)
    # The prometheus pipeline is another test's (tests/collector/test_live_pipeline.py).
    del config["service"]["pipelines"]["metrics"]
    del config["receivers"][collector.RECEIVER]
    http_port = free_port()
    protocols = config["receivers"][collector.OTLP_RECEIVER]["protocols"]
    protocols["grpc"]["endpoint"] = f"127.0.0.1:{free_port()}"
    protocols["http"]["endpoint"] = f"127.0.0.1:{http_port}"
    return config, http_port


def destination_config(grpc_port: int, sink: OtlpJsonSink, health_port: int) -> dict:
    """The operator's backend: a collector that takes OTLP and hands it to the sink."""
    pipeline = {"receivers": ["otlp"], "exporters": ["otlp_http/sink"]}
    return {
        "extensions": {"health_check": {"endpoint": f"127.0.0.1:{health_port}"}},
        "receivers": {"otlp": {"protocols": {"grpc": {"endpoint": f"127.0.0.1:{grpc_port}"}}}},
        "exporters": {
            "otlp_http/sink": {
                "endpoint": sink.endpoint,
                "encoding": "json",
                "compression": "none",
            }
        },
        "service": {
            "extensions": ["health_check"],
            "telemetry": {"metrics": {"level": "none"}},
            "pipelines": {"traces": pipeline, "logs": pipeline, "metrics": pipeline},
        },
    }


def telemetry_destination(destination_port: int) -> dict:
    return {
        "metadata": {"name": "fleet", "creationTimestamp": "2026-11-02T09:00:00Z"},
        "spec": {
            "gateway": {
                "providerConfigRef": {"name": "control-plane"},
                "endpoint": "127.0.0.1:4317",
                "tokenSecretRef": {"name": "t", "namespace": "crossplane-system", "key": "token"},
            },
            "exporter": {
                "type": "OTLPGRPC",
                "endpoint": f"127.0.0.1:{destination_port}",
                "tls": {"insecure": True},
            },
            "rollup": {"enabled": False},
        },
    }


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory) -> Iterator[Pipeline]:
    otelcol = require_tool("otelcol")
    etcd = require_tool("etcd")
    apiserver = require_tool("kube-apiserver")
    workdir = tmp_path_factory.mktemp("traces-logs")
    token = workdir / "token"
    token.write_text(TOKEN)
    cert, key = self_signed_certificate(workdir)
    logs_dir = workdir / "pods"
    logs_dir.mkdir()
    member = Member("member", workdir / "member", etcd, apiserver)
    processes: list[Process] = []
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(OtlpJsonSink())
        try:
            member.start_etcd()
            member.start_apiserver()
            engine_uid, other_uid = _api_objects(member)
            kubeconfig = {"KUBECONFIG": str(_kubeconfig(member, workdir / "kubeconfig"))}

            destination_port, destination_health = free_port(), free_port()
            destination = Process(
                "destination",
                [
                    str(otelcol),
                    "--config="
                    + str(
                        write_yaml(
                            workdir / "destination.yaml",
                            destination_config(destination_port, sink, destination_health),
                        )
                    ),
                ],
                workdir / "destination.log",
            )
            listen = gateway.Listen(
                host="127.0.0.1",
                grpc_port=free_port(),
                http_port=free_port(),
                health_port=free_port(),
                telemetry_port=free_port(),
                token_file=str(token),
                tls_cert_file=str(cert),
                tls_key_file=str(key),
            )
            gateway_config = gateway.render_gateway_config(
                parse_destination(telemetry_destination(destination_port)), listen
            )
            gateway_process = Process(
                "gateway",
                [str(otelcol), f"--config={write_yaml(workdir / 'gateway.yaml', gateway_config)}"],
                workdir / "gateway.log",
            )
            cluster_config, otlp_http_port = cluster_collector_config(listen.grpc_port, token, cert)
            cluster_process = Process(
                "cluster-collector",
                [str(otelcol), f"--config={write_yaml(workdir / 'cluster.yaml', cluster_config)}"],
                workdir / "cluster.log",
                env=kubeconfig,
            )
            processes += [destination, gateway_process, cluster_process]
            built = Pipeline(
                workdir, sink, processes, otlp_http_port, engine_uid, other_uid, logs_dir
            )
            for process, config in (
                (destination, None),
                (gateway_process, None),
                (cluster_process, cluster_config),
            ):
                process.start()
                port = (
                    int(config["extensions"][collector.HEALTH_CHECK]["endpoint"].split(":")[1])
                    if config
                    else (destination_health if process is destination else listen.health_port)
                )
                wait_for(
                    f"{process.name} to be healthy",
                    lambda port=port: http_ok(f"http://127.0.0.1:{port}/"),
                    60,
                    built.logs,
                )
            yield built
        finally:
            for process in reversed(processes):
                process.stop(grace=STOP_GRACE_SECONDS)
            member.close()


# --- what the engine does -----------------------------------------------------------------


def send_engine_span(pipeline: Pipeline, trace_id: str) -> None:
    """One span as vLLM's tracer exports it (scope `vllm.entrypoints.openai`), over
    OTLP/HTTP JSON. The resource names no pod: the collector finds it by the address."""
    now = time.time_ns()
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [{"key": "service.name", "value": {"stringValue": "vllm"}}]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "vllm.entrypoints.openai"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": "00f067aa0ba902b7",
                                "name": "llm_request",
                                "kind": 2,
                                "startTimeUnixNano": str(now - 250_000_000),
                                "endTimeUnixNano": str(now),
                                "attributes": [
                                    {
                                        "key": "gen_ai.request.model",
                                        "value": {"stringValue": MODEL},
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ]
    }
    request = urllib.request.Request(
        f"http://127.0.0.1:{pipeline.otlp_http_port}/v1/traces",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        assert answer.status == 200


# --- reading what the destination got -----------------------------------------------------


def _attributes(items: list[dict] | None) -> dict[str, Any]:
    return {i["key"]: next(iter(i.get("value", {}).values()), None) for i in items or []}


def resources_of(pipeline: Pipeline, kind: str, records: str) -> list[tuple[dict, list[dict]]]:
    """(resource attributes, records) for every resource of one signal in the sink."""
    found = []
    for export in list(pipeline.sink.exports):
        for resource in export.body.get(kind, []):
            attributes = _attributes(resource.get("resource", {}).get("attributes"))
            for scope in resource.get("scopeSpans", []) + resource.get("scopeLogs", []):
                found.append((attributes, scope.get(records, [])))
            for scope in resource.get("scopeMetrics", []):
                found.append((attributes, scope.get("metrics", [])))
    return found


def arrived_span(pipeline: Pipeline, trace_id: str) -> dict | None:
    """The attributes of the span's attributed arrival if one came, else of any arrival:
    every send repeats the trace id, and the first may have beaten k8s_attributes."""
    found = [
        attributes
        for attributes, spans in resources_of(pipeline, "resourceSpans", "spans")
        if any(span.get("traceId") == trace_id for span in spans)
    ]
    attributed = [a for a in found if a.get(contracts.RESOURCE_ATTR_DEPLOYMENT)]
    return (attributed or found or [None])[0]


MODEL_ATTRIBUTES = {
    contracts.RESOURCE_ATTRIBUTE_CLUSTER: CLUSTER,
    contracts.RESOURCE_ATTR_DEPLOYMENT: MODEL,
    contracts.RESOURCE_ATTR_SERVING: SERVING,
    contracts.RESOURCE_ATTR_ENGINE: "vllm",
    contracts.RESOURCE_ATTR_NAMESPACE: NAMESPACE,
}


def _wait_attributed(pipeline: Pipeline, what: str, read, send) -> dict:
    """Send until an arrival carries the model's attributes: the first sends may beat
    k8s_attributes' first list of the pods, and those arrive unattributed."""
    deadline = time.monotonic() + ARRIVAL_SECONDS
    while time.monotonic() < deadline:
        send()
        time.sleep(2)
        attributes = read()
        if attributes and attributes.get(contracts.RESOURCE_ATTR_DEPLOYMENT):
            return attributes
    pytest.fail(f"{what} did not arrive attributed in {ARRIVAL_SECONDS}s\n{pipeline.logs()}")


def test_an_engine_trace_arrives_with_the_model_and_cluster(pipeline):
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    attributes = _wait_attributed(
        pipeline,
        "the engine's span",
        lambda: arrived_span(pipeline, trace_id),
        lambda: send_engine_span(pipeline, trace_id),
    )
    assert {k: attributes.get(k) for k in MODEL_ATTRIBUTES} == MODEL_ATTRIBUTES
    assert attributes["k8s.pod.name"] == ENGINE_POD
    assert attributes["service.name"] == "vllm"


# --- the node tier --------------------------------------------------------------------------


@dataclass
class NodeTier:
    process: Process
    engine_log: Path
    other_log: Path


def node_collector_config(pipeline: Pipeline, gateway_port: int, token: Path, ca: Path) -> dict:
    config = collector.render_node_collector_config(
        collector.CollectorCluster(CLUSTER),
        collector.CollectorDestination(f"127.0.0.1:{gateway_port}", token_file=str(token)),
        interval_seconds=2,
    )
    _common(config, ca)
    metrics = config["service"]["pipelines"]["metrics"]
    # test substitution: no kubelet here; kubeletstats stays rendered, but not run.
    metrics["receivers"].remove("kubeletstats")
    del config["receivers"]["kubeletstats"]
    # test substitution: this host's own filesystem, not the node's mounted at /hostfs.
    config["receivers"]["hostmetrics"]["root_path"] = "/"
    # test substitution: the test's /var/log/pods.
    logs = config["receivers"][collector.LOGS_RECEIVER]
    logs["include"] = [f"{pipeline.logs_dir}/*/*/*.log"]
    logs["exclude"] = [f"{pipeline.logs_dir}/{contracts.SYSTEM_NAMESPACE}_*/*/*.log"]
    return config


def _pod_log(pipeline: Pipeline, pod: str, uid: str) -> Path:
    """Where the kubelet writes a container's log: /var/log/pods/<ns>_<pod>_<uid>/<c>/0.log."""
    folder = pipeline.logs_dir / f"{NAMESPACE}_{pod}_{uid}" / "engine"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "0.log"
    path.touch()
    return path


def _cri_line(path: Path, message: str) -> None:
    """One line as containerd writes it: time, stream, full-line tag, message."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + ".000000000Z"
    with path.open("a") as log:
        log.write(f"{stamp} stdout F {message}\n")


@pytest.fixture(scope="module")
def node_tier(pipeline) -> Iterator[NodeTier]:
    otelcol_node = require_tool("otelcol-node", "otelcol_node")
    workdir = pipeline.workdir
    gateway_config = yaml.safe_load((workdir / "gateway.yaml").read_text())
    gateway_port = int(
        gateway_config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"].rsplit(":", 1)[1]
    )
    config = node_collector_config(
        pipeline, gateway_port, workdir / "token", workdir / "gateway.crt"
    )
    engine_log = _pod_log(pipeline, ENGINE_POD, pipeline.engine_uid)
    other_log = _pod_log(pipeline, OTHER_POD, pipeline.other_uid)
    cluster_env = next(p for p in pipeline.processes if p.name == "cluster-collector").env
    process = Process(
        "node-collector",
        [str(otelcol_node), f"--config={write_yaml(workdir / 'node.yaml', config)}"],
        workdir / "node.log",
        env={**(cluster_env or {}), "K8S_NODE_NAME": NODE},
    )
    pipeline.processes.append(process)
    process.start()
    port = int(config["extensions"][collector.HEALTH_CHECK]["endpoint"].split(":")[1])
    wait_for(
        "the node collector to be healthy",
        lambda: http_ok(f"http://127.0.0.1:{port}/"),
        60,
        pipeline.logs,
    )
    try:
        yield NodeTier(process, engine_log, other_log)
    finally:
        process.stop(grace=STOP_GRACE_SECONDS)
        pipeline.processes.remove(process)


def arrived_log(pipeline: Pipeline, text: str) -> dict | None:
    found = [
        attributes
        for attributes, records in resources_of(pipeline, "resourceLogs", "logRecords")
        if any(text in str(r.get("body", {}).get("stringValue", "")) for r in records)
    ]
    attributed = [a for a in found if a.get(contracts.RESOURCE_ATTR_DEPLOYMENT)]
    return (attributed or found or [None])[0]


def test_an_engine_log_line_arrives_with_its_pod_and_model(pipeline, node_tier):
    line = "INFO 12-06 06:00:00 [loggers.py:123] Engine 000: Avg prompt throughput: 42.0"
    attributes = _wait_attributed(
        pipeline,
        "the engine's log line",
        lambda: arrived_log(pipeline, line),
        lambda: (_cri_line(node_tier.engine_log, line), _cri_line(node_tier.other_log, line)),
    )
    assert {k: attributes.get(k) for k in MODEL_ATTRIBUTES} == MODEL_ATTRIBUTES
    assert attributes["k8s.pod.name"] == ENGINE_POD
    assert attributes["k8s.pod.uid"] == pipeline.engine_uid
    assert attributes["k8s.container.name"] == "engine"
    # The other pod's identical lines are dropped on the node: every arrival is the engine's.
    for found, records in resources_of(pipeline, "resourceLogs", "logRecords"):
        if any(line in str(r.get("body", {}).get("stringValue", "")) for r in records):
            assert found.get("k8s.pod.name") != OTHER_POD, found


def test_host_metrics_arrive_with_the_cluster(pipeline, node_tier):
    def host_metrics() -> set[str]:
        return {
            metric["name"]
            for attributes, metrics in resources_of(pipeline, "resourceMetrics", "metrics")
            if attributes.get(contracts.RESOURCE_ATTRIBUTE_CLUSTER) == CLUSTER
            for metric in metrics
            if metric["name"].startswith("system.")
        }

    wait_for(
        "the host's metrics at the destination",
        lambda: {"system.cpu.time", "system.memory.usage"} <= host_metrics(),
        ARRIVAL_SECONDS,
        pipeline.logs,
    )
