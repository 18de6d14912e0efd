"""The examples rendered as one fleet (`make demo`, `make render`): every XR reads the
others as a control plane would hand them over, so every example model is placed on the
example clusters and every example cluster gets a collector."""

import sys

import pytest
import yaml

import demo  # hack/demo.py (tests/conftest.py puts hack/ on the path)
import render
from functions.common import conditions, contracts
from functions.common.adapters import KIND_MODEL_ADAPTER

EXAMPLES = [yaml.safe_load(p.read_text()) for p in render.example_xrs()]
CLUSTERS = sorted(
    d["metadata"]["name"] for d in EXAMPLES if d["kind"] == contracts.KIND_INFERENCE_CLUSTER
)
DEPLOYMENTS = sorted(
    (d["metadata"]["namespace"], d["metadata"]["name"])
    for d in EXAMPLES
    if d["kind"] == contracts.KIND_MODEL_DEPLOYMENT
)


def _condition(composite: dict, kind: str) -> dict:
    return next(c for c in composite["status"]["conditions"] if c["type"] == kind)


def _composition_names(rendered: render.FleetRender) -> set[str]:
    return {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]
        for d in rendered.composed
    }


def test_every_render_of_the_fleet_succeeds(fleet):
    assert [(r.source, r.result.stderr) for r in fleet.failed] == []
    kinds = {r.composite["kind"] for r in fleet.renders}
    assert kinds == {
        contracts.KIND_INFERENCE_CLUSTER,
        KIND_MODEL_ADAPTER,
        contracts.KIND_MODEL_CACHE,
        contracts.KIND_MODEL_DEPLOYMENT,
        contracts.KIND_MODEL_REPLICA,
        contracts.KIND_TELEMETRY_DESTINATION,
    }


def test_every_example_adapter_is_staged_on_each_cluster_its_base_runs_on(fleet):
    adapters = fleet.of_kind(KIND_MODEL_ADAPTER)
    assert adapters
    for rendered in adapters:
        base = rendered.xr["spec"]["deploymentRef"]["name"]
        placed = sorted(
            r.xr["spec"]["cluster"]["name"]
            for r in fleet.of_kind(contracts.KIND_MODEL_REPLICA)
            if r.xr["spec"]["deployment"] == base
        )
        assert placed, base
        staged_on = sorted(
            d["metadata"]["labels"][contracts.LABEL_CLUSTER]
            for d in rendered.composed
            if d["spec"]["forProvider"]["manifest"]["kind"] == "Job"
        )
        assert staged_on == placed, rendered.source
        assert rendered.composite["status"]["selectedClusters"] == len(placed)


def test_every_cluster_normalizes_the_builtin_engines_with_nothing_applied(fleet):
    for rendered in fleet.of_kind(contracts.KIND_INFERENCE_CLUSTER):
        in_use = rendered.composite["status"]["telemetry"]["mappings"]
        assert [(m["engineType"], m["source"]) for m in in_use] == [
            ("sglang", "BuiltIn"),
            ("triton-trtllm", "BuiltIn"),
            ("trtllm", "BuiltIn"),
            ("vllm", "BuiltIn"),
        ]


@pytest.mark.parametrize(("namespace", "name"), DEPLOYMENTS, ids=lambda v: v)
def test_every_example_model_is_placed_on_the_example_clusters(fleet, namespace, name):
    (rendered,) = [
        r
        for r in fleet.of_kind(contracts.KIND_MODEL_DEPLOYMENT)
        if (r.xr["metadata"]["namespace"], r.xr["metadata"]["name"]) == (namespace, name)
    ]
    status = rendered.composite["status"]
    assert status["placedReplicas"] == status["desiredReplicas"] == rendered.xr["spec"]["replicas"]
    assert {p["cluster"] for p in status["placements"]} <= set(CLUSTERS)
    scheduled = _condition(rendered.composite, conditions.REPLICAS_SCHEDULED)
    assert scheduled["status"] == "True", scheduled["message"]
    # Each placement's ModelReplica was composed and rendered in turn, on its cluster.
    replicas = {
        r.xr["spec"]["cluster"]["name"]: r
        for r in fleet.of_kind(contracts.KIND_MODEL_REPLICA)
        if r.xr["spec"]["deployment"] == name
    }
    assert set(replicas) == {p["cluster"] for p in status["placements"]}
    for placement in status["placements"]:
        replica = replicas[placement["cluster"]]
        assert replica.xr["spec"]["replicas"] == placement["replicas"]
        assert "workload" in _composition_names(replica)


def test_a_second_reconcile_reading_every_models_replicas_moves_nothing(fleet):
    # The steady-state render reads every other model's ModelReplicas and observes its
    # own: what the first placements decided still fits, so nothing moves.
    pools = {
        (r.xr["metadata"]["name"], pool["name"])
        for r in fleet.of_kind(contracts.KIND_INFERENCE_CLUSTER)
        for pool in r.xr["spec"]["nodePools"]
    }
    warnings = [
        res["message"]
        for r in fleet.of_kind(contracts.KIND_MODEL_DEPLOYMENT)
        for res in r.results
        if res.get("severity") == "SEVERITY_WARNING"
    ]
    assert warnings == []
    used = {
        (r.xr["spec"]["cluster"]["name"], r.xr["spec"]["nodePool"]["name"])
        for r in fleet.of_kind(contracts.KIND_MODEL_REPLICA)
    }
    assert used <= pools


@pytest.mark.parametrize("cluster", CLUSTERS)
def test_every_example_cluster_gets_a_collector_pushing_to_the_gateway(fleet, cluster):
    (rendered,) = [
        r
        for r in fleet.of_kind(contracts.KIND_INFERENCE_CLUSTER)
        if r.xr["metadata"]["name"] == cluster
    ]
    assert {"collector-config", "collector-deployment"} <= _composition_names(rendered)
    telemetry = rendered.composite["status"]["telemetry"]
    assert telemetry["mode"] == "Push"
    assert telemetry["unmappedEngineTypes"] == []
    # Its peers are the other example clusters.
    peers = {
        n.removeprefix("peer-clusterprofile-")
        for n in _composition_names(rendered)
        if n.startswith("peer-clusterprofile-")
    }
    assert peers == set(CLUSTERS) - {cluster}


def test_the_demo_prints_a_summary_first_and_names_the_stream_file(
    fleet, tmp_path, monkeypatch, capsys
):
    monkeypatch.setattr(render, "fleet_render", lambda: fleet)
    output = tmp_path / "demo.yaml"
    monkeypatch.setattr(sys, "argv", ["demo.py", "--output", str(output)])
    assert demo.main() == 0
    printed = capsys.readouterr().out
    assert printed.startswith("modelplane demo:")
    for namespace, name in DEPLOYMENTS:
        assert f"{namespace}/{name}: " in printed
    for cluster in CLUSTERS:
        assert f"  {cluster}: stack " in printed
    assert "collector  Push" in printed
    assert printed.rstrip().endswith(f"is in {output}; `make render` prints it.")
    assert output.read_text() == fleet.stream()
    streamed = [d for d in yaml.safe_load_all(output.read_text()) if d]
    # Each ModelReplica twice: composed by its deployment, then rendered as an XR.
    replicas = [d for d in streamed if d["kind"] == contracts.KIND_MODEL_REPLICA]
    assert len(replicas) == 2 * len(fleet.of_kind(contracts.KIND_MODEL_REPLICA))
