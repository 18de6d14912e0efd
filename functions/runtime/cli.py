"""`modelplane-runtime`: the entry point of the agent and the scaler.

One function per subcommand; shared options are decorators, so a subcommand another
part of the runtime grows (the agent's reports and hub decisions) adds its options and
its loop without touching the others.

    modelplane-runtime agent --cluster us-east-1 --member us-east-1=in-cluster \\
        --member eu-west-1=/etc/modelplane/members/eu-west-1/kubeconfig ...
    modelplane-runtime scaler --cluster us-east-1 [--tls-cert-dir /tls]
    modelplane-runtime model-health --kubeconfig in-cluster   # on the control plane
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import click

from functions.common.contracts import (
    ACTIVATOR_HEALTH_PORT,
    ACTIVATOR_PORT,
    COLLECTOR_SIGNALS_URL,
    HEALTHZ_PATH,
    METRICS_PORT,
    READYZ_PATH,
    SCALER_HEALTH_PORT,
    SCALER_PORT,
)
from functions.common.inventory import IDLE_AFTER_SECONDS
from functions.runtime.election.core import (
    DEFAULT_LEASE_DURATION,
    DEFAULT_RENEW_DEADLINE,
    DEFAULT_RETRY_PERIOD,
    Timings,
)

IN_CLUSTER = "in-cluster"
DEFAULT_UPSTREAM = "http://{service}.{namespace}.svc:{port}"
DEFAULT_ATTEMPT_TIMEOUT = 60.0

log = logging.getLogger("modelplane.runtime")


@click.group(help="The modelplane fleet runtime.")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
def main(log_level: str) -> None:
    logging.basicConfig(
        level=log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )


AGENT_STEPS = ("signal", "collector", "report", "hub", "health", "inventory")

# --- shared options ----------------------------------------------------------------


def cluster_option(command: Callable) -> Callable:
    return click.option(
        "--cluster",
        required=True,
        envvar="MODELPLANE_CLUSTER",
        help="This member's name (its InferenceCluster).",
    )(command)


def metrics_option(command: Callable) -> Callable:
    return click.option(
        "--metrics-port",
        type=int,
        default=METRICS_PORT,
        show_default=True,
        help="Serve Prometheus metrics on this port (0: none).",
    )(command)


def parse_member(_ctx, _param, values: tuple[str, ...]) -> dict[str, str]:
    members: dict[str, str] = {}
    for value in values:
        name, sep, source = value.partition("=")
        if not sep or not name or not source:
            raise click.BadParameter(
                f"{value!r}: expected NAME=KUBECONFIG_PATH or NAME={IN_CLUSTER}"
            )
        if name in members:
            raise click.BadParameter(f"{value!r}: member {name!r} is given twice")
        members[name] = source
    return members


def parse_fabric_labels(_ctx, _param, values: tuple[str, ...]) -> tuple:
    from functions.common.inventory import parse_fabric_label  # noqa: PLC0415

    try:
        return tuple(parse_fabric_label(v) for v in values)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


def parse_pool_prices(_ctx, _param, values: tuple[str, ...]) -> tuple:
    from functions.common.cost import parse_pool_price  # noqa: PLC0415

    try:
        return tuple(parse_pool_price(v) for v in values)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


def parse_cpu_pools(_ctx, _param, values: tuple[str, ...]) -> tuple:
    from functions.common.inventory import parse_cpu_pool  # noqa: PLC0415

    try:
        return tuple(parse_cpu_pool(v) for v in values)
    except ValueError as error:
        raise click.BadParameter(str(error)) from error


def client_for(source: str):
    """A Kubernetes client from a kubeconfig path, or this pod's own service account."""
    from functions.runtime.kube.clients import in_cluster_client, kubeconfig_client  # noqa: PLC0415

    return in_cluster_client() if source == IN_CLUSTER else kubeconfig_client(source)


def wait_for_shutdown() -> None:
    """Block the main thread until SIGTERM or SIGINT."""
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()


# --- agent ---------------------------------------------------------------------------


def election_agent(
    cluster: str,
    pod: str,
    members: dict[str, str],
    timings: Timings,
    metrics,
):
    """The agent's election part, built from the command line's member list."""
    from functions.runtime.election.elector import Agent  # noqa: PLC0415

    if cluster not in members:
        raise click.BadParameter(
            f"this member {cluster!r} must be one of the --member entries "
            f"({', '.join(sorted(members)) or 'none given'})",
            param_hint="--member",
        )
    clients = {name: client_for(source) for name, source in sorted(members.items())}
    return Agent(cluster, pod, clients[cluster], clients, timings=timings, metrics=metrics)


