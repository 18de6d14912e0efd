"""LoRA adapters' pure parts: reading a ModelAdapter and a base's capacity, admission
(the base, its rank, the served name, the per-base limit), staging per cluster the base
is placed on, and the engine flags and volume a base that accepts adapters gets."""

import copy
import json
from pathlib import Path

import pytest
import yaml

from functions.common import adapters as contract
from functions.common import contracts
from functions.common.reader import InputError
from functions.compose_model_deployment import adapters, modelcache
from functions.compose_model_deployment.model import read_deployment
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import InvalidReplica, parse

REPO = Path(__file__).resolve().parents[2]
# A vLLM base that accepts adapters: the simplest example with the capacity added.
BASE = yaml.safe_load((REPO / "examples/modeldeployments/llama-8b-vllm.yaml").read_text())
BASE["spec"]["template"]["spec"]["adapters"] = {"maxAdapters": 8, "maxRank": 16}
REPLICA = yaml.safe_load(
    (Path(__file__).parent / "testdata/model_replica/inputs/adapters.yaml").read_text()
)
HF = {"huggingFace": {"repo": "example-org/tone-lora"}}


def adapter_xr(name="tone", *, base="llama-3-1-8b", rank=16, served=None, source=None, at=""):
    spec = {
        "deploymentRef": {"name": base},
        "rank": rank,
        "source": HF if source is None else source,
    }
    if served is not None:
        spec["servedName"] = served
    meta = {"name": name, "namespace": "ml-team"}
    if at:
        meta["creationTimestamp"] = at
    return {"metadata": meta, "spec": spec}


def adapter(*args, **kwargs):
    return adapters.read_adapter(adapter_xr(*args, **kwargs))


def base_xr(**adapters_spec):
    xr = copy.deepcopy(BASE)
    tspec = xr["spec"]["template"]["spec"]
    if adapters_spec.pop("none", False):
        tspec.pop("adapters", None)
    else:
        tspec["adapters"] = adapters_spec or tspec["adapters"]
    return xr


PLACED = [
    adapters.Placement(c, {"kind": "ClusterProviderConfig", "name": c})
    for c in ("eu-west-1", "us-east-1")
]


# --- Reading ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("xr", "path", "rule"),
    [
        (adapter_xr(served="Has Spaces"), "spec.servedName", "must match"),
        (adapter_xr(served='a"b'), "spec.servedName", "must match"),
        (adapter_xr(rank=12), "spec.rank", "must be one of 1, 8, 16"),
        (adapter_xr(base="../other"), "spec.deploymentRef.name", "must name a ModelDeployment"),
        (adapter_xr(source={}), "spec.source", "needs exactly one of"),
        (
            adapter_xr(source={"objectStore": {"uri": "s3://user:pw@bucket/x"}}),
            "spec.source",
            "must not carry credentials",
        ),
        (
            {**adapter_xr(), "metadata": {"name": "tone", "namespace": "modelplane-system"}},
            "metadata.namespace",
            "",
        ),
    ],
    ids=[
        "served_name_with_spaces",
        "served_name_with_a_quote",
        "rank_not_one_vllm_takes",
        "base_not_a_name",
        "no_source",
        "object_store_uri_with_credentials",
        "system_namespace",
    ],
)
def test_refuses_an_adapter_naming_the_field_and_rule(xr, path, rule):
    with pytest.raises(InputError) as err:
        adapters.read_adapter(xr)
    assert str(err.value).startswith(path)
    assert rule in str(err.value)
    assert "pw" not in str(err.value)


def test_served_name_defaults_to_the_adapters_name():
    assert adapter().served_name == "tone"
    assert adapter(served="tone-v2").served_name == "tone-v2"


@pytest.mark.parametrize(
    ("engine_type", "named"),
    [("trtllm", "TensorRT-LLM"), ("triton", "Triton"), ("llama.cpp", "'llama.cpp'")],
)
def test_a_base_on_an_engine_without_runtime_lora_is_refused_naming_the_engine(engine_type, named):
    xr = base_xr()
    xr["spec"]["template"]["spec"]["engines"][0]["type"] = engine_type
    with pytest.raises(InputError) as err:
        read_deployment(xr)
    message = str(err.value)
    assert message.startswith("spec.template.spec.adapters")
    assert f"spec.template.spec.engines[0].type {engine_type!r}" in message
    assert named in message


