"""The Configuration's metadata says what the suite needs to run, derived from what it
composes and calls rather than kept as a second list.

What is needed:
- a provider for every API group the functions compose, other than the Configuration's
  own XRDs' groups: the groups come from the composed resources in the render golden
  files (tests/render checks every one of them against the real `crossplane render`), and
  the provider serving a group from the CRDs of the provider build the suite pins
  (hack/tools/provider_kubernetes.sh), so a new group with no provider fails here;
- a Function for every `functionRef` a Composition calls;
- Crossplane core at the version the docs require (and the fleet box runs).

Each dependency's constraint is `>=` the version the suite tests with (the pins in
hack/tools/), and nothing else is listed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
METADATA = REPO / "package" / "crossplane.yaml"
GOLDENS = REPO / "tests" / "render" / "testdata"
TOOLS = REPO / "hack" / "tools"
COMPOSED = "crossplane.io/composition-resource-name"

# The providers the suite runs against, by the hack/tools variable that pins each one's
# version and module: the package is the module's path in Crossplane's registry.
PROVIDERS = {
    "provider-kubernetes": "PROVIDER_KUBERNETES",
    "provider-helm": "PROVIDER_HELM",
}
REGISTRY = "xpkg.crossplane.io"


def _shell_var(script: Path, name: str) -> str:
    match = re.search(rf"^{name}=(\S+)$", script.read_text(), re.MULTILINE)
    assert match, f"{script} sets no {name}"
    return match.group(1).strip("\"'")


def _group(api_version: str) -> str:
    return api_version.rsplit("/", 1)[0] if "/" in api_version else ""


def composed_groups() -> dict[str, set[str]]:
    """API group -> the golden files composing a resource of it."""
    groups: dict[str, set[str]] = {}
    for path in sorted(GOLDENS.rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if not isinstance(doc, dict):
                continue
            annotations = (doc.get("metadata") or {}).get("annotations") or {}
            if COMPOSED in annotations:
                rel = str(path.relative_to(REPO))
                groups.setdefault(_group(doc["apiVersion"]), set()).add(rel)
    return groups


def own_groups() -> set[str]:
    return {
        yaml.safe_load(p.read_text())["spec"]["group"]
        for p in (REPO / "apis").glob("*/definition.yaml")
        if (p.parent / "composition.yaml").exists()
    }


def called_functions() -> set[str]:
    names = set()
    for path in (REPO / "apis").glob("*/composition.yaml"):
        composition = yaml.safe_load(path.read_text())
        for step in composition["spec"].get("pipeline") or []:
            names.add(step["functionRef"]["name"])
    return names


def providers_under_test() -> dict[str, tuple[str, str]]:
    """Provider name -> (package, the version the suite tests with)."""
    script = TOOLS / "provider_kubernetes.sh"
    out = {}
    for name, var in PROVIDERS.items():
        module = _shell_var(script, f"{var}_MODULE")
        version = _shell_var(script, f"{var}_VERSION")
        assert module.rsplit("/", 1)[1] == name, (module, name)
        out[name] = (f"{REGISTRY}/{module.removeprefix('github.com/')}", version)
    return out


# Which provider serves which group: read from the pinned providers' CRDs by
# test_each_provider_serves_the_groups_named_for_it below, so this table cannot drift.
PROVIDER_FOR_GROUP = {
    "kubernetes.m.crossplane.io": "provider-kubernetes",
    "helm.m.crossplane.io": "provider-helm",
}


def needed(groups: dict[str, set[str]]) -> tuple[dict[str, str], set[str]]:
    """(package -> constraint, unserved groups) for the composed groups."""
    providers = providers_under_test()
    deps: dict[str, str] = {}
    unserved = set()
    for group in sorted(set(groups) - own_groups()):
        name = PROVIDER_FOR_GROUP.get(group)
        if name is None:
            unserved.add(group)
            continue
        package, version = providers[name]
        deps[package] = f">={version}"
    return deps, unserved


def _metadata() -> dict:
    return yaml.safe_load(METADATA.read_text())


def missing_dependencies(metadata: dict) -> list[str]:
    """What the metadata lacks or states wrongly, one line each (empty: it is right)."""
    problems = []
    groups = composed_groups()
    deps, unserved = needed(groups)
    for group in sorted(unserved):
        problems.append(
            f"the functions compose {group} (e.g. {sorted(groups[group])[0]}) and no "
            "provider the suite pins serves it"
        )
    listed = {d["package"]: d for d in metadata["spec"].get("dependsOn") or []}
    for package, constraint in sorted(deps.items()):
        dep = listed.get(package)
        users = sorted(g for g in groups if PROVIDER_FOR_GROUP.get(g) == package.rsplit("/")[-1])
        if dep is None:
            problems.append(
                f"dependsOn lacks {package} (it serves {', '.join(users)}, which the "
                "functions compose)"
            )
        elif dep.get("kind") != "Provider" or dep.get("version") != constraint:
            problems.append(
                f"{package}: want kind Provider, version {constraint!r} (the version the "
                f"suite tests with); got {dep.get('kind')} {dep.get('version')!r}"
            )
    functions = {
        d["package"].rsplit("/", 1)[1]: d for d in listed.values() if d.get("kind") == "Function"
    }
    for name in sorted(called_functions() - set(functions)):
        problems.append(f"dependsOn lacks the Function {name}, which a Composition calls")
    extra = set(listed) - set(deps) - {d["package"] for d in functions.values()}
    extra |= {d["package"] for n, d in functions.items() if n not in called_functions()}
    for package in sorted(extra):
        problems.append(f"dependsOn lists {package}, which nothing composed or called needs")
    return problems


def test_the_functions_compose_resources_of_providers_and_the_suite_own_groups():
    """The derivation has something to derive from: the goldens compose Objects, Releases
    and ModelReplicas (a golden tree that lost them would make the check vacuous)."""
    groups = composed_groups()
    assert {"kubernetes.m.crossplane.io", "helm.m.crossplane.io", "modelplane.ai"} <= set(groups)


def test_depends_on_is_exactly_what_the_compositions_compose_and_call():
    problems = missing_dependencies(_metadata())
    assert not problems, "package/crossplane.yaml:\n  " + "\n  ".join(problems)


def test_a_missing_provider_is_named():
    """The check fails, naming the package, when the metadata lacks provider-helm."""
    metadata = _metadata()
    metadata["spec"]["dependsOn"] = [
        d for d in metadata["spec"]["dependsOn"] if not d["package"].endswith("/provider-helm")
    ]
    problems = missing_dependencies(metadata)
    assert any("lacks xpkg.crossplane.io/crossplane-contrib/provider-helm" in p for p in problems)


def test_the_core_constraint_is_the_version_the_docs_require():
    core = _shell_var(TOOLS / "crossplane.sh", "CROSSPLANE_CORE_VERSION")
    operating = (REPO / "docs" / "operating.md").read_text()
    assert f"Crossplane core **{core} or later**" in operating
    assert _metadata()["spec"]["crossplane"]["version"] == f">={core}"


@pytest.mark.parametrize("name", sorted(PROVIDERS))
def test_each_provider_serves_the_groups_named_for_it(name):
    """PROVIDER_FOR_GROUP against the pinned build's own CRDs (a group named for a
    provider that does not serve it, or a provider serving no group named)."""
    # The tool script installs both providers' CRDs beside the provider-kubernetes build.
    crds = require_tool("provider-kubernetes", "provider_kubernetes").parents[1] / f"{name}-crds"
    assert crds.is_dir(), f"{crds} is missing: run 'bash hack/tools.sh provider_kubernetes'"
    served = {yaml.safe_load(p.read_text())["spec"]["group"] for p in crds.glob("*.yaml")}
    named = {g for g, p in PROVIDER_FOR_GROUP.items() if p == name}
    assert named, f"no composed group is named for {name}"
    assert named <= served, f"{name} serves {sorted(served)}, not {sorted(named - served)}"
