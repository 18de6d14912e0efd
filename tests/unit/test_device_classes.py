"""A DeviceClass a pool names but the member lacks: read back by compose-serving-stack,
reported in the InferenceCluster's status, and kept out of placement with a reason that
names it (compose-model-deployment)."""

import pytest

from functions.compose_model_deployment.model import read_cluster
from functions.compose_model_deployment.placement import place
from functions.compose_serving_stack import device_classes
from functions.compose_serving_stack.envelope import Target
from tests.unit.test_placement import deployment, placed, pool

NIC = {"driver": "rdma.example.com", "perNode": 8, "attributes": {}}


def with_nics(raw: dict) -> dict:
    return {**raw, "additionalDevices": [NIC]}


def test_the_classes_a_cluster_needs_are_every_pools_drivers_once():
    pools = [pool("h100"), with_nics(pool("b200", product="B200")), {"name": "odd"}]
    assert device_classes.needed(pools) == ("gpu.nvidia.com", "rdma.example.com")


def _observed(*, manifest=None, synced=None):
    status: dict = {}
    if manifest is not None:
        status["atProvider"] = {"manifest": manifest}
    if synced is not None:
        status["conditions"] = [{"type": "Synced", "status": "False", "message": synced}]
    return {"status": status}


@pytest.mark.parametrize(
    ("observed", "state"),
    [
        (None, "Unknown"),
        (_observed(manifest={"kind": "DeviceClass"}), "Present"),
        (
            _observed(synced="cannot observe external resource: external resource does not exist"),
            "Missing",
        ),
        (_observed(synced="cannot get provider config"), "Unknown"),
    ],
    ids=[
        "not_observed_yet_is_unknown",
        "an_object_the_member_returned_is_present",
        "an_observe_only_object_with_nothing_there_is_missing",
        "another_sync_failure_says_nothing_about_the_class",
    ],
)
def test_each_class_is_read_back_from_its_observe_only_object(observed, state):
    assert device_classes.observed_state(observed) == state


def test_the_observers_only_observe_and_are_keyed_by_the_class():
    (composed,) = device_classes.observers(Target("c", "c"), ["gpu.nvidia.com"])
    assert composed.key == device_classes.key("gpu.nvidia.com")
    spec = composed.resource["spec"]
    assert spec["managementPolicies"] == ["Observe"]
    assert spec["forProvider"]["manifest"] == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {},
    }


def test_the_status_reports_each_class_and_which_are_missing():
    missing = _observed(synced="external resource does not exist")
    observed = {device_classes.key("rdma.example.com"): missing}
    reported = device_classes.report(["gpu.nvidia.com", "rdma.example.com"], observed)
    assert reported == [
        {"name": "gpu.nvidia.com", "state": "Unknown"},
        {"name": "rdma.example.com", "state": "Missing"},
    ]
    assert device_classes.missing(reported) == ["rdma.example.com"]


# --- Placement -------------------------------------------------------------------------------


def cluster(name, *pools, missing=(), unknown=()):
    return read_cluster(
        {
            "metadata": {"name": name, "labels": {"tier": "prod"}},
            "spec": {"providerConfigRef": {"name": name}, "nodePools": list(pools) or [pool()]},
            "status": {
                "deviceClasses": [{"name": n, "state": "Missing"} for n in missing]
                + [{"name": n, "state": "Unknown"} for n in unknown]
            },
        }
    )


NIC_REQUEST = {"name": "nic", "count": 1, "deviceClassName": "rdma.example.com"}


@pytest.mark.parametrize(
    ("clusters", "dep", "expected"),
    [
        (
            [cluster("a", missing=["gpu.nvidia.com"]), cluster("b")],
            deployment(),
            {("b", "h100"): 1},
        ),
        (
            [cluster("a", with_nics(pool()), missing=["rdma.example.com"]), cluster("b")],
            deployment(),
            {("a", "h100"): 1},
        ),
        (
            [
                cluster("a", with_nics(pool()), missing=["rdma.example.com"]),
                cluster("b", with_nics(pool())),
            ],
            deployment(extra_requests=(NIC_REQUEST,)),
            {("b", "h100"): 1},
        ),
        ([cluster("a", unknown=["gpu.nvidia.com"])], deployment(), {("a", "h100"): 1}),
    ],
    ids=[
        "a_pool_whose_gpu_class_is_missing_takes_nothing",
        "a_missing_nic_class_matters_only_to_a_model_that_claims_nics",
        "a_model_that_claims_nics_skips_the_cluster_without_their_class",
        "a_class_not_observed_yet_is_not_held_against_the_cluster",
    ],
)
def test_placement_avoids_pools_whose_claims_name_a_missing_class(clusters, dep, expected):
    assert placed(place(dep, clusters, [], 1)) == expected


def test_a_model_only_missing_classes_keep_out_says_which_class_and_where():
    clusters = [cluster("a", missing=["gpu.nvidia.com"]), cluster("b", missing=["gpu.nvidia.com"])]
    plan = place(deployment(), clusters, [], 1)
    assert plan.unplaceable == 1
    assert "DeviceClass gpu.nvidia.com on a; DeviceClass gpu.nvidia.com on b" in plan.reason
    assert "status.deviceClasses" in plan.reason
    # It still answers why, from the pool that came closest.
    assert plan.nearest == ("a", "h100")
