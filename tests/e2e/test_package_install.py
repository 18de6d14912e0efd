"""The Configuration installs through Crossplane's package manager with everything the
Compositions compose.

The fleet box applies our XRDs and Compositions directly (it is quicker, and its
functions run as processes), so it cannot see a dependency the Configuration forgets.
This module installs the packages as a platform team does (docs/operating.md): `make
package`'s Configuration and Function packages (hack/package.sh, metadata only without
Docker) and the two providers' packages as their modules ship them, pushed with
`crossplane xpkg push` to a registry (`crane registry serve` on loopback, standing in
for ghcr.io and xpkg.crossplane.io through two ImageConfigs that rewrite those prefixes,
as a registry mirror does), then docs/install.md's steps 2 and 3 as the page shows them
(provider-kubernetes with its watches runtime config, then the Configuration) applied to
a control plane running the real Crossplane core (v2.3.0,
`--package-runtime=External`: no Deployments, so no images), with the managed-resource
activation policy its Helm chart creates by default. Core's resolver installs every
dependency from the registry by its version constraint; then every kind the
Compositions compose (the render goldens, as tests/package/test_dependencies.py derives
them) must be served by the control plane. A dependency missing from `dependsOn` leaves
its kinds unserved, and this test names them.

tests/conftest.py gives this module a worker scope of its own: it does not use the
fleet box and stays off the e2e tier's critical path.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from fleetbox import install_doc
from fleetbox.certificates import Certificates
from fleetbox.process import Process
from fleetbox.wait import FleetBoxError, conditions, is_true, wait_for
from tests.conftest import REPO, require_tool
from tests.package.test_dependencies import COMPOSED, GOLDENS
from tests.ports import free_port
from tests.runtime.cluster import Fleet, _wait_established

NAMESPACE = "crossplane-system"
# The registries our packages and the providers' are named in (package/crossplane.yaml,
# hack/package.sh's default REGISTRY), each rewritten to the loopback registry.
MIRRORED = ("ghcr.io/modelplaneai", "xpkg.crossplane.io/crossplane-contrib")
CONFIGURATION = "ghcr.io/modelplaneai/configuration-modelplane"
# Generous: under `make test` this module shares two cores with the e2e tier's fleet box
# (an API server there took over a minute to become ready); a healthy install returns
# as soon as it is done.
INSTALL_SECONDS = 300
API_SERVER_START_SECONDS = 240.0
# How long an activated managed resource's CRD may take to be served after the install.
SERVED_SECONDS = 60
DEFAULT_ACTIVATION_POLICY = {
    "apiVersion": "apiextensions.crossplane.io/v1alpha1",
    "kind": "ManagedResourceActivationPolicy",
    "metadata": {"name": "default"},
    "spec": {"activate": ["*"]},
}


def composed_kinds() -> set[tuple[str, str]]:
    """(apiVersion, kind) of every resource the functions compose, from the goldens."""
    kinds = set()
    for path in sorted(GOLDENS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and COMPOSED in (doc.get("metadata") or {}).get(
                "annotations", {}
            ):
                kinds.add((doc["apiVersion"], doc["kind"]))
    return kinds


def _version() -> str:
    for line in (REPO / "pyproject.toml").read_text().splitlines():
        if line.startswith("version = "):
            return "v" + line.split('"')[1]
    raise AssertionError("pyproject.toml has no version")


class ControlPlane:
    """One API server with Crossplane's CRDs, core, and a loopback registry."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = require_tool("kubectl", "kube_apiserver").parent
        for tool, installer in (
            ("crossplane", "crossplane"),
            ("crossplane-core", "crossplane_core"),
            ("crane", "crane"),
            ("provider-kubernetes", "provider_kubernetes"),
        ):
            require_tool(tool, installer)
        self.api = Fleet(
            1,
            require_tool("etcd", "etcd"),
            require_tool("kube-apiserver", "kube_apiserver"),
            start_timeout=API_SERVER_START_SECONDS,
        )
        self.kubeconfig = root / "kubeconfig"
        self.processes: list[Process] = []
        self.registry = f"127.0.0.1:{free_port()}"
        self.secrets: set[str] = set()

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        done = subprocess.run(
            [str(self.bin / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise FleetBoxError(f"kubectl {' '.join(args[:3])}: {done.stderr.strip()}")
        return done.stdout

    def start(self) -> None:
        self.api.start()
        self.kubeconfig.write_text(yaml.safe_dump(self.api.members[0].kubeconfig()))
        crds = sorted((self.bin.parent / "crossplane-crds").glob("*.yaml"))
        self.kubectl("apply", "--server-side", *[f"-f={p}" for p in crds])
        self.kubectl("create", "namespace", NAMESPACE)
        # Polled, not `kubectl wait`: a CRD read in the instant after its create has no
        # conditions yet, and `kubectl wait` fails on that instead of waiting.
        api = self.api.members[0].client()
        try:
            extensions = client.ApiextensionsV1Api(api)
            for path in crds:
                _wait_established(extensions, yaml.safe_load(path.read_text())["metadata"]["name"])
        finally:
            api.close()
        # What `core init --activation='*'` creates, as Crossplane's Helm chart runs it by
        # default (provider.defaultActivations): without an activation policy a provider's
        # managed resources stay ManagedResourceDefinitions and their kinds (Object,
        # Release) are never served. This module skips `core init`, so it applies it.
        self.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(DEFAULT_ACTIVATION_POLICY))
        self._start(
            "registry",
            [str(self.bin / "crane"), "registry", "serve", "--address", self.registry],
        )
        certs = self.certs = Certificates(self.root / "pki")
        self._start(
            "crossplane-core",
            [
                str(self.bin / "crossplane-core"), "core", "start",
                "--package-runtime=External", "--enable-webhooks=false",
                f"--tls-client-certs-dir={certs.pair('crossplane-core', None, 'clientAuth')}",
                f"--xpkg-cache-dir={self.root / 'xpkg-cache'}",
                f"--metrics-port={free_port()}", f"--health-probe-port={free_port()}",
            ],
            env={"KUBECONFIG": str(self.kubeconfig), "POD_NAMESPACE": NAMESPACE},
        )  # fmt: skip
        (self.root / "xpkg-cache").mkdir(exist_ok=True)

    def stand_in_for_the_runtime(self, revision: dict) -> None:
        """What the Deployment runtime does for a Provider's or Function's revision before
        core establishes the package's CRDs: a TLS Secret whose certificate core reads
        as the webhook CA bundle, named in the revision's status (as the fleet box does
        for its functions; core re-writes status, so this runs on every poll)."""
        package = revision["metadata"]["labels"]["pkg.crossplane.io/package"]
        secret = f"{package}-tls-server"
        if revision.get("status", {}).get("tlsServerSecretName") == secret:
            return
        if secret not in self.secrets:
            pair = self.certs.pair(package, None, "serverAuth")
            self.kubectl(
                "create", "secret", "generic", secret, "-n", NAMESPACE,
                f"--from-file=tls.crt={pair / 'tls.crt'}",
            )  # fmt: skip
            self.secrets.add(secret)
        kind = f"{revision['kind'].lower()}s.pkg.crossplane.io"
        patch = json.dumps({"status": {"tlsServerSecretName": secret}})
        self.kubectl(
            "patch", kind, revision["metadata"]["name"], "--subresource=status",
            "--type=merge", "-p", patch,
        )  # fmt: skip

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> None:
        process = Process(name, args, self.root / f"{name}.log", env=env or {})
        process.start()
        self.processes.append(process)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(40)}" for p in self.processes)

    def close(self) -> None:
        for process in reversed(self.processes):
            process.stop(grace=5)
        self.api.close()


def build_and_push(plane: ControlPlane, out: Path) -> dict[str, str]:
    """`make package`'s packages and the providers', pushed to the loopback registry under
    the names they are installed by; what was pushed, by name."""
    crossplane = plane.bin / "crossplane"
    version = _version()
    subprocess.run(
        ["bash", str(REPO / "hack" / "package.sh"), "--all", str(out)],
        env={**os.environ, "DOCKER": "no-docker-for-this-test", "VERSION": version},
        check=True, capture_output=True,
    )  # fmt: skip
    pushed = {f"{CONFIGURATION}:{version}": out / f"modelplane-{version}.xpkg"}
    for package in sorted(out.glob("function-*.xpkg")):
        name = package.name.removesuffix(f"-{version}.xpkg")
        pushed[f"ghcr.io/modelplaneai/{name}:{version}"] = package
    empty = out / "no-examples"
    empty.mkdir()
    for provider in ("provider-kubernetes", "provider-helm"):
        root = (plane.bin.parent / f"{provider}-package").resolve()
        version_of = root.parent.name.removeprefix(f"{provider}-")
        package = out / f"{provider}.xpkg"
        subprocess.run(
            [str(crossplane), "xpkg", "build", f"--package-root={root}",
             f"--examples-root={empty}", f"--package-file={package}"],
            check=True, capture_output=True,
        )  # fmt: skip
        pushed[f"xpkg.crossplane.io/crossplane-contrib/{provider}:{version_of}"] = package
    for ref, package in pushed.items():
        mirrored = mirror(plane.registry, ref)
        subprocess.run(
            [str(crossplane), "xpkg", "push", "-f", str(package), mirrored],
            check=True, capture_output=True,
        )  # fmt: skip
    return {ref: str(package) for ref, package in pushed.items()}


def mirror(registry: str, ref: str) -> str:
    for prefix in MIRRORED:
        if ref.startswith(prefix + "/"):
            return f"{registry}/{prefix.split('/', 1)[1]}{ref.removeprefix(prefix)}"
    raise AssertionError(f"{ref} is in no mirrored registry")


def image_configs(registry: str) -> list[dict]:
    """What a platform team applies to install from a mirror instead of the registries
    the packages name."""
    return [
        {
            "apiVersion": "pkg.crossplane.io/v1beta1",
            "kind": "ImageConfig",
            "metadata": {"name": f"mirror-{prefix.split('/', 1)[1]}"},
            "spec": {
                "matchImages": [{"type": "Prefix", "prefix": prefix}],
                "rewriteImage": {"prefix": mirror(registry, prefix + "/x").removesuffix("/x")},
            },
        }
        for prefix in MIRRORED
    ]


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Iterator[tuple[ControlPlane, float]]:
    root = tmp_path_factory.mktemp("package-install")
    plane = ControlPlane(root)
    try:
        plane.start()
        pushed = build_and_push(plane, root / "packages")
        began = time.monotonic()
        # docs/install.md's steps 2 and 3 as the page shows them: provider-kubernetes
        # with its watches runtime config, then the Configuration.
        steps = [*install_doc.block("provider-kubernetes"), *install_doc.block("configuration")]
        packages = {d["spec"]["package"] for d in steps if "package" in d["spec"]}
        assert packages <= set(pushed), f"the page installs {packages}; pushed: {sorted(pushed)}"
        plane.kubectl(
            "apply", "-f", "-", stdin=yaml.safe_dump_all([*image_configs(plane.registry), *steps])
        )

        def healthy() -> bool:
            # With --package-runtime=External nothing reports a Provider's or Function's
            # runtime health (there is no Deployment), so their Healthy stays False here;
            # what the package manager itself decides is each package Installed and its
            # active revision's RevisionHealthy (its objects established, its
            # dependencies resolved), and the Configuration Healthy.
            packages = json.loads(plane.kubectl("get", "pkg", "-o", "json"))["items"]
            revisions = json.loads(plane.kubectl("get", "pkgrev", "-o", "json"))["items"]
            waiting = {}
            for package in packages:
                name = f"{package['kind']}/{package['metadata']['name']}"
                if not is_true(package, "Installed"):
                    waiting[name] = "not Installed"
            for revision in revisions:
                if revision["spec"].get("desiredState") != "Active":
                    continue
                if revision["kind"] != "ConfigurationRevision":
                    plane.stand_in_for_the_runtime(revision)
                if not is_true(revision, "RevisionHealthy"):
                    why = conditions(revision).get("RevisionHealthy", {}).get("message", "")
                    waiting[f"{revision['kind']}/{revision['metadata']['name']}"] = why
            configuration = [p for p in packages if p["kind"] == "Configuration"]
            if not configuration or not is_true(configuration[0], "Healthy"):
                waiting["Configuration/modelplane"] = "not Healthy"
            if waiting:
                raise FleetBoxError(f"waiting for {waiting}")
            return True

        try:
            wait_for(
                "the Configuration and its dependencies installed and healthy",
                healthy,
                INSTALL_SECONDS,
            )
        except FleetBoxError:
            print(plane.kubectl("get", "pkg,pkgrev", "-o", "yaml"))  # what core said
            print(plane.logs())
            raise
        yield plane, time.monotonic() - began
    finally:
        plane.close()


def test_the_package_manager_installs_every_dependency_from_dependsOn(installed):
    plane, seconds = installed
    print(f"installed and healthy in {seconds:.1f} s")
    lock = json.loads(plane.kubectl("get", "lock", "lock", "-o", "json"))
    locked = {p["source"] for p in lock.get("packages", [])}
    metadata = yaml.safe_load((REPO / "package" / "crossplane.yaml").read_text())
    for dependency in metadata["spec"]["dependsOn"]:
        assert dependency["package"] in locked, (
            f"{dependency['package']} was not installed: {sorted(locked)}"
        )


def test_provider_kubernetes_is_the_one_the_page_installs_with_watches(installed):
    """The package manager took the Provider docs/install.md applies (with its runtime
    config) as the Configuration's dependency, and installed no second one."""
    plane, _ = installed
    (provider,) = [d for d in install_doc.block("provider-kubernetes") if d["kind"] == "Provider"]
    (runtime_config,) = [
        d for d in install_doc.block("provider-kubernetes")
        if d["kind"] == "DeploymentRuntimeConfig"
    ]  # fmt: skip
    installed_providers = json.loads(plane.kubectl("get", "providers", "-o", "json"))["items"]
    ours = [
        p
        for p in installed_providers
        if p["spec"]["package"].split(":")[0] == provider["spec"]["package"].split(":")[0]
    ]
    assert [p["metadata"]["name"] for p in ours] == [provider["metadata"]["name"]], ours
    # Kept as the page wrote it once the resolver was done. (Core copies it to the active
    # revision only with the Deployment runtime; this control plane runs External.)
    assert ours[0]["spec"]["runtimeConfigRef"]["name"] == runtime_config["metadata"]["name"]
    assert ours[0]["spec"]["package"] == provider["spec"]["package"]
    assert plane.kubectl("get", "deploymentruntimeconfig", runtime_config["metadata"]["name"])


def unserved_kinds(plane: ControlPlane) -> list[str]:
    """Composed kinds of groups other than Kubernetes' own that the control plane does
    not serve."""
    served = set()
    for line in plane.kubectl("api-resources", "--no-headers", "-o", "wide").splitlines():
        parts = line.split()
        # NAME [SHORTNAMES] APIVERSION NAMESPACED KIND VERBS ...
        namespaced_at = next(i for i, p in enumerate(parts) if p in {"true", "false"})
        served.add((parts[namespaced_at - 1], parts[namespaced_at + 1]))
    return sorted(
        f"{kind} ({api_version})"
        for api_version, kind in composed_kinds()
        # Kubernetes' own groups (no dot, or *.k8s.io) are the API server's.
        if "." in api_version.split("/")[0]
        and not api_version.split("/")[0].endswith(".k8s.io")
        and (api_version, kind) not in served
    )


def test_every_kind_the_compositions_compose_is_served_once_installed(installed):
    plane, _ = installed
    # An activated managed resource's CRD is created by core after its package is
    # healthy: give it a moment to be served.
    deadline = time.monotonic() + SERVED_SECONDS
    unserved = unserved_kinds(plane)
    while unserved and time.monotonic() < deadline:
        time.sleep(2)
        unserved = unserved_kinds(plane)
    assert not unserved, (
        "the Compositions compose kinds that nothing the Configuration installed serves "
        f"(a provider missing from package/crossplane.yaml's dependsOn?): {unserved}"
    )
