"""compose-telemetry under the real `crossplane render`: a destination becomes the
gateway, a second one reports Conflict and composes nothing, MetricMappings report
whether they may be used."""

from pathlib import Path

import pytest
import yaml

import render
from functions.common import conditions
from functions.common.contracts import OBJECT_KIND, TELEMETRY_TOKEN_SECRET_NAME

TESTDATA = Path(__file__).parent / "testdata" / "telemetry"
BUILTIN = render.REPO / "functions" / "common" / "builtin_mappings"


def condition(composite: dict, typ: str) -> dict:
    return next(c for c in composite["status"]["conditions"] if c["type"] == typ)


def composed(result) -> list[dict]:
    return [d for d in result.documents[1:] if d["kind"] != "Result"]


def test_the_oldest_destination_composes_the_gateway(function_servers):
    result = render.render(
        function_servers, TESTDATA / "fleet.yaml", required=TESTDATA / "destinations.yaml"
    )
    assert result.returncode == 0, result.stderr + function_servers.logs()
    composite = result.documents[0]
    assert condition(composite, conditions.CONFLICT)["status"] == "False"
    assert "another" in condition(composite, conditions.CONFLICT)["message"]
    assert condition(composite, conditions.GATEWAY_READY)["status"] == "False"
    assert composite["status"]["endpoint"] == "telemetry.fleet.example.com:4317"
    assert composite["status"]["exporter"] == "PrometheusRemoteWrite"

    objects = composed(result)
    assert {o["kind"] for o in objects} == {OBJECT_KIND}
    manifests = {
        (o["spec"]["forProvider"]["manifest"]["kind"], o["metadata"]["name"]): o for o in objects
    }
    kinds = sorted(kind for kind, _ in manifests)
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "Namespace",
        "Secret",
        "Secret",
        "Service",
        "ServiceAccount",
    ]
    deployment = manifests[("Deployment", "fleet-gateway-deployment")]
    assert deployment["spec"]["forProvider"]["manifest"]["spec"]["replicas"] == 2
    assert deployment["spec"]["providerConfigRef"]["name"] == "control-plane"
    config = yaml.safe_load(
        manifests[("ConfigMap", "fleet-gateway-config")]["spec"]["forProvider"]["manifest"]["data"][
            "config.yaml"
        ]
    )
    assert "prometheus_remote_write/destination" in config["exporters"]
    assert set(config["service"]["pipelines"]) == {
        "metrics/clusters",
        "metrics/snapshot",
        "metrics/fleet",
    }
    token = manifests[("Secret", "fleet-gateway-token")]
    assert token["spec"]["forProvider"]["manifest"]["metadata"]["name"] == (
        TELEMETRY_TOKEN_SECRET_NAME
    )
    # The credential itself never passes through the function.
    assert "data" not in token["spec"]["forProvider"]["manifest"]


def test_a_second_destination_reports_conflict_and_composes_nothing(function_servers):
    result = render.render(
        function_servers, TESTDATA / "second.yaml", required=TESTDATA / "destinations.yaml"
    )
    assert result.returncode == 0, result.stderr + function_servers.logs()
    composite = result.documents[0]
    conflict = condition(composite, conditions.CONFLICT)
    assert conflict["status"] == "True"
    assert "TelemetryDestination fleet" in conflict["message"]
    assert composed(result) == []
    warnings = [d for d in result.documents if d["kind"] == "Result"]
    assert any("fleet" in w.get("message", "") for w in warnings)


def test_an_invalid_destination_is_refused_naming_the_field(function_servers, tmp_path):
    broken = yaml.safe_load((TESTDATA / "fleet.yaml").read_text())
    # Past the XRD's pattern only because render does not run the API server's
    # validation: the function must refuse it on its own.
    broken["spec"]["exporter"]["endpoint"] = "https://prom.example.com/${env:POD_NAME}"
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(broken))
    result = render.render(function_servers, path, required=TESTDATA / "destinations.yaml")
    assert result.returncode != 0
    assert "spec.exporter.endpoint: must not contain" in result.stderr


