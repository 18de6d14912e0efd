"""A ModelCache's pure parts: reading it, the download Job per source, each cluster's
phase from what its Job reports, and how placement uses a referenced cache."""

import asyncio
from pathlib import Path

import pytest
import yaml
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import contracts
from functions.common.modelcache import claim_name, model_flag_in
from functions.compose_model_deployment import fn, modelcache
from functions.compose_model_deployment.cache_plan import plan_cache
from functions.compose_model_deployment.model import InputError, LabelSelector
from functions.compose_model_deployment.modelcache import CacheView
from functions.compose_model_deployment.placement import place
from tests.ledgers import with_ledgers
from tests.unit.test_placement import cluster, deployment, holding, placed, pool


def cache_xr(source, *, size="20Gi", annotations=None, namespace="ml-team", selector=None):
    return {
        "metadata": {"name": "w", "namespace": namespace, "annotations": annotations or {}},
        "spec": {"source": source, "size": size, "clusterSelector": selector or {}},
    }


HF = {"huggingFace": {"repo": "Qwen/Qwen3-8B"}}


# --- Reading ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xr", "path", "rule"),
    [
        (cache_xr({}), "spec.source", "needs exactly one of"),
        (
            cache_xr({**HF, "oci": {"reference": "r.example.com/m:v1"}}),
            "spec.source",
            "got huggingFace, oci",
        ),
        (
            cache_xr({"objectStore": {"uri": "https://b.example.com/m"}}),
            "spec.source.objectStore.uri",
            "must start with s3:// or gs://",
        ),
        (
            cache_xr({"objectStore": {"uri": "s3://bucket/m?X-Amz-Signature=abc"}}),
            "spec.source.objectStore.uri",
            "must not carry credentials",
        ),
        (
            cache_xr({"huggingFace": {"repo": "https://admin:abc@evil.example.com/x"}}),
            "spec.source.huggingFace.repo",
            "must match",
        ),
        (
            cache_xr({"oci": {"reference": "--insecure"}}),
            "spec.source.oci.reference",
            "must match",
        ),
        (
            cache_xr({"huggingFace": {"repo": "a/b", "tokenSecretRef": {"name": "A b"}}}),
            "spec.source.huggingFace.tokenSecretRef.name",
            "must name a Secret",
        ),
        (cache_xr(HF, size="0"), "spec.size", "not a positive quantity"),
        (cache_xr(HF, size="lots"), "spec.size", "not a positive quantity"),
        (cache_xr(HF, namespace="modelplane-system"), "metadata.namespace", "tenant namespace"),
    ],
    ids=[
        "no_source",
        "two_sources",
        "object_store_not_s3_or_gcs",
        "credentials_in_the_uri",
        "repo_not_a_hub_repo",
        "oci_reference_a_flag",
        "secret_name_not_an_object_name",
        "zero_size",
        "size_not_a_quantity",
        "system_namespace",
    ],
)
def test_input_no_cache_can_be_staged_from_is_refused_naming_the_field(xr, path, rule):
    with pytest.raises(InputError) as err:
        modelcache.read_cache(xr)
    assert err.value.path == path
    assert rule in err.value.rule
    assert "abc" not in str(err.value)  # a refused credential is never echoed


def test_a_new_retry_annotation_names_a_new_download_job():
    first = modelcache.read_cache(cache_xr(HF))
    again = modelcache.read_cache(cache_xr(HF, annotations={"modelplane.ai/retry": "1"}))
    assert modelcache.job_name(first) != modelcache.job_name(again)
    assert modelcache.job_key(first, "a") != modelcache.job_key(again, "a")
    # The volume is the same one: the weights already there are kept.
    assert modelcache.volume_claim(first) == modelcache.volume_claim(again)


# --- The download Job per source -----------------------------------------------------------


def _container(source):
    job = modelcache.download_job(modelcache.read_cache(cache_xr(source)))
    pod = job["spec"]["template"]["spec"]
    assert pod["volumes"][0] == {
        "name": "weights",
        "persistentVolumeClaim": {"claimName": claim_name("w")},
    }
    (container,) = pod["containers"]
    return container, pod


