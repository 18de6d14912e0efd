"""What makes the control plane's API server a Crossplane control plane.

Crossplane core and provider-kubernetes run out of cluster against it, and our four
functions serve mTLS on distinct loopback addresses. Our XRDs and Compositions are
applied as they ship; claims are then applied with the real kubectl exactly as a user
applies them.

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

Each member is connected the way docs/install.md (step 4) connects one: provider-
kubernetes' identity from docs/member-rbac.yaml and provider-helm's, a kubeconfig Secret
per identity holding its token, and the page's ClusterProviderConfigs (the control plane
itself gets one with its admin kubeconfig, where a real install injects the provider's own
identity); and the
Secrets compose-serving-stack copies to members (the scaler's TLS pairs, peer and
activator kubeconfigs).
"""

from __future__ import annotations

import gzip
import hashlib
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client

from fleetbox import REPO, install_doc
from fleetbox.certificates import Certificates
from fleetbox.clusters import CONTROL_PLANE, Clusters
from fleetbox.process import Process
from fleetbox.wait import FleetBoxError, wait_for
from functions.common.contracts import (
    ACTIVATOR_SECRET_KEY,
    ACTIVATOR_SECRET_PREFIX,
    FUNCTIONS,
    SCALER_CLIENT_SECRET,
    SCALER_TLS_SECRET,
)
from render import module_for
from tests.ports import free_port

CROSSPLANE_NAMESPACE = "crossplane-system"
# The members' provider identities' tokens: longer than any box runs.
IDENTITY_TOKEN_DURATION = "48h"
PACKAGE_REGISTRY = "ghcr.io/modelplaneai"
# The provider config the example TelemetryDestination's gateway names (the control
# plane itself).
CONTROL_PLANE_CONFIG = "control-plane"
# Secrets the examples reference by name; a user creates them, so the box does.
EXAMPLE_SECRETS = {
    "fleet-telemetry-token": {"token": "fleet-box-token"},
    "prometheus-remote-write": {"authorization": "Bearer fleet-box"},
}
EXAMPLE_NAMESPACES = ("ml-team",)
# The Secret per member that compose-serving-stack copies to its peers (runtime_hosting).
PEER_SECRET_PREFIX = "modelplane-peer-"
SCALER_DNS_NAME = "modelplane-scaler.modelplane-system.svc.cluster.local"
KEDA_SCALER_CLIENT = "keda-scaler-client"  # the certificate KEDA presents to our scaler
# Core's per-XR watch circuit breaker (--circuit-breaker-burst, --circuit-breaker-
# refill-rate), sized as docs/operating.md recommends ("Reconciles that follow changes").
CIRCUIT_BREAKER_BURST = 1000
CIRCUIT_BREAKER_REFILL_PER_SECOND = 10


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


# --- the control plane's CRDs ------------------------------------------------------------


def install_crds(box: Clusters) -> None:
    """Crossplane's CRDs and the providers', the namespaces and the Secrets the examples
    need."""
    # Only the providers' namespaced (.m.) kinds, which is what we compose: the legacy
    # cluster-scoped Object CRD names a conversion webhook Service that does not exist
    # out of cluster.
    providers = ("provider-kubernetes-crds", "provider-helm-crds")
    crds = sorted((box.bin.parent / "crossplane-crds").glob("*.yaml"))
    for folder in providers:
        crds += sorted((box.bin.parent / folder).glob("*.m.crossplane.io_*.yaml"))
    # Server-side: some of Crossplane's CRDs exceed the client-side annotation limit.
    box.kubectl(CONTROL_PLANE, "apply", "--server-side", *[f"-f={p}" for p in crds])
    box.kubectl(CONTROL_PLANE, "create", "namespace", CROSSPLANE_NAMESPACE)
    for namespace in EXAMPLE_NAMESPACES:
        box.kubectl(CONTROL_PLANE, "create", "namespace", namespace)
    for name, data in EXAMPLE_SECRETS.items():
        args = ["create", "secret", "generic", name, "-n", CROSSPLANE_NAMESPACE]
        args += [f"--from-literal={k}={v}" for k, v in data.items()]
        box.kubectl(CONTROL_PLANE, *args)
    box.wait_crds_established(CONTROL_PLANE)


# --- the functions, core and the provider -------------------------------------


@dataclass
class FunctionServer:
    function: str
    host: str
    port: int
    process: Process

    @property
    def endpoint(self) -> str:
        return f"dns:///{self.host}:{self.port}"


def start_functions(box: Clusters, certs: Certificates) -> dict[str, FunctionServer]:
    """Our four functions, each serving mTLS on its own loopback address, listening."""
    functions: dict[str, FunctionServer] = {}
    for index, function in enumerate(FUNCTIONS):
        host = f"127.0.0.{index + 2}"
        port = free_port(host)
        pair = certs.pair(function, host, "serverAuth")
        process = box.start_process(
            Process(
                function,
                [
                    sys.executable,
                    "-m",
                    module_for(function),
                    "--tls-server-certs-dir",
                    str(pair),
                    "--address",
                    f"{host}:{port}",
                ],
                box.root / f"{function}.log",
                cwd=REPO,
            )
        )
        functions[function] = FunctionServer(function, host, port, process)
    for server in functions.values():
        wait_function(server)
    return functions