def test_the_base_capacity_reads_with_defaults_and_bounds():
    assert read_deployment(base_xr(none=True)).adapters is None
    assert read_deployment(base_xr(maxAdapters=2)).adapters == contract.Capacity(2, 16)
    with pytest.raises(InputError, match=r"adapters.maxAdapters: must be a whole number 1-64"):
        read_deployment(base_xr(maxAdapters=65))
    with pytest.raises(InputError, match=r"adapters.maxRank: must be one of"):
        read_deployment(base_xr(maxRank=24))


# --- Admission ----------------------------------------------------------------------------


def test_admits_an_adapter_within_the_bases_capacity():
    base = adapters.read_base(base_xr())
    assert adapters.admit(adapter(), base, [base], [adapter("other")]) is None


def test_refuses_without_a_base_or_one_that_takes_no_adapters_or_a_rank_above_it():
    assert adapters.admit(adapter(), None, [], []).reason == adapters.REASON_NO_BASE
    none = adapters.read_base(base_xr(none=True))
    refused = adapters.admit(adapter(), none, [none], [])
    assert refused.reason == adapters.REASON_BASE_TAKES_NONE
    assert "spec.template.spec.adapters" in refused.message
    small = adapters.read_base(base_xr(maxRank=8))
    refused = adapters.admit(adapter(rank=16), small, [small], [])
    assert (refused.reason, "maxRank 8" in refused.message) == (adapters.REASON_RANK, True)


def test_refuses_a_served_name_another_model_in_the_namespace_answers_to():
    base = adapters.read_base(base_xr())
    other = base_xr()
    other["metadata"]["name"] = "qwen"
    other["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][
        0
    ]["args"] += ["--served-model-name", "qwen-chat"]
    others = [base, adapters.read_base(other)]
    for taken in ("llama-3-1-8b", "qwen", "qwen-chat"):
        refused = adapters.admit(adapter(served=taken), base, others, [])
        assert refused.reason == adapters.REASON_NAME_TAKEN, taken
        assert repr(taken) in refused.message


def test_the_older_adapter_keeps_a_served_name_two_ask_for():
    base = adapters.read_base(base_xr())
    first = adapter("a", served="tone", at="2026-12-01T00:00:00Z")
    second = adapter("b", served="tone", at="2026-12-02T00:00:00Z")
    assert adapters.admit(first, base, [base], [second]) is None
    refused = adapters.admit(second, base, [base], [first])
    assert refused.reason == adapters.REASON_NAME_TAKEN
    assert "ModelAdapter a" in refused.message


def test_admits_at_most_the_per_base_limit_oldest_first():
    base = adapters.read_base(base_xr(maxAdapters=2))
    held = [adapter(n, at=f"2026-12-0{i + 1}T00:00:00Z") for i, n in enumerate("abc")]
    verdicts = {a.name: adapters.admit(a, base, [base], held) for a in held}
    assert verdicts["a"] is None
    assert verdicts["b"] is None
    assert verdicts["c"].reason == adapters.REASON_OVER_LIMIT
    assert "at most 2" in verdicts["c"].message
    assert "a, b" in verdicts["c"].message
    # Another base's adapters take none of this base's slots.
    elsewhere = [adapter(n, base="qwen") for n in "xyz"]
    assert adapters.admit(held[2], base, [base], [held[2], *elsewhere]) is None


# --- Staging ------------------------------------------------------------------------------


def _complete(body: dict) -> dict:
    observed = copy.deepcopy(body)
    observed["status"] = {
        "atProvider": {
            "manifest": {
                "kind": "Job",
                "status": {
                    "succeeded": 1,
                    "conditions": [{"type": "Complete", "status": "True"}],
                },
            }
        }
    }
    return observed


def test_stages_one_download_per_cluster_the_base_is_placed_on_into_its_volume():
    tone = adapter()
    plan = adapters.plan_adapter(tone, None, PLACED, {})
    jobs = {c.key: c.body for c in plan.composed if c.key.startswith("download-")}
    assert sorted(jobs) == sorted(adapters.job_key(tone, p.cluster) for p in PLACED)
    for body in jobs.values():
        job = body["spec"]["forProvider"]["manifest"]
        pod = job["spec"]["template"]["spec"]
        assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "lora-llama-3-1-8b"}
        mount = pod["containers"][0]["volumeMounts"][0]
        assert mount["subPath"] == "tone"
        assert pod["containers"][0]["args"][0] == "hf://example-org/tone-lora"
    assert [p.phase for p in plan.phases] == ["Pending", "Pending"]
    assert plan.condition().status == "False"


