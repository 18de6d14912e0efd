"""The fleet box: a real Crossplane control plane and member API servers on loopback.

One control-plane kube-apiserver and N member kube-apiservers (each with its own etcd
and kube-controller-manager running the garbage collector and namespace controllers),
Crossplane core and provider-kubernetes started out of cluster against the control
plane, and our four functions serving mTLS on distinct loopback addresses. Our XRDs and
Compositions are applied as they ship; claims are then applied with the real kubectl
exactly as a user applies them. No Docker, no kubelet: members named in `gpu=` get a
real kube-scheduler, KWOK nodes from the example node pools, DRA ResourceSlices and
KWOK as their kubelet (gpu.py); on the others no Pod ever runs.

How core finds our functions without a registry or a Deployment runtime:
- every Function names its package by digest (`ghcr.io/modelplaneai/<fn>@sha256:<hex>`,
  the hex being the digest of the package.yaml we write), and that package.yaml is
  pre-seeded, gzipped, in core's package cache under the key core computes
  (`FriendlyID(source, digest)`), so the package manager reads it and fetches nothing.
  Simpler than a loopback OCI registry: no image to build, nothing else to run.
- `--package-runtime=External`: core creates the FunctionRevision (and its
  capabilities, copied from the package) but no Deployment and no endpoint; the box
  writes each revision's `status.endpoint` (`dns:///127.0.0.N:PORT`) and re-writes it
  if a status update of core's races it away.
- core dials functions only with mTLS: the box makes a CA, a client pair for core and
  a server pair per function whose certificate carries the function's loopback IP.

The Helm Releases compose-serving-stack composes for each cluster's substrate get
provider-helm's CRDs on the control plane but no controller: a chart registry is out
of this machine's reach. They stay unready, and so does each InferenceCluster's stack
condition; the box says so instead of pretending.

Every process is started in its own process group and dies with the process that
started it (PR_SET_PDEATHSIG); `close()` stops them all. `make fleet` keeps a box
running detached (see cli.py).
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "hack"))

from kubernetes import client  # noqa: E402

from fleetbox import gpu as fleetbox_gpu  # noqa: E402
from functions.common.conditions import TRUE, condition_status  # noqa: E402
from functions.common.contracts import (  # noqa: E402
    ACTIVATOR_SECRET_KEY,
    ACTIVATOR_SECRET_PREFIX,
    FUNCTIONS,
)
from render import module_for, tools_bin  # noqa: E402
from tests.ports import free_port  # noqa: E402
from tests.runtime.cluster import Member, _die_with_parent  # noqa: E402

CROSSPLANE_NAMESPACE = "crossplane-system"
PACKAGE_REGISTRY = "ghcr.io/modelplaneai"
# The members of examples/inferenceclusters, and the provider config the example
# TelemetryDestination's gateway names (the control plane itself).
DEFAULT_MEMBERS = ("us-east-1", "eu-west-1")
CONTROL_PLANE_CONFIG = "control-plane"
# Secrets the examples reference by name; a user creates them, so the box does.
EXAMPLE_SECRETS = {
    "fleet-telemetry-token": {"token": "fleet-box-token"},
    "prometheus-remote-write": {"authorization": "Bearer fleet-box"},
}
EXAMPLE_NAMESPACES = ("ml-team",)
# The Secret per member that compose-serving-stack copies to its peers (runtime_hosting).
PEER_SECRET_PREFIX = "modelplane-peer-"
SCALER_TLS_SECRET = "modelplane-scaler-tls"
SCALER_CLIENT_SECRET = "modelplane-scaler-client"
SCALER_DNS_NAME = "modelplane-scaler.modelplane-system.svc.cluster.local"
KEDA_SCALER_CLIENT = "keda-scaler-client"  # the certificate KEDA presents to our scaler
# The cluster inventory API's ClusterProfile, which compose-serving-stack writes one of
# per peer on every member. Its CRD is a prerequisite the platform installs (no chart of
# the substrate carries it, and its module is not served here), so the box stands in with
# a structural CRD that keeps whatever it is given.
CLUSTER_PROFILE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "clusterprofiles.multicluster.x-k8s.io"},
    "spec": {
        "group": "multicluster.x-k8s.io",
        "scope": "Namespaced",
        "names": {
            "plural": "clusterprofiles", "singular": "clusterprofile",
            "kind": "ClusterProfile", "listKind": "ClusterProfileList",
        },
        "versions": [{
            "name": "v1alpha1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {
                "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            },
        }],
    },
}  # fmt: skip
WAIT_SECONDS = 120.0
POLL_SECONDS = 0.25


class FleetBoxError(RuntimeError):
    """The box could not start a part, or a part did not become ready in time."""


REQUIRED_TOOLS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
    "crossplane-core",
    "provider-kubernetes",
    "schemas",
)


def missing_tools() -> list[str]:
    return [name for name in REQUIRED_TOOLS if not (tools_bin() / name).exists()]


def wait_for(what: str, check: Callable[[], Any], timeout: float = WAIT_SECONDS) -> Any:
    """Poll `check` until it returns something truthy; the last error says why not."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            result = check()
        except Exception as error:
            last = error
        else:
            if result:
                return result
            last = result
        time.sleep(POLL_SECONDS)
    raise FleetBoxError(f"{what}: not within {timeout:.0f}s (last: {last!r})")