def wait_function(server: FunctionServer) -> None:
    def listening() -> bool:
        if not server.process.running():
            raise FleetBoxError(f"{server.function} exited:\n{server.process.tail()}")
        with socket.create_connection((server.host, server.port), timeout=0.5):
            return True

    wait_for(f"{server.function} listening", listening, 60)


def start_crossplane(
    box: Clusters,
    certs: Certificates,
    core_client_certs: Path,
    functions: dict[str, FunctionServer],
) -> dict[str, str]:
    """Core, with our functions' packages seeded in its cache and their revisions
    pointed at our servers; the package reference of each function."""
    cache = box.root / "xpkg-cache"
    cache.mkdir()
    package_refs = {f: seed_package(cache, f) for f in FUNCTIONS}
    box.core_metrics_port = free_port()  # circuit_breaker_opens_total, for the benches
    box.start_process(
        Process(
            "crossplane-core",
            [
                str(box.bin / "crossplane-core"),
                "core",
                "start",
                "--package-runtime=External",
                "--enable-webhooks=false",
                f"--tls-client-certs-dir={core_client_certs}",
                f"--xpkg-cache-dir={cache}",
                f"--metrics-port={box.core_metrics_port}",
                f"--health-probe-port={free_port()}",
                "--poll-interval=15s",
                # Each XR's circuit breaker, sized for what our XRs legitimately see: a
                # ModelReplica's creation alone makes ~110 watch events, an
                # InferenceCluster's ~460. At the default (100, refilled 1/s) a new
                # replica's breaker opened in some runs and its pod's readiness then
                # waited up to a minute (docs/operating.md).
                f"--circuit-breaker-burst={CIRCUIT_BREAKER_BURST}",
                f"--circuit-breaker-refill-rate={CIRCUIT_BREAKER_REFILL_PER_SECOND}",
            ],
            box.root / "crossplane-core.log",
            env={
                "KUBECONFIG": str(box.kubeconfigs[CONTROL_PLANE]),
                "POD_NAMESPACE": CROSSPLANE_NAMESPACE,
            },
        )
    )
    # The Secret the package manager reads a revision's webhook CA bundle from (the
    # Deployment runtime makes it; our packages carry no CRDs, so it is never used).
    for function in functions:
        crt = certs.root / function / "tls.crt"
        box.kubectl(
            CONTROL_PLANE, "create", "secret", "generic", _tls_secret(function),
            "-n", CROSSPLANE_NAMESPACE, f"--from-file=tls.crt={crt}",
        )  # fmt: skip
    documents = [
        {
            "apiVersion": "pkg.crossplane.io/v1",
            "kind": "Function",
            "metadata": {"name": function},
            "spec": {"package": ref, "packagePullPolicy": "IfNotPresent"},
        }
        for function, ref in package_refs.items()
    ]
    box.kubectl(CONTROL_PLANE, "apply", "-f", "-", stdin=yaml.safe_dump_all(documents))
    point_functions(box, functions)
    return package_refs