def test_a_staged_cluster_gets_the_loaders_config_and_counts_staged():
    tone = adapter(served="tone-v2")
    first = adapters.plan_adapter(tone, None, PLACED, {})
    done_key = adapters.job_key(tone, "us-east-1")
    observed = {done_key: _complete(next(c.body for c in first.composed if c.key == done_key))}
    plan = adapters.plan_adapter(tone, None, PLACED, observed)
    loaders = [c for c in plan.composed if c.key.startswith("load-")]
    assert [c.key for c in loaders] == [adapters.loader_key("us-east-1")]
    config = loaders[0].body["spec"]["forProvider"]["manifest"]
    assert config["data"] == {"servedName": "tone-v2", "path": "/adapters/tone", "rank": "16"}
    assert config["metadata"]["labels"][contracts.LABEL_DEPLOYMENT] == "llama-3-1-8b"
    status = plan.status(tone)
    assert (status["selectedClusters"], status["stagedClusters"]) == (2, 1)
    assert {c["cluster"]: c["phase"] for c in status["clusters"]} == {
        "eu-west-1": modelcache.PHASE_PENDING,
        "us-east-1": modelcache.PHASE_READY,
    }


def test_follows_the_base_removing_what_it_staged_where_the_base_left():
    tone = adapter()
    before = {c.key: c.body for c in adapters.plan_adapter(tone, None, PLACED, {}).composed}
    after = adapters.plan_adapter(tone, None, PLACED[1:], before)
    assert {c.body["metadata"]["labels"][contracts.LABEL_CLUSTER] for c in after.composed} == {
        "us-east-1"
    }
    assert after.removed == sorted(
        [
            adapters.job_key(tone, "eu-west-1"),
            adapters.record_key("eu-west-1"),
            adapters.route_key("eu-west-1"),
            adapters.unavailable_key("eu-west-1"),
        ]
    )


def _manifests(plan, cluster):
    return {
        c.body["spec"]["forProvider"]["manifest"]["kind"]: c.body["spec"]["forProvider"]["manifest"]
        for c in plan.composed
        if c.body["metadata"]["labels"][contracts.LABEL_CLUSTER] == cluster
    }


def test_the_adapters_name_is_routed_to_its_base_where_staged_and_answered_503_before():
    tone = adapter(served="tone-v2")
    first = adapters.plan_adapter(tone, None, PLACED, {})
    done_key = adapters.job_key(tone, "us-east-1")
    observed = {done_key: _complete(next(c.body for c in first.composed if c.key == done_key))}
    plan = adapters.plan_adapter(tone, None, PLACED, observed)
    staged = _manifests(plan, "us-east-1")
    rule = staged["HTTPRoute"]["spec"]["rules"][0]
    assert rule["matches"][0]["headers"] == [
        {"type": "Exact", "name": contracts.HEADER_MODEL_NAME, "value": "tone-v2"}
    ]
    assert rule["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "llama-3-1-8b"}
    ]
    assert "HTTPRouteFilter" not in staged
    pending = _manifests(plan, "eu-west-1")
    assert "backendRefs" not in pending["HTTPRoute"]["spec"]["rules"][0]
    answer = pending["HTTPRouteFilter"]["spec"]["directResponse"]
    assert answer["statusCode"] == 503
    body = json.loads(answer["body"]["inline"])["error"]
    assert body["model"] == "tone-v2"
    assert "not loaded on cluster eu-west-1 yet: Pending" in body["message"]


def test_a_refused_adapter_composes_nothing_and_removes_what_it_had():
    tone = adapter()
    before = {c.key: c.body for c in adapters.plan_adapter(tone, None, PLACED, {}).composed}
    refusal = adapters.Refusal(adapters.REASON_OVER_LIMIT, "full")
    plan = adapters.plan_adapter(tone, refusal, PLACED, before)
    assert (plan.composed, plan.removed) == ([], sorted(before))
    assert plan.condition().reason == adapters.REASON_OVER_LIMIT


def test_placements_are_read_from_the_bases_replicas_only():
    replicas = [
        {"spec": {"deployment": "llama-3-1-8b", "cluster": {"name": "us-east-1"}}},
        {"spec": {"deployment": "other", "cluster": {"name": "eu-west-1"}}},
        {"spec": {"deployment": "llama-3-1-8b", "cluster": "not-an-object"}},
    ]
    assert [p.cluster for p in adapters.read_placements(replicas, "llama-3-1-8b")] == ["us-east-1"]


# --- The base's engines --------------------------------------------------------------------


