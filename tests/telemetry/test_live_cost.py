"""Live: what each model's GPUs cost per hour, and the runtime's own metrics, arrive at a
real Prometheus as the destination, per cluster and rolled up per model.

    member API server us-east-1 ──▶ agent + activator us-east-1 ──▶ cluster collector us-east-1 ─┐
    member API server eu-west-1 ──▶ agent + activator eu-west-1 ──▶ cluster collector eu-west-1 ─┤
                                              OTLP ──▶ gateway ──▶ Prometheus (remote write) ◀─┘

Real parts: two kube-apiservers (with etcd) holding each member's Nodes (labelled as the
example InferenceClusters' pools select them), ResourceClaims with allocations (GPUs from
`gpu.nvidia.com`, and on us-east-1 a NIC from `dra.net` beside them) and model pods bound
to the nodes; the agent as it ships (`modelplane-runtime agent`, both members configured,
so they elect one hub), with the `--pool-price` arguments `crossplane render` composed for
the example InferenceClusters (us-east-1's H100 at 4.5, eu-west-1's B200 at 6.25); the
activator as it ships (`modelplane-runtime activator`, with the arguments composed for
it), reading the member's HTTPRoutes (the real Gateway API CRD, with the route
compose-model-replica composes for an on-demand model) and serving its own metrics; the
cluster collectors' configs from the same renders (their ConfigMaps); the gateway's from
the real render of a TelemetryDestination that remote-writes to this Prometheus; the
collector and Prometheus from hack/tools.sh.

What the test substitutes, because there is no Kubernetes network here (each marked
`# test substitution`): the collectors' pod discovery of the agent becomes a static
target carrying the `__meta_kubernetes_*` labels discovery would attach (so the rendered
keep rules select it as rendered), and the activator's the same; `k8s_attributes` is
left out (the agent is not a model pod: it would add nothing); the activator's control
plane is its own member's API server (it is only asked about a model no route vouches
for, so it reads nothing there); the jobs of engines and substrate, which have no pods
here, are left out; listen addresses, file paths and the gateway endpoint point at
loopback and the test's files, and the collectors trust the test's certificate.
"""

from __future__ import annotations

import contextlib
import http.client
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from kubernetes import client

import render
from fleetbox.process import Process
from functions.common import contracts
from functions.common.cost import MODEL_COST_PER_HOUR
from functions.common.exposition import prometheus_label
from functions.compose_serving_stack import collector
from functions.compose_telemetry import gateway, rollup
from functions.runtime.activator import metrics as activator_metrics
from functions.runtime.kube.rest import kube_request
from functions.runtime.shared.cert_expiry import CERTIFICATE_EXPIRY
from functions.runtime.shared.metrics import HUB_LEADING
from tests.collector.harness import localize_paths
from tests.conftest import REPO, require_tool
from tests.runtime.cluster import Member
from tests.runtime.test_hub_integration import install_crds
from tests.telemetry.test_live_fleet import (
    STOP_GRACE_SECONDS,
    Fleet,
    free_port,
    http_ok,
    self_signed_certificate,
    wait_for,
    write_yaml,
)
from tests.unit.test_activator import composed_route, token_of

EXAMPLES = REPO / "examples" / "inferenceclusters"
CLUSTERS = {
    "us-east-1": EXAMPLES / "us-east-h100.yaml",
    "eu-west-1": EXAMPLES / "eu-west-b200.yaml",
}
DESTINATION = REPO / "examples" / "telemetrydestinations" / "fleet.yaml"
NAMESPACE = "ml-team"
LLAMA = "llama-3-1-8b"
QWEN = "qwen-2-5-32b"
GPU = "gpu.nvidia.com"
NIC = "dra.net"
RESOURCE = "/apis/resource.k8s.io/v1"
CLUSTER = prometheus_label(contracts.RESOURCE_ATTRIBUTE_CLUSTER)
FLEET = 'modelplane_scope="fleet"'
ENTRYPOINT = [sys.executable, "-m", "functions.entrypoint", "runtime"]


# --- what crossplane render composes ------------------------------------------------------


