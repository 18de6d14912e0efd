"""What the shell and status say around placement: waiting for inputs, rate-limited
warnings, and counting a model against what it should have now."""

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import conditions, contracts
from functions.compose_model_deployment import manifests, status
from functions.compose_model_deployment.fn import (
    REQUIRED_CLUSTERS,
    FunctionRunner,
)
from functions.compose_model_deployment.model import read_cluster, read_deployment
from functions.compose_model_deployment.parking import Decision, Parked
from functions.compose_model_deployment.placement import Placement, PlacementPlan
from tests.ledgers import with_ledgers

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]
REPO_EXAMPLE = "examples/modeldeployments/llama-8b-vllm.yaml"


def unplaceable_plan(reason="needs 8 free H100 on one fabric; largest free block: a/h100 6"):
    return PlacementPlan((), 1, reason)


def test_the_unplaceable_warning_is_emitted_when_first_seen():
    report = status.report_unplaceable(None, unplaceable_plan(), NOW)
    assert report.warn
    assert report.status["since"] == report.status["warnedAt"] == "2026-12-02T12:00:00Z"


def test_the_same_reason_is_not_warned_again_within_ten_minutes():
    first = status.report_unplaceable(None, unplaceable_plan(), NOW)
    again = status.report_unplaceable(first.status, unplaceable_plan(), NOW + timedelta(minutes=9))
    assert not again.warn
    assert again.status == first.status


def test_the_same_reason_is_warned_again_after_ten_minutes_and_keeps_its_since():
    first = status.report_unplaceable(None, unplaceable_plan(), NOW)
    later = status.report_unplaceable(first.status, unplaceable_plan(), NOW + timedelta(minutes=10))
    assert later.warn
    assert later.status["since"] == "2026-12-02T12:00:00Z"
    assert later.status["warnedAt"] == "2026-12-02T12:10:00Z"


def test_a_changed_reason_is_warned_at_once():
    first = status.report_unplaceable(None, unplaceable_plan(), NOW)
    changed = status.report_unplaceable(
        first.status, unplaceable_plan("no InferenceClusters exist"), NOW + timedelta(minutes=1)
    )
    assert changed.warn
    assert changed.status["since"] == "2026-12-02T12:01:00Z"


def test_everything_placed_clears_the_unplaceable_status():
    report = status.report_unplaceable(
        {"reason": "x"}, PlacementPlan((Placement("a", "p", 1),), 0, ""), NOW
    )
    assert report == status.UnplaceableReport(None, False)


def test_a_model_is_counted_against_what_it_should_have_now():
    plan = PlacementPlan(
        (Placement("a", "p", 2),), 1, "needs 1 free H100 per replica; most free: a/p 0"
    )
    derived = {
        c.type: c
        for c in status.derive_conditions(
            desired=3,
            plan=plan,
            ready=2,
            parking=Decision(None, None, 0, "", ""),
            parking_enabled=True,
        )
    }
    assert derived[conditions.REPLICAS_READY].status == "False"
    assert derived[conditions.REPLICAS_READY].message == "2 of 3 ready"
    assert derived[conditions.REPLICAS_SCHEDULED].reason == "Unplaceable"


def _request(with_required: bool, observed_replica: dict | None = None) -> fnv1.RunFunctionRequest:
    xr = yaml.safe_load((REPO / REPO_EXAMPLE).read_text())
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    if observed_replica is not None:
        req.observed.resources["modelreplica-us-east-1"].resource.update(observed_replica)
    if with_required:
        req.required_resources[REQUIRED_CLUSTERS].SetInParent()
    return req


NOT_PARKED = Decision(None, None, 0, "", "")


def _scale_status(plan, ready_by_cluster, parking=NOT_PARKED):
    built = status.build_status(
        desired=3,
        label_selector="modelplane.ai/deployment=llama-3-1-8b",
        plan=plan,
        ready_by_cluster=ready_by_cluster,
        unplaceable=status.report_unplaceable(None, plan, NOW),
        parking=parking,
    )
    return built["replicas"], built["labelSelector"]


def test_the_scale_status_counts_replicas_placed_whether_or_not_they_are_ready():
    # Two placed (one ready), one that fits nowhere: an HPA reading /scale sees 2, as it
    # would see a Deployment's created pods.
    plan = PlacementPlan((Placement("a", "p", 2),), 1, "needs 1 free H100; most free: a/p 0")
    assert _scale_status(plan, {"a": 1}) == (2, "modelplane.ai/deployment=llama-3-1-8b")


