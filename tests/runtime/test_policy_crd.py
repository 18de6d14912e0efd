"""The policy's schemas on a real API server: the CEL rules must fit the server's cost
budget (an offline validator does not estimate it, and a CRD over budget is refused at
install), and a policy breaking a weight rule is refused naming the rule."""

import contextlib
import copy

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.conftest import REPO
from tests.runtime.conftest import POLICY_NAMESPACE


def xrd_as_crd(path) -> dict:
    """The CRD Crossplane derives from an XRD, as far as validation is concerned: the
    same group, names, scope and per-version schema."""
    xrd = yaml.safe_load(path.read_text())
    spec = xrd["spec"]
    names = dict(spec["names"])
    names.setdefault("listKind", names["kind"] + "List")
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": xrd["metadata"]["name"]},
        "spec": {
            "group": spec["group"],
            "names": names,
            "scope": spec.get("scope", "Namespaced"),
            "versions": [
                {
                    "name": v["name"],
                    "served": True,
                    "storage": True,
                    "schema": copy.deepcopy(v["schema"]),
                }
                for v in spec["versions"]
            ],
        },
    }


def test_the_modeldeployment_schema_fits_the_api_servers_cel_budget(fleet):
    api = fleet.members[0].client()
    extensions = client.ApiextensionsV1Api(api)
    crd = xrd_as_crd(REPO / "apis" / "modeldeployments" / "definition.yaml")
    try:
        extensions.create_custom_resource_definition(crd)  # refused (422) when over budget
    finally:
        with contextlib.suppress(ApiException):
            extensions.delete_custom_resource_definition(crd["metadata"]["name"])
        api.close()


@pytest.mark.parametrize(
    ("clusters", "rule"),
    [
        (
            [
                {"name": "a", "maxReplicas": 2, "weight": 70},
                {"name": "b", "maxReplicas": 2, "weight": 40},
            ],
            "clusters[].weight must sum to at most 100",
        ),
        (
            [{"name": "a", "maxReplicas": 2, "minWeight": 50, "maxWeight": 40}],
            "clusters[].minWeight must not exceed maxWeight",
        ),
    ],
)
def test_an_adaptivepolicy_breaking_a_weight_rule_is_refused(fleet, clusters, rule):
    api = fleet.members[0].client()
    body = {
        "apiVersion": "autoscaling.modelplane.ai/v1alpha1",
        "kind": "AdaptivePolicy",
        "metadata": {"name": "weights", "namespace": POLICY_NAMESPACE},
        "spec": {
            "workload": {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "name": "x"},
            "clusters": clusters,
        },
    }
    try:
        with pytest.raises(ApiException) as refused:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                "autoscaling.modelplane.ai", "v1alpha1", POLICY_NAMESPACE, "adaptivepolicies", body
            )
        assert refused.value.status == 422
        assert rule in refused.value.body
    finally:
        api.close()
