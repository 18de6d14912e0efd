"""compose-model-deployment under the real `crossplane render`.

Each scenario under testdata/model_deployment/<name>/ is a ModelDeployment (`xr.yaml`),
optionally the ModelReplicas it composed before (`observed.yaml`, also listed among the
required resources, as the API server would list them), other deployments'
ModelReplicas (`replicas.yaml`) and the ModelCache it names (`cache.yaml`), rendered
against the fleet in `clusters.yaml` (and the scenario's own `clusters.yaml`, if any)
supplied with `-e`. The whole output is compared
with `expected.yaml`; timestamps the function takes from its clock are replaced by
`<now>`. `{definitionHash}` in an input file stands
for the deployment's definition hash.

Regenerate the golden files after an intended change with

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/render/test_compose_model_deployment.py

and read the diff before committing it.
"""

import os
import re
from pathlib import Path

import pytest
import yaml

import render
from functions.common import conditions, contracts
from functions.compose_model_deployment.model import read_deployment
from tests.ledgers import with_ledgers
from tests.validate import crossplane_validate

TESTDATA = Path(__file__).parent / "testdata" / "model_deployment"
UPDATE = os.environ.get("UPDATE_GOLDEN", "") == "1"
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
_RENDER_CONDITION_TIME = "2024-01-01T00:00:00Z"
# The clusters in clusters.yaml the production selector picks (resource keys).
SELECTED = ["modelreplica-eu-west-1", "modelreplica-us-east-1"]


