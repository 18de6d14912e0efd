"""The live rollout scenarios (tests/e2e/test_rollouts_live.py) as the real `crossplane
render` composes them, without the fleet box: the documents the e2e tier applies, over
the clusters it makes (us-east-1 labelled for it, its H100 copy e2e-rollout on a spare
member, and eu-west-1, which it does not select).

So a change to placement or the planner that would make the box scenarios test
something else (both replicas on one cluster, the real engine's cluster not first)
fails here in seconds, not after minutes of a real engine's start.
"""

from __future__ import annotations

import copy

import pytest
import yaml

import render
from functions.common import contracts
from tests.e2e import claims
from tests.e2e import test_rollouts_live as live
from tests.ledgers import with_ledgers
from tests.render.test_rollout import as_observed, baked, composite, next_xr, replicas


def _clusters() -> list[dict]:
    real = claims.example("inferenceclusters/us-east-h100.yaml")
    real["metadata"]["labels"][live.ROLLOUT_LABEL] = "true"
    return [real, live._spare_cluster(), claims.example("inferenceclusters/eu-west-b200.yaml")]


@pytest.fixture
def reconcile(function_servers, tmp_path):
    steps = iter(range(1, 100))

    def run(xr: dict, observed: list[dict]) -> list[dict]:
        workdir = tmp_path / f"step-{next(steps)}"
        workdir.mkdir()
        (workdir / "xr.yaml").write_text(yaml.safe_dump(xr))
        required = workdir / "required.yaml"
        required.write_text(yaml.safe_dump_all(with_ledgers(_clusters(), observed)))
        observed_path = None
        if observed:
            observed_path = workdir / "observed.yaml"
            observed_path.write_text(yaml.safe_dump_all(observed))
        result = render.render(
            function_servers, workdir / "xr.yaml", required=required, observed=observed_path
        )
        assert result.returncode == 0, result.stderr
        return result.documents

    return run


def _rollout(documents: list[dict]) -> dict:
    return composite(documents)["status"]["rollout"]


def _first_wave(reconcile, make) -> tuple[list[dict], list[dict]]:
    """The first revision settled on both clusters, then the good change's first wave."""
    first = reconcile(make(), [])
    placed = {c: r["spec"]["replicas"] for c, r in replicas(first).items()}
    assert placed == {"us-east-1": 1, live.SPARE_CLUSTER: 1}, placed
    assert _rollout(first)["phase"] == contracts.ROLLOUT_PHASE_COMPLETE
    everywhere = set(placed)
    settled = reconcile(next_xr(make(), first), as_observed(first, rolled=everywhere))
    changed = make(live.GOOD_FLAG)
    wave1 = reconcile(next_xr(changed, settled), as_observed(settled, rolled=everywhere))
    return settled, wave1


def test_the_real_engines_cluster_is_the_first_wave(reconcile):
    _, wave1 = _first_wave(reconcile, live._document)
    rollout = _rollout(wave1)
    given = sorted(
        c for c, r in replicas(wave1).items() if r["spec"]["revision"] == rollout["revision"]
    )
    assert given == [live.REAL], rollout
    # Its pods carry the label that runs them for real.
    template = replicas(wave1)[live.REAL]["spec"]["podMetadata"]
    assert template["labels"][live.REAL_RUN_LABEL] == live.REAL_RUN_VALUE


def test_the_slo_scenarios_gate_is_unmeasured_then_fails_with_the_numbers(reconcile):
    _, wave1 = _first_wave(reconcile, live._slo_document)
    changed = live._slo_document(live.GOOD_FLAG)
    rollout = _rollout(wave1)
    given = sorted(
        c for c, r in replicas(wave1).items() if r["spec"]["revision"] == rollout["revision"]
    )
    assert given == [live.SPARE_CLUSTER], rollout
    ready = as_observed(wave1, rolled={live.REAL, live.SPARE_CLUSTER})
    baking = reconcile(next_xr(changed, wave1), ready)
    held = _rollout(reconcile(baked(next_xr(changed, baking)), ready))
    assert (held["phase"], held["reason"]) == ("Progressing", "WaitingForGates"), held
    (gate,) = [g for g in held["gates"] if g["name"] == "ErrorRate"]
    assert gate["state"] == "Unmeasured", held
    assert "cannot be measured" in held["message"], held
    signalled = copy.deepcopy(ready)
    for replica in signalled:
        if replica["spec"]["cluster"]["name"] == live.SPARE_CLUSTER:
            replica["status"]["signals"] = {"errorRate": live.STAND_IN_ERROR_RATE}
    paused = _rollout(reconcile(baked(next_xr(changed, baking)), signalled))
    assert (paused["phase"], paused["reason"]) == ("Paused", "GateFailed"), paused
    assert paused["failedGate"] == {
        "name": "ErrorRate",
        "observed": str(live.STAND_IN_ERROR_RATE),
        "threshold": str(live.ERROR_RATE_MAX),
    }
