"""The examples, applied to a real control plane as a user applies them: every claim is
reconciled through our functions, the status our functions write survives the API
server (nothing pruned) and says what `crossplane render` says, and what they compose
reaches the member clusters through provider-kubernetes."""

from __future__ import annotations

import json
import time

import pytest
import yaml

import render
from fleetbox.control_plane import example_paths
from fleetbox.wait import conditions, is_true, wait_for
from tests.e2e import claims
from tests.e2e.conftest import measured

EXAMPLE_DEPLOYMENTS = sorted((claims.EXAMPLES / "modeldeployments").glob("*.yaml"))
EXAMPLE_CLUSTERS = sorted((claims.EXAMPLES / "inferenceclusters").glob("*.yaml"))
# What a deployment reads besides the clusters: the ModelCaches it may name.
EXAMPLE_CACHES = sorted((claims.EXAMPLES / "modelcaches").glob("*.yaml"))
# What each stack's engine workload is on the member.
WORKLOAD_KINDS = {"Deployment", "LeaderWorkerSet", "PodCliqueSet"}


def _example_claims() -> list[tuple[str, str, str | None]]:
    found = []
    for path in example_paths():
        document = yaml.safe_load(path.read_text())
        found.append(
            (
                document["kind"].lower(),
                document["metadata"]["name"],
                document["metadata"].get("namespace"),
            )
        )
    return found


@pytest.fixture(scope="module")
def settled(box):
    """Every example claim Synced, and every example deployment's replicas composed."""

    def synced():
        pending = []
        for kind, name, namespace in _example_claims():
            xr = claims.get(box, kind, name, namespace)
            if xr is None or not is_true(xr, "Synced"):
                pending.append((kind, name, conditions(xr or {}).get("Synced")))
        assert not pending, pending
        return True

    wait_for("every example claim Synced", synced, claims.CONVERGE_SECONDS)
    measured(
        "examples applied to every example claim Synced", time.monotonic() - box.example_applied_at
    )
    return box


@pytest.mark.parametrize(("kind", "name", "namespace"), _example_claims(), ids=str)
def test_every_example_claim_is_synced_and_its_conditions_say_why(settled, kind, name, namespace):
    xr = claims.get(settled, kind, name, namespace)
    by_type = conditions(xr)
    assert by_type["Synced"]["status"] == "True", by_type["Synced"]
    ready = by_type.get("Ready")
    assert ready is not None, f"{kind} {name} has no Ready condition: {by_type}"
    if ready["status"] != "True":
        # Nothing runs pods here: a claim that is not ready must say why in one of its
        # own conditions (our functions write them), never be silent.
        explained = [
            c
            for c in by_type.values()
            if c["type"] not in {"Synced", "Ready"} and c["status"] == "False" and c.get("message")
        ]
        assert explained, f"{kind} {name} is not ready and no condition says why: {by_type}"


def _live_replicas(box, name: str) -> tuple[list[dict], list[dict]]:
    """Every ModelReplica on the control plane, as (this deployment's, everyone else's)."""
    items = json.loads(
        box.kubectl(claims.CONTROL, "get", "modelreplicas", "-A", "-o", "json").stdout
    )["items"]
    own, others = [], []
    for item in items:
        item["metadata"].pop("managedFields", None)
        owners = {o["name"] for o in item["metadata"].get("ownerReferences", [])}
        (own if name in owners else others).append(item)
    return own, others


def _rendered_status(function_servers, tmp_path, deployment, box):
    """What render prints for this deployment given the fleet as it stands live: every
    ModelReplica read (as on the control plane), its own also observed (placement is sticky, and the
    examples compete for room, so which deployment placed first decides who got it)."""
    name = yaml.safe_load(deployment.read_text())["metadata"]["name"]
    own, others = _live_replicas(box, name)
    required = tmp_path / "required.yaml"
    required.write_text(
        "\n---\n".join(
            [p.read_text() for p in EXAMPLE_CLUSTERS + EXAMPLE_CACHES]
            + [yaml.safe_dump(r) for r in own + others]
        )
    )
    observed = None
    if own:
        observed = tmp_path / "observed.yaml"
        observed.write_text("\n---\n".join(yaml.safe_dump(r) for r in own))
    result = render.render(function_servers, deployment, required=required, observed=observed)
    assert result.returncode == 0, result.stderr
    return result.documents[0]["status"]


def _paths(value, prefix=""):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield f"{prefix}.{key}"
            yield from _paths(inner, f"{prefix}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _paths(inner, f"{prefix}[{index}]")


@pytest.mark.parametrize("deployment", EXAMPLE_DEPLOYMENTS, ids=lambda p: p.stem)
def test_deployment_status_survives_the_api_server_and_matches_render(
    settled, function_servers, tmp_path, deployment
):
    document = yaml.safe_load(deployment.read_text())
    rendered: dict = {}

    def placed():
        rendered["status"] = _rendered_status(function_servers, tmp_path, deployment, settled)
        xr = claims.get(
            settled,
            "modeldeployment",
            document["metadata"]["name"],
            document["metadata"]["namespace"],
        )
        wanted = rendered["status"].get("placements")
        return xr if xr.get("status", {}).get("placements") == wanted else None

    xr = wait_for(
        f"{deployment.stem}'s placements as render printed them for the live fleet",
        placed,
        claims.CONVERGE_SECONDS,
    )
    expected = rendered["status"]
    live = xr["status"]
    # Every field our function wrote is still there: an API server prunes, silently,
    # any status field its schema lacks.
    live_paths = set(_paths(live))
    pruned = [
        p
        for p in _paths({k: v for k, v in expected.items() if k != "conditions"})
        if p not in live_paths
    ]
    assert not pruned, f"the API server pruned {pruned} from {deployment.stem}'s status"
    ours = {c["type"] for c in expected.get("conditions", [])}
    assert ours <= {c["type"] for c in live.get("conditions", [])}


def test_composed_resources_reach_the_members(settled):
    """Each example deployment's engine workloads, Services and routes exist on the
    member its replicas were placed on; each cluster's runtime and collector too."""

    def everything_there():
        missing = []
        for path in EXAMPLE_DEPLOYMENTS:
            document = yaml.safe_load(path.read_text())
            composed = claims.everything_composed_for(
                settled, document["metadata"]["name"], document["metadata"]["namespace"]
            )
            kinds = {stub["kind"] for _member, stub in composed}
            if not kinds & WORKLOAD_KINDS:
                missing.append(f"{path.stem}: no engine workload composed yet ({sorted(kinds)})")
            for member, stub in composed:
                if claims.remote_get(settled, member, stub) is None:
                    missing.append(f"{path.stem}: {claims.describe(stub)} not on {member}")
        for path in EXAMPLE_CLUSTERS:
            name = yaml.safe_load(path.read_text())["metadata"]["name"]
            for obj in claims.composed_objects(settled, name):
                if claims.observe_only(obj):
                    continue
                member, stub = claims.remote_identity(obj)
                applied = {"Namespace", "CustomResourceDefinition", "Deployment", "ConfigMap"}
                if stub["kind"] in applied and claims.remote_get(settled, member, stub) is None:
                    missing.append(f"{name}: {claims.describe(stub)} not on {member}")
        assert not missing, missing
        return True

    wait_for("every composed resource on its member", everything_there, claims.CONVERGE_SECONDS)