def _manifests(documents: list[dict]) -> list[dict]:
    return [
        d["spec"]["forProvider"]["manifest"]
        for d in documents[1:]
        if d.get("kind") == contracts.OBJECT_KIND and "manifest" in d["spec"]["forProvider"]
    ]


def _render(function_servers, xr: Path, required: list[Path], folder: Path) -> list[dict]:
    folder.mkdir(parents=True)
    for i, path in enumerate(required):
        shutil.copy(path, folder / f"{i:02d}-{path.name}")
    result = render.render(function_servers, xr, required=folder)
    assert result.returncode == 0, result.stderr + function_servers.logs()
    return result.documents


@dataclass
class RenderedMember:
    agent_args: list[str]  # the composed agent container's arguments after `runtime agent`
    collector_config: dict
    activator_args: list[str]  # after `runtime activator`
    activator_ports: dict[str, int]  # the activator container's declared ports, by name


def render_member(function_servers, name: str, folder: Path) -> RenderedMember:
    manifests = _manifests(_render(function_servers, CLUSTERS[name], [DESTINATION], folder))
    agent = next(
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"] == contracts.AGENT_SERVICE_NAME
    )
    config_map = next(
        m
        for m in manifests
        if m["kind"] == "ConfigMap"
        and "config.yaml" in (m.get("data") or {})
        and m["metadata"]["namespace"] == contracts.SYSTEM_NAMESPACE
    )
    args = agent["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["runtime", "agent"]
    activator = next(
        m
        for m in manifests
        if m["kind"] == "Deployment" and m["metadata"]["name"] == contracts.ACTIVATOR_SERVICE_NAME
    )
    (container,) = activator["spec"]["template"]["spec"]["containers"]
    assert container["args"][:2] == ["runtime", "activator"]
    return RenderedMember(
        args[2:],
        yaml.safe_load(config_map["data"]["config.yaml"]),
        container["args"][2:],
        {p["name"]: p["containerPort"] for p in container["ports"]},
    )


def render_gateway(function_servers, prometheus_port: int, folder: Path) -> dict:
    destination = yaml.safe_load(DESTINATION.read_text())
    destination["metadata"]["creationTimestamp"] = "2026-11-02T09:00:00Z"
    # This Prometheus, on loopback: remote write over plain HTTP, no header credential.
    destination["spec"]["exporter"] = {
        "type": "PrometheusRemoteWrite",
        "endpoint": f"http://127.0.0.1:{prometheus_port}/api/v1/write",
        "tls": {"insecure": True},
    }
    xr = write_yaml(folder / "destination.yaml", destination)
    manifests = _manifests(_render(function_servers, xr, [xr], folder / "required"))
    config_map = next(
        m
        for m in manifests
        if m["kind"] == "ConfigMap" and m["metadata"]["name"] == gateway.GATEWAY_NAME
    )
    return yaml.safe_load(config_map["data"][gateway.CONFIG_FILE])


# --- the rendered configs, runnable on loopback -------------------------------------------


def live_gateway(config: dict, listen: gateway.Listen) -> dict:
    """test substitution: the rendered gateway on loopback ports, with the test's token
    file and certificate (in a cluster TLS is terminated in front of the Service)."""
    otlp = config["receivers"]["otlp"]["protocols"]
    tls = {"cert_file": listen.tls_cert_file, "key_file": listen.tls_key_file}
    otlp["grpc"]["endpoint"] = f"127.0.0.1:{listen.grpc_port}"
    otlp["http"]["endpoint"] = f"127.0.0.1:{listen.http_port}"
    otlp["grpc"]["tls"] = tls
    otlp["http"]["tls"] = tls
    config["extensions"]["health_check"]["endpoint"] = f"127.0.0.1:{listen.health_port}"
    config["extensions"]["bearertokenauth"]["filename"] = listen.token_file
    snapshot = f"127.0.0.1:{listen.snapshot_port}"
    config["exporters"][rollup.EXPORTER_SNAPSHOT]["endpoint"] = snapshot
    job = config["receivers"][rollup.RECEIVER_SNAPSHOT]["config"]["scrape_configs"][0]
    job["static_configs"] = [{"targets": [snapshot]}]
    job["scrape_interval"] = listen.snapshot_scrape_interval
    config["service"]["telemetry"] = {"metrics": {"level": "none"}}
    return config


def _runtime_target(job: str, name: str, port: int) -> dict:
    """What Kubernetes discovery would attach to a runtime pod's `metrics` port (the
    agent's, the activator's: labelled with its job's name, as runtime_hosting does)."""
    pod_label = prometheus_label("app.kubernetes.io/name")
    return {
        "targets": [f"127.0.0.1:{port}"],
        "labels": {
            "__meta_kubernetes_namespace": contracts.SYSTEM_NAMESPACE,
            "__meta_kubernetes_pod_name": f"{job}-{name}-0",
            "__meta_kubernetes_pod_uid": f"uid-{job}-{name}",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_container_port_name": contracts.PORT_NAME_METRICS,
            f"__meta_kubernetes_pod_label_{pod_label}": job,
        },
    }


def live_collector(
    config: dict,
    name: str,
    *,
    agent_port: int,
    activator_port: int,
    listen: gateway.Listen,
    ca: Path,
    folder: Path,
) -> dict:
    live = localize_paths(config, folder)
    scrape = live["receivers"][collector.RECEIVER]["config"]["scrape_configs"]
    jobs = {j["job_name"]: j for j in scrape}
    runtime = {
        contracts.AGENT_SERVICE_NAME: agent_port,
        contracts.ACTIVATOR_SERVICE_NAME: activator_port,
    }
    # test substitution: the runtime's pods as discovery would offer them (the rendered
    # relabel rules still pick them); no other job has pods here.
    for job_name, port in runtime.items():
        job = jobs[job_name]
        del job["kubernetes_sd_configs"]
        job["static_configs"] = [_runtime_target(job_name, name, port)]
        job["scrape_interval"] = "2s"
        job["scrape_timeout"] = "2s"
    live["receivers"][collector.RECEIVER]["config"]["scrape_configs"] = [jobs[j] for j in runtime]
    # test substitution: no API server to look pods up in (the agent is not a model pod).
    pipeline = live["service"]["pipelines"]["metrics"]
    pipeline["processors"].remove("k8s_attributes")
    del live["processors"]["k8s_attributes"]
    # A tick per scrape, as the rendered interval is per (30 s) scrape.
    live["processors"][collector.INTERVAL]["interval"] = "2s"
    # test substitution: the gateway on loopback, trusted through the test's certificate.
    exporter = live["exporters"][collector.EXPORTER]
    exporter["endpoint"] = f"127.0.0.1:{listen.grpc_port}"
    exporter["tls"] = {"ca_file": str(ca)}
    live["extensions"][collector.AUTHENTICATOR]["filename"] = listen.token_file
    return live


# --- the members --------------------------------------------------------------------------


def _node(api, name: str, labels: dict[str, str]) -> None:
    client.CoreV1Api(api).create_node({"metadata": {"name": name, "labels": labels}})


def _claim(api, name: str, devices: list[tuple[str, str, str]]) -> None:
    path = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
    created = kube_request(
        api,
        "POST",
        path,
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": GPU, "count": len(devices)}}
                    ]
                }
            },
        },
    )
    created["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": driver, "pool": pool, "device": device}
                    for driver, pool, device in devices
                ]
            }
        }
    }
    kube_request(api, "PUT", f"{path}/{name}/status", body=created)


