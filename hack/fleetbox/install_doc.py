"""docs/install.md's marked blocks, as the box and the tests apply them.

A block is the fenced `yaml` block right after a `<!-- install: NAME -->` line. The
fleet box connects its members with the identity and provider configs step 4 shows, and
the package-install test applies steps 2 and 3 through core's package manager: what
the page tells a platform team to apply is what the tests run.
"""

from __future__ import annotations

import copy
import re
from typing import Any, Final

import yaml

from fleetbox import REPO

INSTALL_DOC: Final = REPO / "docs" / "install.md"
MEMBER_RBAC: Final = REPO / "docs" / "member-rbac.yaml"
# Step 4's member: every name in its provider-config block starts with it.
DOC_MEMBER: Final = "us-east-1"
IDENTITY_NAMESPACE: Final = "crossplane-system"
# Per provider, the member ServiceAccount step 4 makes (member-rbac.yaml holds the first).
IDENTITIES: Final = {
    "kubernetes": "modelplane-provider-kubernetes",
    "helm": "modelplane-provider-helm",
}
_MARKER = re.compile(r"<!-- install: ([\w-]+) -->")


def blocks() -> dict[str, list[dict[str, Any]]]:
    """Every marked block of the page, by name: its YAML documents."""
    found: dict[str, list[dict[str, Any]]] = {}
    lines = INSTALL_DOC.read_text().splitlines()
    for index, line in enumerate(lines):
        marker = _MARKER.fullmatch(line.strip())
        if marker is None:
            continue
        if index + 1 >= len(lines) or lines[index + 1].strip() != "```yaml":
            raise ValueError(f"{INSTALL_DOC}: block {marker.group(1)} is not a ```yaml fence")
        end = next(i for i in range(index + 2, len(lines)) if lines[i].strip() == "```")
        text = "\n".join(lines[index + 2 : end])
        found[marker.group(1)] = [d for d in yaml.safe_load_all(text) if d is not None]
    return found


def block(name: str) -> list[dict[str, Any]]:
    return copy.deepcopy(blocks()[name])


def provider_configs(member: str) -> list[dict[str, Any]]:
    """Step 4's provider configs for `member` (the page shows them for DOC_MEMBER)."""
    documents = block("provider-configs")
    for document in documents:
        assert document["metadata"]["name"] == DOC_MEMBER, document["metadata"]
        document["metadata"]["name"] = member
        reference = document["spec"]["credentials"]["secretRef"]
        assert reference["name"].startswith(DOC_MEMBER + "-"), reference
        reference["name"] = member + reference["name"].removeprefix(DOC_MEMBER)
    return documents


def secret_name(member: str, provider: str) -> str:
    """The Secret step 4 stores `provider`'s member kubeconfig in."""
    return f"{member}-{provider}-kubeconfig"
