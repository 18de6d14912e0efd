"""Change and react, as users and operators change a live fleet: scale a deployment,
take a cluster out of its selector, delete a destination, delete a deployment — and
restart Crossplane core and our functions in the middle. Each test applies its own
claims (named for it) and removes them."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client

from fleetbox.wait import wait_for
from functions.common import contracts
from functions.compose_serving_stack.runtime_hosting import HEALTH_ROLE
from tests.e2e import claims
from tests.e2e.conftest import measured

NAMESPACE = "ml-team"
TIER = "fleet.example.com/tier"
# The tier of this module's own clusters (on the box's spare members), which no example
# deployment selects, so these tests never move the examples' replicas.
E2E_TIER = "e2e"
H100, B200 = "e2e-a", "e2e-b"


def _deployment(name: str, replicas: int, tier: str) -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), name)
    document["spec"]["replicas"] = replicas
    document["spec"]["template"]["spec"]["clusterSelector"] = {"matchLabels": {TIER: tier}}
    document["spec"].pop("autoscaling", None)
    return document


def _cluster(example: str, name: str) -> dict:
    """A copy of an example cluster on one of the box's spare members (named for it)."""
    document = claims.renamed(claims.example(f"inferenceclusters/{example}"), name)
    document["metadata"]["labels"] = {TIER: E2E_TIER}
    document["spec"]["providerConfigRef"] = {"name": name}
    return document


def _placed(box, name: str) -> dict[str, int]:
    xr = claims.get(box, "modeldeployment", name, NAMESPACE)
    by_cluster: dict[str, int] = {}
    for placement in (xr or {}).get("status", {}).get("placements", []) or []:
        by_cluster[placement["cluster"]] = (
            by_cluster.get(placement["cluster"], 0) + placement["replicas"]
        )
    return by_cluster


def _wait_on_members(box, name: str, clusters: set[str]) -> list[tuple[str, dict]]:
    """Wait until the deployment's workloads exist on exactly `clusters` and everything
    its replicas composed exists on its member."""

    def there():
        composed = claims.member_stubs(claims.whole_composition(box, name, NAMESPACE))
        members = {
            member
            for member, stub in composed
            if stub["kind"] in {"Deployment", "LeaderWorkerSet", "PodCliqueSet"}
        }
        assert members == clusters, f"workloads on {members}"
        missing = [
            f"{claims.describe(s)} on {m}"
            for m, s in composed
            if claims.remote_get(box, m, s) is None
        ]
        assert not missing, missing
        return composed

    return wait_for(f"{name}'s workloads on {sorted(clusters)}", there, claims.CONVERGE_SECONDS)


@pytest.fixture(scope="module")
def clusters(box):
    """Copies of the example clusters on the spare members, in the tier E2E_TIER."""
    made = [_cluster("us-east-h100.yaml", H100), _cluster("eu-west-b200.yaml", B200)]
    for cluster in made:
        claims.apply_document(box, cluster)
    yield E2E_TIER
    for cluster in made:
        claims.delete(box, "inferencecluster", cluster["metadata"]["name"])


def _wait_total(box, name: str, replicas: int) -> dict[str, int]:
    def placed():
        got = _placed(box, name)
        assert sum(got.values()) == replicas, f"placements {got}"
        return got

    return wait_for(f"{name} placed {replicas} replicas", placed, claims.CONVERGE_SECONDS)


def test_scaling_a_deployment_up_and_down_reaches_the_members(box, clusters):
    name = "e2e-scale"
    try:
        for replicas in (1, 4, 1):
            claims.apply_document(box, _deployment(name, replicas, clusters))
            placed = _wait_total(box, name, replicas)
            _wait_on_members(box, name, set(placed))
    finally:
        claims.delete(box, "modeldeployment", name, NAMESPACE)