def _pod(api, name: str, node: str, *, deployment: str, cluster: str, claim: str) -> None:
    core = client.CoreV1Api(api)
    core.create_namespaced_pod(
        NAMESPACE,
        {
            "metadata": {
                "name": name,
                "labels": {
                    contracts.LABEL_SERVING: f"{deployment}-{cluster}",
                    contracts.LABEL_DEPLOYMENT: deployment,
                    contracts.LABEL_ROLE: "Standalone",
                },
            },
            "spec": {
                "nodeName": node,
                "containers": [{"name": "engine", "image": "vllm/vllm-openai:v0.11.0"}],
                "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            },
        },
    )
    pod = core.read_namespaced_pod(name, NAMESPACE)
    pod.status = client.V1PodStatus(phase="Running")
    core.replace_namespaced_pod_status(name, NAMESPACE, pod)


def populate_us_east(api) -> None:
    """Llama on an H100 node with two GPUs and a NIC; Qwen on an L40S node with two GPUs."""
    _node(api, "h100-0", {"karpenter.sh/nodepool": "h100"})
    _node(api, "l40s-0", {"node.kubernetes.io/instance-type": "g6e.12xlarge"})
    _claim(
        api,
        "llama-0",
        [(GPU, "h100-0", "gpu-0"), (GPU, "h100-0", "gpu-1"), (NIC, "h100-0", "nic-0")],
    )
    _pod(api, "llama-0", "h100-0", deployment=LLAMA, cluster="us-east-1", claim="llama-0")
    _claim(api, "qwen-0", [(GPU, "l40s-0", "gpu-0"), (GPU, "l40s-0", "gpu-1")])
    _pod(api, "qwen-0", "l40s-0", deployment=QWEN, cluster="us-east-1", claim="qwen-0")


def populate_eu_west(api) -> None:
    """Llama on a B200 node with four GPUs."""
    _node(api, "b200-0", {"karpenter.sh/nodepool": "b200"})
    _claim(api, "llama-0", [(GPU, "b200-0", f"gpu-{i}") for i in range(4)])
    _pod(api, "llama-0", "b200-0", deployment=LLAMA, cluster="eu-west-1", claim="llama-0")


POPULATE = {"us-east-1": populate_us_east, "eu-west-1": populate_eu_west}
# The on-demand model each member's route leads to its activator for.
ON_DEMAND = "mistral-7b"


def route_on_demand(api) -> None:
    """The Gateway API's HTTPRoute CRD, and the route compose-model-replica composes for
    an on-demand model here (it leads to the activator: the activator vouches for it)."""
    install_crds(api)
    route = composed_route(NAMESPACE, ON_DEMAND)
    group, version = route["apiVersion"].split("/")
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        group, version, NAMESPACE, "httproutes", route
    )


