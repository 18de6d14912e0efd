"""docs/install.md says what the tests do, and docs/member-rbac.yaml grants what the
functions compose onto a member: no kind less, no kind more.

- The member identity: the kinds come from every manifest in the render and replica
  golden files (tests/render and tests/unit check those against the real functions), an
  Object's manifest read-only where every Object of that kind only observes; the role
  must grant each with provider-kubernetes' verbs (and `escalate`/`bind` on roles, which
  the stack composes), and nothing the functions never compose. The fleet box reaches its
  members as this identity, so a kind the golden files miss fails the e2e tier instead.
- The page's blocks: the core arguments are the box's; provider-kubernetes is the
  version the suite pins, with watches on; the Configuration is this release's; the
  provider configs read a Secret exactly as a composed cluster's do.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path

import yaml

from fleetbox import install_doc
from fleetbox.control_plane import (
    CIRCUIT_BREAKER_BURST,
    CIRCUIT_BREAKER_REFILL_PER_SECOND,
    CROSSPLANE_NAMESPACE,
)
from tests.package.test_dependencies import TOOLS, _group, _shell_var

REPO = Path(__file__).resolve().parents[2]
GOLDENS = (REPO / "tests" / "render" / "testdata", REPO / "tests" / "unit" / "testdata")
READ = frozenset({"get", "list", "watch"})
WRITE = READ | {"create", "update", "patch", "delete"}
# Composing a role that grants what the identity does not hold, and binding one.
RBAC_GROUP = "rbac.authorization.k8s.io"
RBAC_EXTRA = frozenset({"escalate", "bind"})
OBJECT_GROUP = "kubernetes.m.crossplane.io"
# Groups that are the control plane's own, never a member's: Crossplane's and our XRDs'.
CONTROL_PLANE_GROUPS = ("modelplane.ai",)


def _plural(kind: str) -> str:
    """The resource name Kubernetes and CRD generators give a kind."""
    lower = kind.lower()
    if lower.endswith("y") and lower[-2:-1] not in {"a", "e", "i", "o", "u"}:
        return lower[:-1] + "ies"
    if lower.endswith("s"):
        return lower + "es"
    return lower + "s"


def _member_kind(api_version: str) -> bool:
    group = _group(api_version)
    return not group.endswith("crossplane.io") and group not in CONTROL_PLANE_GROUPS


@cache
def composed_member_resources() -> dict[tuple[str, str], frozenset[str]]:
    """(group, resource) -> the verbs provider-kubernetes needs on a member."""
    needed: dict[tuple[str, str], frozenset[str]] = {}

    def need(manifest: dict, verbs: frozenset[str]) -> None:
        key = (_group(manifest["apiVersion"]), _plural(manifest["kind"]))
        needed[key] = needed.get(key, frozenset()) | verbs

    def walk(node) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
            return
        if not isinstance(node, dict):
            return
        api_version, kind = node.get("apiVersion"), node.get("kind")
        if isinstance(api_version, str) and isinstance(kind, str):
            if _group(api_version) == OBJECT_GROUP and kind == "Object":
                spec = node.get("spec") or {}
                manifest = (spec.get("forProvider") or {}).get("manifest") or {}
                if manifest.get("apiVersion") and manifest.get("kind"):
                    observe = list(spec.get("managementPolicies") or ["*"]) == ["Observe"]
                    need(manifest, READ if observe else WRITE)
                walk({k: v for k, v in spec.items() if k != "forProvider"})
                return
            if _member_kind(api_version):
                need(node, WRITE)
        for value in node.values():
            walk(value)

    for root in GOLDENS:
        for path in sorted(root.rglob("*.yaml")):
            # The C loader where PyYAML has it: the golden files are large.
            loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
            for document in yaml.load_all(path.read_text(), Loader=loader):
                walk(document)
    return {
        key: verbs | RBAC_EXTRA if key[0] == RBAC_GROUP else verbs for key, verbs in needed.items()
    }


def _rbac_documents() -> list[dict]:
    return [d for d in yaml.safe_load_all(install_doc.MEMBER_RBAC.read_text()) if d]


def granted() -> dict[tuple[str, str], frozenset[str]]:
    (role,) = [d for d in _rbac_documents() if d["kind"] == "ClusterRole"]
    out: dict[tuple[str, str], frozenset[str]] = {}
    for rule in role["rules"]:
        for field in ("verbs", "resources", "apiGroups"):
            assert "*" not in rule[field], rule
        assert not rule.get("nonResourceURLs"), rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out[(group, resource)] = out.get((group, resource), frozenset()) | set(
                    rule["verbs"]
                )
    return out


def test_the_golden_files_hold_what_a_member_runs():
    """The derivation itself: the kinds a stack and a replica are made of are found."""
    needed = composed_member_resources()
    for key in (
        ("apps", "deployments"),
        ("leaderworkerset.x-k8s.io", "leaderworkersets"),
        ("inference.networking.k8s.io", "inferencepools"),
        ("autoscaling.modelplane.ai", "adaptivepolicies"),
        ("apiextensions.k8s.io", "customresourcedefinitions"),
    ):
        assert needed.get(key) == WRITE, (key, needed.get(key))
    assert needed[("resource.k8s.io", "deviceclasses")] == READ


def _beyond(these: Mapping, those: Mapping) -> list[str]:
    """Each (group, resource) whose verbs in `these` are not all in `those`, with them."""
    return sorted(
        f"{group or 'core'}/{resource}: {sorted(verbs - those.get((group, resource), set()))}"
        for (group, resource), verbs in these.items()
        if not verbs <= those.get((group, resource), set())
    )


def test_the_member_role_grants_every_composed_kind_with_the_verbs_it_needs():
    missing = _beyond(composed_member_resources(), granted())
    assert not missing, f"docs/member-rbac.yaml lacks: {missing}"


def test_the_member_role_grants_nothing_the_functions_do_not_compose():
    extra = _beyond(granted(), composed_member_resources())
    assert not extra, f"docs/member-rbac.yaml grants more than is composed: {extra}"


def test_the_member_role_is_bound_to_the_identity_step_4_names():
    documents = {d["kind"]: d for d in _rbac_documents()}
    account = documents["ServiceAccount"]["metadata"]
    assert account == {
        "name": install_doc.IDENTITIES["kubernetes"],
        "namespace": install_doc.IDENTITY_NAMESPACE,
    }
    assert documents["Namespace"]["metadata"]["name"] == install_doc.IDENTITY_NAMESPACE
    binding = documents["ClusterRoleBinding"]
    assert binding["roleRef"]["name"] == documents["ClusterRole"]["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", **account}]


def test_the_page_has_every_step_the_tests_apply():
    assert set(install_doc.blocks()) == {
        "core-values",
        "provider-kubernetes",
        "configuration",
        "provider-configs",
    }


def test_core_runs_with_the_arguments_the_box_runs_it_with():
    (values,) = install_doc.block("core-values")
    assert values["args"] == [
        f"--circuit-breaker-burst={CIRCUIT_BREAKER_BURST}",
        f"--circuit-breaker-refill-rate={CIRCUIT_BREAKER_REFILL_PER_SECOND}",
    ]


def test_provider_kubernetes_is_the_pinned_release_with_watches():
    documents = {d["kind"]: d for d in install_doc.block("provider-kubernetes")}
    provider, runtime = documents["Provider"], documents["DeploymentRuntimeConfig"]
    version = _shell_var(TOOLS / "provider_kubernetes.sh", "PROVIDER_KUBERNETES_VERSION")
    assert provider["spec"]["package"] == (
        f"xpkg.crossplane.io/crossplane-contrib/provider-kubernetes:{version}"
    )
    assert provider["spec"]["runtimeConfigRef"]["name"] == runtime["metadata"]["name"]
    (container,) = runtime["spec"]["deploymentTemplate"]["spec"]["template"]["spec"]["containers"]
    # The container Crossplane's Deployment runtime runs a package in.
    assert container["name"] == "package-runtime"
    assert "--enable-watches" in container["args"]


def test_the_configuration_is_this_release():
    (configuration,) = install_doc.block("configuration")
    version = next(
        line.split('"')[1]
        for line in (REPO / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    assert configuration["spec"]["package"] == (
        f"ghcr.io/modelplaneai/configuration-modelplane:v{version}"
    )


def test_the_provider_configs_read_the_secret_step_4_creates():
    documents = install_doc.provider_configs("ap-south-1")
    groups = sorted(_group(d["apiVersion"]) for d in documents)
    assert groups == ["helm.m.crossplane.io", "kubernetes.m.crossplane.io"]
    for document in documents:
        provider = _group(document["apiVersion"]).split(".")[0]
        assert document["kind"] == "ClusterProviderConfig"
        assert document["metadata"]["name"] == "ap-south-1"
        assert document["spec"]["credentials"] == {
            "source": "Secret",
            "secretRef": {
                "namespace": CROSSPLANE_NAMESPACE,
                "name": install_doc.secret_name("ap-south-1", provider),
                "key": "kubeconfig",
            },
        }


def test_the_page_makes_the_secrets_and_identities_the_box_makes():
    text = install_doc.INSTALL_DOC.read_text()
    # The shell loop over `who` in step 4, with the names install_doc uses.
    assert "for who in kubernetes helm; do" in text
    assert sorted(install_doc.IDENTITIES) == ["helm", "kubernetes"]
    assert install_doc.secret_name("$MEMBER", "$who") in text
    assert install_doc.IDENTITIES["helm"] in text
    assert '"modelplane-provider-$who"' in text
    for provider, account in install_doc.IDENTITIES.items():
        assert account == f"modelplane-provider-{provider}"
