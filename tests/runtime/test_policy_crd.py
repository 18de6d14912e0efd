"""The policy's schemas on a real API server: the CEL rules must fit the server's cost
budget (an offline validator does not estimate it, and a CRD over budget is refused at
install), and a policy breaking a weight rule is refused naming the rule."""

import contextlib
import copy
import json
import time

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.conftest import REPO
from tests.runtime.cluster import _wait_established, delete_crd
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


@contextlib.contextmanager
def installed(api, crd: dict):
    """The CRD created and Established for the length of a block, and gone again after
    it (delete_crd waits for the deletion to finish), so the tests here may install the
    same kind in turn."""
    extensions = client.ApiextensionsV1Api(api)
    name = crd["metadata"]["name"]
    extensions.create_custom_resource_definition(crd)
    try:
        _wait_established(extensions, name)
        yield
    finally:
        delete_crd(extensions, name)


def test_the_modeldeployment_schema_fits_the_api_servers_cel_budget(fleet):
    api = fleet.members[0].client()
    crd = xrd_as_crd(REPO / "apis" / "modeldeployments" / "definition.yaml")
    try:
        with installed(api, crd):  # the create is refused (422) when over budget
            pass
    finally:
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


def test_a_bare_string_signal_is_refused_naming_the_field(fleet):
    """The older `signals: {demand: "<PromQL>"}` form, on the real API server.

    The refusal is the server's own type check: it names the field and the type wanted
    (`spec.autoscaling.signals.demand ... must be of type object`), and the field's
    description (kubectl explain) says to write `{promql: <query>}`. A message of our
    own cannot be given there: a type error blocks every CEL rule, and a signal node
    left untyped (x-kubernetes-preserve-unknown-fields, to let a string through to a
    rule) is hidden from its own and its parent's CEL ("unable to convert structural
    schema to CEL declarations" / "undefined field"), which would drop the signal rules.
    """
    api = fleet.members[0].client()
    crd = xrd_as_crd(REPO / "apis" / "modeldeployments" / "definition.yaml")
    body = {
        "apiVersion": "modelplane.ai/v1alpha1",
        "kind": "ModelDeployment",
        "metadata": {"name": "bare", "namespace": POLICY_NAMESPACE},
        "spec": {
            "autoscaling": {
                "maxReplicas": 2,
                "signals": {"demand": "sum(rate(vllm:request_success_total[1m]))"},
            }
        },
    }
    try:
        with installed(api, crd):
            refused = _dry_run_refusal(api, crd, body)
        assert refused is not None, "a bare string signal was accepted"
        assert refused.status == 422
        message = json.loads(refused.body)["message"]
        assert "spec.autoscaling.signals.demand" in message
        assert "must be of type object" in message
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        signals = schema["properties"]["spec"]["properties"]["autoscaling"]["properties"]
        assert "write {promql: <query>}" in signals["signals"]["description"]
    finally:
        api.close()


def _dry_run_refusal(api, crd: dict, body: dict):
    """The server's refusal of a dry-run create of `body`, or None when it is accepted.
    A 404 in the moment after the CRD is Established (the handler being installed) is
    tried again."""
    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    for _ in range(50):
        try:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                group, "v1alpha1", POLICY_NAMESPACE, plural, body, dry_run="All"
            )
        except ApiException as err:
            if err.status == 404:
                time.sleep(0.2)
                continue
            return err
        return None
    raise AssertionError(f"{plural}.{group} was not served after it was Established")
