"""The fleet box's runtime half: KEDA, the HPA controller and our agent and scaler.

Per member that asks for it (`Runtime(box, members).start()`), all out of cluster:
- our scaler (`modelplane runtime scaler`) and agent (`modelplane runtime agent`, with
  this member's kubeconfig and every peer's, as the composed runtime has in cluster);
- KEDA's operator, which dials the scaler at the address the composed ScaledObject
  names (`modelplane-scaler.modelplane-system.svc.cluster.local:9090`). There is no
  cluster DNS here, so the operator runs with HTTPS_PROXY set to the member's
  ServiceProxy (service_proxy.py), which maps in-cluster Service names to this
  member's local processes;
- KEDA's metrics adapter, an aggregated API server for `external.metrics.k8s.io`.
  The member's kube-apiserver runs with the front-proxy (requestheader) flags and
  `--enable-aggregator-routing` (members.py), so it proxies to an EndpointSlice address
  instead of a ClusterIP nobody routes. EndpointSlice validation refuses loopback
  addresses, so the adapter listens on a host-side address of the box's pod network
  (podnet.py: the host end of the veth pair to the namespace the box makes; never an
  address of the host's own) and its slice names that. The APIService carries the
  adapter's CA; the adapter's certificate names the Service
  (`keda-metrics-apiserver.keda.svc`), which is what the aggregator checks.
  kube-controller-manager's HPA controller reads the floor there, as in cluster.

The operator and the adapter talk over KEDA's own mTLS gRPC (ca.crt, tls.crt, tls.key in
one folder, as KEDA's chart mounts them); the box makes that pair.
"""

from __future__ import annotations

import base64
import contextlib
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import yaml

from fleetbox import REPO
from fleetbox.box import FleetBox
from fleetbox.certificates import Certificates
from fleetbox.clusters import component_flags
from fleetbox.control_plane import KEDA_SCALER_CLIENT, SCALER_DNS_NAME
from fleetbox.gpu import example_cluster
from fleetbox.podrunner import CLUSTER_HOST_ADDRESSES
from fleetbox.process import Process
from fleetbox.service_proxy import ServiceProxy, in_cluster_name
from fleetbox.wait import FleetBoxError, wait_for
from functions.common.contracts import (
    SCALED_OBJECT_API_VERSION,
    SCALER_CLIENT_SECRET,
    SCALER_PORT,
    SCALER_SERVICE_NAME,
    SCALER_TRIGGER_AUTHENTICATION,
    SYSTEM_NAMESPACE,
)
from functions.common.inventory import fabric_labels_of_pools, format_fabric_label
from tests.ports import free_port

KEDA_NAMESPACE = "keda"
ADAPTER_SERVICE = "keda-metrics-apiserver"
EXTERNAL_METRICS_GROUP = "external.metrics.k8s.io"
EXTERNAL_METRICS_APISERVICE = f"v1beta1.{EXTERNAL_METRICS_GROUP}"
RUNTIME_TOOLS = ("keda-operator", "keda-adapter")
# The processes `Runtime` adds to the box, each named `<kind>-<member>`.
PROCESS_KINDS = ("agent", "scaler", "keda-operator", "keda-adapter", "kube-controller-manager-hpa")
# KEDA exits on a start-up error (the API server slow to answer discovery, caches not
# synced in time) and leaves the restart to its pod's kubelet; the box plays that part
# for these, with a backoff like kubelet's, shorter. Ours are never restarted: a crash
# of the scaler or the agent must fail the test that meets it.
RESTARTED_KINDS = ("keda-operator", "keda-adapter")
RESTART_BACKOFF_SECONDS, RESTART_BACKOFF_MAX_SECONDS = 1.0, 30.0
ENTRYPOINT = [sys.executable, "-m", "functions.entrypoint", "runtime"]
# How long the agents' Leases last: short, so a failover fits in a test.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6.0, 4.0, 1.0
# The agents' steps, faster than a cluster's defaults so a scenario fits in a test, slow
# enough for a loaded 2-core machine. `collector` is the interval of the collectors the
# scenarios run (COLLECTOR_INTERVAL): a signal point older than three is stale.
COLLECTOR_INTERVAL = 2
AGENT_INTERVALS = {
    "signal": 1,
    "collector": COLLECTOR_INTERVAL,
    "report": 2,
    "hub": 1,
    "health": 5,
    "inventory": 30,
}
# Seconds a serving replica's request counter must stand still before the box's agents
# name it idle (`--idle-after`; a cluster's default is IDLE_AFTER_SECONDS, 10 minutes):
# short enough that a scenario sees an idle replica, a few inventory turns at most.
AGENT_IDLE_AFTER = 20


