"""Every manifest compose-model-replica composes, against the real published schemas.

The schemas come from the projects' own Go modules at pinned versions, laid out by
`bash hack/tools.sh schemas` (hack/tools/schemas.sh): the CRDs of provider-kubernetes,
KEDA, LeaderWorkerSet, Grove, Gateway API, the Inference Extension and Envoy Gateway,
and Kubernetes' OpenAPI v3 documents at the kube-apiserver version the runtime tests use.

- The provider-kubernetes Objects, and every manifest inside them whose kind is a CRD,
  go through `crossplane beta validate` (the API server's structural schema, unknown
  fields and CEL rules), with our own XRDs/CRDs (the AdaptivePolicy) beside them.
- Core kinds (Deployment, Service, ResourceClaimTemplate, RBAC, ...) are checked with
  jsonschema against the OpenAPI document, made strict: an object schema with listed
  properties rejects any other field, as the API server's strict field validation does.

Inputs are every shape's ModelReplica under tests/unit/testdata/model_replica/inputs and
the ModelReplicas that placing the examples as one fleet composes (the `fleet` fixture:
the render `make demo` shows).
"""

import functools
import json
import subprocess
from pathlib import Path

import jsonschema
import pytest
import yaml

import render
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse
from tests.conftest import require_tool
from tests.validate import crossplane_validate

REPO = render.REPO
INPUTS = sorted((REPO / "tests" / "unit" / "testdata" / "model_replica" / "inputs").glob("*.yaml"))
# A managed-traffic model on three clusters (its route's ServiceImport backends, the
# exported Service and ServiceExport): the ModelReplicas of its render golden.
MANAGED_TRAFFIC = REPO / "tests/render/testdata/model_deployment/managed-traffic/expected.yaml"


def managed_traffic_replicas() -> list[dict]:
    replicas = []
    for doc in yaml.safe_load_all(MANAGED_TRAFFIC.read_text()):
        if doc["kind"] == "ModelReplica":
            doc["metadata"] = {k: doc["metadata"][k] for k in ("name", "namespace", "labels")}
            replicas.append(doc)
    return replicas


@pytest.fixture(scope="module")
def schemas() -> Path:
    return require_tool("schemas").resolve()


def composed(xr: Path | dict):
    return compose(parse(xr if isinstance(xr, dict) else yaml.safe_load(xr.read_text()))).composed


@pytest.fixture(scope="module")
def fleet_replicas(fleet) -> list[dict]:
    replicas = [r.xr for r in fleet.of_kind("ModelReplica")]
    assert replicas, "the example fleet placed nothing"
    return replicas


class CoreSchemas:
    """Kubernetes' OpenAPI v3 component schemas, by group/version/kind."""

    def __init__(self, openapi: Path) -> None:
        components: dict[str, dict] = {}
        for document in sorted(openapi.glob("*.json")):
            components.update(
                json.loads(document.read_text()).get("components", {}).get("schemas", {})
            )
        self.by_gvk: dict[tuple[str, str, str], str] = {}
        for name, schema in components.items():
            _strict(schema)
            for gvk in schema.get("x-kubernetes-group-version-kind", []):
                self.by_gvk[(gvk["group"], gvk["version"], gvk["kind"])] = name
        self.components = components

    @staticmethod
    def gvk(manifest: dict) -> tuple[str, str, str]:
        group, _, version = manifest["apiVersion"].rpartition("/")
        return group, version, manifest["kind"]

    def knows(self, manifest: dict) -> bool:
        return self.gvk(manifest) in self.by_gvk

    def errors(self, manifest: dict) -> list[str]:
        name = self.by_gvk[self.gvk(manifest)]
        schema = {
            "$ref": f"#/components/schemas/{name}",
            "components": {"schemas": self.components},
        }
        validator = jsonschema.Draft7Validator(schema)
        return [
            f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in validator.iter_errors(manifest)
        ]


