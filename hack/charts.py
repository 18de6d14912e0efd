"""The substrate's Helm charts, as their projects publish them, from the Go modules that
carry their sources.

No chart repository or OCI registry is reachable from here; the Go module proxy is.
Several charts compose-serving-stack pins live in their project's Go module, at the tag
the chart is released from. A chart folder in a repository is not quite the published
chart: each project's release step stamps the chart's version and appVersion, points
the image at the release, and (cert-manager) assembles templates the repository keeps
apart. `SOURCES` says, per chart, where its folder is and what that release step does
(read in each project's own script: envoyproxy/gateway tools/make/helm.mk,
cert-manager make/manifests.mk, lws hack/push-chart.sh, gateway-api-inference-extension
hack/push-chart.sh), and `lay_out` does it into the tool cache, once per chart version.

`UNFETCHABLE` names every pinned chart whose source no reachable registry serves, with
why; docs/testing.md lists the same (tests/package/test_charts.py holds both to the
pins in functions/compose_serving_stack/substrate.py, the one place versions live).

    python hack/charts.py      lay out every fetchable chart and print where
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from functions.compose_serving_stack import substrate
from functions.compose_serving_stack.envelope import Chart


class ChartError(RuntimeError):
    """A chart could not be laid out (no Go, a module the proxy refuses)."""


def _set_versions(chart_dir: Path, version: str) -> None:
    """What `helm package --version V --app-version V` stamps into Chart.yaml."""
    path = chart_dir / "Chart.yaml"
    meta = yaml.safe_load(path.read_text())
    meta["version"] = version
    meta["appVersion"] = version
    path.write_text(yaml.safe_dump(meta, sort_keys=False))


def _envoy_gateway(chart_dir: Path, version: str) -> None:
    # tools/make/helm.mk: envsubst of values.tmpl.yaml with the release image, then
    # `helm package --app-version TAG --version CHART_VERSION`.
    template = (chart_dir / "values.tmpl.yaml").read_text()
    values = template.replace("${GatewayImage}", f"docker.io/envoyproxy/gateway:{version}")
    values = values.replace("${GatewayImagePullPolicy}", "IfNotPresent")
    (chart_dir / "values.yaml").write_text(values)
    (chart_dir / "values.tmpl.yaml").unlink()
    _set_versions(chart_dir, version)


def _lws(chart_dir: Path, version: str) -> None:
    # hack/push-chart.sh: the release image (registry.k8s.io/lws/lws:TAG, IfNotPresent)
    # and the tag as the chart's version and appVersion (it is published as v0.7.0;
    # Helm matches a pin of "0.7.0" to it as a semver constraint).
    path = chart_dir / "values.yaml"
    values = yaml.safe_load(path.read_text())
    values["image"]["manager"].update(
        {"repository": "registry.k8s.io/lws/lws", "tag": version, "pullPolicy": "IfNotPresent"}
    )
    path.write_text(yaml.safe_dump(values, sort_keys=False))
    _set_versions(chart_dir, version)


def _inference_extension(chart_dir: Path, version: str) -> None:
    # hack/push-chart.sh: the tag as version and appVersion (the body-based router's
    # values already name its image at the release tag).
    _set_versions(chart_dir, version)


def _cert_manager(chart_dir: Path, version: str) -> None:
    # make/manifests.mk: Chart.yaml from Chart.template.yaml with the version, the
    # templates as they are, and templates/crds.yaml the concatenation of deploy/crds/*.
    module_root = chart_dir.parent.parent.parent  # deploy/charts/cert-manager
    template = yaml.safe_load((chart_dir / "Chart.template.yaml").read_text())
    template["annotations"]["artifacthub.io/prerelease"] = "false"
    (chart_dir / "Chart.yaml").write_text(yaml.safe_dump(template, sort_keys=False))
    for leftover in ("Chart.template.yaml", "README.template.md", "signkey_annotation.txt"):
        (chart_dir / leftover).unlink(missing_ok=True)
    crds = sorted((module_root / "deploy" / "crds").glob("*.yaml"))
    (chart_dir / "templates" / "crds.yaml").write_text(
        "\n---\n".join(path.read_text() for path in crds)
    )
    _set_versions(chart_dir, version)


@dataclass(frozen=True)
class Source:
    """Where a published chart's source lives: a Go module at the chart's tag, the chart's
    folder in it, and the project's release step."""

    module: str
    folder: str
    release_step: Callable[[Path, str], None]

    def module_version(self, chart: Chart) -> str:
        return chart.version if chart.version.startswith("v") else f"v{chart.version}"