def host_address() -> str:
    """The address the KEDA adapter listens on for the aggregation layer: EndpointSlices
    refuse loopback ones, and test traffic goes to no address of the host's own, so a
    host-side address of the box's pod network (podnet.py: the host end of the veth pair
    to the namespace the box made itself)."""
    return CLUSTER_HOST_ADDRESSES.allocate("keda-adapter")


def _listening_ports() -> set[int]:
    """The TCP ports something on this host listens on, from /proc/net/tcp{,6}: no
    connection made, so no TLS server logs a handshake cut short."""
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if len(fields) > 3 and fields[3] == "0A":  # TCP_LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


# --- one member's runtime --------------------------------------------------------------------


class Runtime:
    """KEDA, our scaler and our agent on some members of a started FleetBox."""

    def __init__(self, box: FleetBox, members: Iterable[str]) -> None:
        missing = [t for t in RUNTIME_TOOLS if not (box.bin / t).exists()]
        if missing:
            raise FleetBoxError(
                f"missing tools {', '.join(missing)} in {box.bin}: run 'bash hack/tools.sh keda'"
            )
        unknown = [m for m in members if m not in box.members]
        if unknown:
            raise FleetBoxError(f"no such members in the box: {', '.join(unknown)}")
        self.box = box
        self.members = list(members)
        self.host = host_address()
        self.proxies: dict[str, ServiceProxy] = {}
        self.scaler_ports: dict[str, int] = {}
        # Every address each runtime process was given to listen on, by process name.
        self.listens: dict[str, list[tuple[str, int]]] = {}
        # Restarts done and due (monotonic time), by process name.
        self.restarts: dict[str, int] = {}
        self._restart_due: dict[str, float] = {}

    def start(self) -> Runtime:
        for name in self.members:
            self._prepare(name)
        for name in self.members:
            self._start_hpa_controller(name)
            self._start_scaler(name)
            self._start_agent(name)
            self._start_keda(name)
        self._wait_listening()
        for name in self.members:
            self.wait_external_metrics(name)
        # One of ours that exited at start would only show later as a floor nobody serves:
        # say which, now (KEDA's are restarted by the runtime's waits).
        exited = [
            p
            for name in self.members
            for p in self._processes(name)
            if not p.running() and not p.name.startswith(RESTARTED_KINDS)
        ]
        if exited:
            raise FleetBoxError(
                "runtime processes exited at start: "
                + ", ".join(f"{p.name} ({p.popen.returncode})" for p in exited)
                + "\n" + self.diagnosis()
            )  # fmt: skip
        return self

    def process(self, kind: str, member: str) -> Process:
        return self.box.processes[f"{kind}-{member}"]

    def _port(self, process: str, host: str = "127.0.0.1") -> int:
        """A port for `process` to listen on, remembered for `_wait_listening`."""
        port = free_port(host)
        self.listens.setdefault(process, []).append((host, port))
        return port

    def _wait_listening(self, timeout: float = 120.0) -> None:
        """Until every runtime process listens on every port it was given. One that exits
        first (a port taken after all, a flag refused) fails the start at once, named,
        with its log: later it would only show as a floor nobody serves."""
        deadline = time.monotonic() + timeout
        while True:
            self.revive()
            waiting, listening = [], _listening_ports()
            for name, addresses in self.listens.items():
                process = self.box.processes[name]
                if name in self._restart_due:
                    waiting.append(f"{name} (restarting)")
                    continue
                if not process.running():
                    raise FleetBoxError(
                        f"{name} exited ({process.popen.returncode}) before it listened on "
                        f"{', '.join(f'{h}:{p}' for h, p in addresses)}:\n{process.tail()}"
                    )
                waiting += [f"{name} on {h}:{p}" for h, p in addresses if p not in listening]
            if not waiting:
                return
            if time.monotonic() > deadline:
                raise FleetBoxError(
                    f"not listening within {timeout:.0f}s: {', '.join(waiting)}\n"
                    + self.diagnosis()
                )
            time.sleep(0.2)

    def revive(self) -> list[str]:
        """Restart each of KEDA's processes that exited, once its backoff is over (1 s,
        doubling to 30 s), as kubelet restarts a pod's container; a line in its log marks
        each restart. Called from the main thread (the box's processes die with the
        thread that started them), by the runtime's waits. The names restarted."""
        now, restarted = time.monotonic(), []
        for member in self.members:
            for kind in RESTARTED_KINDS:
                process = self.box.processes.get(f"{kind}-{member}")
                if process is None or process.running():
                    continue
                count = self.restarts.get(process.name, 0)
                backoff = min(RESTART_BACKOFF_SECONDS * 2**count, RESTART_BACKOFF_MAX_SECONDS)
                due = self._restart_due.setdefault(process.name, now + backoff)
                if now < due:
                    continue
                with process.log.open("a") as log:
                    log.write(
                        f"--- fleet box: exited ({process.popen.returncode}), restart {count + 1}\n"
                    )
                process.start()
                self.restarts[process.name] = count + 1
                del self._restart_due[process.name]
                restarted.append(process.name)
        return restarted

    def _processes(self, member: str) -> list[Process]:
        found = (self.box.processes.get(f"{kind}-{member}") for kind in PROCESS_KINDS)
        return [p for p in found if p is not None]

    def diagnosis(self, members: Iterable[str] | None = None, lines: int = 12) -> str:
        """Each runtime process of the members (all by default): running or how it
        exited, and the last lines of its log, each cut to a screen's width."""
        parts = []
        for member in members or self.members:
            for process in self._processes(member):
                state = "running" if process.running() else f"exited {process.popen.returncode}"
                if self.restarts.get(process.name):
                    state += f", restarted {self.restarts[process.name]}x"
                tail = "\n".join(line[:240] for line in process.tail(lines).splitlines())
                parts.append(f"--- {process.name} ({state})\n{tail}")
        return "\n".join(parts)

    def wait_for(
        self, what: str, check: Callable[[], Any], timeout: float, members: Iterable[str] = ()
    ) -> Any:
        """`wait.wait_for`, and when it times out, the diagnosis of the members (the
        runtime's own when none are named): which process stopped, what it last said."""

        def revived_then_checked() -> Any:
            self.revive()
            return check()

        try:
            return wait_for(what, revived_then_checked, timeout)
        except FleetBoxError as error:
            raise FleetBoxError(f"{error}\n{self.diagnosis(list(members) or None)}") from error

    def _add(self, process: Process) -> Process:
        return self.box.start_process(process)

    def _prepare(self, name: str) -> None:
        """Namespaces, the AdaptivePolicy CRD (what compose-serving-stack sends every
        member) and KEDA's CRDs from the module the binaries were built from."""
        box = self.box
        documents = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
            for ns in (KEDA_NAMESPACE, SYSTEM_NAMESPACE)
        ]
        box.kubectl(name, "apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
        crds = sorted((box.bin.parent / "keda-crds").glob("*.yaml"))
        # The schema bundle put KEDA's CRDs here already (same module and release).
        box.kubectl(name, "apply", "--server-side", "--force-conflicts", *[f"-f={p}" for p in crds])
        # compose-serving-stack sends the AdaptivePolicy CRD to members with a cluster;
        # create it only where it has not (provider-kubernetes owns it where it has).
        policy = REPO / "apis" / "adaptivepolicies" / "definition.yaml"
        result = box.kubectl(name, "create", "-f", str(policy), check=False)
        if result.returncode != 0 and "AlreadyExists" not in result.stderr:
            raise FleetBoxError(f"AdaptivePolicy CRD on {name}: {result.stderr.strip()}")
        box.wait_crds_established(name)
        # KEDA dials the scaler with the client certificate compose-serving-stack copies
        # from the platform's Secrets (the box's, `FleetBox._connect_members`) through the
        # ClusterTriggerAuthentication every composed ScaledObject names. On a member
        # without an InferenceCluster nothing composed them: the same objects, made here.
        for document in self._scaler_authentication():
            result = box.kubectl(name, "create", "-f", "-", stdin=yaml.safe_dump(document),
                                 check=False)  # fmt: skip
            if result.returncode != 0 and "AlreadyExists" not in result.stderr:
                raise FleetBoxError(f"{document['kind']} on {name}: {result.stderr.strip()}")

    def _scaler_authentication(self) -> list[dict]:
        client = self.box.certs.root / KEDA_SCALER_CLIENT
        keys = ("ca.crt", "tls.crt", "tls.key")
        return [
            {
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": SCALER_CLIENT_SECRET, "namespace": KEDA_NAMESPACE},
                "stringData": {key: (client / key).read_text() for key in keys},
            },
            {
                "apiVersion": SCALED_OBJECT_API_VERSION, "kind": "ClusterTriggerAuthentication",
                "metadata": {"name": SCALER_TRIGGER_AUTHENTICATION},
                "spec": {"secretTargetRef": [
                    {"parameter": parameter, "name": SCALER_CLIENT_SECRET, "key": key}
                    for parameter, key in zip(
                        ("caCert", "tlsClientCert", "tlsClientKey"), keys, strict=True
                    )
                ]},
            },
        ]  # fmt: skip

    def _start_hpa_controller(self, name: str) -> None:
        """A GPU member's controller manager runs the HPA controller already; on another,
        a second one runs only that controller (the first keeps its two)."""
        if name in self.box.gpu:
            return
        workdir = self.box.members[name].workdir
        self._add(Process(
            f"kube-controller-manager-hpa-{name}",
            [
                str(self.box.bin / "kube-controller-manager"),
                *component_flags(self.box.kubeconfigs[name], workdir / "kcm-hpa-certs"),
                "--controllers=horizontal-pod-autoscaler-controller",
            ],
            workdir / "kube-controller-manager-hpa.log",
        ))  # fmt: skip

    def _start_scaler(self, name: str) -> None:
        port = self._port(f"scaler-{name}")
        self.scaler_ports[name] = port
        workdir = self.box.members[name].workdir
        self._add(Process(
            f"scaler-{name}",
            [
                *ENTRYPOINT, "scaler", f"--cluster={name}",
                f"--kubeconfig={self.box.kubeconfigs[name]}",
                f"--listen=127.0.0.1:{port}",
                # TLS with client certificates, as composed: the box's pair for the
                # scaler's in-cluster name, and its CA, which signed KEDA's.
                f"--tls-cert-dir={self.box.certs.root / SCALER_DNS_NAME}",
                f"--health-listen=127.0.0.1:{self._port(f'scaler-{name}')}",
                "--metrics-port=0",
            ],
            workdir / "scaler.log",
            cwd=REPO,
        ))  # fmt: skip
        self.proxies[name] = ServiceProxy({
            in_cluster_name(SCALER_SERVICE_NAME, SYSTEM_NAMESPACE, SCALER_PORT): f"127.0.0.1:{port}"
        })  # fmt: skip

    def route(self, member: str, address: str, local: str | None) -> None:
        """Make an in-cluster address (`host:port`, as a URL names it) reach a local one
        for the member's runtime (None: unreachable again), e.g. the agent's collector
        page (`contracts.COLLECTOR_SIGNALS_URL`) to a collector a test runs."""
        if local is None:
            self.proxies[member].routes.pop(address, None)
        else:
            self.proxies[member].routes[address] = local

    def _start_agent(self, name: str) -> None:
        workdir = self.box.members[name].workdir
        peers = [f"--member={m}={self.box.kubeconfigs[m]}" for m in self.members]
        # The node label each pool's fabric is on, as compose-serving-stack gives the
        # composed agent (the box labels the nodes with the pool's fabricNodeLabel):
        # without it every node's fabric reads "unlabelled".
        cluster = example_cluster(name) or {}
        fabrics = [
            f"--fabric-label={format_fabric_label(f)}"
            for f in fabric_labels_of_pools((cluster.get("spec") or {}).get("nodePools") or [])
        ]
        self._add(Process(
            f"agent-{name}",
            [
                *ENTRYPOINT, "agent", f"--cluster={name}", "--pod=agent-0", *peers,
                f"--lease-duration={LEASE_DURATION}", f"--renew-deadline={RENEW_DEADLINE}",
                f"--retry-period={RETRY_PERIOD}",
                f"--decision-log={workdir / 'decisions.jsonl'}",
                *[f"--interval={step}={seconds}" for step, seconds in AGENT_INTERVALS.items()],
                f"--idle-after={AGENT_IDLE_AFTER}",
                *fabrics,
                f"--metrics-port={self._port(f'agent-{name}')}",
            ],
            workdir / "agent.log",
            # The agent reads in-cluster pages (the collector's signals) by name, through
            # the member's proxy; its API servers are on loopback, never proxied.
            env={
                "http_proxy": self.proxies[name].url,
                "no_proxy": f"127.0.0.1,localhost,{self.host}",
            },
            cwd=REPO,
        ))  # fmt: skip

    def _start_keda(self, name: str) -> None:
        box, member = self.box, self.box.members[name]
        certs = Certificates(member.workdir / "keda-pki")
        # KEDA's operator <-> adapter mTLS: one pair, both ends, as KEDA's chart mounts it.
        grpc_dir = certs.pair("keda-operator", "127.0.0.1", "serverAuth,clientAuth")
        serving = certs.pair(f"{ADAPTER_SERVICE}.{KEDA_NAMESPACE}.svc", self.host, "serverAuth")
        kubeconfig = str(box.kubeconfigs[name])
        env = {
            "KUBECONFIG": kubeconfig,
            "WATCH_NAMESPACE": "",
            "POD_NAMESPACE": KEDA_NAMESPACE,
            "KEDA_CLUSTER_OBJECT_NAMESPACE": KEDA_NAMESPACE,
            "HTTPS_PROXY": self.proxies[name].url,
            "https_proxy": self.proxies[name].url,
        }
        operator = f"keda-operator-{name}"
        metrics_service = self._port(operator)
        self._add(Process(
            operator,
            [
                str(box.bin / "keda-operator"),
                f"--metrics-bind-address=127.0.0.1:{self._port(operator)}",
                f"--health-probe-bind-address=127.0.0.1:{self._port(operator)}",
                f"--metrics-service-bind-address=127.0.0.1:{metrics_service}",
                f"--cert-dir={grpc_dir}",
                f"--ca-dir={grpc_dir}",
                "--leader-elect=false",
                "--enable-webhook-patching=false",
                "--enable-apiservice-patching=false",
            ],
            member.workdir / "keda-operator.log",
            env=env,
        ))  # fmt: skip
        adapter = f"keda-adapter-{name}"
        port = self._port(adapter, self.host)
        self._add(Process(
            adapter,
            [
                str(box.bin / "keda-adapter"),
                f"--bind-address={self.host}",
                f"--secure-port={port}",
                f"--tls-cert-file={serving / 'tls.crt'}",
                f"--tls-private-key-file={serving / 'tls.key'}",
                f"--cert-dir={grpc_dir}",
                f"--metrics-service-address=127.0.0.1:{metrics_service}",
                f"--port={self._port(adapter)}",
                f"--lister-kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
            ],
            member.workdir / "keda-adapter.log",
            env=env,
        ))  # fmt: skip
        ca_bundle = base64.b64encode(certs.ca_crt.read_bytes()).decode()
        documents = [
            {
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": ADAPTER_SERVICE, "namespace": KEDA_NAMESPACE},
                "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
            },
            {
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {
                    "name": f"{ADAPTER_SERVICE}-box", "namespace": KEDA_NAMESPACE,
                    "labels": {
                        "kubernetes.io/service-name": ADAPTER_SERVICE,
                        "endpointslice.kubernetes.io/managed-by": "fleetbox.modelplane.ai",
                    },
                },
                "addressType": "IPv4",
                "endpoints": [{"addresses": [self.host], "conditions": {"ready": True}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            },
            {
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": EXTERNAL_METRICS_APISERVICE},
                "spec": {
                    "group": EXTERNAL_METRICS_GROUP, "version": "v1beta1",
                    "service": {"name": ADAPTER_SERVICE, "namespace": KEDA_NAMESPACE, "port": 443},
                    "caBundle": ca_bundle,
                    "groupPriorityMinimum": 100, "versionPriority": 100,
                },
            },
        ]  # fmt: skip
        box.kubectl(name, "apply", "-f", "-", stdin=yaml.safe_dump_all(documents))

    def wait_external_metrics(self, name: str, timeout: float = 180.0) -> None:
        """Until the member's API server serves external.metrics.k8s.io through the
        adapter (the APIService is Available)."""

        def available() -> bool:
            result = self.box.kubectl(
                name, "get", "apiservice", EXTERNAL_METRICS_APISERVICE, "-o",
                "jsonpath={.status.conditions[?(@.type=='Available')].status}", check=False,
            )  # fmt: skip
            return result.stdout.strip() == "True"

        self.wait_for(
            f"{EXTERNAL_METRICS_APISERVICE} available on {name}", available, timeout, [name]
        )

    def close(self) -> None:
        for proxy in self.proxies.values():
            with contextlib.suppress(Exception):
                proxy.close()
        CLUSTER_HOST_ADDRESSES.release("keda-adapter")


__all__ = ["Runtime"]