def _strict(schema):
    """Reject unknown fields wherever the schema lists the known ones."""
    if isinstance(schema, dict):
        if (
            "properties" in schema
            and "additionalProperties" not in schema
            and not schema.get("x-kubernetes-preserve-unknown-fields")
        ):
            schema["additionalProperties"] = False
        for value in schema.values():
            _strict(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict(value)


@functools.cache
def core_schemas(openapi: Path) -> CoreSchemas:
    return CoreSchemas(openapi)


def validate_objects(schemas: Path, resources: list[Path]) -> subprocess.CompletedProcess:
    return crossplane_validate(
        require_tool("crossplane"), [schemas / "crds", REPO / "apis"], resources
    )


def test_objects_and_custom_resources_match_their_crds(schemas, fleet_replicas, tmp_path):
    core = core_schemas(schemas / "openapi")
    objects, custom = [], []
    for xr_path in [*INPUTS, *fleet_replicas, *managed_traffic_replicas()]:
        for c in composed(xr_path):
            objects.append(c.object)
            if not core.knows(c.manifest):
                custom.append(c.manifest)
    kinds = {m["kind"] for m in custom}
    assert kinds >= {"LeaderWorkerSet", "PodCliqueSet", "InferencePool", "HTTPRoute"}
    assert kinds >= {"ScaledObject", "AdaptivePolicy", "HTTPRouteFilter", "ServiceExport"}
    files = [tmp_path / "objects.yaml", tmp_path / "custom.yaml"]
    files[0].write_text(yaml.safe_dump_all(objects))
    files[1].write_text(yaml.safe_dump_all(custom))
    done = validate_objects(schemas, files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(objects) + len(custom)} success cases" in done.stdout


@pytest.mark.parametrize("xr_path", INPUTS, ids=lambda p: p.stem)
def test_core_kinds_match_the_kubernetes_openapi_document(schemas, xr_path):
    core = core_schemas(schemas / "openapi")
    checked = 0
    for c in composed(xr_path):
        if core.knows(c.manifest):
            assert core.errors(c.manifest) == [], f"{c.key} ({c.manifest['kind']})"
            checked += 1
    assert checked >= 4  # namespace, health record, claim template(s), service at least


def test_core_kinds_of_the_example_fleet_match_the_kubernetes_openapi_document(
    schemas, fleet_replicas
):
    core = core_schemas(schemas / "openapi")
    for replica in [*fleet_replicas, *managed_traffic_replicas()]:
        for c in composed(replica):
            if core.knows(c.manifest):
                name = replica["metadata"]["name"]
                assert core.errors(c.manifest) == [], f"{name}: {c.key} ({c.manifest['kind']})"


def test_the_core_check_rejects_an_unknown_field_and_a_wrong_type(schemas):
    core = core_schemas(schemas / "openapi")
    deployment = next(c.manifest for c in composed(INPUTS[0]) if c.manifest["kind"] == "Deployment")
    typo = json.loads(json.dumps(deployment))
    typo["spec"]["replica"] = 2
    assert any("replica" in e for e in core.errors(typo))
    wrong = json.loads(json.dumps(deployment))
    wrong["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    assert core.errors(wrong)


def test_crossplane_validate_rejects_a_broken_custom_resource(schemas, tmp_path):
    scaled = next(
        c.manifest
        for c in composed(REPO / "tests/unit/testdata/model_replica/inputs/autoscaling.yaml")
        if c.manifest["kind"] == "ScaledObject"
    )
    scaled["spec"]["scaleTargetRef"].pop("name")
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(scaled))
    done = validate_objects(schemas, [bad])
    assert done.returncode != 0
    assert "name" in done.stdout


def test_what_the_example_adapters_compose_matches_the_crds_and_openapi(schemas, fleet, tmp_path):
    # The download Job, the route and its 503 filter, as the example fleet renders them.
    core = core_schemas(schemas / "openapi")
    objects, custom = [], []
    for rendered in fleet.of_kind("ModelAdapter"):
        for document in rendered.composed:
            objects.append(document)
            manifest = document["spec"]["forProvider"]["manifest"]
            if document["spec"].get("managementPolicies") == ["Observe"]:
                continue  # a reference to the agent's record, not an object we write
            if core.knows(manifest):
                assert core.errors(manifest) == [], f"{rendered.source}: {manifest['kind']}"
            else:
                custom.append(manifest)
    assert {m["kind"] for m in custom} == {"HTTPRoute", "HTTPRouteFilter"}
    files = [tmp_path / "objects.yaml", tmp_path / "custom.yaml"]
    files[0].write_text(yaml.safe_dump_all(objects))
    files[1].write_text(yaml.safe_dump_all(custom))
    done = validate_objects(schemas, files)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(objects) + len(custom)} success cases" in done.stdout
