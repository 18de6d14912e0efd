"""The ModelAdapter kind on a real kube-apiserver (its XRD's schema served as a CRD, as
Crossplane serves it): the examples are accepted, the status compose-model-deployment
writes survives (nothing pruned), and a ModelAdapter cannot be moved to another base.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from functions.common.contracts import API_GROUP, API_VERSION
from tests.conftest import REPO, require_tool
from tests.runtime.cluster import Member, _wait_established
from tests.runtime.test_operator_cli import crd_from_xrd

NAMESPACE = "ml-team"
PLURAL = "modeladapters"
RENDERED = REPO / "tests/render/testdata/model_adapter/staged-where-the-base-runs/expected.yaml"


@pytest.fixture(scope="module")
def api(tmp_path_factory) -> Iterator[client.ApiClient]:
    member = Member(
        "control-plane",
        tmp_path_factory.mktemp("adapter-api"),
        require_tool("etcd"),
        require_tool("kube-apiserver"),
    )
    member.start_etcd()
    member.start_apiserver()
    api = member.client()
    try:
        extensions = client.ApiextensionsV1Api(api)
        crd = crd_from_xrd(REPO / "apis" / PLURAL / "definition.yaml")
        extensions.create_custom_resource_definition(crd)
        _wait_established(extensions, crd["metadata"]["name"])
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        yield api
    finally:
        api.close()
        member.close()


def _create(api, document: dict) -> dict:
    return client.CustomObjectsApi(api).create_namespaced_custom_object(
        API_GROUP, API_VERSION, NAMESPACE, PLURAL, document
    )


def test_the_examples_are_accepted_and_the_status_we_write_survives(api):
    objects = client.CustomObjectsApi(api)
    for path in sorted((REPO / "examples" / PLURAL).glob("*.yaml")):
        _create(api, yaml.safe_load(path.read_text()))
    rendered = next(yaml.safe_load_all(RENDERED.read_text()))["status"]
    status = {k: v for k, v in rendered.items() if k != "conditions"}  # Crossplane's own
    live = objects.get_namespaced_custom_object(
        API_GROUP, API_VERSION, NAMESPACE, PLURAL, "qwen-sql"
    )
    live["status"] = status
    objects.replace_namespaced_custom_object_status(
        API_GROUP, API_VERSION, NAMESPACE, PLURAL, "qwen-sql", live
    )
    read = objects.get_namespaced_custom_object(
        API_GROUP, API_VERSION, NAMESPACE, PLURAL, "qwen-sql"
    )
    assert read["status"] == status


def test_an_adapter_cannot_be_moved_to_another_base(api):
    document = yaml.safe_load((REPO / "examples" / PLURAL / "qwen-support-tone.yaml").read_text())
    document["metadata"]["name"] = "moving"
    _create(api, document)
    with pytest.raises(ApiException) as refused:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            API_GROUP,
            API_VERSION,
            NAMESPACE,
            PLURAL,
            "moving",
            {"spec": {"deploymentRef": {"name": "another-base"}}},
        )
    assert refused.value.status == 422
    assert "deploymentRef.name is immutable" in refused.value.body
