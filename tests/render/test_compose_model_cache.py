"""A ModelCache under the real `crossplane render`, through compose-model-deployment.

Each scenario under testdata/model_cache/<name>/ is a ModelCache (`xr.yaml`), what it
composed before as the member clusters returned it (`observed.yaml`) and the
ModelDeployments in its namespace (`deployments.yaml`: it is staged only where one that
references it could be placed), rendered against the fleet of the deployment scenarios
(testdata/model_deployment/clusters.yaml).
The whole output is compared with `expected.yaml`; regenerate after an intended change
with

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/render/test_compose_model_cache.py

and read the diff before committing it.
"""

import os
import tempfile
from pathlib import Path

import yaml

import render
from functions.common import contracts
from functions.common.modelcache import claim_name

TESTDATA = Path(__file__).parent / "testdata" / "model_cache"
CLUSTERS = Path(__file__).parent / "testdata" / "model_deployment" / "clusters.yaml"
UPDATE = os.environ.get("UPDATE_GOLDEN", "") == "1"


def _render(function_servers, name: str):
    scenario = TESTDATA / name
    observed = scenario / "observed.yaml"
    parts = [CLUSTERS.read_text()]
    if (scenario / "deployments.yaml").exists():
        parts.append((scenario / "deployments.yaml").read_text())
    with tempfile.TemporaryDirectory() as workdir:
        required = Path(workdir) / "required.yaml"
        required.write_text("\n---\n".join(parts))
        result = render.render(
            function_servers,
            scenario / "xr.yaml",
            required=required,
            observed=observed if observed.exists() else None,
        )
    assert result.returncode == 0, result.stderr
    documents = result.documents
    golden = scenario / "expected.yaml"
    text = yaml.safe_dump_all(documents, sort_keys=True, width=100)
    if UPDATE:
        golden.write_text(text)
    assert golden.exists(), f"no golden file {golden}: run with UPDATE_GOLDEN=1"
    assert documents == list(yaml.safe_load_all(golden.read_text())), (
        f"render of {name} differs from {golden.relative_to(render.REPO)}; "
        "regenerate with UPDATE_GOLDEN=1 if the change is intended"
    )
    return documents


def _manifests(documents, kind):
    return {
        d["metadata"]["labels"][contracts.LABEL_CLUSTER]: d["spec"]["forProvider"]["manifest"]
        for d in documents[1:]
        if d.get("kind") == contracts.OBJECT_KIND
        and d["spec"]["forProvider"]["manifest"]["kind"] == kind
    }


def test_a_cache_on_two_clusters_reports_one_ready_and_one_failed_with_why(function_servers):
    documents = _render(function_servers, "two-clusters-one-failed")
    composite = documents[0]
    status = composite["status"]
    # dev-1 is not production: the selector keeps the weights off it.
    by_cluster = {c["cluster"]: c for c in status["clusters"]}
    assert sorted(by_cluster) == ["eu-west-1", "us-east-1"]
    assert (status["selectedClusters"], status["readyClusters"]) == (2, 1)
    assert by_cluster["us-east-1"]["phase"] == "Ready"
    failed = by_cluster["eu-west-1"]
    assert (failed["phase"], failed["reason"]) == ("Failed", "BackoffLimitExceeded")
    assert "backoff limit" in failed["message"]
    cache_ready = next(c for c in composite["status"]["conditions"] if c["type"] == "CacheReady")
    assert cache_ready["status"] == "False"
    assert "eu-west-1: Failed" in cache_ready["message"]
    warnings = [
        d for d in documents if d.get("kind") == "Result" and d["severity"] == "SEVERITY_WARNING"
    ]
    assert any("eu-west-1 failed" in w["message"] for w in warnings)

    # Per cluster: a ReadWriteMany volume of the declared size, and a Job filling it.
    volumes = _manifests(documents, "PersistentVolumeClaim")
    jobs = _manifests(documents, "Job")
    assert sorted(volumes) == sorted(jobs) == ["eu-west-1", "us-east-1"]
    for cluster, volume in volumes.items():
        assert volume["metadata"]["name"] == claim_name("llama-3-1-8b")
        assert volume["spec"]["accessModes"] == ["ReadWriteMany"]
        assert volume["spec"]["resources"]["requests"]["storage"] == "40Gi"
        assert volume["spec"]["storageClassName"] == "shared-rwx"
        pod = jobs[cluster]["spec"]["template"]["spec"]
        assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == claim_name("llama-3-1-8b")
        (download,) = pod["containers"]
        assert download["args"] == [
            "hf://meta-llama/Llama-3.1-8B-Instruct:0e9e39f249a16976918f6564b8830bc894c89659",
            "/models/llama-3-1-8b",
        ]
        # The token by reference only: no value anywhere in what is composed.
        (token,) = download["env"]
        assert token == {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
        }
    # Every Object reaches its own cluster.
    for d in documents[1:]:
        if d.get("kind") == contracts.OBJECT_KIND:
            assert (
                d["spec"]["providerConfigRef"]["name"]
                == d["metadata"]["labels"][contracts.LABEL_CLUSTER]
            )


def test_a_cache_is_not_staged_where_no_deployment_that_references_it_can_run(function_servers):
    documents = _render(function_servers, "staged-where-placeable")
    composite = documents[0]
    status = composite["status"]
    # Its selector picks eu-west-1 too, but the one deployment that references it asks
    # for an H100, which eu-west-1 does not have.
    assert [c["cluster"] for c in status["clusters"]] == ["us-east-1"]
    assert sorted(_manifests(documents, "Job")) == ["us-east-1"]
    assert sorted(_manifests(documents, "PersistentVolumeClaim")) == ["us-east-1"]
    cache_ready = next(c for c in status["conditions"] if c["type"] == "CacheReady")
    assert cache_ready["status"] == "True"
    assert (
        "not staged on eu-west-1: no ModelDeployment that references this cache"
        in (cache_ready["message"])
    )
    # What was staged there before is removed, and said so.
    normals = [
        d["message"]
        for d in documents
        if d.get("kind") == "Result" and d["severity"] == "SEVERITY_NORMAL"
    ]
    assert any("removing" in m and "eu-west-1" in m for m in normals), normals