@pytest.mark.parametrize("builtin", sorted(BUILTIN.glob("*.yaml")), ids=lambda p: p.stem)
def test_builtin_mappings_are_valid(function_servers, builtin):
    result = render.render(function_servers, builtin, required=BUILTIN)
    assert result.returncode == 0, result.stderr + function_servers.logs()
    composite = result.documents[0]
    valid = condition(composite, conditions.MAPPING_VALID)
    assert valid["status"] == "True", valid.get("message")
    assert composed(result) == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "mapping-invalid.yaml",
            "spec.labels[0].to: 'modelplane_cluster' is reserved",
        ),
        (
            "mapping-duplicate-target.yaml",
            "spec.metrics[1].to: 'modelplane_requests_running' is already the target of "
            "spec.metrics[0]",
        ),
    ],
)
def test_invalid_mappings_say_why(function_servers, name, message):
    result = render.render(function_servers, TESTDATA / name, required=BUILTIN)
    assert result.returncode == 0, result.stderr + function_servers.logs()
    composite = result.documents[0]
    valid = condition(composite, conditions.MAPPING_VALID)
    assert valid["status"] == "False"
    assert message in valid["message"]
    assert composed(result) == []


def _observed(objects: list[dict], ready: bool) -> list[dict]:
    observed = []
    for obj in objects:
        copy = {k: v for k, v in obj.items() if k in ("apiVersion", "kind", "metadata", "spec")}
        copy["status"] = {
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True" if ready else "False",
                    "reason": "Available" if ready else "Creating",
                    "lastTransitionTime": "2026-11-02T09:05:00Z",
                }
            ]
        }
        observed.append(copy)
    return observed


def test_gateway_ready_follows_the_observed_objects(function_servers, tmp_path):
    first = render.render(
        function_servers, TESTDATA / "fleet.yaml", required=TESTDATA / "destinations.yaml"
    )
    assert first.returncode == 0, first.stderr
    objects = composed(first)

    ready = tmp_path / "ready.yaml"
    ready.write_text(yaml.safe_dump_all(_observed(objects, ready=True)))
    result = render.render(
        function_servers,
        TESTDATA / "fleet.yaml",
        required=TESTDATA / "destinations.yaml",
        observed=ready,
    )
    assert result.returncode == 0, result.stderr
    composite = result.documents[0]
    assert condition(composite, conditions.GATEWAY_READY)["status"] == "True"
    assert condition(composite, "Ready")["status"] == "True"

    not_ready = _observed(objects, ready=True)
    deployment = next(
        o for o in not_ready if o["spec"]["forProvider"]["manifest"]["kind"] == "Deployment"
    )
    deployment["status"]["conditions"][0]["status"] = "False"
    path = tmp_path / "not-ready.yaml"
    path.write_text(yaml.safe_dump_all(not_ready))
    result = render.render(
        function_servers,
        TESTDATA / "fleet.yaml",
        required=TESTDATA / "destinations.yaml",
        observed=path,
    )
    gateway_ready = condition(result.documents[0], conditions.GATEWAY_READY)
    assert gateway_ready["status"] == "False"
    assert "gateway-deployment" in gateway_ready["message"]


def test_a_destination_that_loses_keeps_what_it_composed_before(function_servers, tmp_path):
    # `another` composed a gateway before `fleet` (older) was restored from a backup:
    # it now reports Conflict but does not delete a gateway clusters may be pushing to.
    first = render.render(function_servers, TESTDATA / "second.yaml")
    assert first.returncode == 0, first.stderr
    previously = composed(first)
    assert previously
    observed = tmp_path / "observed.yaml"
    observed.write_text(yaml.safe_dump_all(_observed(previously, ready=True)))
    result = render.render(
        function_servers,
        TESTDATA / "second.yaml",
        required=TESTDATA / "destinations.yaml",
        observed=observed,
    )
    assert result.returncode == 0, result.stderr
    assert condition(result.documents[0], conditions.CONFLICT)["status"] == "True"
    kept = {
        o["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        for o in composed(result)
    }
    assert kept == {
        o["metadata"]["annotations"]["crossplane.io/composition-resource-name"] for o in previously
    }
    by_key = {
        o["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: o
        for o in composed(result)
    }
    for before in previously:
        key = before["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        assert by_key[key]["spec"] == before["spec"]
    assert "kept the" in condition(result.documents[0], conditions.CONFLICT)["message"]