def test_s3_credentials_reach_the_downloader_as_a_secret_reference():
    container, _ = _container(
        {"objectStore": {"uri": "s3://bucket/m", "credentialsSecretRef": {"name": "s3"}}}
    )
    assert container["image"] == modelcache.STORAGE_INITIALIZER_IMAGE
    assert container["args"] == ["s3://bucket/m", "/models/w"]
    assert container["envFrom"] == [{"secretRef": {"name": "s3"}}]


def test_a_gcs_key_file_is_mounted_and_named_by_google_application_credentials():
    container, pod = _container(
        {"objectStore": {"uri": "gs://bucket/m", "credentialsSecretRef": {"name": "gcs"}}}
    )
    assert {
        "name": "GOOGLE_APPLICATION_CREDENTIALS",
        "value": f"{modelcache.SECRETS_ROOT}/gcs/key.json",
    } in container["env"]
    assert pod["volumes"][1]["secret"]["secretName"] == "gcs"


def test_an_oci_artifact_is_pulled_by_oras_with_the_pull_secret_as_registry_config():
    container, pod = _container(
        {"oci": {"reference": "r.example.com/m:v1", "pullSecretRef": {"name": "pull"}}}
    )
    assert container["image"] == modelcache.ORAS_IMAGE
    assert container["args"] == [
        "pull",
        "r.example.com/m:v1",
        "--output",
        "/models/w",
        "--registry-config",
        f"{modelcache.SECRETS_ROOT}/registry/config.json",
    ]
    assert pod["volumes"][1]["secret"] == {
        "secretName": "pull",
        "items": [{"key": ".dockerconfigjson", "path": "config.json"}],
    }


# --- Each cluster's phase ----------------------------------------------------------------------


def _object(job_status=None, conditions=None):
    obj = {"status": {"conditions": conditions or []}}
    if job_status is not None:
        obj["status"]["atProvider"] = {"manifest": {"kind": "Job", "status": job_status}}
    return obj