def _inputs(scenario: Path, workdir: Path) -> tuple[Path, Path, Path | None, set[str]]:
    xr_text = (scenario / "xr.yaml").read_text()
    raw = yaml.safe_load(xr_text.replace("{definitionHash}", "x"))
    definition = read_deployment(raw).definition_hash

    def fill(text: str) -> str:
        return text.replace("{definitionHash}", definition)

    xr = workdir / "xr.yaml"
    xr.write_text(fill(xr_text))
    # What the fleet holds reaches the function in each cluster's capacity ledger,
    # written here by compose-serving-stack's own code (tests/ledgers.py) from the
    # scenario's ModelReplicas; the ModelReplicas themselves stay in the file, as the API
    # server would have them, but the function no longer asks for them.
    held = [
        doc
        for name in ("replicas.yaml", "observed.yaml")
        if (scenario / name).exists()
        for doc in yaml.safe_load_all(fill((scenario / name).read_text()))
        if doc
    ]
    clusters = [d for d in yaml.safe_load_all((TESTDATA / "clusters.yaml").read_text()) if d]
    parts = [yaml.safe_dump_all(with_ledgers(clusters, held), sort_keys=False)]
    observed = None
    for name in ("clusters.yaml", "replicas.yaml", "observed.yaml", "cache.yaml"):
        if (scenario / name).exists():
            parts.append(fill((scenario / name).read_text()))
    if (scenario / "observed.yaml").exists():
        observed = workdir / "observed.yaml"
        observed.write_text(fill((scenario / "observed.yaml").read_text()))
    required = workdir / "required.yaml"
    required.write_text("\n---\n".join(parts))
    given = "\n".join([xr.read_text(), required.read_text()])
    known_times = set(re.findall(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", given))
    return xr, required, observed, known_times | {_RENDER_CONDITION_TIME}


def _normalize(value, known_times: set[str]):
    if isinstance(value, dict):
        return {k: _normalize(v, known_times) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v, known_times) for v in value]
    if isinstance(value, str) and _TIMESTAMP.match(value) and value not in known_times:
        return "<now>"
    return value


def _render(function_servers, name: str, tmp_path: Path):
    xr, required, observed, known = _inputs(TESTDATA / name, tmp_path)
    result = render.render(function_servers, xr, required=required, observed=observed)
    assert result.returncode == 0, result.stderr
    documents = [_normalize(d, known) for d in result.documents]
    golden = TESTDATA / name / "expected.yaml"
    text = yaml.safe_dump_all(documents, sort_keys=True, width=100)
    if UPDATE:
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run with UPDATE_GOLDEN=1"
    assert documents == list(yaml.safe_load_all(golden.read_text())), (
        f"render of {name} differs from {golden.relative_to(render.REPO)}; "
        "regenerate with UPDATE_GOLDEN=1 if the change is intended"
    )
    return documents


def _parts(documents):
    composite = documents[0]
    replicas = {
        d["metadata"]["annotations"]["crossplane.io/composition-resource-name"]: d
        for d in documents[1:]
        if d["kind"] == contracts.KIND_MODEL_REPLICA
    }
    results = [d for d in documents if d["kind"] == "Result"]
    conds = {c["type"]: c for c in composite["status"]["conditions"]}
    return composite, replicas, results, conds


def test_first_placement_spreads_replicas_over_the_selected_clusters(function_servers, tmp_path):
    composite, replicas, _results, conds = _parts(
        _render(function_servers, "first-placement", tmp_path)
    )
    placed = {
        (r["spec"]["cluster"]["name"], r["spec"]["nodePool"]["name"]): r for r in replicas.values()
    }
    # dev-1 is not production; the L40S pool is tainted; eu-west-1 has one B200 node left.
    assert {k: r["spec"]["replicas"] for k, r in placed.items()} == {
        ("eu-west-1", "b200"): 2,
        ("us-east-1", "h100"): 1,
    }
    for r in replicas.values():
        assert r["metadata"]["namespace"] == "ml-team"
        assert r["metadata"]["labels"][contracts.LABEL_DEPLOYMENT] == "llama-3-1-8b"
        assert r["metadata"]["labels"][contracts.LABEL_CLUSTER] == r["spec"]["cluster"]["name"]
        assert r["spec"]["engines"][0]["port"] == contracts.PORT_SERVING
        assert "unavailable" not in r["spec"]
    # Every ModelReplica carries the same member list, so the AdaptivePolicy copies match.
    policies = [r["spec"]["autoscaling"] for r in replicas.values()]
    assert all(p == policies[0] for p in policies)
    assert [c["name"] for c in policies[0]["clusters"]] == ["eu-west-1", "us-east-1"]
    assert all(c["maxReplicas"] == 6 for c in policies[0]["clusters"])
    # The deployment's per-cluster settings land on the clusters placement used, its
    # weights rescaled to shares of those (dev-1's 20 is not among them).
    eu, us = policies[0]["clusters"]
    assert (eu["weight"], eu["maxWeight"], eu["costRank"], eu["replicaCapacity"]) == (50, 80, 1, 6)
    assert (us["weight"], us["minWeight"], us["costRank"]) == (50, 20, 2)
    assert policies[0]["placement"] == "StaticFirst"
    assert policies[0]["traffic"]["routes"] == [{"name": "llama-3-1-8b"}]
    assert policies[0]["signals"]["extra"][0]["name"] == "waiting"
    assert composite["status"]["placedReplicas"] == 3
    assert conds[conditions.REPLICAS_SCHEDULED]["status"] == "True"
    assert conds[conditions.REPLICAS_READY]["reason"] == "Short"  # 0 of 3 ready yet
    assert conds[conditions.PARKED]["status"] == "False"


def test_replicas_on_a_cluster_that_went_away_move(function_servers, tmp_path):
    composite, replicas, results, _conds = _parts(
        _render(function_servers, "cluster-gone", tmp_path)
    )
    assert sorted(replicas) == ["modelreplica-eu-west-1", "modelreplica-us-east-1"]
    assert replicas["modelreplica-us-east-1"]["spec"]["replicas"] == 1
    assert replicas["modelreplica-eu-west-1"]["spec"]["replicas"] == 1
    assert any(
        r["severity"] == "SEVERITY_WARNING"
        and "moving 1 replicas off ap-south-1/h100: InferenceCluster ap-south-1 no longer exists"
        in r["message"]
        for r in results
    )
    # Ready is counted where replicas are now: the moved one is not ready yet.
    assert composite["status"]["readyReplicas"] == 1


def test_five_start_failures_park_the_model_and_free_its_gpus(function_servers, tmp_path):
    composite, replicas, results, conds = _parts(_render(function_servers, "parked", tmp_path))
    # Every selected cluster's gateway answers why, not only where it ran.
    assert sorted(replicas) == [
        "modelreplica-dev-1",
        "modelreplica-eu-west-1",
        "modelreplica-us-east-1",
    ]
    for r in replicas.values():
        assert r["spec"]["replicas"] == 0
        assert r["spec"]["unavailable"]["reason"] == "Parked"
        assert (
            "unknown model architecture: 'kev' (after upgrade)"
            in r["spec"]["unavailable"]["message"]
        )
    parked = composite["status"]["parked"]
    assert parked["failures"] == 5
    assert parked["since"] == "<now>"
    assert conds[conditions.PARKED]["status"] == "True"
    assert conds[conditions.REPLICAS_READY]["status"] == "False"  # never satisfied while parked
    assert any(
        r["severity"] == "SEVERITY_WARNING" and "parked after 5" in r["message"] for r in results
    )


def test_a_new_retry_annotation_places_a_parked_model_again(function_servers, tmp_path):
    composite, replicas, results, conds = _parts(
        _render(function_servers, "retry-unparks", tmp_path)
    )
    assert sum(r["spec"]["replicas"] for r in replicas.values()) == 2
    assert all("unavailable" not in r["spec"] for r in replicas.values())
    assert "parked" not in composite["status"]
    # The five failures that parked it are spent; they do not park it again.
    assert composite["status"]["retried"]["failures"] == 5
    assert conds[conditions.PARKED]["status"] == "False"
    assert any("unparked: retry requested" in r["message"] for r in results)


def test_an_unplaceable_model_says_what_was_missing_where(function_servers, tmp_path):
    composite, replicas, results, conds = _parts(_render(function_servers, "unplaceable", tmp_path))
    reason = (
        "needs 2 free whole nodes (16 NVIDIA H100 80GB HBM3) on one fabric; "
        "largest free block: us-east-1/h100 ib-a 1"
    )
    assert composite["status"]["unplaceable"] == {
        "replicas": 1,
        "reason": reason,
        "since": "<now>",
        "warnedAt": "<now>",
    }
    assert conds[conditions.REPLICAS_SCHEDULED]["reason"] == "Unplaceable"
    assert [r["message"] for r in results if r["severity"] == "SEVERITY_WARNING"] == [
        f"ModelDeployment ml-team/deepseek-v3: 1 replicas fit nowhere: {reason}"
    ]
    # A ModelReplica at 0 replicas on every selected cluster lets a request be answered
    # with why, whichever cluster's gateway it reaches.
    assert sorted(replicas) == SELECTED
    for replica in replicas.values():
        assert replica["spec"]["replicas"] == 0
        assert replica["spec"]["unavailable"] == {"reason": "Unplaceable", "message": reason}


def test_an_idle_on_demand_model_runs_nothing_and_routes_to_the_activator(
    function_servers, tmp_path
):
    composite, replicas, _results, conds = _parts(
        _render(function_servers, "on-demand-idle", tmp_path)
    )
    status = composite["status"]
    assert status["desiredReplicas"] == 0
    assert status["placedReplicas"] == 0
    assert status["onDemand"] == {"state": "Idle"}
    assert conds[conditions.REPLICAS_READY]["status"] == "True"  # 0 desired, 0 ready
    # A ModelReplica at 0 on each selected cluster, so a request can arrive anywhere.
    assert {r["spec"]["cluster"]["name"]: r["spec"]["replicas"] for r in replicas.values()} == {
        "eu-west-1": 0,
        "us-east-1": 0,
    }
    assert all(r["spec"]["activator"] is True for r in replicas.values())
    assert all("unavailable" not in r["spec"] for r in replicas.values())


def test_a_new_activate_value_is_one_fresh_placement_attempt(function_servers, tmp_path):
    composite, replicas, _results, _conds = _parts(
        _render(function_servers, "on-demand-activate", tmp_path)
    )
    status = composite["status"]
    assert status["desiredReplicas"] == 1
    assert status["placedReplicas"] == 1
    assert status["onDemand"] == {
        "state": "Active",
        "activatedAt": "<now>",
        "attempt": {"id": "us-east-1/3f2a9c", "result": "Placed", "reason": "", "at": "<now>"},
    }
    placed = [r for r in replicas.values() if r["spec"]["replicas"]]
    assert len(placed) == 1
    # Not ready yet anywhere: every route still leads to the activator.
    assert all(r["spec"]["activator"] is True for r in replicas.values())


def test_an_on_demand_model_that_fits_nowhere_is_answered_afresh_with_why(
    function_servers, tmp_path
):
    composite, replicas, _results, conds = _parts(
        _render(function_servers, "on-demand-fits-nowhere", tmp_path)
    )
    reason = (
        "needs 2 free whole nodes (16 NVIDIA H100 80GB HBM3) on one fabric; "
        "largest free block: us-east-1/h100 ib-a 1"
    )
    status = composite["status"]
    assert status["onDemand"]["attempt"] == {
        "id": "us-east-1/77c1d0",
        "result": "Unplaceable",
        "reason": reason,
        "at": "<now>",
    }
    # The earlier answer is not reused: the reason and its since are this attempt's.
    assert status["unplaceable"]["reason"] == reason
    assert status["unplaceable"]["since"] == "<now>"
    assert status["desiredReplicas"] == 1  # asked for and fits nowhere: short, not satisfied
    assert conds[conditions.REPLICAS_READY]["status"] == "False"
    # Every selected cluster's route leads to its member's activator.
    assert sorted(replicas) == SELECTED
    for replica in replicas.values():
        assert replica["spec"]["replicas"] == 0
        assert replica["spec"]["activator"] is True


def test_a_model_no_pool_matches_is_not_ready_and_still_answers_why(function_servers, tmp_path):
    documents = _render(function_servers, "no-matching-pool", tmp_path)
    composite, replicas, _results, conds = _parts(documents)
    reason = composite["status"]["unplaceable"]["reason"]
    assert "\n" not in reason
    assert reason.endswith(
        "no selected pool's devices satisfy "
        '\'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"\''
    ), reason
    assert conds["Ready"]["status"] == "False"
    assert replicas
    for replica in replicas.values():
        assert replica["spec"]["replicas"] == 0
        assert replica["spec"]["unavailable"] == {"reason": "Unplaceable", "message": reason}


def test_a_pool_with_gpus_and_nics_places_a_model_that_needs_both(function_servers, tmp_path):
    composite, replicas, _results, conds = _parts(
        _render(function_servers, "two-driver-pool", tmp_path)
    )
    (only,) = replicas.values()
    assert (only["spec"]["cluster"]["name"], only["spec"]["replicas"]) == ("dev-1", 2)
    requests = only["spec"]["engines"][0]["members"][0]["devices"]
    assert [(r["name"], r.get("deviceClassName")) for r in requests] == [
        ("gpus", None),
        ("rdma", "dra.net"),
    ]
    assert conds[conditions.REPLICAS_SCHEDULED]["status"] == "True"
    assert "unplaceable" not in composite["status"]


def test_multi_node_replicas_name_the_fabrics_their_pods_are_pinned_to(function_servers, tmp_path):
    _composite, replicas, _results, conds = _parts(
        _render(function_servers, "fabric-pinned", tmp_path)
    )
    (only,) = replicas.values()
    # Two 2-node replicas fill ib-a (4 nodes), the third opens ib-b.
    assert only["spec"]["replicas"] == 3
    assert only["spec"]["nodePool"]["fabricNodeLabel"] == "network.example.com/fabric"
    assert only["spec"]["nodePool"]["fabrics"] == ["ib-a", "ib-b"]
    assert conds[conditions.REPLICAS_SCHEDULED]["status"] == "True"


def test_a_cpu_deployment_lands_only_on_cpu_pools_and_names_what_is_missing(
    function_servers, tmp_path
):
    composite, replicas, _results, conds = _parts(_render(function_servers, "cpu-pool", tmp_path))
    placed = {
        (r["spec"]["cluster"]["name"], r["spec"]["nodePool"]["name"]): r["spec"]["replicas"]
        for r in replicas.values()
    }
    # The GPU clusters are production too: none of their pools takes it.
    assert placed == {("cpu-1", "c7i"): 2}
    (only,) = replicas.values()
    member = only["spec"]["engines"][0]["members"][0]
    assert (member["cpu"], member["memory"], member["devices"]) == ("8", "16Gi", [])
    assert composite["status"]["unplaceable"]["replicas"] == 1
    assert composite["status"]["unplaceable"]["reason"] == (
        "no node pool with 8 CPU and 16Gi memory free; most free: cpu-1/c7i nothing"
    )
    assert conds[conditions.REPLICAS_SCHEDULED]["status"] == "False"


@pytest.mark.parametrize(
    "example", sorted((render.REPO / "examples" / "modeldeployments").glob("*.yaml"))
)
def test_without_inputs_an_example_composes_nothing_and_says_why(function_servers, example):
    result = render.render(function_servers, example)
    assert result.returncode == 0, result.stderr
    composite = result.documents[0]
    assert [d for d in result.documents if d["kind"] not in ("Result", composite["kind"])] == []
    scheduled = next(
        c for c in composite["status"]["conditions"] if c["type"] == conditions.REPLICAS_SCHEDULED
    )
    assert scheduled["status"] == "False"
    assert "no InferenceClusters exist" in scheduled["message"]


def test_inputs_and_everything_rendered_match_the_xrds(crossplane, tmp_path):
    """The composed ModelReplicas and the status written back obey the XRDs (schema,
    unknown fields and CEL rules, as the API server would check them)."""
    documents = []
    for scenario in sorted(p for p in TESTDATA.iterdir() if p.is_dir()):
        xr, required, _observed, _known = _inputs(scenario, tmp_path)
        given = yaml.safe_load(xr.read_text())
        rendered = list(yaml.safe_load_all((scenario / "expected.yaml").read_text()))
        timestamps = {"<now>": "2026-12-02T12:00:00Z"}
        given["status"] = _restore(rendered[0]["status"], timestamps)
        documents.append(given)
        documents += [_restore(d, timestamps) for d in rendered[1:] if d["kind"] != "Result"]
        documents += [d for d in yaml.safe_load_all(required.read_text()) if d]
    unique = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"], yaml.safe_dump(d)): d
        for d in documents
    }
    resources = tmp_path / "resources.yaml"
    resources.write_text(yaml.safe_dump_all(list(unique.values())))
    done = crossplane_validate(crossplane, [render.REPO / "apis"], [resources])
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{len(unique)} success cases" in done.stdout


