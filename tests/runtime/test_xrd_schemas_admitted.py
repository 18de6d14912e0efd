"""Every XRD's schema as a CRD the pinned kube-apiserver admits.

Crossplane turns each CompositeResourceDefinition into a CRD; a schema the API server
refuses (a CEL rule whose estimated cost is over budget, say, for a string or list
without a bound) leaves the XRD never Established, and nothing of the API is served.
`crossplane beta validate` does not estimate CEL cost: the API server does, here, on a
dry-run create of each XRD's versions as a CRD.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from tests.conftest import require_tool
from tests.runtime.cluster import Fleet

XRDS = sorted(
    path
    for path in (Path(__file__).resolve().parents[2] / "apis").glob("*/definition.yaml")
    if yaml.safe_load(path.read_text()).get("kind") == "CompositeResourceDefinition"
)


@pytest.fixture(scope="module")
def api_server() -> Iterator[client.ApiClient]:
    one = Fleet(1, require_tool("etcd"), require_tool("kube-apiserver"))
    try:
        one.start()
        api = one.members[0].client()
        yield api
        api.close()
    finally:
        one.close()


def as_crd(xrd: dict) -> dict:
    spec = xrd["spec"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": xrd["metadata"]["name"]},
        "spec": {
            "group": spec["group"],
            "names": spec["names"],
            "scope": spec.get("scope", "Namespaced"),
            "versions": [
                {
                    "name": version["name"],
                    "served": True,
                    "storage": index == 0,
                    "schema": version["schema"],
                    "subresources": {"status": {}},
                }
                for index, version in enumerate(spec["versions"])
            ],
        },
    }


@pytest.mark.parametrize("path", XRDS, ids=[p.parent.name for p in XRDS])
def test_the_api_server_admits_the_xrds_schema(api_server, path):
    xrd = yaml.safe_load(path.read_text())
    try:
        client.ApiextensionsV1Api(api_server).create_custom_resource_definition(
            as_crd(xrd), dry_run="All"
        )
    except ApiException as error:
        pytest.fail(f"{path.parent.name}: {json.loads(error.body)['message']}")