@pytest.mark.parametrize(
    ("job", "volume", "phase", "reason"),
    [
        (None, None, "Pending", "NotObserved"),
        (
            _object(conditions=[{"type": "Synced", "status": "False", "message": "no route"}]),
            None,
            "Pending",
            "NotApplied",
        ),
        (_object({}), None, "Pending", "WaitingForPod"),
        (
            _object({}),
            {"status": {"atProvider": {"manifest": {"status": {"phase": "Pending"}}}}},
            "Pending",
            "WaitingForPod",
        ),
        (_object({"active": 1}), None, "Pending", "WaitingForPod"),
        (_object({"active": 1, "ready": 1}), None, "Downloading", "Running"),
        (
            _object({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
            None,
            "Ready",
            "Complete",
        ),
        (
            _object(
                {
                    "failed": 5,
                    "conditions": [
                        {
                            "type": "Failed",
                            "status": "True",
                            "reason": "DeadlineExceeded",
                            "message": "Job was active longer than specified deadline",
                        }
                    ],
                }
            ),
            None,
            "Failed",
            "DeadlineExceeded",
        ),
    ],
    ids=[
        "not_observed",
        "not_applied",
        "pod_not_started",
        "volume_not_bound",
        "pod_pending",
        "running",
        "complete",
        "failed",
    ],
)
def test_each_clusters_phase_is_read_from_its_job(job, volume, phase, reason):
    observed = modelcache.observe_cluster("a", job, volume)
    assert (observed.phase, observed.reason) == (phase, reason)
    assert observed.message


def test_a_failure_says_the_jobs_own_words_and_how_to_retry():
    observed = modelcache.observe_cluster(
        "a",
        _object(
            {
                "conditions": [
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                    }
                ]
            }
        ),
        None,
    )
    assert "Job has reached the specified backoff limit" in observed.message
    assert "modelplane.ai/retry" in observed.message


# --- Placement with a referenced cache --------------------------------------------------------


def view(ready=(), failed=(), selector=None):
    phases = {c: "Ready" for c in ready} | {c: "Failed" for c in failed}
    return CacheView("w", selector or LabelSelector(), phases)


PROD = LabelSelector(match_labels=(("tier", "prod"),))


def test_replicas_go_where_the_cache_is_ready_before_spreading():
    clusters = [cluster("a"), cluster("b"), cluster("c")]
    plan = place(deployment(replicas=3), clusters, [], 3, cache=view(ready=("b",)))
    assert placed(plan) == {("b", "h100"): 3}


def test_when_the_ready_cluster_is_full_the_rest_spread_over_the_others():
    clusters = [cluster("a"), cluster("b"), cluster("c")]
    plan = place(deployment(replicas=20, devices=1), clusters, [], 20, cache=view(ready=("b",)))
    assert placed(plan) == {("a", "h100"): 2, ("b", "h100"): 16, ("c", "h100"): 2}


def test_never_places_outside_the_caches_selector_even_with_room():
    clusters = [cluster("a", labels={"tier": "dev"}), cluster("b")]
    plan = place(deployment(replicas=20), clusters, [], 20, cache=view(selector=PROD))
    assert placed(plan) == {("b", "h100"): 16}
    assert plan.unplaceable == 4


def test_unplaceable_when_no_cluster_is_in_both_selectors_says_so():
    clusters = [cluster("a", labels={"tier": "dev"})]
    plan = place(deployment(), clusters, [], 1, cache=view(selector=PROD))
    assert plan.unplaceable == 1
    assert "ModelCache w's spec.clusterSelector (0 do)" in plan.reason


def test_replicas_on_a_cluster_leaving_the_caches_selector_move_and_say_why():
    clusters = [cluster("a", labels={"tier": "dev"}), cluster("b")]
    plan = place(
        deployment(), clusters, [holding("m", "a", "h100", 1)], 1, cache=view(selector=PROD)
    )
    assert placed(plan) == {("b", "h100"): 1}
    (moved,) = plan.dropped
    assert "outside ModelCache w's clusterSelector" in moved.reason


def test_existing_replicas_stay_where_the_cache_is_not_ready_yet():
    clusters = [cluster("a"), cluster("b")]
    plan = place(
        deployment(), clusters, [holding("m", "a", "h100", 1)], 1, cache=view(ready=("b",))
    )
    assert placed(plan) == {("a", "h100"): 1}


# --- The engine's model flag --------------------------------------------------------------


@pytest.mark.parametrize(
    ("engine", "argv", "found"),
    [
        ("vllm", ["--model", "x"], "--model x"),
        ("vllm", ["--model=x"], "--model=x"),
        ("vllm", ["vllm", "serve", "x", "--port", "1"], "serve x"),
        ("vllm", ["vllm", "serve", "--port", "1"], ""),
        ("sglang", ["--model-path", "x"], "--model-path x"),
        ("sglang", ["--model", "x"], "--model x"),
        ("trtllm", ["--model", "x"], ""),
    ],
)
def test_the_users_own_model_flag_is_found_under_each_spelling(engine, argv, found):
    assert model_flag_in(engine, argv) == found


# --- The shell: a referenced cache that went away -------------------------------------------


def test_a_cache_that_went_away_keeps_every_running_replica_as_it_is():
    testdata = Path(__file__).parents[1] / "render" / "testdata" / "model_deployment"
    xr = yaml.safe_load((testdata / "cache-prefers-ready" / "xr.yaml").read_text())
    clusters = list(yaml.safe_load_all((testdata / "clusters.yaml").read_text()))
    expected = list(
        yaml.safe_load_all((testdata / "cache-prefers-ready" / "expected.yaml").read_text())
    )
    (running,) = [d for d in expected if d["kind"] == "ModelReplica"]
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    req.observed.resources["modelreplica-eu-west-1"].resource.update(running)
    for key, items in (
        (fn.REQUIRED_CLUSTERS, with_ledgers(clusters, [running])),
        (fn.REQUIRED_CACHE, []),  # asked, and absent
    ):
        req.required_resources[key].SetInParent()
        for item in items:
            req.required_resources[key].items.add().resource.update(item)
    rsp = asyncio.run(fn.FunctionRunner().RunFunction(req))
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    kept = rsp.desired.resources["modelreplica-eu-west-1"].resource
    assert kept["spec"]["replicas"] == 3
    assert kept["spec"]["modelCache"]["name"] == "qwen3-8b-weights"
    (scheduled, *_rest) = rsp.conditions
    assert scheduled.status == fnv1.STATUS_CONDITION_UNKNOWN
    assert "does not exist" in scheduled.message


def test_pods_start_where_the_cache_is_ready_or_replicas_already_serve():
    # a: Ready; b: downloading again under a model serving there; c: failed, nothing serves.
    serving = holding("d", "b", "h100", 2)
    serving = type(serving)(**{**serving.__dict__, "ready_replicas": 2})
    waiting = holding("d", "c", "h100", 1)
    cache = view(ready=("a",), failed=("c",))
    assert modelcache.ready_at(cache, [serving, waiting]) == {"a", "b"}
    assert modelcache.ready_at(None, [serving]) == frozenset()


# --- Where a cache is staged --------------------------------------------------------------

A100_ONLY = 'device.attributes["gpu.nvidia.com"].productName == "A100"'
DEV_ONLY = {"matchLabels": {"tier": "dev"}}


@pytest.mark.parametrize(
    ("deployments", "staged", "skipped"),
    [
        ([deployment()], ["a", "c"], ["b"]),
        ([deployment(selector=A100_ONLY)], ["b"], ["a", "c"]),
        ([deployment(devices=16)], [], ["a", "b", "c"]),
        ([deployment(cluster_selector=DEV_ONLY)], ["c"], ["a", "b"]),
        (
            [deployment(selector=A100_ONLY), deployment("n", cluster_selector=DEV_ONLY)],
            ["b", "c"],
            ["a"],
        ),
        ([], [], ["a", "b", "c"]),
    ],
    ids=[
        "on_every_selected_cluster_with_the_h100s_it_asks_for",
        "not_where_no_pool_has_the_devices_it_asks_for",
        "not_where_no_pool_could_ever_hold_one_replica",
        "not_where_the_deployments_cluster_selector_leaves_it_out",
        "wherever_any_referencing_deployment_could_go",
        "nowhere_while_no_deployment_references_it",
    ],
)
def test_a_cache_is_staged_only_where_its_deployments_can_be_placed(deployments, staged, skipped):
    clusters = [
        cluster("a"),
        cluster("b", pool("a100", product="A100")),
        cluster("c", labels={"tier": "dev"}),
    ]
    got, why = modelcache.staging_clusters(clusters, deployments)
    assert [c.name for c in got] == staged
    assert sorted(why) == skipped
    condition = modelcache.cache_condition([], why) if not staged else None
    if condition is not None:
        assert condition.reason == modelcache.REASON_NOT_PLACEABLE
        assert all(f"not staged on {c}" in condition.message for c in skipped)


def test_the_replica_mount_carries_the_size_that_sizes_the_startup_budget():
    view = modelcache.read_cache_view(cache_xr(HF, size="140Gi"))
    assert modelcache.replica_mount(view) == {
        "name": "w",
        "claimName": claim_name("w"),
        "mountPath": "/models/w",
        "size": "140Gi",
    }


@pytest.mark.parametrize(
    ("referencing", "staged", "skipped"),
    [
        (None, ["a", "b"], []),
        ([], [], ["a", "b"]),
        ([deployment()], ["a"], ["b"]),
    ],
    ids=[
        "on_every_selected_cluster_while_a_referencing_deployment_cannot_be_read",
        "nowhere_while_no_deployment_references_it",
        "only_where_a_referencing_deployment_could_be_placed",
    ],
)
def test_the_cache_plan_composes_only_on_the_clusters_it_is_staged_on(referencing, staged, skipped):
    cache = modelcache.read_cache(cache_xr(HF))
    clusters = [cluster("a"), cluster("b", pool("a100", product="A100"))]
    decided = plan_cache(cache, clusters, set(), {}, referencing)
    assert [c.name for c in decided.selected] == staged
    assert [p.cluster for p in decided.phases] == staged
    assert sorted(decided.skipped) == skipped
    owners = {c.body["metadata"]["labels"][contracts.LABEL_CLUSTER] for c in decided.composed}
    assert owners == set(staged)