@dataclass
class CostFleet:
    fleet: Fleet  # its query helpers and process logs
    members: dict[str, Member]
    agents: dict[str, Process]
    activators: dict[str, tuple[Process, int]]  # and the port it serves requests on


def start_member(name: str, workdir: Path) -> Member:
    member = Member(name, workdir / name, require_tool("etcd"), require_tool("kube-apiserver"))
    member.start_etcd()
    member.start_apiserver()
    member.install()
    api = member.client()
    try:
        core = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": NAMESPACE}})
        # No controller manager: the ServiceAccount pods need is made by hand.
        core.create_namespaced_service_account(NAMESPACE, {"metadata": {"name": "default"}})
        POPULATE[name](api)
        route_on_demand(api)
    finally:
        api.close()
    return member


def agent_process(
    name: str, composed: list[str], *, kubeconfigs: dict[str, Path], port: int, workdir: Path
) -> Process:
    """The agent as shipped, with the arguments crossplane render composed for it, except
    `--member`: the composed ones name this member in-cluster and peers by mounted paths;
    here every member is a kubeconfig file."""
    kept: list[str] = []
    skip = False
    for arg in composed:
        if skip:
            skip = False
        elif arg == "--member":
            skip = True
        else:
            kept.append(arg)
    assert "--pool-price" in kept, composed
    return Process(
        f"agent-{name}",
        [
            *ENTRYPOINT,
            "agent",
            f"--cluster={name}",
            "--pod=agent-0",
            *(f"--member={m}={kubeconfigs[m]}" for m in CLUSTERS),
            *kept,
            "--signals-url=",
            "--lease-duration=6",
            "--renew-deadline=4",
            "--retry-period=1",
            "--interval=inventory=2",
            "--interval=report=2",
            "--interval=health=2",
            f"--metrics-port={port}",
            f"--decision-log={workdir / f'decisions-{name}.jsonl'}",
        ],
        workdir / f"agent-{name}.log",
    )