def point_functions(box: Clusters, functions: dict[str, FunctionServer]) -> None:
    """Do for each active FunctionRevision what the Deployment runtime would: name
    its TLS server Secret and write its endpoint, until both stay written."""
    custom = client.CustomObjectsApi(box.api())

    def pointed() -> bool:
        revisions = custom.list_cluster_custom_object(
            "pkg.crossplane.io", "v1", "functionrevisions"
        )["items"]
        done = set()
        for revision in revisions:
            labels = revision["metadata"].get("labels", {})
            function = labels.get("pkg.crossplane.io/package")
            if function not in functions:
                continue
            if revision["spec"].get("desiredState") != "Active":
                continue
            want = {
                "endpoint": functions[function].endpoint,
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
        if done != set(functions):
            raise FleetBoxError(f"pointed so far: {sorted(done)}")
        return True

    # Twice, a little apart: a status update of core's may race the first.
    wait_for("FunctionRevisions pointed at our functions", pointed)
    time.sleep(2)
    wait_for("FunctionRevisions still pointed at our functions", pointed)


def start_provider_kubernetes(box: Clusters, certs: Certificates, watches: bool = True) -> None:
    """provider-kubernetes at its own poll and sync defaults (10 minutes, 1 hour), as a
    platform team runs it: every Object whose remote state a function reads asks to be
    watched (functions/common/objects.py), so the poll only catches drift. With
    `watches` off (its --enable-watches; the field is then ignored: what a provider
    without the flag does, for comparing) it polls every 30 s, or a comparison would
    wait ten minutes for every status."""
    webhook = certs.pair("provider-kubernetes-webhook", "127.0.0.1", "serverAuth")
    box.start_process(
        Process(
            "provider-kubernetes",
            [
                str(box.bin / "provider-kubernetes"),
                *(["--enable-watches"] if watches else ["--poll=30s"]),
                f"--webhook-port={free_port()}",
                f"--metrics-bind-address=127.0.0.1:{free_port()}",
                f"--health-probe-bind-addr=127.0.0.1:{free_port()}",
            ],
            box.root / "provider-kubernetes.log",
            env={
                "KUBECONFIG": str(box.kubeconfigs[CONTROL_PLANE]),
                "TLS_SERVER_CERTS_DIR": str(webhook),
            },
        )
    )


# --- connecting the members --------------------------------------------------------------


def connect_members(box: Clusters, certs: Certificates) -> None:
    """One kubeconfig Secret and ClusterProviderConfig per member, and one for the
    control plane itself (where the example TelemetryDestination's gateway runs)."""
    documents = []
    # What the platform team provides for KEDA -> scaler client-certificate auth
    # (contracts.SCALER_TLS_SECRET / SCALER_CLIENT_SECRET), one pair for every member.
    scaler_server = certs.pair(SCALER_DNS_NAME, "127.0.0.1", "serverAuth")
    keda_client = certs.pair(KEDA_SCALER_CLIENT, None, "clientAuth")
    targets = {**box.members, CONTROL_PLANE_CONFIG: box.control}
    for name, cluster in targets.items():
        config = cluster.kubeconfig()
        if name in box.members:
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
                    ACTIVATOR_SECRET_KEY: yaml.safe_dump(box.control.kubeconfig()),
                },
            })  # fmt: skip
        if name in box.members:
            # docs/install.md, step 4: provider-kubernetes reaches the member as the
            # identity docs/member-rbac.yaml grants, so a kind the functions compose and
            # the role lacks fails here; provider-helm (no controller in the box) gets
            # its own identity, as the page says.
            for provider, config in member_identities(box, name).items():
                documents.append({
                    "apiVersion": "v1", "kind": "Secret",
                    "metadata": {
                        "name": install_doc.secret_name(name, provider),
                        "namespace": CROSSPLANE_NAMESPACE,
                    },
                    "stringData": {"kubeconfig": yaml.safe_dump(config)},
                })  # fmt: skip
            documents.extend(install_doc.provider_configs(name))
            continue
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
    box.kubectl(CONTROL_PLANE, "apply", "-f", "-", stdin=yaml.safe_dump_all(documents))


def member_identities(box: Clusters, name: str) -> dict[str, dict]:
    """docs/install.md, step 4, on one member: docs/member-rbac.yaml applied,
    provider-helm's ServiceAccount bound to cluster-admin, and per provider a kubeconfig
    holding that ServiceAccount's TokenRequest token and no other credential."""
    namespace = install_doc.IDENTITY_NAMESPACE
    helm = install_doc.IDENTITIES["helm"]
    box.kubectl(name, "apply", "-f", str(install_doc.MEMBER_RBAC))
    box.kubectl(name, "-n", namespace, "create", "serviceaccount", helm)
    box.kubectl(
        name, "create", "clusterrolebinding", helm, "--clusterrole=cluster-admin",
        f"--serviceaccount={namespace}:{helm}",
    )  # fmt: skip
    configs = {}
    for provider, account in install_doc.IDENTITIES.items():
        token = box.kubectl(
            name, "-n", namespace, "create", "token", account,
            f"--duration={IDENTITY_TOKEN_DURATION}",
        ).stdout.strip()  # fmt: skip
        config = box.members[name].kubeconfig()
        config["users"] = [{"name": account, "user": {"token": token}}]
        for context in config["contexts"]:
            context["context"]["user"] = account
        configs[provider] = config
    return configs


# --- our APIs ----------------------------------------------------------------------------


def install_apis(box: Clusters) -> None:
    """Our XRDs and Compositions as they ship, until every XRD is established."""
    paths = []
    for folder in sorted((REPO / "apis").iterdir()):
        definition = folder / "definition.yaml"
        if yaml.safe_load(definition.read_text())["kind"] != "CompositeResourceDefinition":
            continue  # the AdaptivePolicy CRD is for members; compose-serving-stack sends it
        paths += [definition, folder / "composition.yaml"]
    box.apply(CONTROL_PLANE, paths)
    custom = client.CustomObjectsApi(box.api())

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
    box.wait_crds_established(CONTROL_PLANE)
    # No MetricMapping is applied: the built-ins are in effect on a fresh install.


__all__ = [
    "CROSSPLANE_NAMESPACE",
    "FunctionServer",
    "connect_members",
    "example_paths",
    "install_apis",
    "install_crds",
    "point_functions",
    "start_crossplane",
    "start_functions",
    "start_provider_kubernetes",
    "wait_function",
]
