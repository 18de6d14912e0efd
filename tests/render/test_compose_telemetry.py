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
BUILTIN = render.REPO / "apis" / "metricmappings" / "builtin"


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
    assert condition(composite, conditions.MAPPING_VALID)["status"] == "True"
    assert composed(result) == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "mapping-invalid.yaml",
            "spec.labels[0].to: 'modelplane_cluster' is a fleet roll-up label",
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