def activator_process(
    name: str,
    composed: list[str],
    *,
    kubeconfig: Path,
    listen: int,
    health: int,
    metrics: int,
    workdir: Path,
) -> Process:
    """The activator as shipped, with the arguments crossplane render composed for it,
    except where they point into a pod: the control plane's kubeconfig (its mounted
    Secret) and the listen addresses become this member's kubeconfig and loopback ports;
    the member's routes are read through the same kubeconfig (in-cluster in a pod)."""
    replaced = {"--control-plane": str(kubeconfig), "--listen": f"127.0.0.1:{listen}"}
    replaced["--health-listen"] = f"127.0.0.1:{health}"
    args: list[str] = []
    flags = iter(composed)
    for arg in flags:
        if arg in replaced:
            next(flags)
            args += [arg, replaced.pop(arg)]
        else:
            args.append(arg)
    assert not replaced, (replaced, composed)
    # The pod serves its metrics on the default port its container declares; here
    # several processes share loopback (test substitution: a port of its own).
    assert "--metrics-port" not in args, composed
    return Process(
        f"activator-{name}",
        [
            *ENTRYPOINT,
            "activator",
            f"--cluster={name}",
            *args,
            f"--member-api={kubeconfig}",
            f"--metrics-port={metrics}",
        ],
        workdir / f"activator-{name}.log",
    )


