"""The substrate's Helm charts accept exactly the values compose-serving-stack composes.

Every provider-helm Release the function composes (either stack) is either rendered here
or listed, with why, as a chart this machine cannot fetch (hack/charts.py, and the same
list in docs/testing.md). A fetchable chart is laid out as its project publishes it
(hack/charts.py), rendered by the real Helm (the version provider-helm v1.2.0 is built
with) with the Release's own values, namespace and release name, against the pinned
kube-apiserver's version and served API versions, and what it renders passes that API
server's dry run: the chart's CRDs are created for real first (as `helm install` does
with crds/, and as the release's own apply would for CRDs among its templates), then
every other object is applied with `--dry-run=server` and strict field validation.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import charts
import pytest
import yaml
from kubernetes import client

from functions.common import contracts
from functions.compose_serving_stack import substrate
from functions.compose_serving_stack.envelope import RELEASE_KIND, Chart, Target
from tests.conftest import IN_CI, REPO, require_tool
from tests.runtime.cluster import Fleet, _wait_established

TARGET = Target("gpu-a", "gpu-a")


def composed_releases() -> dict[str, dict[str, Any]]:
    """Every Release compose-serving-stack composes, by key, over both stacks."""
    releases = {}
    for stack in (contracts.STACK_STANDARD, contracts.STACK_DYNAMO):
        for composed in substrate.substrate(TARGET, stack):
            if composed.resource["kind"] == RELEASE_KIND:
                releases[composed.key] = composed.resource
    return releases


RELEASES = composed_releases()


def chart_of(release: dict[str, Any]) -> Chart:
    spec = release["spec"]["forProvider"]["chart"]
    return Chart(spec["repository"], spec["name"], spec["version"])


FETCHABLE = sorted(
    key
    for key, release in RELEASES.items()
    if (chart_of(release).repository, chart_of(release).name) in charts.SOURCES
)


def test_every_composed_chart_is_rendered_here_or_listed_as_unfetchable():
    for key, release in RELEASES.items():
        chart = chart_of(release)
        known = (chart.repository, chart.name)
        assert known in charts.SOURCES or known in charts.UNFETCHABLE, (
            f"Release {key} composes {chart.name} {chart.version} from {chart.repository}: "
            "say where its source is (hack/charts.py SOURCES) or why it cannot be fetched "
            "(UNFETCHABLE, and docs/testing.md)"
        )
    composed = {(chart_of(r).repository, chart_of(r).name) for r in RELEASES.values()}
    assert set(charts.SOURCES) | set(charts.UNFETCHABLE) == composed, (
        "a listed chart is no longer composed"
    )


def test_the_testing_page_lists_every_unfetchable_chart_at_its_pinned_version():
    page = (REPO / "docs" / "testing.md").read_text()
    for release in RELEASES.values():
        chart = chart_of(release)
        if (chart.repository, chart.name) in charts.UNFETCHABLE:
            assert f"`{chart.name}` {chart.version}" in page, (
                f"docs/testing.md does not list {chart.name} {chart.version} as unfetchable"
            )


# --- rendering and the dry run ---------------------------------------------------------


@pytest.fixture(scope="module")
def helm() -> Path:
    return require_tool("helm", "helm")


@pytest.fixture(scope="module")
def api_server(tmp_path_factory) -> Iterator[tuple[Fleet, Path, Path]]:
    kubectl = require_tool("kubectl", "kube_apiserver")
    one = Fleet(1, require_tool("etcd", "etcd"), require_tool("kube-apiserver", "kube_apiserver"))
    try:
        one.start()
        kubeconfig = tmp_path_factory.mktemp("charts") / "kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(one.members[0].kubeconfig()))
        yield one, kubeconfig, kubectl
    finally:
        one.close()


def laid_out(chart: Chart) -> Path:
    try:
        return charts.lay_out(chart)
    except charts.ChartError as error:
        message = f"{chart.name} {chart.version}: {error}; run 'python hack/charts.py'"
        if IN_CI:
            pytest.fail(f"CI requires the chart: {message}")
        pytest.skip(f"{message} (under CI=true it fails)")  # not in CI: failed above in CI
        raise


def run(*args: str | Path, stdin: str | None = None) -> str:
    done = subprocess.run(
        [str(a) for a in args], input=stdin, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{' '.join(str(a) for a in args[:3])} … failed:\n{done.stderr}{done.stdout}")
    return done.stdout


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


# What a chart must render for the resources we compose beside it to work: the names,
# ports and settings they rely on, read from the rendered objects.
def _envoy_gateway_serves_backends(objects: list[dict[str, Any]]) -> None:
    config = next(
        o
        for o in objects
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "envoy-gateway-config"
    )
    settings = yaml.safe_load(config["data"]["envoy-gateway.yaml"])
    assert settings["extensionApis"]["enableBackend"] is True, settings


def _cert_manager_installs_its_crds(objects: list[dict[str, Any]]) -> None:
    crds = {o["metadata"]["name"] for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert {"certificates.cert-manager.io", "issuers.cert-manager.io"} <= crds, crds


def _router_is_where_our_backend_points(objects: list[dict[str, Any]]) -> None:
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["metadata"]["name"] == substrate.BODY_BASED_ROUTER_NAME, service["metadata"]
    ports = {p["port"] for p in service["spec"]["ports"]}
    assert substrate.BODY_BASED_ROUTER_PORT in ports, ports


def _lws_runs_its_controller(objects: list[dict[str, Any]]) -> None:
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("CustomResourceDefinition", "leaderworkersets.leaderworkerset.x-k8s.io") in kinds
    assert any(kind == "Deployment" for kind, _ in kinds), kinds


RELIED_ON = {
    substrate.ENVOY_GATEWAY.name: _envoy_gateway_serves_backends,
    substrate.CERT_MANAGER.name: _cert_manager_installs_its_crds,
    substrate.BODY_BASED_ROUTER.name: _router_is_where_our_backend_points,
    substrate.LEADER_WORKER_SET.name: _lws_runs_its_controller,
}


def create_crds(fleet: Fleet, kubectl: Path, kubeconfig: Path, crds: list[dict[str, Any]]) -> None:
    if not crds:
        return
    stream = yaml.safe_dump_all(crds)
    # Server-side: some CRDs are over the client-side annotation limit.
    run(kubectl, f"--kubeconfig={kubeconfig}", "apply", "--server-side", "-f", "-", stdin=stream)
    # Polled, not `kubectl wait`: a CRD read in the instant after its create has no
    # conditions yet, and `kubectl wait` fails on that instead of waiting.
    api = fleet.members[0].client()
    try:
        for crd in crds:
            _wait_established(client.ApiextensionsV1Api(api), crd["metadata"]["name"])
    finally:
        api.close()


@pytest.mark.parametrize("key", FETCHABLE)
def test_the_chart_renders_our_values_and_the_api_server_accepts_it(
    helm, api_server, tmp_path, key
):
    fleet, kubeconfig, kubectl = api_server
    release = RELEASES[key]
    chart = chart_of(release)
    chart_dir = laid_out(chart)
    for_provider = release["spec"]["forProvider"]
    namespace = for_provider["namespace"]
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(for_provider.get("values", {})))

    # What `helm install` does first: the chart's crds/ folder.
    create_crds(fleet, kubectl, kubeconfig, documents(run(helm, "show", "crds", chart_dir)))
    api = client.VersionApi(fleet.members[0].client())
    kube_version = api.get_code().git_version
    served = run(kubectl, f"--kubeconfig={kubeconfig}", "api-versions").split()
    rendered = run(
        helm, "template", release["metadata"]["name"], chart_dir,
        "--namespace", namespace, "--values", values, "--kube-version", kube_version,
        *[f"--api-versions={v}" for v in served],
    )  # fmt: skip
    objects = documents(rendered)
    assert objects, f"{chart.name} rendered nothing"
    RELIED_ON[chart.name](objects)

    # The release's own CRDs exist before its other objects are checked against them.
    create_crds(
        fleet, kubectl, kubeconfig, [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    )
    # Helm puts an object without a namespace in the release's, and leaves one that names
    # its own (cert-manager's leader-election Roles in kube-system) where it says.
    by_namespace: dict[str, list[dict[str, Any]]] = {}
    for o in objects:
        if o["kind"] != "CustomResourceDefinition":
            by_namespace.setdefault(o["metadata"].get("namespace", namespace), []).append(o)
    existing = run(kubectl, f"--kubeconfig={kubeconfig}", "get", "namespaces", "-o", "name")
    for target in sorted(by_namespace):
        if f"namespace/{target}" not in existing.split():
            run(kubectl, f"--kubeconfig={kubeconfig}", "create", "namespace", target)
        rest = by_namespace[target]
        outcome = run(
            kubectl, f"--kubeconfig={kubeconfig}", "apply", "--server-side", "--dry-run=server",
            "--validate=strict", "--field-manager=helm", "-n", target, "-o", "json", "-f", "-",
            stdin=yaml.safe_dump_all(rest),
        )  # fmt: skip
        accepted = json.loads(outcome)
        items = accepted.get("items", [accepted])
        assert len(items) == len(rest), f"{target}: {len(items)} of {len(rest)} objects accepted"
