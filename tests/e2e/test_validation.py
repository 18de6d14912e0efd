"""The control plane's API server itself rejects what our XRDs forbid, with the rule's
message: server-side schema and CEL validation of the CRDs Crossplane rendered from our
XRDs, not only `crossplane beta validate` offline — and the transition rules offline
validation cannot run."""

from pathlib import Path

import pytest
import yaml

from fleetbox.members import DEFAULT_MEMBERS
from tests.conftest import REPO
from tests.e2e import claims
from tests.schemas.test_validate import expected_message

INVALID = sorted((Path(__file__).resolve().parents[1] / "schemas" / "invalid").glob("*.yaml"))
# The AdaptivePolicy is a member's kind (compose-serving-stack installs its CRD there).
MEMBER_KINDS = {"AdaptivePolicy"}
POLICY_CRD = REPO / "apis" / "adaptivepolicies" / "definition.yaml"


def _cluster_for(box, manifest: Path) -> str:
    document = yaml.safe_load(manifest.read_text())
    if document.get("kind") not in MEMBER_KINDS:
        return claims.CONTROL
    member = DEFAULT_MEMBERS[0]
    # A missing namespace is refused before the schema is checked: make the tenant's.
    namespace = document["metadata"]["namespace"]
    done = box.kubectl(member, "create", "namespace", namespace, check=False)
    assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr
    # Composed there by the examples' InferenceCluster; created here if not yet.
    done = box.kubectl(member, "create", "-f", str(POLICY_CRD), check=False)
    assert done.returncode == 0 or "AlreadyExists" in done.stderr, done.stderr
    box.kubectl(
        member, "wait", "--for=condition=Established", "--timeout=120s",
        "crd/adaptivepolicies.autoscaling.modelplane.ai",
    )  # fmt: skip
    return member


@pytest.mark.parametrize("manifest", INVALID, ids=lambda p: p.stem)
def test_the_api_server_rejects_each_invalid_manifest_with_its_rule(box, manifest):
    done = box.kubectl(
        _cluster_for(box, manifest), "apply", "--dry-run=server", "-f", str(manifest), check=False
    )
    assert done.returncode != 0, f"{manifest.name} was accepted by the API server:\n{done.stdout}"
    assert expected_message(manifest) in done.stderr, done.stderr


def test_a_cluster_stack_cannot_change_once_applied(box):
    cluster = claims.renamed(
        claims.example("inferenceclusters/us-east-h100.yaml"), "e2e-immutable-stack"
    )
    cluster["metadata"]["labels"] = {
        "fleet.example.com/tier": "e2e-immutable"
    }  # selected by no model
    claims.apply_document(box, cluster)
    try:
        cluster["spec"]["stack"] = "Dynamo"
        done = box.kubectl(
            claims.CONTROL, "apply", "-f", "-", stdin=claims.yaml.safe_dump(cluster), check=False
        )
        assert done.returncode != 0, "changing spec.stack was accepted"
        assert "stack is immutable; create a new InferenceCluster instead" in done.stderr, (
            done.stderr
        )
        kept = claims.get(box, "inferencecluster", "e2e-immutable-stack")
        assert kept["spec"]["stack"] == "Standard"
    finally:
        claims.delete(box, "inferencecluster", "e2e-immutable-stack")
