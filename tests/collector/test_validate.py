"""`otelcol validate` on every collector config we ship, with the real collector.

Validation builds every pipeline and parses every OTTL statement (syntax, functions,
paths) without starting anything. Checked: each cluster-tier golden config under
tests/unit/testdata/collector, and the ConfigMap each example InferenceCluster gets when
rendered by the real function through `crossplane render` with the example
TelemetryDestination and the built-in MetricMappings (what `make demo` shows once a
destination exists). File paths that only exist in a pod are pointed at temporary files
first (tests/collector/harness.py), because the collector checks they exist.

The node-tier configs are not validated here: kubeletstats, hostmetrics, filelog and
k8s_cluster are not in the test collector's build (hack/tools/otelcol/manifest.yaml;
the module proxy serves their modules at no release where it serves the rest under the
component names these configs use).
"""

import shutil
from pathlib import Path

import pytest
import yaml

import render
from functions.compose_serving_stack import collector_objects
from tests.collector import harness
from tests.conftest import require_tool
from tests.unit.test_collector import golden_configs

REPO = render.REPO
# The node tier's receivers (kubeletstats, hostmetrics, filelog) and k8s_cluster are not
# in the test collector's build yet (hack/tools/otelcol/manifest.yaml): configs with them
# are left out.
CLUSTER_TIER = {
    name: path
    for name, path in golden_configs().items()
    if not name.startswith("node-tier") and "k8s_cluster:" not in path.read_text()
}
EXAMPLE_CLUSTERS = sorted((REPO / "examples" / "inferenceclusters").glob("*.yaml"))


@pytest.fixture(scope="module")
def otelcol() -> Path:
    return require_tool("otelcol")


@pytest.mark.parametrize("case", sorted(CLUSTER_TIER))
def test_golden_config_validates(otelcol, case, tmp_path):
    config = yaml.safe_load(CLUSTER_TIER[case].read_text())
    done = harness.validate(otelcol, config, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_broken_statement_fails_validation(otelcol, tmp_path):
    # The check above can fail: validation really parses the OTTL.
    config = yaml.safe_load(CLUSTER_TIER["scaled-mapping"].read_text())
    (group,) = [
        g
        for g in config["processors"]["transform/normalize"]["metric_statements"]
        if g["statements"][0].startswith("scale_metric(")
    ]
    group["statements"][0] = group["statements"][0].replace("scale_metric(", "scale_metrik(")
    done = harness.validate(otelcol, config, tmp_path)
    assert done.returncode != 0
    assert "scale_metrik" in done.stdout + done.stderr


@pytest.mark.parametrize("xr", EXAMPLE_CLUSTERS, ids=lambda p: p.stem)
def test_every_rendered_example_config_validates(otelcol, function_servers, xr, tmp_path):
    required = tmp_path / "required"
    required.mkdir()
    shutil.copy(REPO / "examples" / "telemetrydestinations" / "fleet.yaml", required / "fleet.yaml")
    for path in (REPO / "functions" / "common" / "builtin_mappings").glob("*.yaml"):
        shutil.copy(path, required / path.name)
    result = render.render(function_servers, xr, required=required)
    assert result.returncode == 0, result.stderr
    config_maps = [
        d["spec"]["forProvider"]["manifest"]
        for d in result.documents[1:]
        if d.get("kind") == "Object" and d["spec"]["forProvider"]["manifest"]["kind"] == "ConfigMap"
    ]
    # The collector's config, beside the agent's inventory record (observed, never written).
    collector_configs = [
        c for c in config_maps if c["metadata"]["name"] == collector_objects.COLLECTOR
    ]
    assert len(collector_configs) == 1, [c["metadata"]["name"] for c in config_maps]
    config = yaml.safe_load(collector_configs[0]["data"][collector_objects.CONFIG_KEY])
    done = harness.validate(otelcol, config, tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