def _restore(value, timestamps):
    if isinstance(value, dict):
        return {k: _restore(v, timestamps) for k, v in value.items()}
    if isinstance(value, list):
        return [_restore(v, timestamps) for v in value]
    return timestamps.get(value, value) if isinstance(value, str) else value


def test_a_cached_model_goes_where_its_cache_is_ready_and_never_outside_it(
    function_servers, tmp_path
):
    composite, replicas, _results, _conds = _parts(
        _render(function_servers, "cache-prefers-ready", tmp_path)
    )
    placed = {r["spec"]["cluster"]["name"]: r["spec"]["replicas"] for r in replicas.values()}
    # dev-1 fits (the deployment selects every cluster) but holds no copy of the weights.
    assert placed == {"eu-west-1": 3}
    status = composite["status"]
    assert status["placements"][0]["modelCache"] == "Ready"
    assert status["modelCache"]["name"] == "qwen3-8b-weights"
    assert status["modelCache"]["readyClusters"] == ["eu-west-1"]
    assert "clusters where it is Ready come first (eu-west-1)" in status["modelCache"]["message"]
    # Every ModelReplica tells its pods where the cache is, and that it is there.
    for r in replicas.values():
        assert r["spec"]["modelCache"] == {
            "name": "qwen3-8b-weights",
            "claimName": "modelcache-qwen3-8b-weights",
            "mountPath": "/models/qwen3-8b-weights",
            "ready": True,
            "size": "20Gi",  # the engine's startup budget is sized by it
        }