# Keyed by (repository, name): a version bump in substrate.py lays out the new tag.
SOURCES: dict[tuple[str, str], Source] = {
    (substrate.ENVOY_GATEWAY.repository, substrate.ENVOY_GATEWAY.name): Source(
        "github.com/envoyproxy/gateway", "charts/gateway-helm", _envoy_gateway
    ),
    (substrate.LEADER_WORKER_SET.repository, substrate.LEADER_WORKER_SET.name): Source(
        "sigs.k8s.io/lws", "charts/lws", _lws
    ),
    (substrate.BODY_BASED_ROUTER.repository, substrate.BODY_BASED_ROUTER.name): Source(
        "sigs.k8s.io/gateway-api-inference-extension",
        "config/charts/body-based-routing",
        _inference_extension,
    ),
    (substrate.CERT_MANAGER.repository, substrate.CERT_MANAGER.name): Source(
        "github.com/cert-manager/cert-manager", "deploy/charts/cert-manager", _cert_manager
    ),
}

# Why each of the others cannot be fetched here (checked 2026-12-07 against the Go module
# proxy; no Helm repository or OCI registry is reachable, and none of them is vendored in
# a PyPI, npm or Debian package).
UNFETCHABLE: dict[tuple[str, str], str] = {
    (substrate.NVIDIA_DRA_DRIVER.repository, substrate.NVIDIA_DRA_DRIVER.name): (
        "github.com/NVIDIA/k8s-dra-driver-gpu (which holds deployments/helm/"
        "nvidia-dra-driver-gpu) is refused by the Go module proxy (403) at every version"
    ),
    (substrate.GROVE.repository, substrate.GROVE.name): (
        "github.com/ai-dynamo/grove/operator and github.com/NVIDIA/grove/operator (the chart "
        "is operator/charts) are refused by the Go module proxy (403); only the API module "
        "is served, without the chart"
    ),
    (substrate.KAI_SCHEDULER.repository, substrate.KAI_SCHEDULER.name): (
        "github.com/NVIDIA/KAI-scheduler and github.com/kai-scheduler/KAI-scheduler are "
        "refused by the Go module proxy (403)"
    ),
    (substrate.MODEL_EXPRESS.repository, substrate.MODEL_EXPRESS.name): (
        "github.com/ai-dynamo/modelexpress is refused by the Go module proxy (403) (a Rust "
        "project; its chart is published only to ghcr.io)"
    ),
}


def cache_root() -> Path:
    override = os.environ.get("MODELPLANE_TOOLS")
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return (Path(override) if override else cache / "modelplane" / "tools") / "charts"


def _module_dir(module: str, version: str) -> Path:
    if shutil.which("go") is None:
        raise ChartError("go is not installed (the charts come from Go modules)")
    done = subprocess.run(
        ["go", "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        env={**os.environ, "GOTOOLCHAIN": "local"},
        check=False,
    )
    info = json.loads(done.stdout or "{}")
    if done.returncode != 0 or "Dir" not in info:
        raise ChartError(f"cannot download {module}@{version}: {info.get('Error', done.stderr)}")
    return Path(info["Dir"])


def lay_out(chart: Chart) -> Path:
    """The chart as published, in the cache (laid out once per version); ChartError if
    its module cannot be fetched."""
    source = SOURCES[(chart.repository, chart.name)]
    dest = cache_root() / f"{chart.name}-{chart.version}"
    if (dest / "Chart.yaml").exists():
        return dest
    version = source.module_version(chart)
    module_dir = _module_dir(source.module, version)
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    # The module root too (cert-manager's release step reads deploy/crds beside the chart).
    shutil.copytree(module_dir / source.folder, partial / source.folder)
    if source.module == "github.com/cert-manager/cert-manager":
        shutil.copytree(module_dir / "deploy" / "crds", partial / "deploy" / "crds")
    for path in partial.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)
    chart_dir = partial / source.folder
    source.release_step(chart_dir, version)
    shutil.rmtree(dest, ignore_errors=True)
    shutil.move(chart_dir, dest)
    shutil.rmtree(partial)
    return dest


def pinned_charts() -> list[Chart]:
    """Every chart compose-serving-stack composes, for either stack."""
    return sorted(
        {value for value in vars(substrate).values() if isinstance(value, Chart)},
        key=lambda chart: chart.name,
    )


if __name__ == "__main__":
    for pinned in pinned_charts():
        key = (pinned.repository, pinned.name)
        if key in UNFETCHABLE:
            print(f"{pinned.name} {pinned.version}: not fetchable: {UNFETCHABLE[key]}")
        else:
            print(f"{pinned.name} {pinned.version}: {lay_out(pinned)}")
