"""What a rollout reads from the members and writes into their policies: a ModelReplica's
status.revision only once its workload has fully rolled that revision, the SLO signals
copied from the AdaptivePolicy copy's report, and the extra signals a deployment's
rollout gates add to its policy (valid for the runtime, nothing else changed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from functions.common import contracts
from functions.common.adaptivepolicy import (
    DEFAULT_VOCABULARY_SIGNALS,
    EXTRA_SIGNALS_MAX,
    with_rollout_signals,
)
from functions.compose_model_deployment import manifests
from functions.compose_model_deployment.model import Cluster, read_deployment
from functions.compose_model_replica.status import rolled, rollout_signals
from functions.runtime.shared.policy import DEFAULT_SIGNALS, Signals


def workload(**status) -> dict:
    return {
        "metadata": {"labels": {contracts.LABEL_REVISION: "abc"}, "generation": 3},
        "spec": {"replicas": 2},
        "status": {"observedGeneration": 3, **status},
    }


@pytest.mark.parametrize(
    ("manifest", "expected"),
    [
        (workload(readyReplicas=2, updatedReplicas=2, replicas=2), True),
        # Old pods still ready while the new ones start: not rolled.
        (workload(readyReplicas=2, updatedReplicas=1, replicas=3), False),
        (workload(readyReplicas=2, updatedReplicas=2, replicas=3), False),
        (workload(readyReplicas=1, updatedReplicas=2, replicas=2), False),
        # The controller has not seen the new spec yet.
        (
            {**workload(readyReplicas=2), "status": {"observedGeneration": 2, "readyReplicas": 2}},
            False,
        ),
        # Another revision applied.
        (
            {
                **workload(readyReplicas=2),
                "metadata": {"labels": {contracts.LABEL_REVISION: "old"}},
            },
            False,
        ),
    ],
)
def test_a_workload_counts_as_rolled_only_when_every_pod_is_of_the_revision_and_ready(
    manifest, expected
):
    assert rolled(manifest, "abc", "readyReplicas") is expected


def test_a_kind_without_an_updated_count_is_rolled_when_ready_at_the_revision():
    assert rolled(workload(availableReplicas=2), "abc", "availableReplicas") is True


def test_rollout_signals_come_from_the_policy_copys_report_under_the_replicas_names():
    copy = {"status": {"report": {"extra": {"rolloutErrorRate": 0.02, "rolloutTtftP95": 0.4}}}}
    assert rollout_signals(copy) == {"errorRate": 0.02, "timeToFirstTokenP95": 0.4}
    assert rollout_signals({"status": {"report": {"extra": {"rolloutErrorRate": "x"}}}}) == {}
    assert rollout_signals(None) == {}


def test_rollout_signals_are_added_as_extras_the_runtime_accepts_keeping_the_defaults():
    added = with_rollout_signals({"mode": "auto"}, ("rolloutErrorRate", "rolloutTtftP95"))
    signals = Signals.model_validate(added["signals"])
    # A policy that named no signal is scaled by the defaults: they are written out.
    assert signals.configured() == DEFAULT_SIGNALS
    assert set(signals.extra_signals()) == {"rolloutErrorRate", "rolloutTtftP95"}
    assert {
        k: added["signals"][k] for k in DEFAULT_VOCABULARY_SIGNALS
    } == DEFAULT_VOCABULARY_SIGNALS


def test_rollout_signals_are_not_added_twice_nor_past_the_extras_limit():
    once = with_rollout_signals({"signals": {"window": "2m"}}, ("rolloutErrorRate",))
    assert with_rollout_signals(once, ("rolloutErrorRate",)) == once
    full = {
        "signals": {"extra": [{"name": f"x{i}", "metric": "m"} for i in range(EXTRA_SIGNALS_MAX)]}
    }
    assert with_rollout_signals(full, ("rolloutErrorRate",)) == full


def _deployment(rollout: dict | None):
    path = Path(__file__).resolve().parents[2] / "examples/modeldeployments/llama-8b-vllm.yaml"
    xr = yaml.safe_load(path.read_text())
    if rollout is not None:
        xr["spec"]["rollout"] = rollout
    return read_deployment(xr)


def test_a_deployment_whose_gates_read_signals_asks_its_policy_for_them_and_only_then():
    cluster = Cluster("c1", {}, "", "Standard", {}, ())
    plain = manifests.autoscaling_spec(_deployment(None), [(cluster, "pool")])
    gated = manifests.autoscaling_spec(
        _deployment({"gates": {"timeToFirstTokenP95": {"maxSeconds": 2}}}), [(cluster, "pool")]
    )
    assert plain is not None
    assert gated is not None
    names = [e["name"] for e in gated["signals"]["extra"]]
    assert "rolloutTtftP95" in names
    assert "rolloutErrorRate" not in names
    assert "rolloutTtftP95" not in [
        e.get("name") for e in (plain.get("signals") or {}).get("extra") or []
    ]
    # Everything else in the policy is as the deployment wrote it.
    assert {k: v for k, v in gated.items() if k != "signals"} == {
        k: v for k, v in plain.items() if k != "signals"
    }