def _scale(box, name: str) -> dict:
    """The deployment's scale subresource as an HPA reads it (autoscaling/v1 Scale)."""
    done = box.kubectl(
        claims.CONTROL, "get", "modeldeployment", name, "-n", NAMESPACE,
        "--subresource=scale", "-o", "json",
    )  # fmt: skip
    return json.loads(done.stdout)


def _wait_scaled(box, name: str, replicas: int) -> None:
    """Placement follows spec.replicas: the ModelReplicas hold `replicas` in all, and the
    scale subresource reports them with the deployment's pod selector."""

    def scaled():
        held = sum(r["spec"]["replicas"] for r in claims.replicas_of(box, name, NAMESPACE))
        assert held == replicas, f"ModelReplicas hold {held}"
        scale = _scale(box, name)
        assert scale["spec"]["replicas"] == replicas, scale
        assert scale["status"].get("replicas") == replicas, scale
        assert scale["status"].get("selector") == f"{contracts.LABEL_DEPLOYMENT}={name}", scale
        return True

    wait_for(f"{name} scaled to {replicas}", scaled, claims.CONVERGE_SECONDS)


def test_kubectl_scale_moves_the_placement_and_the_scale_subresource_reports_it(box, clusters):
    name = "e2e-kubectl-scale"
    claims.apply_document(box, _deployment(name, 1, clusters))
    try:
        _wait_scaled(box, name, 1)
        box.kubectl(
            claims.CONTROL, "scale", "modeldeployment", name, "-n", NAMESPACE, "--replicas=3"
        )
        assert claims.get(box, "modeldeployment", name, NAMESPACE)["spec"]["replicas"] == 3
        _wait_scaled(box, name, 3)
        _wait_on_members(box, name, set(_wait_total(box, name, 3)))

        # What an HPA or KEDA does: write /scale through the API, not kubectl.
        client.CustomObjectsApi(box.api()).patch_namespaced_custom_object_scale(
            contracts.API_GROUP, contracts.API_VERSION, NAMESPACE, "modeldeployments", name,
            {"spec": {"replicas": 2}},
        )  # fmt: skip
        _wait_scaled(box, name, 2)
        _wait_on_members(box, name, set(_wait_total(box, name, 2)))

        # The schema's bounds hold through /scale too, and the error names the field.
        refused = box.kubectl(
            claims.CONTROL, "scale", "modeldeployment", name, "-n", NAMESPACE,
            "--replicas=1001", check=False,
        )  # fmt: skip
        assert refused.returncode != 0
        assert "spec.replicas" in refused.stderr, refused.stderr
        assert claims.get(box, "modeldeployment", name, NAMESPACE)["spec"]["replicas"] == 2
    finally:
        claims.delete(box, "modeldeployment", name, NAMESPACE)


def test_the_scale_selector_selects_the_models_pods_on_a_member(box):
    # The examples' llama-3-1-8b runs real (KWOK) pods on us-east-1: the selector its
    # scale subresource reports is what selects them there, and no other model's pods.
    name, member = "llama-3-1-8b", "us-east-1"

    def pods(*selector: str) -> list[dict]:
        done = box.kubectl(member, "get", "pods", "-A", "-o", "json", *selector)
        return json.loads(done.stdout)["items"]

    def selected():
        selector = _scale(box, name)["status"]["selector"]
        assert selector, "no selector yet"
        chosen = pods("-l", selector)
        assert chosen, f"no pod on {member} matches {selector}"
        return selector, chosen

    selector, chosen = wait_for(
        f"{name}'s pods on {member} by its scale selector", selected, claims.CONVERGE_SECONDS
    )

    def key(pod: dict) -> tuple[str, str]:
        return pod["metadata"]["namespace"], pod["metadata"]["name"]

    chosen_keys = {key(p) for p in chosen}
    others = [p for p in pods("-l", contracts.LABEL_DEPLOYMENT) if key(p) not in chosen_keys]
    assert others, f"only {name}'s pods run on {member}: the test proves nothing"
    assert all(p["metadata"]["labels"].get(contracts.LABEL_ENGINE) for p in chosen)
    # Every pod the model's workloads made is selected: none of its pods is left out.
    deployment_label = contracts.LABEL_DEPLOYMENT
    left_out = [key(p) for p in others if p["metadata"]["labels"][deployment_label] == name]
    assert not left_out, left_out
    assert selector == f"{contracts.LABEL_DEPLOYMENT}={name}"


