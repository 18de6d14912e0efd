"""`otelcol validate` (the real collector from hack/tools.sh) accepts every gateway config
compose-telemetry renders: each exporter kind, with and without the roll-up, and the
example destination a user applies.

Validation builds every pipeline without starting it, so component names, config keys
and every OTTL statement of the roll-up are checked by the collector that runs them.
"""

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from functions.common.telemetrydestination import parse_destination
from functions.compose_telemetry import gateway
from tests.conftest import REPO, require_tool
from tests.unit.test_gateway import CASES

EXAMPLES = sorted((REPO / "examples" / "telemetrydestinations").glob("*.yaml"))
DESTINATIONS = {name: xr for name, xr in CASES.items()} | {
    f"example-{p.stem}": yaml.safe_load(p.read_text()) for p in EXAMPLES
}


@pytest.fixture(scope="module")
def otelcol() -> Path:
    return require_tool("otelcol")


@pytest.mark.parametrize("name", sorted(DESTINATIONS))
def test_otelcol_validates_the_rendered_gateway_config(otelcol, tmp_path, name):
    config = gateway.render_gateway_config(parse_destination(DESTINATIONS[name]))
    path = tmp_path / "gateway.yaml"
    path.write_text(gateway.config_yaml(config))
    env = os.environ | {"POD_NAME": "gateway-0"}
    done = subprocess.run(
        [str(otelcol), "validate", f"--config={path}"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr + done.stdout
