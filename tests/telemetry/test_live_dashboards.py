"""Live: every panel of every shipped dashboard (hack/dashboards.py) runs against a real
Prometheus fed by the real collector tier, and returns series with the labels it groups
by; then each dashboard is drawn from that data (docs/dashboards/*.png).

    vLLM page + agent page + activator a ──▶ cluster collector a ─┐ OTLP + token
                                                                 ├──▶ gateway ──▶ Prometheus
    vLLM page + agent page + activator b ──▶ cluster collector b ─┘

The fleet is test_live_fleet's (same collectors, gateway and Prometheus, the same test
substitutions for Kubernetes), with two additions on each member. The agent's page: the
runtime's own instruments — RuntimeMetrics, HubMetrics, CostMetrics,
CertificateExpiryMetrics and (on member a, standing in for the control plane's
`modelplane-runtime model-health`) ModelHealthMetrics — exported by the same OpenTelemetry
Prometheus exporter the agent uses, their values set here rather than by a running hub
(test substitution: no API servers). And the on-demand activator: the real server
(functions/runtime/activator/server.py) with its own ActivatorMetrics on that exporter,
as `modelplane-runtime activator` serves them, taking real requests for an on-demand
model, holding them through activations and proxying them to a chat server standing in
for the engine; only the control plane and the member's routes are in-memory stand-ins
(test substitution: no API servers), the control plane answering an activation the way
compose-model-deployment does (Placed, then a ready replica a moment later, and back to
zero replicas soon after, so activations keep coming). The rendered agent and activator
scrape jobs read them. So the runtime and cost panels are checked live too, against the
names and labels the runtime really exports; only the agent's values are the test's.

`MODELPLANE_DASHBOARD_PICTURES=docs/dashboards` writes the pictures into the docs (else a
temporary folder, so drawing is exercised on every run).
"""

from __future__ import annotations

import http.client
import json
import math
import os
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from wsgiref.simple_server import make_server

import dashboards  # hack/, on sys.path through tests/conftest.py
import prometheus_client
import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader

from fleetbox.process import Process
from functions.common import contracts
from functions.common.exposition import prometheus_label
from functions.common.telemetrydestination import parse_destination
from functions.compose_telemetry import gateway, rollup
from functions.runtime.activator import server as activator_shell
from functions.runtime.activator.metrics import ActivatorMetrics
from functions.runtime.agent.cost import CostMetrics
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.operator.model_health import ModelHealthMetrics
from functions.runtime.shared.cert_expiry import CertificateExpiryMetrics, PemFile
from functions.runtime.shared.metrics import METER_NAME, RuntimeMetrics
from tests.conftest import REPO, require_tool
from tests.ports import free_port
from tests.telemetry.test_live_fleet import (
    MODEL,
    STOP_GRACE_SECONDS,
    FakeEngine,
    _Quiet,
    cluster_collector_config,
    gateway_destination,
    http_ok,
    self_signed_certificate,
    wait_for,
    write_yaml,
)
from tests.unit.chatserver import Answer, ChatServer
from tests.unit.test_activator import Routes, composed_route, token_of

CLUSTERS = ("a", "b")
ON_DEMAND = "qwen-2-5-7b"
VALUES = {"deployment": MODEL, "cluster": "a", "ttft_slo": "0.5", "datasource": "prometheus"}
RATE_WINDOW = "1m"
PANEL_TIMEOUT_SECONDS = 150
PICTURE_SAMPLES = 20  # at the pictures' 4 s step


# The activator's stand-in control plane: a placed replica is ready this long after the
# activation asked for it, and the model is back at zero replicas this long after that.
LOAD_SECONDS = 1.5
READY_FOR_SECONDS = 3.0
ACTIVATOR_LIMITS = activator_shell.Limits(read_interval=0.2, routes_interval=1.0)