def gateway_listen(workdir: Path) -> gateway.Listen:
    token = workdir / "token"
    # The same token the collectors read (tests/collector/harness.py localize_paths).
    token.write_text("test-gateway-token\n")
    cert, key = self_signed_certificate(workdir)
    return gateway.Listen(
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


def prometheus_process(workdir: Path, port: int) -> Process:
    return Process(
        "prometheus",
        [
            str(require_tool("prometheus")),
            f"--config.file={write_yaml(workdir / 'prometheus.yml', {'global': {}})}",
            f"--storage.tsdb.path={workdir / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--web.enable-remote-write-receiver",
            "--storage.tsdb.retention.time=1h",
        ],
        workdir / "prometheus.log",
    )


@pytest.fixture(scope="module")
def cost_fleet(function_servers, tmp_path_factory) -> Iterator[CostFleet]:
    otelcol = str(require_tool("otelcol"))
    workdir = tmp_path_factory.mktemp("cost")
    processes: list[Process] = []
    members: dict[str, Member] = {}
    try:
        prometheus_port = free_port()
        rendered = {
            name: render_member(function_servers, name, workdir / f"render-{name}")
            for name in CLUSTERS
        }
        gateway_config = render_gateway(function_servers, prometheus_port, workdir)
        prometheus = prometheus_process(workdir, prometheus_port)
        processes.append(prometheus)
        prometheus.start()

        listen = gateway_listen(workdir)
        config = write_yaml(workdir / "gateway.yaml", live_gateway(gateway_config, listen))
        gateway_process = Process(
            "gateway-0",
            [otelcol, f"--config={config}"],
            workdir / "gateway.log",
            env={rollup.POD_NAME_ENV: "gateway-0"},
        )
        processes.append(gateway_process)

        for name in CLUSTERS:
            members[name] = start_member(name, workdir)
        kubeconfigs = {
            name: write_yaml(workdir / f"{name}.kubeconfig", member.kubeconfig())
            for name, member in members.items()
        }
        agents: dict[str, Process] = {}
        activators: dict[str, tuple[Process, int]] = {}
        collectors: dict[str, Process] = {}
        for name in CLUSTERS:
            # The composed activator declares the port `runtime activator` serves its
            # metrics on by default, under the name the collector's job selects.
            assert rendered[name].activator_ports[contracts.PORT_NAME_METRICS] == (
                contracts.METRICS_PORT
            )
            activator_port, activator_metrics = free_port(), free_port()
            activators[name] = (
                activator_process(
                    name,
                    rendered[name].activator_args,
                    kubeconfig=kubeconfigs[name],
                    listen=activator_port,
                    health=free_port(),
                    metrics=activator_metrics,
                    workdir=workdir,
                ),
                activator_port,
            )
            port = free_port()
            agents[name] = agent_process(
                name,
                rendered[name].agent_args,
                kubeconfigs=kubeconfigs,
                port=port,
                workdir=workdir,
            )
            folder = workdir / f"collector-{name}"
            live = live_collector(
                rendered[name].collector_config,
                name,
                agent_port=port,
                activator_port=activator_metrics,
                listen=listen,
                ca=Path(listen.tls_cert_file),
                folder=folder,
            )
            collectors[name] = Process(
                f"collector-{name}",
                [otelcol, f"--config={write_yaml(folder / 'live.yaml', live)}"],
                workdir / f"collector-{name}.log",
            )
        started = [*agents.values(), *(p for p, _ in activators.values()), *collectors.values()]
        processes += started

        fleet = Fleet(
            workdir,
            prometheus_port,
            {},
            collectors,
            gateway_process,
            prometheus,
            listen,
            gateway_process,
            listen,
            Path(listen.token_file),
            Path(listen.tls_cert_file),
        )
        wait_for(
            "Prometheus to be ready",
            lambda: http_ok(f"http://127.0.0.1:{prometheus_port}/-/ready"),
            60,
            fleet.logs,
        )
        gateway_process.start()
        wait_for(
            "the gateway to be healthy",
            lambda: http_ok(f"http://127.0.0.1:{listen.health_port}/"),
            60,
            fleet.logs,
        )
        for process in started:
            process.start()
        yield CostFleet(fleet, members, agents, activators)
    finally:
        for process in reversed(processes):
            process.stop(grace=STOP_GRACE_SECONDS)
        for member in members.values():
            with contextlib.suppress(Exception):
                member.close()
        shutil.rmtree(workdir / "tsdb", ignore_errors=True)


def _logs(cost: CostFleet) -> str:
    parts = [cost.fleet.logs()]
    for process in [*cost.agents.values(), *(p for p, _ in cost.activators.values())]:
        text = process.log.read_text(errors="replace") if process.log.exists() else ""
        parts.append(f"--- {process.name} (last 30 lines)\n" + "\n".join(text.splitlines()[-30:]))
    return "\n".join(parts)


def settle(cost: CostFleet, what: str, promql: str, expected: float) -> None:
    wait_for(
        f"{what}: {promql} == {expected} (last {cost.fleet.value(promql)!r})",
        lambda: cost.fleet.value(promql) == pytest.approx(expected),
        120,
        lambda: _logs(cost),
    )


def _cost(cluster: str, deployment: str) -> str:
    return (
        f'sum({MODEL_COST_PER_HOUR}{{{CLUSTER}="{cluster}",namespace="{NAMESPACE}",'
        f'deployment="{deployment}"}})'
    )


def _fleet_cost(deployment: str) -> str:
    return (
        f'sum({MODEL_COST_PER_HOUR}{{{FLEET},namespace="{NAMESPACE}",deployment="{deployment}"}})'
    )


@pytest.mark.tools
def test_each_models_gpus_cost_their_pools_price_per_cluster_and_add_up_per_model(cost_fleet):
    # us-east-1: two H100s at 4.5 (the NIC beside them is not a GPU); eu-west-1: four
    # B200s at 6.25 — the prices crossplane render composed from the examples.
    settle(cost_fleet, "llama on us-east-1", _cost("us-east-1", LLAMA), 2 * 4.5)
    settle(cost_fleet, "llama on eu-west-1", _cost("eu-west-1", LLAMA), 4 * 6.25)
    settle(cost_fleet, "qwen on us-east-1", _cost("us-east-1", QWEN), 2 * 1.8)
    # Each cluster's series names its pool and is one series, whichever agent exports it.
    series = cost_fleet.fleet.query(
        f'{MODEL_COST_PER_HOUR}{{{CLUSTER}="us-east-1",deployment="{LLAMA}"}}'
    )
    assert [s["metric"]["pool"] for s in series] == ["h100"]
    # The fleet roll-up: one series per model, the clusters' sum, no cluster or pool.
    settle(cost_fleet, "llama across the fleet", _fleet_cost(LLAMA), 2 * 4.5 + 4 * 6.25)
    settle(cost_fleet, "qwen across the fleet", _fleet_cost(QWEN), 2 * 1.8)
    fleet_series = cost_fleet.fleet.query(f"{MODEL_COST_PER_HOUR}{{{FLEET}}}")
    assert {s["metric"]["deployment"] for s in fleet_series} == {LLAMA, QWEN}
    assert all(CLUSTER not in s["metric"] and "pool" not in s["metric"] for s in fleet_series)


@pytest.mark.tools
def test_the_cost_follows_what_the_pods_hold(cost_fleet):
    settle(cost_fleet, "llama on eu-west-1", _cost("eu-west-1", LLAMA), 4 * 6.25)
    api = cost_fleet.members["eu-west-1"].client()
    try:
        _claim(api, "llama-1", [(GPU, "b200-0", f"gpu-{i}") for i in range(4, 8)])
        _pod(api, "llama-1", "b200-0", deployment=LLAMA, cluster="eu-west-1", claim="llama-1")
    finally:
        api.close()
    settle(cost_fleet, "llama on eu-west-1, a second pod", _cost("eu-west-1", LLAMA), 8 * 6.25)
    settle(cost_fleet, "llama across the fleet", _fleet_cost(LLAMA), 2 * 4.5 + 8 * 6.25)


@pytest.mark.tools
def test_the_runtimes_own_metrics_arrive_with_their_cluster(cost_fleet):
    # The two agents elect one hub over both members: the destination sees exactly one.
    settle(cost_fleet, "one hub in the fleet", f"sum({HUB_LEADING})", 1)
    leading = cost_fleet.fleet.query(f"{HUB_LEADING}")
    assert {s["metric"][CLUSTER] for s in leading} == set(CLUSTERS)
    # The CA each agent trusts its peer with (the peer kubeconfig), from both clusters.
    wait_for(
        "certificate expiry from both clusters",
        lambda: (
            {s["metric"][CLUSTER] for s in cost_fleet.fleet.query(CERTIFICATE_EXPIRY)}
            == set(CLUSTERS)
        ),
        120,
        lambda: _logs(cost_fleet),
    )
    # The runtime's series carry no namespace that could be read as a model's.
    for series in cost_fleet.fleet.query(f"{HUB_LEADING}"):
        assert prometheus_label(contracts.RESOURCE_ATTR_NAMESPACE) not in series["metric"]


def _ask(port: int, identity: str) -> int | None:
    """One chat request through an activator; its HTTP status (None: not answering yet)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(
            "POST",
            "/v1/chat/completions",
            b"{}",
            {
                "Content-Type": "application/json",
                contracts.HEADER_DEPLOYMENT: identity,
                # What the identity's route sets beside it (the Gateway's proxy sends both).
                contracts.HEADER_ROUTE_TOKEN: token_of(identity),
            },
        )
        reply = connection.getresponse()
        reply.read()
        return reply.status
    except OSError:
        return None
    finally:
        connection.close()


@pytest.mark.tools
def test_the_activators_own_metrics_arrive_with_their_cluster(cost_fleet):
    """The real activator's series, through the rendered activator job: a request for a
    model no route vouches for is counted without a model (NotRouted); the on-demand
    model its route vouches for is on the held gauge at 0 from that read of the routes."""
    for name, (_, port) in cost_fleet.activators.items():
        wait_for(
            f"the activator on {name} to answer",
            lambda port=port: _ask(port, f"{NAMESPACE}/made-up") == 404,
            60,
            lambda: _logs(cost_fleet),
        )
    service = f'service_name="{contracts.ACTIVATOR_SERVICE_NAME}"'
    refused = f'{activator_metrics.REQUESTS_TOTAL}{{{service},outcome="NotRouted"}}'
    held = (
        f'{activator_metrics.REQUESTS_HELD}{{{service},namespace="{NAMESPACE}",'
        f'deployment="{ON_DEMAND}"}}'
    )
    for promql in (refused, held):
        wait_for(
            f"{promql} from both clusters",
            lambda promql=promql: (
                {s["metric"][CLUSTER] for s in cost_fleet.fleet.query(promql)} == set(CLUSTERS)
            ),
            120,
            lambda: _logs(cost_fleet),
        )
    for series in cost_fleet.fleet.query(refused):
        # Counted without a model: a made-up identity makes no series of its own.
        assert "deployment" not in series["metric"], series
        assert float(series["value"][1]) >= 1
    for series in cost_fleet.fleet.query(held):
        assert float(series["value"][1]) == 0
        # The runtime's pods' namespace is dropped: `namespace` is the model's.
        assert prometheus_label(contracts.RESOURCE_ATTR_NAMESPACE) not in series["metric"]