def test_a_parked_model_reports_no_replicas_to_the_scale_subresource():
    parked = Parked("2026-12-02T11:00:00Z", 5, "CrashLoopBackOff", "abc", "")
    decision = Decision(parked, None, 5, "", "")
    assert _scale_status(PlacementPlan((), 0, ""), {}, decision)[0] == 0


@pytest.mark.parametrize("replicas", [1, 2, 4])
def test_the_scale_status_follows_spec_replicas_through_the_function(replicas):
    # What `kubectl scale` writes is spec.replicas; the function places that many and the
    # scale subresource reads them back with the pods' selector.
    req = _request(with_required=True)
    req.observed.composite.resource["spec"]["replicas"] = replicas
    ic = yaml.safe_load((REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml").read_text())
    req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(ic)
    built = resource.struct_to_dict(_run(req).desired.composite.resource)["status"]
    assert built["replicas"] == built["placedReplicas"] == replicas
    assert built["labelSelector"] == f"{contracts.LABEL_DEPLOYMENT}=llama-3-1-8b"


def _run(req):
    return asyncio.run(FunctionRunner(clock=lambda: NOW).RunFunction(req))


def test_first_call_asks_for_inputs_and_keeps_what_exists():
    existing = {
        "apiVersion": contracts.API_GROUP_VERSION,
        "kind": contracts.KIND_MODEL_REPLICA,
        "metadata": {"name": "llama-3-1-8b-us-east-1", "uid": "u-1", "resourceVersion": "7"},
        "spec": {"deployment": "llama-3-1-8b", "replicas": 3},
        "status": {"readyReplicas": 3},
    }
    rsp = _run(_request(with_required=False, observed_replica=existing))
    # Only the clusters: what the fleet holds is in their ledgers (#33).
    assert set(rsp.requirements.resources) == {REQUIRED_CLUSTERS}
    # Not fetched is not empty: the replica composed before is kept exactly, nothing new.
    assert list(rsp.desired.resources) == ["modelreplica-us-east-1"]
    kept = resource.struct_to_dict(rsp.desired.resources["modelreplica-us-east-1"].resource)
    assert kept["spec"] == {"deployment": "llama-3-1-8b", "replicas": 3}
    assert kept["metadata"] == {"name": "llama-3-1-8b-us-east-1"}
    scheduled = next(c for c in rsp.conditions if c.type == conditions.REPLICAS_SCHEDULED)
    assert scheduled.reason == "WaitingForInputs"
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]


def test_answered_but_empty_inputs_mean_no_clusters():
    rsp = _run(_request(with_required=True))
    assert list(rsp.desired.resources) == []
    scheduled = next(c for c in rsp.conditions if c.type == conditions.REPLICAS_SCHEDULED)
    assert scheduled.reason == "Unplaceable"
    assert "no InferenceClusters exist" in scheduled.message


def test_a_selector_that_does_not_compile_is_fatal_and_names_the_field():
    req = _request(with_required=True)
    engines = req.observed.composite.resource["spec"]["template"]["spec"]["engines"]
    member = engines[0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"][0]["cel"] = 'device.attributes["x"'
    rsp = _run(req)
    fatal = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    assert len(fatal) == 1
    assert (
        "spec.template.spec.engines[0].members[0].nodeSelector.devices[0].selectors[0].cel: "
        "does not compile" in fatal[0]
    )


def _example(name: str):
    return read_deployment(
        yaml.safe_load((REPO / "examples" / "modeldeployments" / name).read_text())
    )


def test_the_decode_engine_serves_on_8001_behind_the_routing_sidecar():
    pd = _example("llama-70b-prefill-decode.yaml")
    assert {e.name: e.port for e in pd.engines} == {
        "prefill": contracts.PORT_SERVING,
        "decode": contracts.PORT_DECODE_ENGINE,
    }
    unified = _example("llama-8b-vllm.yaml")
    assert [e.port for e in unified.engines] == [contracts.PORT_SERVING]


def test_every_model_replica_carries_the_same_sorted_member_list():
    dep = _example("llama-8b-vllm.yaml")
    clusters = [
        read_cluster(yaml.safe_load((REPO / "examples" / "inferenceclusters" / f).read_text()))
        for f in ("us-east-h100.yaml", "eu-west-b200.yaml")
    ]
    used = [(clusters[0], "h100"), (clusters[1], "b200")]
    policy = manifests.autoscaling_spec(dep, used)
    assert policy == manifests.autoscaling_spec(dep, list(reversed(used)))
    assert policy["clusters"] == [
        {"name": "eu-west-1", "region": "eu-west-1", "maxReplicas": 6, "nodePools": ["b200"]},
        {"name": "us-east-1", "region": "us-east-1", "maxReplicas": 6, "nodePools": ["h100"]},
    ]
    assert "minReplicas" not in policy
    assert "maxReplicas" not in policy
    assert "workload" not in policy


def test_a_malformed_cluster_is_ignored_with_a_warning_not_fatal_to_every_model():
    req = _request(with_required=True)
    for f in ("us-east-h100.yaml", "eu-west-b200.yaml"):
        ic = yaml.safe_load((REPO / "examples" / "inferenceclusters" / f).read_text())
        if ic["metadata"]["name"] == "eu-west-1":
            ic["spec"]["nodePools"][0]["nodes"] = 1.5
        req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(ic)
    rsp = _run(req)
    assert not [r for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    warnings = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    assert any(
        "placing nothing on eu-west-1: InferenceCluster eu-west-1: spec.nodePools[0].nodes: "
        "must be an integer" in w
        for w in warnings
    )
    assert list(rsp.desired.resources) == ["modelreplica-us-east-1"]


def _replica(name, namespace, deployment, *, replicas, devices, created):
    return {
        "apiVersion": contracts.API_GROUP_VERSION,
        "kind": contracts.KIND_MODEL_REPLICA,
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": created},
        "spec": {
            "deployment": deployment,
            "cluster": {"name": "us-east-1"},
            "nodePool": {"name": "h100"},
            "replicas": replicas,
            "engines": [
                {"members": [{"role": "Standalone", "devices": [{"name": "g", "count": devices}]}]}
            ],
        },
    }


def test_a_model_that_no_longer_fits_anywhere_keeps_answering_where_it_was():
    mine = _replica(
        "llama-3-1-8b-us-east-1",
        "ml-team",
        "llama-3-1-8b",
        replicas=3,
        devices=1,
        created="2026-12-01T00:00:00Z",
    )
    older = _replica(
        "big-us-east-1", "other", "big", replicas=16, devices=8, created="2026-11-01T00:00:00Z"
    )
    req = _request(with_required=True, observed_replica=mine)
    ic = yaml.safe_load((REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml").read_text())
    # What the others hold arrives in the cluster's ledger (tests/ledgers.py).
    (ic,) = with_ledgers([ic], [mine, older])
    req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(ic)
    rsp = _run(req)
    assert list(rsp.desired.resources) == ["modelreplica-us-east-1"]
    spec = resource.struct_to_dict(rsp.desired.resources["modelreplica-us-east-1"].resource)["spec"]
    assert spec["replicas"] == 0
    assert spec["unavailable"]["reason"] == "Unplaceable"
    assert spec["unavailable"]["message"].startswith(
        "needs 1 free NVIDIA H100 80GB HBM3 per replica"
    )
    warnings = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    assert any(
        "moving 3 replicas off us-east-1/h100: no longer fits beside older" in w for w in warnings
    )


def test_a_parked_model_says_when_it_loses_a_model_replica_with_its_cluster():
    xr = yaml.safe_load((REPO / REPO_EXAMPLE).read_text())
    definition = read_deployment(xr).definition_hash
    xr["status"] = {
        "parked": {"since": "2026-12-01T00:00:00Z", "failures": 5, "definitionHash": definition}
    }
    req = fnv1.RunFunctionRequest()
    req.observed.composite.resource.update(xr)
    for cluster in ("us-east-1", "gone-1"):
        mr = _replica(
            f"llama-3-1-8b-{cluster}",
            "ml-team",
            "llama-3-1-8b",
            replicas=0,
            devices=1,
            created="2026-12-01T00:00:00Z",
        )
        mr["spec"]["cluster"]["name"] = cluster
        req.observed.resources[f"modelreplica-{cluster}"].resource.update(mr)
    ic = yaml.safe_load((REPO / "examples" / "inferenceclusters" / "us-east-h100.yaml").read_text())
    req.required_resources[REQUIRED_CLUSTERS].items.add().resource.update(ic)
    rsp = _run(req)
    assert list(rsp.desired.resources) == ["modelreplica-us-east-1"]
    spec = resource.struct_to_dict(rsp.desired.resources["modelreplica-us-east-1"].resource)["spec"]
    assert (spec["replicas"], spec["unavailable"]["reason"]) == (0, "Parked")
    warnings = [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_WARNING]
    assert any("removing the parked model's ModelReplica on gone-1/h100" in w for w in warnings)