# --- certificates ---------------------------------------------------------------------


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@dataclass
class Certificates:
    """A CA, core's client pair and one server pair per function address."""

    root: Path

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.ca_key = self.root / "ca.key"
        self.ca_crt = self.root / "ca.crt"
        _openssl("genrsa", "-out", str(self.ca_key), "2048")
        _openssl(
            "req", "-x509", "-new", "-key", str(self.ca_key), "-days", "2",
            "-subj", "/CN=modelplane-fleet-box-ca", "-out", str(self.ca_crt),
        )  # fmt: skip

    def pair(self, name: str, ip: str | None, usage: str) -> Path:
        """A folder holding tls.crt, tls.key and ca.crt, as core and the SDK read them."""
        folder = self.root / name
        folder.mkdir()
        key, csr, crt = folder / "tls.key", folder / "tls.csr", folder / "tls.crt"
        _openssl("genrsa", "-out", str(key), "2048")
        _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={name}", "-out", str(csr))
        extensions = folder / "ext.cnf"
        lines = [f"extendedKeyUsage={usage}"]
        if ip:
            lines.append(f"subjectAltName=IP:{ip},DNS:{name}")
        extensions.write_text("\n".join(lines) + "\n")
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(self.ca_crt), "-CAkey",
            str(self.ca_key), "-CAcreateserial", "-days", "2", "-extfile", str(extensions),
            "-out", str(crt),
        )  # fmt: skip
        shutil.copy(self.ca_crt, folder / "ca.crt")
        return folder


# --- processes -------------------------------------------------------------------------


@dataclass
class Process:
    """One long-running process of the box, restartable with the same arguments."""

    name: str
    args: list[str]
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    popen: subprocess.Popen | None = None

    def start(self) -> None:
        environment = {**os.environ, **self.env}
        self.popen = subprocess.Popen(
            self.args,
            stdout=self.log.open("ab"),
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=self.cwd,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - sets a signal and a group only
        )

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if not self.running():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def tail(self, lines: int = 30) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def component_flags(kubeconfig: Path, cert_dir: Path) -> list[str]:
    """How a control-plane component (controller manager, scheduler) runs out of cluster
    against one API server: its kubeconfig for everything, one instance, its own port."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={free_port()}",
        f"--cert-dir={cert_dir}",
    ]


# --- the function packages ---------------------------------------------------------------


def package_yaml(function: str) -> bytes:
    """The package.yaml of one function package: its metadata as it ships."""
    return (
        REPO / "package" / "functions" / function.removeprefix("function-") / "crossplane.yaml"
    ).read_bytes()


def friendly_id(name: str, digest: str) -> str:
    """Core's package-cache key (internal/xpkg FriendlyID over the source and digest)."""
    raw = f"{name[:50]}-{digest[:12]}"
    out = []
    for i, char in enumerate(raw):
        if "a" <= char <= "z" or "0" <= char <= "9":
            out.append(char)
        if char in "./:-" and i not in (0, 62, len(raw) - 1):
            out.append("-")
        if i == 62:
            break
    return "".join(out).strip("-")