@main.command(help="Run the member agent: one replica per member takes part in the hub election.")
@cluster_option
@click.option(
    "--pod",
    envvar="POD_NAME",
    default=socket.gethostname,
    show_default="hostname",
    help="This replica's pod name; the holder identity is <cluster>/<pod>.",
)
@click.option(
    "--member",
    "members",
    multiple=True,
    callback=parse_member,
    required=True,
    help=f"A configured member as NAME=KUBECONFIG or NAME={IN_CLUSTER}; repeat for "
    "every member, this one included. A majority of these must be reachable.",
)
@click.option("--lease-duration", type=float, default=DEFAULT_LEASE_DURATION, show_default=True)
@click.option("--renew-deadline", type=float, default=DEFAULT_RENEW_DEADLINE, show_default=True)
@click.option("--retry-period", type=float, default=DEFAULT_RETRY_PERIOD, show_default=True)
@click.option(
    "--prometheus-url",
    envvar="MODELPLANE_PROMETHEUS_URL",
    help="The operator's Prometheus-compatible endpoint, where PromQL signals (those "
    "outside the vocabulary) are queried.",
)
@click.option(
    "--signals-url",
    envvar="MODELPLANE_SIGNALS_URL",
    default=COLLECTOR_SIGNALS_URL,
    show_default=True,
    help="The cluster collector's page of merged vocabulary series ('' for none).",
)
@click.option(
    "--fabric-label",
    "fabric_labels",
    multiple=True,
    callback=parse_fabric_labels,
    help="The node label naming a node pool's fabric, as LABEL or LABEL:key=value,... "
    "(the pool's nodeSelector); one per pool of this InferenceCluster, in its order. "
    "None: modelplane.ai/fabric.",
)
@click.option(
    "--pool-price",
    "pool_prices",
    multiple=True,
    callback=parse_pool_prices,
    help='A priced node pool as JSON: {"pool": NAME, "driver": DRA_DRIVER, '
    '"pricePerDeviceHour": N, "nodeSelector": {...}}; one per priced pool. Each model\'s '
    "devices on it are exported as modelplane_model_cost_per_hour.",
)
@click.option(
    "--cpu-pool",
    "cpu_pools",
    multiple=True,
    callback=parse_cpu_pools,
    help="A CPU-only node pool as NAME or NAME:key=value,... (its nodeSelector); one per "
    "CPU pool. The inventory reports its CPU and memory and what pods there request.",
)
@click.option(
    "--decision-log",
    default="-",
    show_default=True,
    help="Append hub decisions here, one JSON line each ('-': stdout).",
)
@click.option(
    "--interval",
    "intervals",
    multiple=True,
    metavar="STEP=SECONDS",
    help="How often one of the agent's steps runs: " + ", ".join(AGENT_STEPS) + " (e.g. "
    "report=2); repeat. The defaults suit a cluster; a test box runs faster. `collector` "
    "is the collector's own interval (how old a signal point may get).",
)
@click.option(
    "--idle-after",
    type=click.FloatRange(min=1, max=86400),
    default=IDLE_AFTER_SECONDS,
    show_default=True,
    help="Seconds a serving replica's request counter must stand still before the "
    "inventory names it idle (holding GPUs nothing asks anything of). Shorter flaps "
    "replicas in and out of the list; the fleet box sets seconds to see one in a test.",
)
@metrics_option
def agent(
    *,
    cluster,
    pod,
    members,
    lease_duration,
    renew_deadline,
    retry_period,
    prometheus_url,
    signals_url,
    fabric_labels,
    pool_prices,
    cpu_pools,
    decision_log,
    intervals,
    idle_after,
    metrics_port,
):
    from functions.runtime.agent.loop import start_loop  # noqa: PLC0415
    from functions.runtime.shared import cert_expiry  # noqa: PLC0415
    from functions.runtime.shared.metrics import serve_prometheus  # noqa: PLC0415

    try:
        timings = Timings(lease_duration, renew_deadline, retry_period)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--lease-duration") from error
    steps = parse_intervals(intervals)
    running: list = []  # the loop, once started; until then the probes say "starting"

    def probe(check):
        def answer() -> tuple[bool, str]:
            return check(running[0].agent, time.time()) if running else (False, "starting")

        return answer

    probes = {
        HEALTHZ_PATH: probe(lambda agent, now: agent.live(now)),
        READYZ_PATH: probe(lambda agent, now: agent.ready(now)),
    }
    metrics = serve_prometheus(metrics_port, probes=probes) if metrics_port else None
    # The certificates the agent presents to (and trusts of) its peers.
    cert_expiry.watch(
        metrics,
        [
            cert_expiry.KubeconfigFile("agent", Path(source))
            for _, source in sorted(members.items())
            if source != IN_CLUSTER
        ],
    )
    election = election_agent(cluster, pod, members, timings, metrics).start()
    clients = {name: client_for(source) for name, source in sorted(members.items())}
    loop = start_loop(
        election,
        clients,
        prometheus_url,
        decision_log,
        metrics,
        signals_url=signals_url or None,
        fabric_labels=fabric_labels,
        pool_prices=pool_prices,
        cpu_pools=cpu_pools,
        intervals=steps,
        idle_after=idle_after,
    )
    running.append(loop)
    wait_for_shutdown()
    loop.stop()
    log.info("agent %s: shutting down, releasing its Leases", election.identity)
    election.stop(release=True)