def test_deleting_a_deployment_removes_everything_it_composed_everywhere(box, clusters):
    name = "e2e-delete"
    claims.apply_document(box, _deployment(name, 4, clusters))
    _wait_on_members(box, name, set(_wait_total(box, name, 4)))
    # One listing for both: core may still be creating Objects between two.
    objects = claims.whole_composition(box, name, NAMESPACE)
    remote = claims.member_stubs(objects, deleted_with_it=True)
    kept = [s for s in claims.member_stubs(objects) if s not in remote]
    assert {stub["kind"] for _m, stub in kept} == {"Namespace"}, kept
    replicas = [r["metadata"]["name"] for r in claims.replicas_of(box, name, NAMESPACE)]
    assert replicas
    claims.delete(box, "modeldeployment", name, NAMESPACE)

    def control_plane_clean():
        left = [r["metadata"]["name"] for r in claims.replicas_of(box, name, NAMESPACE)]
        objects = [o["metadata"]["name"] for o in claims.composed_objects(box, name, NAMESPACE)]
        deployment = claims.get(box, "modeldeployment", name, NAMESPACE)
        assert deployment is None, "the deployment is still there"
        assert not left, left
        assert not objects, objects
        return True

    wait_for(
        "the deployment, its replicas and Objects gone",
        control_plane_clean,
        claims.CONVERGE_SECONDS,
    )
    claims.wait_gone(box, remote)


def test_a_cluster_taken_out_of_the_selector_loses_its_replicas(box, clusters):
    name = "e2e-move"
    claims.apply_document(box, _deployment(name, 4, clusters))
    try:
        placed = _wait_total(box, name, 4)
        before = _wait_on_members(box, name, set(placed))
        assert set(placed) == {H100, B200}, f"4 replicas should spread over both clusters: {placed}"
        box.kubectl(
            claims.CONTROL,
            "label",
            "inferencecluster",
            B200,
            f"{TIER}=e2e-elsewhere",
            "--overwrite",
        )
        try:

            def moved():
                got = _placed(box, name)
                assert B200 not in got, f"placements {got}"
                assert got.get(H100), f"placements {got}"
                return got

            after = wait_for(f"{name}'s replicas off {B200}", moved, claims.CONVERGE_SECONDS)
            _wait_on_members(box, name, set(after))
            deleted = claims.everything_composed_for(box, name, NAMESPACE, deleted_with_it=True)
            assert not [m for m, _s in deleted if m == B200]
            claims.wait_gone(
                box, [(m, s) for m, s in before if m == B200 and s["kind"] != "Namespace"]
            )
        finally:
            box.kubectl(
                claims.CONTROL,
                "label",
                "inferencecluster",
                B200,
                f"{TIER}={E2E_TIER}",
                "--overwrite",
            )
    finally:
        claims.delete(box, "modeldeployment", name, NAMESPACE)


def _identities(box, composed) -> dict[tuple[str, str], str]:
    return {
        (m, claims.describe(s)): claims.remote_get(box, m, s)["metadata"]["uid"]
        for m, s in composed
    }