def _engine(replica_xr: dict) -> dict:
    plan = compose(parse(replica_xr))
    workload = next(c for c in plan.composed if c.key.startswith("workload"))
    return workload.manifest["spec"]["template"]["spec"]


def test_a_base_that_takes_adapters_starts_its_engine_able_to_load_them_at_runtime():
    pod = _engine(REPLICA)
    engine = pod["containers"][0]
    args = engine["args"]
    assert args[args.index("--max-loras") + 1] == "8"
    assert args[args.index("--max-lora-rank") + 1] == "16"
    assert "--enable-lora" in args
    assert "--lora-modules" not in args
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in engine["env"]
    assert {"name": "lora-adapters", "mountPath": "/adapters", "readOnly": True} in engine[
        "volumeMounts"
    ]
    plan = compose(parse(REPLICA))
    claim = next(c for c in plan.composed if c.key == "lora-adapters").manifest
    assert claim["metadata"]["name"] == contract.claim_name("llama-3-1-8b")
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "shared-rwx"


def test_the_users_own_lora_flags_win():
    xr = copy.deepcopy(REPLICA)
    container = xr["spec"]["engines"][0]["members"][0]["template"]["spec"]["containers"][0]
    container["args"] = [*container.get("args", []), "--max-loras=2"]
    args = _engine(xr)["containers"][0]["args"]
    assert "--max-loras=2" in args
    assert "--max-loras" not in args


def test_a_replica_without_adapters_gets_no_lora_flag_volume_or_claim():
    xr = copy.deepcopy(REPLICA)
    del xr["spec"]["adapters"]
    pod = _engine(xr)
    assert not any("lora" in a for a in pod["containers"][0].get("args", []))
    assert all(v["name"] != "lora-adapters" for v in pod.get("volumes", []))
    assert all(c.key != "lora-adapters" for c in compose(parse(xr)).composed)


def test_a_replica_on_an_engine_without_runtime_lora_is_refused():
    xr = copy.deepcopy(REPLICA)
    xr["spec"]["engines"][0]["type"] = "trtllm"
    with pytest.raises(InvalidReplica, match=r"spec.engines\[0\].type 'trtllm'.*TensorRT-LLM"):
        parse(xr)


@pytest.mark.parametrize(
    "odd",
    [
        {"metadata": "x", "spec": []},
        {"metadata": {"name": "m"}, "spec": {"template": []}},
        {"metadata": {"name": "m"}, "spec": {"template": {"spec": {"engines": "vllm"}}}},
        {
            "metadata": {"name": "m"},
            "spec": {"template": {"spec": {"engines": [{"members": [{"template": 3}]}]}}},
        },
        {
            "metadata": {"name": "m"},
            "spec": {
                "template": {
                    "spec": {
                        "engines": [
                            {
                                "type": "vllm",
                                "members": [
                                    {
                                        "template": {
                                            "spec": {
                                                "containers": [
                                                    "engine",
                                                    {"args": ["--served-model-name", "odd"]},
                                                ]
                                            }
                                        }
                                    }
                                ],
                            }
                        ]
                    }
                }
            },
        },
    ],
    ids=["not_objects", "template_a_list", "engines_a_string", "template_a_number", "a_bare_str"],
)
def test_another_teams_odd_deployment_never_fails_an_adapters_reconcile(odd):
    names = adapters.served_names(odd)
    assert names <= {"m", "odd"}
    base = adapters.read_base(odd)
    assert base.capacity is None


def test_each_cluster_reports_on_how_many_replicas_the_adapter_is_loaded_and_the_engines_error():
    tone = adapter()
    first = adapters.plan_adapter(tone, None, PLACED, {})
    record = next(c.body for c in first.composed if c.key == adapters.record_key("us-east-1"))
    assert record["spec"]["managementPolicies"] == ["Observe"]
    observed = copy.deepcopy(record)
    observed["status"] = {
        "atProvider": {
            "manifest": {
                "data": {
                    "tone": json.dumps(
                        {"loaded": 1, "replicas": 2, "error": "loading tone: 400 rank too big"}
                    )
                }
            }
        }
    }
    plan = adapters.plan_adapter(tone, None, PLACED, {adapters.record_key("us-east-1"): observed})
    by_cluster = {c["cluster"]: c for c in plan.status(tone)["clusters"]}
    assert "loadedReplicas" not in by_cluster["eu-west-1"]  # no record there yet
    us = by_cluster["us-east-1"]
    assert (us["loadedReplicas"], us["replicas"]) == (1, 2)
    assert us["loadError"] == "loading tone: 400 rank too big"