def test_replicas_placed_where_the_cache_still_downloads_wait_for_it(function_servers, tmp_path):
    # The same fleet, the download still running on eu-west-1: replicas are placed all the
    # same, but each ModelReplica holds its pods until the weights are there.
    scenario = tmp_path / "downloading"
    scenario.mkdir()
    source = TESTDATA / "cache-prefers-ready"
    (scenario / "xr.yaml").write_text((source / "xr.yaml").read_text())
    cache = yaml.safe_load((source / "cache.yaml").read_text())
    cache["status"]["readyClusters"] = 0
    cache["status"]["clusters"][0].update(
        phase="Downloading", reason="Running", message="the download Job's pod is running"
    )
    (scenario / "cache.yaml").write_text(yaml.safe_dump(cache))
    xr, required, observed, _known = _inputs(scenario, tmp_path)
    result = render.render(function_servers, xr, required=required, observed=observed)
    assert result.returncode == 0, result.stderr
    composite, replicas, _results, _conds = _parts(result.documents)
    placed = {r["spec"]["cluster"]["name"]: r["spec"] for r in replicas.values()}
    # No cluster is Ready: placed as any model is, on the clusters the cache selects
    # (us-east-1's download failed; it is retried when the source is fixed).
    assert set(placed) == {"eu-west-1", "us-east-1"}
    assert sum(spec["replicas"] for spec in placed.values()) == 3
    assert all(spec["modelCache"]["ready"] is False for spec in placed.values())
    phases = {p["cluster"]: p["modelCache"] for p in composite["status"]["placements"]}
    assert phases == {"eu-west-1": "Downloading", "us-east-1": "Failed"}