def parse_intervals(values: tuple[str, ...]) -> dict[str, float]:
    """`--interval STEP=SECONDS` values as AgentConfig fields (`<step>_interval`)."""
    out = {}
    for value in values:
        step, _, seconds = value.partition("=")
        if step not in AGENT_STEPS:
            raise click.BadParameter(
                f"{value!r}: the step must be one of {', '.join(AGENT_STEPS)}",
                param_hint="--interval",
            )
        try:
            number = float(seconds)
        except ValueError:
            number = 0.0
        if not 0 < number <= 3600:
            raise click.BadParameter(
                f"{value!r}: seconds must be a number above 0 and at most 3600",
                param_hint="--interval",
            )
        out[f"{step}_interval"] = number
    return out


# --- scaler --------------------------------------------------------------------------


@main.command(help="Serve the hub's floors to KEDA (external-push).")
@cluster_option
@click.option(
    "--kubeconfig",
    default=IN_CLUSTER,
    show_default=True,
    help=f"This member's API server: a kubeconfig path or {IN_CLUSTER}.",
)
@click.option("--listen", default=f"0.0.0.0:{SCALER_PORT}", show_default=True)
@click.option(
    "--health-listen",
    default=f"0.0.0.0:{SCALER_HEALTH_PORT}",
    show_default=True,
    help="Plaintext gRPC health (kubelet's probes); empty to serve none.",
)
@click.option(
    "--tls-cert-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="tls.crt and tls.key to serve TLS; with ca.crt, client certificates "
    "signed by it are required (the trigger's TriggerAuthentication).",
)
@click.option(
    "--recheck",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds between an open stream's re-checks when nothing changes.",
)
@metrics_option
def scaler(*, cluster, kubeconfig, listen, health_listen, tls_cert_dir, recheck, metrics_port):
    from functions.runtime.scaler import server as floor_scaler  # noqa: PLC0415
    from functions.runtime.shared import cert_expiry  # noqa: PLC0415
    from functions.runtime.shared.metrics import serve_prometheus  # noqa: PLC0415

    metrics = serve_prometheus(metrics_port) if metrics_port else None
    if tls_cert_dir:
        # What it serves to KEDA, and the CA KEDA's client certificate must be signed by.
        cert_expiry.watch(
            metrics,
            [
                cert_expiry.PemFile("scaler", tls_cert_dir / name)
                for name in ("tls.crt", "ca.crt")
                if (tls_cert_dir / name).exists()
            ],
        )
    cache = floor_scaler.MemberCache(client_for(kubeconfig)).start()
    credentials = floor_scaler.tls_credentials(tls_cert_dir) if tls_cert_dir else None
    server, port = floor_scaler.serve(
        floor_scaler.FloorScaler(cache, cluster, recheck=recheck), listen, credentials
    )
    health = floor_scaler.serve_health(cache, health_listen)[0] if health_listen else None
    log.info(
        "scaler for %s listening on %s (port %d, %s), health on %s",
        cluster,
        listen,
        port,
        "TLS" if credentials else "plaintext",
        health_listen or "the scaler port only",
    )
    wait_for_shutdown()
    if health is not None:
        health.stop(grace=1)
    server.stop(grace=5).wait()
    cache.stop()


# --- model health ----------------------------------------------------------------------


@main.command(
    "model-health",
    help="Export every model's health (desired, ready, start failures, parked, "
    "unplaceable), present at 0, read from the control plane at each scrape.",
)
@click.option(
    "--kubeconfig",
    default=IN_CLUSTER,
    show_default=True,
    help=f"The control plane's API server: a kubeconfig path or {IN_CLUSTER}.",
)
@metrics_option
def model_health(*, kubeconfig, metrics_port):
    from functions.runtime.operator.cli import ControlPlane  # noqa: PLC0415
    from functions.runtime.operator.model_health import ModelHealthMetrics  # noqa: PLC0415
    from functions.runtime.shared.metrics import METER_NAME, serve_prometheus  # noqa: PLC0415

    if not metrics_port:
        raise click.BadParameter("model-health only serves metrics", param_hint="--metrics-port")
    plane = ControlPlane(client_for(kubeconfig))
    metrics = serve_prometheus(metrics_port)
    ModelHealthMetrics(metrics.provider.get_meter(METER_NAME), lambda: plane.fleet(None))
    log.info("model health for the control plane on :%d/metrics", metrics_port)
    wait_for_shutdown()
    metrics.shutdown()