def _runtime_target(job: str, cluster: str, port: int) -> dict:
    """What Kubernetes discovery would attach to a runtime pod's `metrics` port (the
    agent's, the activator's: named by its job, as runtime_hosting labels it)."""
    pod_label = prometheus_label("app.kubernetes.io/name")
    return {
        "targets": [f"127.0.0.1:{port}"],
        "labels": {
            "__meta_kubernetes_namespace": contracts.SYSTEM_NAMESPACE,
            "__meta_kubernetes_pod_name": f"{job}-{cluster}-0",
            "__meta_kubernetes_pod_uid": f"uid-{job}-{cluster}",
            "__meta_kubernetes_pod_phase": "Running",
            "__meta_kubernetes_pod_container_port_name": contracts.PORT_NAME_METRICS,
            f"__meta_kubernetes_pod_label_{pod_label}": job,
        },
    }


class _Page:
    """A runtime process's /metrics: its instruments on a registry of its own, served by
    the OpenTelemetry Prometheus exporter the runtime's processes use."""

    def __init__(self, service: str) -> None:
        self.registry = prometheus_client.CollectorRegistry()
        self.runtime = RuntimeMetrics(PrometheusMetricReader(registry=self.registry), service)
        self.meter = self.runtime.provider.get_meter(METER_NAME)
        self.port = free_port()
        app = prometheus_client.make_wsgi_app(self.registry)
        self._server = make_server("127.0.0.1", self.port, app, handler_class=_Quiet)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self.runtime.shutdown()


class AgentPage(_Page):
    """A member agent's /metrics: the runtime's instruments, values set by the test."""

    def __init__(self, cluster: str, certificate: Path, *, control_plane: bool) -> None:
        super().__init__(contracts.AGENT_SERVICE_NAME)
        self.hub = HubMetrics(self.meter)
        self.cost = CostMetrics(self.meter)
        CertificateExpiryMetrics(self.meter, [PemFile("agent", certificate)])
        self.fleet = SimpleNamespace(model_list=[])
        if control_plane:
            ModelHealthMetrics(self.meter, lambda: self.fleet, reuse_for=0)
        self.cluster = cluster


class OnDemandPlane:
    """The control plane as the activator sees it, for one on-demand model: an activation
    is answered Placed at once (compose-model-deployment's answer), a replica here is
    ready LOAD_SECONDS later, and READY_FOR_SECONDS after that the model is idle at zero
    again (test substitution: no API server, no compose-model-deployment)."""

    def __init__(self, cluster: str) -> None:
        self.cluster = cluster
        self.lock = threading.Lock()
        self.attempts: dict[tuple[str, str], tuple[str, float]] = {}

    def get(self, namespace: str, name: str) -> dict | None:
        status: dict = {}
        with self.lock:
            attempt = self.attempts.get((namespace, name))
            if attempt is not None:
                attempt_id, asked = attempt
                age = time.monotonic() - asked
                if age > LOAD_SECONDS + READY_FOR_SECONDS:
                    del self.attempts[(namespace, name)]
                else:
                    status["onDemand"] = {"attempt": {"id": attempt_id, "result": "Placed"}}
                    if age >= LOAD_SECONDS:
                        status["placements"] = [{"cluster": self.cluster, "readyReplicas": 1}]
        return {"spec": {"onDemand": {"activationTimeout": "60s"}}, "status": status}

    def activate(self, namespace: str, name: str, attempt_id: str) -> None:
        with self.lock:
            self.attempts[(namespace, name)] = (attempt_id, time.monotonic())