def test_a_missing_model_cache_places_nothing_and_names_the_field(function_servers):
    # Its weights exist nowhere: nothing runs, every selected cluster answers why, and the
    # status and a warning say so.
    result = render.render(
        function_servers,
        TESTDATA / "cache-prefers-ready" / "xr.yaml",
        required=TESTDATA / "clusters.yaml",
    )
    assert result.returncode == 0, result.stderr
    composite = result.documents[0]
    answering = [d for d in result.documents if d["kind"] == contracts.KIND_MODEL_REPLICA]
    assert sorted(r["spec"]["cluster"]["name"] for r in answering) == [
        "dev-1",
        "eu-west-1",
        "us-east-1",
    ]
    assert all(r["spec"]["replicas"] == 0 for r in answering)
    assert all("does not exist" in r["spec"]["unavailable"]["message"] for r in answering)
    status = composite["status"]
    assert status["unplaceable"]["replicas"] == 3
    assert (
        "ModelCache qwen3-8b-weights (spec.modelCacheRef.name) does not exist"
        in (status["unplaceable"]["reason"])
    )
    assert "does not exist" in status["modelCache"]["message"]
    warnings = [d["message"] for d in result.documents if d["kind"] == "Result"]
    assert any(
        "spec.modelCacheRef.name: ModelCache ml-team/qwen3-8b-weights does not exist" in w
        for w in warnings
    )


