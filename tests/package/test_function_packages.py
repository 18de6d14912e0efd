"""Each Function package's metadata is what Crossplane's package manager can read: one
YAML document, a meta.pkg.crossplane.io Function named as the Configuration depends on
it. (The fleet box found a description with an unquoted ': ' that no YAML parser reads.)"""

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from functions.common.contracts import FUNCTIONS
from functions.compose_serving_stack.fn import DEFAULT_RUNTIME_IMAGE
from tests.package.test_configuration import REPO, _package_documents

PACKAGES = Path(__file__).resolve().parents[2] / "package" / "functions"


@pytest.mark.parametrize("function", FUNCTIONS)
def test_function_package_metadata_parses_and_names_the_function(function):
    path = PACKAGES / function.removeprefix("function-") / "crossplane.yaml"
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert len(documents) == 1
    (meta,) = documents
    assert meta["apiVersion"].startswith("meta.pkg.crossplane.io/")
    assert meta["kind"] == "Function"
    assert meta["metadata"]["name"] == function
    assert isinstance(meta["metadata"]["annotations"]["meta.crossplane.io/description"], str)


def _image_config(xpkg: Path) -> tuple[dict, int]:
    """The package image's config and how many of its layers are not the package's own
    (those `crossplane xpkg build` labels io.crossplane.xpkg:<digest>): the runtime's."""
    with tarfile.open(xpkg) as image:
        manifest = json.load(image.extractfile("manifest.json"))
        config = json.load(image.extractfile(manifest[0]["Config"]))
    labels = (config.get("config") or {}).get("Labels") or {}
    package_layers = {k.rsplit(":", 1)[1] for k in labels if k.startswith("io.crossplane.xpkg:")}
    runtime = [n for n in manifest[0]["Layers"] if n.split(".", 1)[0] not in package_layers]
    return config, len(runtime)


def _docker_answers(docker: str) -> bool:
    found = shutil.which(docker)
    if not found:
        return False
    return subprocess.run([found, "info"], check=False, capture_output=True).returncode == 0


def test_make_package_builds_the_four_functions_and_a_configuration_that_agree(
    crossplane, tmp_path
):
    """`hack/package.sh --all` (make package): each Function package holds exactly its
    metadata and, where Docker answers, embeds the runtime image with its component set;
    without Docker it says so and still builds the metadata; the Configuration depends on
    exactly the Function packages built, at the same version as the runtime image the
    serving stack composes by default."""
    env = {"CROSSPLANE": str(crossplane), "PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "package.sh"), "--all", str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    with_docker = _docker_answers("docker")
    if not with_docker:
        assert "Docker is not available" in done.stderr
    version = DEFAULT_RUNTIME_IMAGE.rsplit(":", 1)[1]
    registry = DEFAULT_RUNTIME_IMAGE.rsplit("/", 1)[0]

    for function in FUNCTIONS:
        xpkg = tmp_path / f"{function}-{version}.xpkg"
        documents = _package_documents(xpkg)
        assert [(d["kind"], d["metadata"]["name"]) for d in documents] == [("Function", function)]
        config, runtime_layers = _image_config(xpkg)
        env_vars = (config.get("config") or {}).get("Env") or []
        if with_docker:
            assert f"MODELPLANE_COMPONENT={function}" in env_vars
            assert f"MODELPLANE_RUNTIME_IMAGE={DEFAULT_RUNTIME_IMAGE}" in env_vars
            assert runtime_layers > 0
        else:
            assert runtime_layers == 0
            assert not any(v.startswith("MODELPLANE_COMPONENT=") for v in env_vars)

    (configuration,) = [
        d
        for d in _package_documents(tmp_path / f"modelplane-{version}.xpkg")
        if d["kind"] == "Configuration"
    ]
    functions = {
        dep["package"]: dep["version"]
        for dep in configuration["spec"]["dependsOn"]
        if dep.get("kind") == "Function"
    }
    assert functions == {f"{registry}/{function}": version for function in FUNCTIONS}