class ActivatorPage(_Page):
    """A member's on-demand activator: the real server, its ActivatorMetrics on the
    exporter (as `modelplane-runtime activator` serves them on `--metrics-port`), in front
    of `engine` for the on-demand model ON_DEMAND, whose route (as compose-model-replica
    composes it) vouches for it."""

    def __init__(self, cluster: str, engine: ChatServer) -> None:
        super().__init__(contracts.ACTIVATOR_SERVICE_NAME)
        self.served = activator_shell.serve(
            OnDemandPlane(cluster),
            Routes([composed_route("ml-team", ON_DEMAND)]),
            cluster,
            "127.0.0.1:0",
            activator_shell.Upstreams(cluster, engine.url.removesuffix("/v1"), {}),
            health_listen="127.0.0.1:0",
            limits=ACTIVATOR_LIMITS,
            metrics=ActivatorMetrics(self.meter),
        )

    def request(self, identity: str) -> None:
        """One client's chat request through the activator (its answer is not the point)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.served.port, timeout=30)
        headers = {
            "Content-Type": "application/json",
            contracts.HEADER_DEPLOYMENT: identity,
            # What the identity's route sets beside it (the Gateway's proxy sends both).
            contracts.HEADER_ROUTE_TOKEN: token_of(identity),
        }
        try:
            connection.request("POST", "/v1/chat/completions", b"{}", headers)
            connection.getresponse().read()
        except OSError:
            pass
        finally:
            connection.close()

    def close(self) -> None:
        self.served.shutdown()
        super().close()


@dataclass
class DashboardFleet:
    prometheus_port: int
    processes: list[Process]
    engines: dict[str, FakeEngine]
    agents: dict[str, AgentPage]
    activators: dict[str, ActivatorPage]
    started: float
    stop: threading.Event = field(default_factory=threading.Event)

    def logs(self) -> str:
        try:
            names = self.query('count by (__name__) ({__name__=~"plumb_.*|modelplane_.*"})')
            parts = [
                "--- in Prometheus: " + " ".join(sorted(s["metric"]["__name__"] for s in names))
            ]
        except OSError as err:
            parts = [f"--- Prometheus: {err}"]
        for process in self.processes:
            text = process.log.read_text(errors="replace") if process.log.exists() else ""
            parts.append(f"--- {process.name}\n" + "\n".join(text.splitlines()[-30:]))
        return "\n".join(parts)

    def _get(self, path: str, params: dict[str, str]) -> list[dict]:
        url = f"http://127.0.0.1:{self.prometheus_port}{path}?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = json.load(answer)
        assert body["status"] == "success", body
        return body["data"]["result"]

    def query(self, promql: str) -> list[dict]:
        return self._get("/api/v1/query", {"query": promql})

    def query_range(self, promql: str, start: float, end: float) -> list[dict]:
        return self._get(
            "/api/v1/query_range",
            {"query": promql, "start": f"{start:.0f}", "end": f"{end:.0f}", "step": "4"},
        )


def _feed(fleet: DashboardFleet) -> None:
    """Traffic that never stops while the test reads: counters and histograms move, so
    rates and quantiles have something to say."""
    tick = 0
    while not fleet.stop.wait(1.0):
        tick += 1
        for index, engine in enumerate(fleet.engines.values()):
            engine.running.set(3 + index + tick % 3)
            engine.waiting.set((tick + index) % 4)
            engine.kv_cache.set(0.3 + 0.2 * index + 0.05 * (tick % 4))
            engine.tokens.inc(40 + 10 * index)
            engine.prompt.inc(120 + 30 * index)
            engine.ttft.observe(0.2 + 0.1 * index + 0.4 * (tick % 3 == 0))
            engine.tpot.observe(0.02 + 0.01 * index)
            engine.e2e.observe(0.9 + 0.3 * index)
            engine.prefix_queries.inc(100)
            engine.prefix_hits.inc(30 + 20 * index)
            engine.finished.labels(MODEL, "stop").inc(3)
            if tick % 4 == index:
                engine.finished.labels(MODEL, "error").inc()
            if tick % 5 == 0:
                engine.finished.labels(MODEL, "abort").inc()
        # Clients of the on-demand model, through each member's activator: held while
        # it is at zero, proxied at once while a replica is ready; now and then a made-up
        # identity (NotRouted).
        for activator in fleet.activators.values():
            identity = f"ml-team/{ON_DEMAND}" if tick % 6 else "ml-team/made-up"
            threading.Thread(target=activator.request, args=(identity,), daemon=True).start()
        # The hub raises a floor now and then; the replicas it asked for get ready.
        hub = fleet.agents["a"].hub
        if tick % 3 == 0:
            hub.decision("default", "raise-floor", "planner", applied=True)
            hub.time_to_ready("default", 60.0 + 30 * (tick % 5))
        if tick % 7 == 0:
            hub.decision("default", "set-weights", "planner", applied=tick % 2 == 0)


def _set_runtime(agents: dict[str, AgentPage]) -> None:
    for name, agent in agents.items():
        leading = name == "a"
        agent.runtime.hub_leading(leading)
        agent.runtime.fleet_members(len(agents))
        agent.hub.serve_policy("default")
        agent.hub.member_report("default", 1 if leading else 0, 2)
        agent.hub.model_health(
            {("ml-team", f"{MODEL}-{name}"): (0, 2), ("ml-team", ON_DEMAND): (1, 0)}
        )
        agent.cost.update(
            {("ml-team", MODEL, "h100" if leading else "b200"): 9.0 if leading else 6.25}
        )
        if leading:
            agent.hub.hub_view("default", escalated=False, out_of_sync=0)
            agent.hub.decision("default", "raise-floor", "planner", applied=True)
            agent.hub.decision("default", "set-weights", "planner", applied=True)
            agent.hub.step_error("default")
            agent.hub.time_to_ready("default", 95.0)
            agent.fleet.model_list = [
                SimpleNamespace(
                    namespace="ml-team", name=MODEL, desired=2, ready=2, start_failures=0,
                    parked=None, unplaceable=None,
                    # Mid-rollout: a on the new revision, b still on the last good one.
                    revisions=[
                        SimpleNamespace(cluster="a", revision="5d41402abc"),
                        SimpleNamespace(cluster="b", revision="7d793037a0"),
                    ],
                ),
                SimpleNamespace(
                    namespace="ml-team", name=ON_DEMAND, desired=0, ready=0, start_failures=3,
                    parked=SimpleNamespace(), unplaceable=SimpleNamespace(replicas=1),
                    revisions=[],
                ),
            ]  # fmt: skip


@pytest.fixture(scope="module")
def board_fleet(tmp_path_factory) -> Iterator[DashboardFleet]:
    otelcol = require_tool("otelcol")
    prometheus_binary = require_tool("prometheus")
    workdir = tmp_path_factory.mktemp("dashboards")
    token = workdir / "token"
    token.write_text("fleet-token-for-the-dashboards-test")
    cert, key = self_signed_certificate(workdir)
    processes: list[Process] = []
    engines: dict[str, FakeEngine] = {}
    agents: dict[str, AgentPage] = {}
    activators: dict[str, ActivatorPage] = {}
    chat = ChatServer(script=[Answer(content="served by the engine")] * 100_000)
    fleet = None
    try:
        prometheus_port = free_port()
        prometheus = Process(
            "prometheus",
            [
                str(prometheus_binary),
                f"--config.file={write_yaml(workdir / 'prometheus.yml', {'global': {}})}",
                f"--storage.tsdb.path={workdir / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{prometheus_port}",
                "--web.enable-remote-write-receiver",
            ],
            workdir / "prometheus.log",
        )
        processes.append(prometheus)
        prometheus.start()
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
        gateway_process = Process(
            "gateway-0",
            [str(otelcol), f"--config={write_yaml(workdir / 'gateway.yaml', config)}"],
            workdir / "gateway.log",
            env={rollup.POD_NAME_ENV: "gateway-0"},
        )
        processes.append(gateway_process)
        fleet = DashboardFleet(prometheus_port, processes, engines, agents, activators, time.time())
        wait_for(
            "Prometheus",
            lambda: http_ok(f"http://127.0.0.1:{prometheus_port}/-/ready"),
            60,
            fleet.logs,
        )
        gateway_process.start()
        wait_for(
            "the gateway",
            lambda: http_ok(f"http://127.0.0.1:{listen.health_port}/"),
            60,
            fleet.logs,
        )
        for name in CLUSTERS:
            engines[name] = FakeEngine()
            agents[name] = AgentPage(name, cert, control_plane=name == "a")
            activators[name] = ActivatorPage(name, chat)
            config = cluster_collector_config(
                name,
                engines[name],
                listen,
                token,
                cert,
                runtime_targets={
                    job: _runtime_target(job, name, page.port)
                    for job, page in (
                        (contracts.AGENT_SERVICE_NAME, agents[name]),
                        (contracts.ACTIVATOR_SERVICE_NAME, activators[name]),
                    )
                },
            )
            process = Process(
                f"collector-{name}",
                [str(otelcol), f"--config={write_yaml(workdir / f'cluster-{name}.yaml', config)}"],
                workdir / f"collector-{name}.log",
            )
            processes.append(process)
            process.start()
        _set_runtime(agents)
        fleet.started = time.time()
        feeder = threading.Thread(target=_feed, args=(fleet,), daemon=True)
        feeder.start()
        yield fleet
    finally:
        if fleet is not None:
            fleet.stop.set()
        for process in reversed(processes):
            process.stop(grace=STOP_GRACE_SECONDS)
        for engine in engines.values():
            engine.close()
        for page in [*agents.values(), *activators.values()]:
            page.close()
        chat.close()


def _live(expr: str) -> str:
    return dashboards.substitute(expr.replace(dashboards.RATE, RATE_WINDOW), VALUES)


SPECS = [make() for make in dashboards.DASHBOARDS]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.uid)
def test_every_panel_returns_series_with_the_labels_it_groups_by(board_fleet, spec):
    pending = {(panel.title, query.expr): query for panel in spec.panels for query in panel.queries}
    cluster = prometheus_label(contracts.RESOURCE_ATTRIBUTE_CLUSTER)

    def answers(query: dashboards.Query) -> bool:
        result = board_fleet.query(_live(query.expr))
        # A series whose value is a number (0/0 is NaN: the panel would draw nothing).
        result = [s for s in result if s["value"][1] not in ("NaN", "+Inf", "-Inf")]
        if not result:
            return False
        if not all(all(s["metric"].get(label) for label in query.by) for s in result):
            return False
        # Per model and cluster means every cluster (unless the panel picks one).
        if cluster in query.by and "$cluster" not in query.expr:
            return {s["metric"][cluster] for s in result} >= set(CLUSTERS)
        return True

    errors: dict[tuple[str, str], str] = {}

    def all_answer() -> bool:
        for key, query in list(pending.items()):
            try:
                if answers(query):
                    del pending[key]
            except OSError as err:  # a query Prometheus refuses says why
                errors[key] = f"{err}: {getattr(err, 'read', lambda: b'')().decode()}"
        return not pending

    wait_for(
        f"every panel of {spec.uid} to answer",
        all_answer,
        PANEL_TIMEOUT_SECONDS,
        lambda: f"still waiting for: {sorted(pending)}\nrefused: {errors}\n{board_fleet.logs()}",
    )


def test_the_numbers_are_the_fleets(board_fleet):
    # A few panels whose values the test knows exactly.
    exprs = {
        (spec.uid, panel.title): panel.queries[0].expr for spec in SPECS for panel in spec.panels
    }

    def value(uid: str, title: str) -> list[float]:
        return [float(s["value"][1]) for s in board_fleet.query(_live(exprs[(uid, title)]))]

    wait_for(
        "one hub, and the fleet's cost: 9.00 + 6.25 an hour",
        lambda: (
            value("modelplane-runtime", "Hubs in the fleet") == [1.0]
            and value("modelplane-cost", "Fleet cost per hour") == [15.25]
        ),
        PANEL_TIMEOUT_SECONDS,
        board_fleet.logs,
    )
    on_demand = board_fleet.query(_live(exprs[("modelplane-runtime", "On-demand models at zero")]))
    assert {s["metric"]["deployment"] for s in on_demand} == {ON_DEMAND}
    # The real activators: every activation of the on-demand model got a ready replica,
    # on both members, and only the model a route vouches for has series of its own.
    cluster = prometheus_label(contracts.RESOURCE_ATTRIBUTE_CLUSTER)
    ready = {(c, ON_DEMAND, "Ready") for c in CLUSTERS}

    def activations() -> set[tuple[str, str, str]]:
        expr = exprs[("modelplane-runtime", "Activations per second, by result")]
        return {
            (s["metric"][cluster], s["metric"]["deployment"], s["metric"]["result"])
            for s in board_fleet.query(_live(expr))
        }

    wait_for(
        "activations that got a ready replica on both members",
        lambda: activations() == ready,
        PANEL_TIMEOUT_SECONDS,
        lambda: f"{activations()}\n{board_fleet.logs()}",
    )
    held = board_fleet.query(
        _live(exprs[("modelplane-runtime", "Requests held for an activation")])
    )
    assert {s["metric"]["deployment"] for s in held} == {ON_DEMAND}


def test_each_dashboard_is_drawn_from_the_live_data(board_fleet, tmp_path):
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    from matplotlib import pyplot  # noqa: PLC0415

    out = Path(os.environ.get("MODELPLANE_DASHBOARD_PICTURES", tmp_path))
    if not out.is_absolute():
        out = REPO / out
    out.mkdir(parents=True, exist_ok=True)
    # Enough history that a picture shows a trend: 20 samples of the fleet's load.
    running = f"sum(modelplane_requests_running{{{dashboards.PER_CLUSTER}}})"
    wait_for(
        "20 samples of history",
        lambda: (
            len(board_fleet.query_range(running, board_fleet.started, time.time())[0]["values"])
            >= PICTURE_SAMPLES
        ),
        PANEL_TIMEOUT_SECONDS,
        board_fleet.logs,
    )
    end = time.time()
    start = max(board_fleet.started, end - 600)
    for spec in SPECS:
        panels = spec.panels
        columns = 3
        rows = (len(panels) + columns - 1) // columns
        figure, axes = pyplot.subplots(rows, columns, figsize=(15, 3.1 * rows), squeeze=False)
        figure.suptitle(spec.title, fontsize=14, fontweight="bold")
        for ax, panel in zip(axes.flat, panels, strict=False):
            ax.set_title(panel.title, fontsize=9)
            ax.tick_params(labelsize=7)
            drawn = 0
            for query in panel.queries:
                for series in board_fleet.query_range(_live(query.expr), start, end):
                    points = [(float(t) - start, float(v)) for t, v in series["values"]]
                    points = [(t, v) for t, v in points if math.isfinite(v)]
                    if not points:
                        continue
                    label = query.legend
                    for name, value in series["metric"].items():
                        label = label.replace(f"{{{{{name}}}}}", value)
                    ax.plot(*zip(*points, strict=True), label=label[:40], linewidth=1.2)
                    drawn += 1
            assert drawn, (spec.uid, panel.title)
            ax.set_xlabel("seconds", fontsize=7)
            ax.text(0.99, 0.02, panel.unit, transform=ax.transAxes, ha="right", fontsize=6)
            ax.legend(fontsize=6, loc="upper left")
        for ax in list(axes.flat)[len(panels) :]:
            ax.axis("off")
        figure.tight_layout()
        path = out / f"{spec.uid}.png"
        figure.savefig(path, dpi=70)
        pyplot.close(figure)
        assert path.stat().st_size > 10_000