def test_managed_traffic_names_a_backend_per_cluster_and_weights_the_models_route(
    function_servers, tmp_path
):
    _composite, replicas, _results, _conds = _parts(
        _render(function_servers, "managed-traffic", tmp_path)
    )
    policies = [r["spec"]["autoscaling"] for r in replicas.values()]
    assert all(p == policies[0] for p in policies)
    assert sorted(r["spec"]["cluster"]["name"] for r in replicas.values()) == [
        "dev-1",
        "eu-west-1",
        "us-east-1",
    ]
    # The hub writes each cluster's weight for the backend named here, which is the
    # name compose-model-replica gives that cluster's backend on every member's route.
    assert {c["name"]: c["backendRef"] for c in policies[0]["clusters"]} == {
        "dev-1": "qwen-3-32b-at-dev-1",
        "eu-west-1": "qwen-3-32b-at-eu-west-1",
        "us-east-1": "qwen-3-32b-at-us-east-1",
    }
    # The model's own route first (it carries those backends), then the team's own.
    assert policies[0]["traffic"]["routes"] == [
        {"name": "qwen-3-32b"},
        {"name": "qwen-public", "namespace": "edge"},
    ]
    assert policies[0]["traffic"]["stepPercent"] == 20


def test_a_device_class_missing_on_every_cluster_is_the_unplaceable_reason(
    function_servers, tmp_path
):
    # compose-serving-stack reports gpu.nvidia.com Missing on both production clusters:
    # a claim on it would stay pending, so nothing runs, every selected cluster answers
    # why, and the reason names the class and the clusters.
    clusters = list(yaml.safe_load_all((TESTDATA / "clusters.yaml").read_text()))
    for cluster in clusters:
        if cluster["metadata"]["name"] in ("us-east-1", "eu-west-1"):
            cluster.setdefault("status", {})["deviceClasses"] = [
                {"name": "gpu.nvidia.com", "state": "Missing"}
            ]
    required = tmp_path / "clusters.yaml"
    required.write_text(yaml.safe_dump_all(clusters))
    result = render.render(
        function_servers, TESTDATA / "first-placement" / "xr.yaml", required=required
    )
    assert result.returncode == 0, result.stderr
    composite, replicas, _results, _conds = _parts(result.documents)
    reason = composite["status"]["unplaceable"]["reason"]
    assert "DeviceClass gpu.nvidia.com on eu-west-1" in reason
    assert "DeviceClass gpu.nvidia.com on us-east-1" in reason
    assert sorted(replicas) == SELECTED
    for replica in replicas.values():
        assert replica["spec"]["replicas"] == 0
        assert replica["spec"]["unavailable"] == {"reason": "Unplaceable", "message": reason}


