"""`crossplane beta validate`, offline, against our XRDs and CRDs: every example a user
applies passes, and every manifest under invalid/ fails with its own rule's message.

Offline means the Crossplane schema cache is the one hack/tools.sh laid out from the
Crossplane module; no registry is asked for anything.
"""

import subprocess
from pathlib import Path

import pytest
import yaml

import render
from functions.common import builtin_mappings
from tests.validate import crossplane_validate

REPO = render.REPO
INVALID = sorted((Path(__file__).parent / "invalid").glob("*.yaml"))
EXTENSIONS = REPO / "apis"


def validate(crossplane: Path, resources: list[Path]) -> subprocess.CompletedProcess:
    return crossplane_validate(crossplane, [EXTENSIONS], resources)


def expected_message(path: Path) -> str:
    first = path.read_text().splitlines()[0]
    assert first.startswith("# expect: "), f"{path.name} must open with '# expect: <message>'"
    return first.removeprefix("# expect: ")


def test_every_example_is_valid(crossplane):
    done = validate(crossplane, render.example_xrs())
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 failure cases" in done.stdout
    assert f"{len(render.example_xrs())} success cases" in done.stdout


def test_every_xrd_and_composition_is_valid_for_the_pinned_crossplane(crossplane):
    # Against Crossplane's own CRDs (core's version, hack/tools/crossplane.sh): the
    # ModelDeployment XRD's scale subresource is a field only v2.3.0 on knows; v2.2.1's
    # schema answers `unknown field: "subresources"` here.
    ours = [
        path
        for path in sorted(EXTENSIONS.glob("*/*.yaml"))
        if yaml.safe_load(path.read_text())["apiVersion"].startswith("apiextensions.crossplane.io/")
    ]
    done = validate(crossplane, ours)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(ours)} success cases" in done.stdout
    assert "0 missing schemas" in done.stdout


def test_the_builtin_mappings_are_valid_metricmappings(crossplane):
    # A platform team may apply a copy of one to start their own.
    builtin = sorted(builtin_mappings.DIRECTORY.glob("*.yaml"))
    done = validate(crossplane, builtin)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(builtin)} success cases" in done.stdout


def test_test_fixtures_are_valid(crossplane):
    # Render inputs the tests hand to functions, and CRD objects no example covers.
    fixtures = sorted((REPO / "tests" / "render" / "testdata").glob("*.yaml"))
    fixtures += sorted((Path(__file__).parent / "valid").glob("*.yaml"))
    done = validate(crossplane, fixtures)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(fixtures)} success cases" in done.stdout


@pytest.mark.parametrize("manifest", INVALID, ids=lambda p: p.stem)
def test_invalid_manifest_fails_with_its_rule(crossplane, manifest):
    done = validate(crossplane, [manifest])
    assert done.returncode != 0, f"{manifest.name} was accepted:\n{done.stdout}"
    errors = [line for line in done.stdout.splitlines() if line.startswith("[x]")]
    assert len(errors) == 1, "\n".join(errors)  # exactly the one rule it is about
    assert expected_message(manifest) in errors[0]