# --- on-demand activator ----------------------------------------------------------------


@main.command(
    help="Hold a request for an on-demand model with no ready replica for one placement "
    "attempt, then proxy it or answer why."
)
@cluster_option
@click.option(
    "--control-plane",
    required=True,
    help="A kubeconfig for the control plane (get and patch ModelDeployments only).",
)
@click.option(
    "--member-api",
    default=IN_CLUSTER,
    show_default=True,
    help="Where this member's HTTPRoutes are listed (the identities the activator serves): "
    f"a kubeconfig path or {IN_CLUSTER}.",
)
@click.option(
    "--listen",
    default=f"0.0.0.0:{ACTIVATOR_PORT}",
    show_default=True,
    help="HOST:PORT to serve requests on (the gateway's proxies only).",
)
@click.option(
    "--health-listen",
    default=f"0.0.0.0:{ACTIVATOR_HEALTH_PORT}",
    show_default=True,
    help="HOST:PORT for the kubelet's probes (/healthz, /readyz); empty: none.",
)
@click.option(
    "--upstream",
    default=DEFAULT_UPSTREAM,
    show_default=True,
    help="This member's model endpoint; {service}, {namespace}, {port}, {deployment} "
    "and {cluster} are filled in.",
)
@click.option(
    "--gateway",
    "gateways",
    multiple=True,
    callback=parse_member,
    help="Another member's inference gateway as NAME=URL; repeat per member.",
)
@click.option(
    "--attempt-timeout",
    type=float,
    default=DEFAULT_ATTEMPT_TIMEOUT,
    show_default=True,
    help="Seconds the control plane has to answer a placement attempt.",
)
@click.option(
    "--max-body-bytes",
    type=click.IntRange(min=0),
    default=1024 * 1024,
    show_default=True,
    help="The largest request body accepted (413 beyond).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="Open connections at most (503 beyond).",
)
@click.option(
    "--max-in-flight",
    type=click.IntRange(min=1),
    default=128,
    show_default=True,
    help="Requests held or proxied at once (503 with Retry-After beyond).",
)
@click.option(
    "--max-per-model",
    type=click.IntRange(min=1),
    default=32,
    show_default=True,
    help="Of those, for one model (429 with Retry-After beyond).",
)
@click.option(
    "--control-plane-timeout",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Seconds to connect and to read, per call to the control plane or the member.",
)
@metrics_option
def activator(
    *,
    cluster,
    control_plane,
    member_api,
    listen,
    health_listen,
    upstream,
    gateways,
    attempt_timeout,
    max_body_bytes,
    max_connections,
    max_in_flight,
    max_per_model,
    control_plane_timeout,
    metrics_port,
):
    from functions.runtime.activator import server as activator_shell  # noqa: PLC0415
    from functions.runtime.activator.metrics import ActivatorMetrics  # noqa: PLC0415
    from functions.runtime.shared.metrics import METER_NAME, serve_prometheus  # noqa: PLC0415

    limits = activator_shell.Limits(
        max_body_bytes=max_body_bytes,
        max_connections=max_connections,
        max_in_flight=max_in_flight,
        max_per_model=min(max_per_model, max_in_flight),
        control_plane_seconds=control_plane_timeout,
    )
    exporter = serve_prometheus(metrics_port) if metrics_port else None
    metrics = ActivatorMetrics(exporter.provider.get_meter(METER_NAME)) if exporter else None
    server = activator_shell.serve(
        activator_shell.ControlPlane(client_for(control_plane), control_plane_timeout),
        activator_shell.MemberRoutes(client_for(member_api), control_plane_timeout),
        cluster,
        listen,
        activator_shell.Upstreams(cluster, upstream, gateways),
        health_listen=health_listen or None,
        limits=limits,
        attempt_timeout=attempt_timeout,
        metrics=metrics,
    )
    log.info("activator for %s listening on :%d", cluster, server.port)
    wait_for_shutdown()
    server.shutdown()
    if exporter is not None:
        exporter.shutdown()


if __name__ == "__main__":
    main(prog_name=os.path.basename(sys.argv[0]))