def seed_package(cache_dir: Path, function: str) -> str:
    """Write the function's package into core's cache; return its digest reference."""
    content = package_yaml(function)
    digest = "sha256:" + hashlib.sha256(content).hexdigest()
    source = f"{PACKAGE_REGISTRY}/{function}"
    (cache_dir / f"{friendly_id(source, digest)}.gz").write_bytes(gzip.compress(content))
    return f"{source}@{digest}"


def _tls_secret(function: str) -> str:
    return f"{function}-tls-server"


def example_paths() -> list[Path]:
    """The claims a user applies, in order: clusters and the destination, then models."""
    kinds = ("inferenceclusters", "telemetrydestinations", "modelcaches", "modeldeployments")
    return [p for kind in kinds for p in sorted((REPO / "examples" / kind).glob("*.yaml"))]


# --- the box ------------------------------------------------------------------------------


@dataclass
class FunctionServer:
    function: str
    host: str
    port: int
    process: Process

    @property
    def endpoint(self) -> str:
        return f"dns:///{self.host}:{self.port}"


class FleetBox:
    """The control plane, its members and every process that makes them a fleet."""

    def __init__(
        self,
        members: Iterable[str] = DEFAULT_MEMBERS,
        root: Path | None = None,
        gpu: Iterable[str] = (),
    ) -> None:
        """`gpu`: members that schedule and run pods on KWOK GPU nodes (fleetbox_gpu)."""
        bin_dir = tools_bin()
        self.gpu = tuple(gpu)
        missing = missing_tools() + [
            t for t in fleetbox_gpu.REQUIRED_TOOLS if self.gpu and not (bin_dir / t).exists()
        ]
        if missing:
            raise FleetBoxError(
                f"missing tools {', '.join(missing)} in {bin_dir}: run 'bash hack/tools.sh'"
            )
        self.bin = bin_dir
        self.root = root or Path(tempfile.mkdtemp(prefix="modelplane-fleetbox-"))
        self.root.mkdir(parents=True, exist_ok=True)
        etcd, apiserver = bin_dir / "etcd", bin_dir / "kube-apiserver"
        self.control = Member("control-plane", self.root / "control-plane", etcd, apiserver)
        self.members = {name: Member(name, self.root / name, etcd, apiserver) for name in members}
        self.processes: dict[str, Process] = {}
        self.functions: dict[str, FunctionServer] = {}
        self.kubeconfigs: dict[str, Path] = {}
        self.timings: dict[str, float] = {}

    # -- the API servers and their controllers --------------------------------------

    @property
    def clusters(self) -> list[Member]:
        return [self.control, *self.members.values()]

    def start(self) -> FleetBox:
        began = time.monotonic()
        try:
            self._start_api_servers()
            self._start_controller_managers()
            self._install_control_plane_crds()
            self._install_member_substrate()
            for name in self.gpu:
                fleetbox_gpu.equip(self, name)
            self._start_functions()
            self._start_crossplane()
            self._start_provider_kubernetes()
            self._connect_members()
            self._install_apis()
        except BaseException:
            self.close()
            raise
        self.timings["start"] = time.monotonic() - began
        return self

    def _start_api_servers(self) -> None:
        began = time.monotonic()
        from fleetbox.runtime import aggregation_args  # noqa: PLC0415 - it imports this module

        for cluster in self.members.values():
            # KEDA's metrics adapter is reached through each member's aggregation layer.
            cluster.apiserver_args = aggregation_args(cluster.workdir / "front-proxy")
        for cluster in self.clusters:
            cluster.start_etcd()
        for cluster in self.clusters:
            cluster.start_apiserver(wait=False)
        with ThreadPoolExecutor(len(self.clusters)) as pool:
            list(pool.map(lambda c: c.wait_ready(), self.clusters))
        for cluster in self.clusters:
            path = cluster.workdir / "kubeconfig"
            path.write_text(yaml.safe_dump(cluster.kubeconfig()))
            self.kubeconfigs[cluster.name] = path
        self.timings["api_servers"] = time.monotonic() - began

    def _start_controller_managers(self) -> None:
        for cluster in self.clusters:
            path = self.kubeconfigs[cluster.name]
            process = Process(
                f"kube-controller-manager-{cluster.name}",
                [
                    str(self.bin / "kube-controller-manager"),
                    *component_flags(path, cluster.workdir / "kcm-certs"),
                    "--controllers="
                    + ",".join(
                        fleetbox_gpu.CONTROLLERS
                        if cluster.name in self.gpu
                        else ("garbagecollector", "namespace")
                    ),
                ],
                cluster.workdir / "kube-controller-manager.log",
            )
            process.start()
            self.processes[process.name] = process

    def api(self, cluster: str = "control-plane") -> client.ApiClient:
        member = self.control if cluster == "control-plane" else self.members[cluster]
        return member.client()

    def kubectl(
        self, cluster: str, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess:
        """The real kubectl against one cluster of the box."""
        result = subprocess.run(  # noqa: PLW1510 - the caller decides (check=...)
            [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfigs[cluster]}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise FleetBoxError(f"kubectl {' '.join(args)} on {cluster}: {result.stderr.strip()}")
        return result

    def apply(self, cluster: str, paths: Iterable[Path]) -> None:
        args = ["apply"]
        for path in paths:
            args += ["-f", str(path)]
        self.kubectl(cluster, *args)

    def _wait_crds_established(self, cluster: str) -> None:
        def established() -> bool:
            out = self.kubectl(cluster, "get", "crd", "-o", "json").stdout
            items = json.loads(out)["items"]
            pending = [
                c["metadata"]["name"]
                for c in items
                if not any(
                    x["type"] == "Established" and x["status"] == "True"
                    for x in c.get("status", {}).get("conditions", [])
                )
            ]
            return not pending

        wait_for(f"CRDs established on {cluster}", established)

    def _install_control_plane_crds(self) -> None:
        # Only the providers' namespaced (.m.) kinds, which is what we compose: the legacy
        # cluster-scoped Object CRD names a conversion webhook Service that does not exist
        # out of cluster.
        providers = ("provider-kubernetes-crds", "provider-helm-crds")
        crds = sorted((self.bin.parent / "crossplane-crds").glob("*.yaml"))
        for folder in providers:
            crds += sorted((self.bin.parent / folder).glob("*.m.crossplane.io_*.yaml"))
        # Server-side: some of Crossplane's CRDs exceed the client-side annotation limit.
        self.kubectl("control-plane", "apply", "--server-side", *[f"-f={p}" for p in crds])
        self.kubectl("control-plane", "create", "namespace", CROSSPLANE_NAMESPACE)
        for namespace in EXAMPLE_NAMESPACES:
            self.kubectl("control-plane", "create", "namespace", namespace)
        for name, data in EXAMPLE_SECRETS.items():
            args = ["create", "secret", "generic", name, "-n", CROSSPLANE_NAMESPACE]
            args += [f"--from-literal={k}={v}" for k, v in data.items()]
            self.kubectl("control-plane", *args)
        self._wait_crds_established("control-plane")

    def _install_member_substrate(self) -> None:
        """What each member's substrate would install: the CRDs of the schema bundle we
        pin (LeaderWorkerSet, Grove, Gateway API, the Inference Extension, KEDA)."""
        documents = []
        for path in sorted((self.bin / "schemas" / "crds").glob("*.yaml")):
            if path.name.split("_")[0].endswith("crossplane.io"):
                continue  # the providers' own kinds live on the control plane only
            crd = yaml.safe_load(path.read_text())
            # A conversion webhook names an in-cluster Service no member has; with the
            # stored version only, None conversion serves the same objects.
            crd["spec"].pop("conversion", None)
            documents.append(crd)
        documents.append(CLUSTER_PROFILE_CRD)
        # KEDA's own namespace, which its install creates: the scaler's client-certificate
        # Secret goes there (KEDA reads ClusterTriggerAuthentication Secrets from it).
        documents.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "keda"}})
        for name in self.members:
            self.kubectl(
                name, "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(documents)
            )
        for name in self.members:
            self._wait_crds_established(name)

    # -- the functions, core and the provider -------------------------------------

    def _start_functions(self) -> None:
        self.certs = Certificates(self.root / "pki")
        self.core_client_certs = self.certs.pair("crossplane-core", None, "clientAuth")
        for index, function in enumerate(FUNCTIONS):
            host = f"127.0.0.{index + 2}"
            port = free_port(host)
            certs = self.certs.pair(function, host, "serverAuth")
            process = Process(
                function,
                [
                    sys.executable,
                    "-m",
                    module_for(function),
                    "--tls-server-certs-dir",
                    str(certs),
                    "--address",
                    f"{host}:{port}",
                ],
                self.root / f"{function}.log",
                cwd=REPO,
            )
            process.start()
            self.processes[function] = process
            self.functions[function] = FunctionServer(function, host, port, process)
        for server in self.functions.values():
            self.wait_function(server)

    def wait_function(self, server: FunctionServer) -> None:
        def listening() -> bool:
            if not server.process.running():
                raise FleetBoxError(f"{server.function} exited:\n{server.process.tail()}")
            with socket.create_connection((server.host, server.port), timeout=0.5):
                return True

        wait_for(f"{server.function} listening", listening, 60)

    def _start_crossplane(self) -> None:
        cache = self.root / "xpkg-cache"
        cache.mkdir()
        self.package_refs = {f: seed_package(cache, f) for f in FUNCTIONS}
        core = Process(
            "crossplane-core",
            [
                str(self.bin / "crossplane-core"),
                "core",
                "start",
                "--package-runtime=External",
                "--enable-webhooks=false",
                f"--tls-client-certs-dir={self.core_client_certs}",
                f"--xpkg-cache-dir={cache}",
                f"--metrics-port={free_port()}",
                f"--health-probe-port={free_port()}",
                "--poll-interval=15s",
            ],
            self.root / "crossplane-core.log",
            env={
                "KUBECONFIG": str(self.kubeconfigs["control-plane"]),
                "POD_NAMESPACE": CROSSPLANE_NAMESPACE,
            },
        )
        core.start()
        self.processes[core.name] = core
        # The Secret the package manager reads a revision's webhook CA bundle from (the
        # Deployment runtime makes it; our packages carry no CRDs, so it is never used).
        for function in self.functions:
            crt = self.certs.root / function / "tls.crt"
            self.kubectl(
                "control-plane", "create", "secret", "generic", _tls_secret(function),
                "-n", CROSSPLANE_NAMESPACE, f"--from-file=tls.crt={crt}",
            )  # fmt: skip
        functions = [
            {
                "apiVersion": "pkg.crossplane.io/v1",
                "kind": "Function",
                "metadata": {"name": function},
                "spec": {"package": ref, "packagePullPolicy": "IfNotPresent"},
            }
            for function, ref in self.package_refs.items()
        ]
        self.kubectl("control-plane", "apply", "-f", "-", stdin=yaml.safe_dump_all(functions))
        self.point_functions()

    def point_functions(self) -> None:
        """Do for each active FunctionRevision what the Deployment runtime would: name
        its TLS server Secret and write its endpoint, until both stay written."""
        custom = client.CustomObjectsApi(self.api())

        def pointed() -> bool:
            revisions = custom.list_cluster_custom_object(
                "pkg.crossplane.io", "v1", "functionrevisions"
            )["items"]
            done = set()
            for revision in revisions:
                labels = revision["metadata"].get("labels", {})
                function = labels.get("pkg.crossplane.io/package")
                if function not in self.functions:
                    continue
                if revision["spec"].get("desiredState") != "Active":
                    continue
                want = {
                    "endpoint": self.functions[function].endpoint,
                    "tlsServerSecretName": _tls_secret(function),
                }
                status = revision.get("status", {})
                if any(status.get(k) != v for k, v in want.items()):
                    custom.patch_cluster_custom_object_status(
                        "pkg.crossplane.io",
                        "v1",
                        "functionrevisions",
                        revision["metadata"]["name"],
                        {"status": want},
                    )
                    continue
                if "composition" not in status.get("capabilities", []):
                    continue  # core has not read the package yet
                done.add(function)
            if done != set(self.functions):
                raise FleetBoxError(f"pointed so far: {sorted(done)}")
            return True

        # Twice, a little apart: a status update of core's may race the first.
        wait_for("FunctionRevisions pointed at our functions", pointed)
        time.sleep(2)
        wait_for("FunctionRevisions still pointed at our functions", pointed)

    def _start_provider_kubernetes(self) -> None:
        certs = self.certs.pair("provider-kubernetes-webhook", "127.0.0.1", "serverAuth")
        process = Process(
            "provider-kubernetes",
            [
                str(self.bin / "provider-kubernetes"),
                "--poll=30s",
                "--sync=5m",
                f"--webhook-port={free_port()}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-addr=127.0.0.1:{free_port()}",
            ],
            self.root / "provider-kubernetes.log",
            env={
                "KUBECONFIG": str(self.kubeconfigs["control-plane"]),
                "TLS_SERVER_CERTS_DIR": str(certs),
            },
        )
        process.start()
        self.processes[process.name] = process

    def _connect_members(self) -> None:
        """One kubeconfig Secret and ClusterProviderConfig per member, and one for the
        control plane itself (where the example TelemetryDestination's gateway runs)."""
        documents = []
        # What the platform team provides for KEDA -> scaler client-certificate auth
        # (contracts.SCALER_TLS_SECRET / SCALER_CLIENT_SECRET), one pair for every member.
        scaler_server = self.certs.pair(SCALER_DNS_NAME, "127.0.0.1", "serverAuth")
        keda_client = self.certs.pair(KEDA_SCALER_CLIENT, None, "clientAuth")
        targets = {**self.members, CONTROL_PLANE_CONFIG: self.control}
        for name, cluster in targets.items():
            config = cluster.kubeconfig()
            if name in self.members:
                for prefix, folder in (
                    (SCALER_TLS_SECRET, scaler_server),
                    (SCALER_CLIENT_SECRET, keda_client),
                ):
                    documents.append({
                        "apiVersion": "v1", "kind": "Secret",
                        "metadata": {"name": f"{prefix}-{name}", "namespace": CROSSPLANE_NAMESPACE},
                        "stringData": {
                            key: (folder / key).read_text()
                            for key in ("ca.crt", "tls.crt", "tls.key")
                        },
                    })  # fmt: skip
                # What the platform team provides for each member's peers (README: the
                # runtime): a kubeconfig peers' agents reach it with. A real one is
                # built for the member's modelplane-peer ServiceAccount; the box has no
                # token controller, so it carries the member's admin token.
                documents.append({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {
                        "name": f"{PEER_SECRET_PREFIX}{name}", "namespace": CROSSPLANE_NAMESPACE,
                    },
                    "stringData": {"kubeconfig": yaml.safe_dump(config)},
                })  # fmt: skip
                # What the platform team provides for each member's on-demand activator
                # (docs/activator-rbac.yaml): a control-plane kubeconfig. A real one is
                # for a ServiceAccount bound to that ClusterRole; the box's carries the
                # control plane's admin credentials (tests/e2e/test_on_demand.py runs its
                # activator with a token bound to the shipped role instead).
                documents.append({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {
                        "name": f"{ACTIVATOR_SECRET_PREFIX}{name}",
                        "namespace": CROSSPLANE_NAMESPACE,
                    },
                    "stringData": {
                        ACTIVATOR_SECRET_KEY: yaml.safe_dump(self.control.kubeconfig()),
                    },
                })  # fmt: skip
            secret = f"{name}-kubeconfig"
            documents.append({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": secret, "namespace": CROSSPLANE_NAMESPACE},
                "stringData": {"kubeconfig": yaml.safe_dump(config)},
            })  # fmt: skip
            credentials = {
                "source": "Secret",
                "secretRef": {
                    "namespace": CROSSPLANE_NAMESPACE,
                    "name": secret,
                    "key": "kubeconfig",
                },
            }
            documents.append({
                "apiVersion": "kubernetes.m.crossplane.io/v1alpha1",
                "kind": "ClusterProviderConfig",
                "metadata": {"name": name}, "spec": {"credentials": credentials},
            })  # fmt: skip
            documents.append({
                "apiVersion": "helm.m.crossplane.io/v1beta1", "kind": "ClusterProviderConfig",
                "metadata": {"name": name}, "spec": {"credentials": credentials},
            })  # fmt: skip
        self.kubectl("control-plane", "apply", "-f", "-", stdin=yaml.safe_dump_all(documents))

    def _install_apis(self) -> None:
        paths = []
        for folder in sorted((REPO / "apis").iterdir()):
            definition = folder / "definition.yaml"
            if yaml.safe_load(definition.read_text())["kind"] != "CompositeResourceDefinition":
                continue  # the AdaptivePolicy CRD is for members; compose-serving-stack sends it
            paths += [definition, folder / "composition.yaml"]
        self.apply("control-plane", paths)
        custom = client.CustomObjectsApi(self.api())

        def offered() -> bool:
            xrds = custom.list_cluster_custom_object(
                "apiextensions.crossplane.io", "v2", "compositeresourcedefinitions"
            )["items"]
            return len(xrds) == len(paths) // 2 and all(
                any(
                    c["type"] == "Established" and c["status"] == "True"
                    for c in x.get("status", {}).get("conditions", [])
                )
                for x in xrds
            )

        wait_for("XRDs established", offered)
        self._wait_crds_established("control-plane")
        # No MetricMapping is applied: the built-ins are in effect on a fresh install.

    # -- examples ------------------------------------------------------------------

    def apply_examples(self) -> None:
        self.apply("control-plane", example_paths())

    # -- reading -------------------------------------------------------------------

    def get(self, cluster: str, resource: str, namespace: str | None = None) -> list[dict]:
        args = ["get", resource, "-o", "json"]
        args += ["-n", namespace] if namespace else ["-A"]
        result = self.kubectl(cluster, *args, check=False)
        if result.returncode != 0:
            return []
        return json.loads(result.stdout)["items"]

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail()}" for p in self.processes.values())

    # -- stopping ------------------------------------------------------------------

    def close(self) -> None:
        for process in reversed(list(self.processes.values())):
            with contextlib.suppress(Exception):
                process.stop(grace=5)
        for cluster in self.clusters:
            with contextlib.suppress(Exception):
                cluster.close()
        if not os.environ.get("MODELPLANE_KEEP_FLEETBOX"):
            shutil.rmtree(self.root, ignore_errors=True)


def conditions(resource: dict) -> dict[str, dict]:
    return {c["type"]: c for c in resource.get("status", {}).get("conditions", [])}


def is_true(resource: dict, condition: str) -> bool:
    return condition_status(resource, condition) == TRUE


__all__ = ["FleetBox", "FleetBoxError", "conditions", "is_true", "wait_for"]