def test_restarting_core_and_every_function_deletes_and_duplicates_nothing(box, clusters):
    name = "e2e-restart"
    claims.apply_document(box, _deployment(name, 4, clusters))
    try:
        before = _identities(box, _wait_on_members(box, name, set(_wait_total(box, name, 4))))
        replicas = {
            r["metadata"]["name"]: r["metadata"]["uid"]
            for r in claims.replicas_of(box, name, NAMESPACE)
        }
        box.processes["crossplane-core"].restart()
        for server in box.functions.values():
            server.process.restart()
            box.wait_function(server)
        box.point_functions()
        # A change after the restarts is reconciled by the restarted processes.
        began = time.monotonic()
        claims.apply_document(box, _deployment(name, 5, clusters))
        placed = _wait_total(box, name, 5)
        after = _wait_on_members(box, name, set(placed))
        measured("reconcile after restarting core and the functions", time.monotonic() - began)
        still = _identities(box, after)
        # Nothing was deleted and recreated: every object keeps its identity (uid).
        assert {k: still.get(k) for k in before} == before
        assert len(after) == len(still), "a member object is composed twice"
        now = {
            r["metadata"]["name"]: r["metadata"]["uid"]
            for r in claims.replicas_of(box, name, NAMESPACE)
        }
        assert {k: now.get(k) for k in replicas} == replicas
    finally:
        claims.delete(box, "modeldeployment", name, NAMESPACE)


def test_time_from_applying_a_deployment_to_workloads_on_every_member(box, clusters):
    for attempt in range(3):
        name = f"e2e-timed-{attempt}"
        began = time.monotonic()
        claims.apply_document(box, _deployment(name, 4, clusters))
        try:
            _wait_on_members(box, name, set(_wait_total(box, name, 4)))
            measured(
                "ModelDeployment applied to workloads on every member", time.monotonic() - began
            )
        finally:
            claims.delete(box, "modeldeployment", name, NAMESPACE)


def _follows_replicas(key: str) -> bool:
    """A serving stack's composed resource that exists per namespace with ModelReplicas
    on the cluster (the agent's health-record Role and RoleBinding)."""
    return f"-{HEALTH_ROLE}-" in key


def _composed_by_key(box, cluster: str) -> dict[str, tuple[str, dict]]:
    return {
        o["metadata"]["annotations"][
            "crossplane.io/composition-resource-name"
        ]: claims.remote_identity(o)
        for o in claims.composed_objects(box, cluster)
        if not claims.observe_only(o)
    }


def test_deleting_the_destination_removes_collectors_and_nothing_else(box, clusters):
    destination = claims.example("telemetrydestinations/fleet.yaml")
    name = destination["metadata"]["name"]

    def with_collector():
        composed = _composed_by_key(box, H100)
        assert any("collector" in key for key in composed), sorted(composed)
        missing = [k for k, (m, s) in composed.items() if claims.remote_get(box, m, s) is None]
        assert not missing, missing
        return composed

    before = wait_for(
        f"{H100} composed with its collector", with_collector, claims.CONVERGE_SECONDS
    )
    # The agent's per-namespace health Roles follow the ModelReplicas on the cluster (an
    # earlier test's deployment may still be leaving it), not the destination: left out.
    kept = {k: v for k, v in before.items() if "collector" not in k and not _follows_replicas(k)}
    kept_uids = {k: claims.remote_get(box, m, s)["metadata"]["uid"] for k, (m, s) in kept.items()}
    claims.delete(box, "telemetrydestination", name)
    try:

        def collectors_gone():
            composed = _composed_by_key(box, H100)
            assert not [k for k in composed if "collector" in k], sorted(composed)
            return composed

        after = wait_for("collectors no longer composed", collectors_gone, claims.CONVERGE_SECONDS)
        claims.wait_gone(box, [v for k, v in before.items() if "collector" in k])
        after = {k: v for k, v in after.items() if not _follows_replicas(k)}
        assert set(after) == set(kept), "deleting the destination changed more than the collector"
        now = {k: claims.remote_get(box, m, s)["metadata"]["uid"] for k, (m, s) in kept.items()}
        assert now == kept_uids, "something besides the collector was deleted or recreated"
    finally:
        claims.apply_document(box, destination)
    wait_for(f"{H100}'s collector back", with_collector, claims.CONVERGE_SECONDS)
