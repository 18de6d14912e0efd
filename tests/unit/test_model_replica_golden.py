"""Whole-manifest golden tests: every serving shape, composed by the pure planner.

Each input under testdata/model_replica/inputs/ is a ModelReplica as compose-model-
deployment writes it; its golden file under testdata/model_replica/golden/ is every
provider-kubernetes Object the function composes for it, in key order, for a reviewer
to read. After an intended change, regenerate and review the diff:

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_model_replica_golden.py
"""

import os
from pathlib import Path

import pytest
import yaml

from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse

TESTDATA = Path(__file__).parent / "testdata" / "model_replica"
INPUTS = sorted((TESTDATA / "inputs").glob("*.yaml"))
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data):
        return True


def render_golden(xr_path: Path) -> str:
    xr = yaml.safe_load(xr_path.read_text())
    plan = compose(parse(xr))
    header = (
        f"# Composed from inputs/{xr_path.name}. Regenerate with\n"
        "# UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_model_replica_golden.py\n"
    )
    return header + "".join(
        f"---\n# key: {c.key}\n"
        + yaml.dump(c.object, Dumper=_NoAliases, sort_keys=False, width=100)
        for c in plan.composed
    )


@pytest.mark.parametrize("xr_path", INPUTS, ids=lambda p: p.stem)
def test_composes_golden_manifests(xr_path):
    golden = TESTDATA / "golden" / xr_path.name
    rendered = render_golden(xr_path)
    if UPDATE:
        golden.write_text(rendered)
    assert golden.exists(), f"no golden for {xr_path.name}: run with UPDATE_GOLDEN=1"
    assert rendered == golden.read_text()


def test_every_shape_has_a_golden():
    assert {p.stem for p in INPUTS} >= {
        "standalone",
        "leader-worker",
        "grove-leader-worker",
        "grove-prefill-decode",
        "prefill-decode",
        "autoscaling",
        "parked",
    }
