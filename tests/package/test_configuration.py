"""`crossplane xpkg build` turns package/ and apis/ into a Configuration package that
carries every XRD and Composition (no Docker needed for a Configuration)."""

import gzip
import io
import json
import subprocess
import tarfile
from pathlib import Path

import yaml

import render

REPO = render.REPO


def _package_documents(xpkg: Path) -> list[dict]:
    """The YAML documents in the package's base layer (package.yaml)."""
    with tarfile.open(xpkg) as image:
        manifest = json.load(image.extractfile("manifest.json"))
        documents = []
        for layer_name in manifest[0]["Layers"]:
            layer = image.extractfile(layer_name).read()
            if layer[:2] == b"\x1f\x8b":
                layer = gzip.decompress(layer)
            with tarfile.open(fileobj=io.BytesIO(layer)) as files:
                for member in files.getmembers():
                    if member.name.endswith("package.yaml"):
                        text = files.extractfile(member).read().decode()
                        documents += [d for d in yaml.safe_load_all(text) if d]
    return documents


def test_configuration_package_carries_every_xrd_and_composition(crossplane, tmp_path):
    out = tmp_path / "modelplane.xpkg"
    done = subprocess.run(
        ["bash", str(REPO / "hack" / "package.sh"), str(out)],
        capture_output=True,
        text=True,
        check=False,
        env={"CROSSPLANE": str(crossplane), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr

    documents = _package_documents(out)
    by_kind: dict[str, set[str]] = {}
    for doc in documents:
        by_kind.setdefault(doc["kind"], set()).add(doc["metadata"]["name"])

    assert by_kind["Configuration"] == {"modelplane"}
    expected = {
        yaml.safe_load(p.read_text())["metadata"]["name"]
        for p in (REPO / "apis").glob("*/composition.yaml")
    }
    assert len(expected) == 7
    assert by_kind["CompositeResourceDefinition"] == expected
    assert by_kind["Composition"] == expected