def test_launch_warnings_are_listed_once_with_the_clusters_that_reported_them(
    function_servers, tmp_path
):
    composite, replicas, results, _conds = _parts(
        _render(function_servers, "launch-warnings", tmp_path)
    )
    assert list(replicas) == ["modelreplica-dev-1"]
    image = "spec.template.spec.engines[0].members[0].template.spec.containers[0].image"
    worker_nodes = "spec.template.spec.engines[0].members[1].worker.nodes"
    found = {w["field"]: w for w in composite["status"]["warnings"]}
    assert set(found) == {image, worker_nodes}
    assert found[image]["reason"] == "ImageOlderThanChecked"
    assert found[image]["clusters"] == ["dev-1"]
    assert found[worker_nodes]["reason"] == "WorkerNodesOnWorker"
    assert "clusters" not in found[worker_nodes]
    said = [r.get("message", "") for r in results if r.get("severity") == "SEVERITY_WARNING"]
    assert any(f"{worker_nodes}: worker.nodes is read only on the Leader" in m for m in said)


def test_worker_nodes_on_a_worker_that_disagrees_is_fatal_and_names_both_fields(
    function_servers, tmp_path
):
    xr = yaml.safe_load((TESTDATA / "launch-warnings" / "xr.yaml").read_text())
    xr["spec"]["template"]["spec"]["engines"][0]["members"][1]["worker"] = {"nodes": 3}
    path = tmp_path / "xr.yaml"
    path.write_text(yaml.safe_dump(xr))
    required = tmp_path / "required.yaml"
    required.write_text((TESTDATA / "clusters.yaml").read_text())
    result = render.render(function_servers, path, required=required)
    assert result.returncode != 0
    assert (
        "spec.template.spec.engines[0].members[1].worker.nodes: worker.nodes belongs on the "
        "Leader member (spec.template.spec.engines[0].members[0].worker.nodes, which says 1)"
    ) in result.stderr
