"""A ModelAdapter under the real `crossplane render`, through compose-model-deployment.

Each scenario under testdata/model_adapter/<name>/ is a ModelAdapter (`xr.yaml`), what
it composed before as the member clusters returned it (`observed.yaml`, optional) and
what it reads from its namespace (`required.yaml`: the ModelDeployments, the other
ModelAdapters, and the base's ModelReplicas, which say where the base is placed). The
whole output is compared with `expected.yaml`; regenerate after an intended change with

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/render/test_compose_model_adapter.py

and read the diff before committing it.
"""

import os
from pathlib import Path

import yaml

import render
from functions.common import adapters as contract
from functions.common import contracts

TESTDATA = Path(__file__).parent / "testdata" / "model_adapter"
UPDATE = os.environ.get("UPDATE_GOLDEN", "") == "1"


def _render(function_servers, name: str) -> list[dict]:
    scenario = TESTDATA / name
    observed = scenario / "observed.yaml"
    result = render.render(
        function_servers,
        scenario / "xr.yaml",
        required=scenario / "required.yaml",
        observed=observed if observed.exists() else None,
    )
    assert result.returncode == 0, result.stderr
    documents = result.documents
    golden = scenario / "expected.yaml"
    if UPDATE:
        golden.write_text(yaml.safe_dump_all(documents, sort_keys=True, width=100))
    assert golden.exists(), f"no golden file {golden}: run with UPDATE_GOLDEN=1"
    assert documents == list(yaml.safe_load_all(golden.read_text())), (
        f"render of {name} differs from {golden.relative_to(render.REPO)}; "
        "regenerate with UPDATE_GOLDEN=1 if the change is intended"
    )
    return documents


def _observing(documents: list[dict]) -> list[str]:
    """The clusters whose loaded record an Observe-only Object reads."""
    return sorted(
        d["metadata"]["labels"][contracts.LABEL_CLUSTER]
        for d in documents[1:]
        if d.get("kind") == contracts.OBJECT_KIND
        and d["spec"].get("managementPolicies") == ["Observe"]
    )


def _composed(documents: list[dict]) -> dict[tuple[str, str], dict]:
    """(cluster, manifest kind) -> manifest, for every Object composed to be written."""
    return {
        (
            d["metadata"]["labels"][contracts.LABEL_CLUSTER],
            d["spec"]["forProvider"]["manifest"]["kind"],
        ): d["spec"]["forProvider"]["manifest"]
        for d in documents[1:]
        if d.get("kind") == contracts.OBJECT_KIND
        and d["spec"].get("managementPolicies") != ["Observe"]
    }


def _condition(composite: dict) -> dict:
    return next(c for c in composite["status"]["conditions"] if c["type"] == contract.ADAPTER_READY)


def test_an_adapter_is_staged_on_every_cluster_its_base_runs_on_and_nowhere_else(
    function_servers,
):
    documents = _render(function_servers, "staged-where-the-base-runs")
    composed = _composed(documents)
    # The base runs on eu-west-1 and us-east-1; dev-1's Job (the base left it) is gone.
    assert sorted(composed) == [
        ("eu-west-1", "HTTPRoute"),
        ("eu-west-1", "HTTPRouteFilter"),
        ("eu-west-1", "Job"),
        ("us-east-1", "ConfigMap"),
        ("us-east-1", "HTTPRoute"),
        ("us-east-1", "Job"),
    ]
    # Its name reaches the base's pool where staged; a 503 with why where not yet.
    assert (
        composed[("us-east-1", "HTTPRoute")]["spec"]["rules"][0]["backendRefs"][0]["name"]
        == "llama-3-1-8b"
    )
    assert composed[("eu-west-1", "HTTPRouteFilter")]["spec"]["directResponse"]["statusCode"] == 503
    for cluster in ("eu-west-1", "us-east-1"):
        pod = composed[(cluster, "Job")]["spec"]["template"]["spec"]
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == contract.claim_name(
            "llama-3-1-8b"
        )
        assert pod["containers"][0]["volumeMounts"][0]["subPath"] == "llama-8b-sql"
    # Staged on us-east-1: its runtime is told to load it, under the name clients send.
    assert composed[("us-east-1", "ConfigMap")]["data"] == {
        "servedName": "text-to-sql",
        "path": "/adapters/llama-8b-sql",
        "rank": "8",
    }
    status = documents[0]["status"]
    assert (status["servedName"], status["selectedClusters"], status["stagedClusters"]) == (
        "text-to-sql",
        2,
        1,
    )
    # What us-east-1's agent reports its engines hold (its record, observed only).
    assert _observing(documents) == ["eu-west-1", "us-east-1"]
    us_east = next(c for c in status["clusters"] if c["cluster"] == "us-east-1")
    assert (us_east["loadedReplicas"], us_east["replicas"]) == (1, 2)
    assert "No adapter found for /adapters/llama-8b-sql" in us_east["loadError"]
    condition = _condition(documents[0])
    assert (condition["status"], condition["reason"]) == ("False", "Staging")
    assert "eu-west-1: Pending" in condition["message"]


def test_an_adapter_served_under_its_bases_name_is_refused_and_stages_nothing(
    function_servers,
):
    documents = _render(function_servers, "served-name-taken")
    assert _composed(documents) == {}
    condition = _condition(documents[0])
    assert (condition["status"], condition["reason"]) == ("False", "ServedNameTaken")
    assert (
        "'llama-3-1-8b' is a name ModelDeployment llama-3-1-8b is served under"
        in (condition["message"])
    )


def test_adapters_existing_or_not_the_base_composes_the_same_bytes(function_servers, tmp_path):
    # The base's ModelReplicas (and so its pod templates and its revision) are the same
    # with or without ModelAdapters on it: adding or removing one restarts nothing.
    base = render.REPO / "examples" / "modeldeployments" / "qwen-sglang.yaml"
    clusters = sorted((render.REPO / "examples" / "inferenceclusters").glob("*.yaml"))
    adapters = sorted((render.REPO / "examples" / "modeladapters").glob("*.yaml"))
    rendered = []
    for extra in ([], adapters):
        required = tmp_path / f"required-{len(extra)}.yaml"
        required.write_text("\n---\n".join(p.read_text() for p in [*clusters, *extra]))
        result = render.render(function_servers, base, required=required)
        assert result.returncode == 0, result.stderr
        rendered.append(result.documents)
    without, with_adapters = rendered
    # Every composed resource is byte-for-byte the same.
    assert yaml.safe_dump_all(without[1:]) == yaml.safe_dump_all(with_adapters[1:])
    # So is the XR's status, but for when each cluster's rollout entry was written
    # (`since` is the render's own clock, a second apart across two renders).
    for xr in (without[0], with_adapters[0]):
        for entry in xr.get("status", {}).get("rollout", {}).get("clusters", []):
            entry.pop("since", None)
    assert without[0] == with_adapters[0]
    assert f"kind: {contracts.KIND_MODEL_REPLICA}" in yaml.safe_dump_all(without[1:])
