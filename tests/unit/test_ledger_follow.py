"""Placement under contention settles in seconds a round, not a TTL a hop (issue #43): a
deployment whose new placement its cluster's ledger does not list yet asks to be called
back within seconds (compose_model_deployment/confirm.py), and so does a cluster whose
ledger its reconcile changed (compose_serving_stack/ledger.py); once the ledgers agree,
both are back at the SDK's 60 s TTL, so a settled fleet costs no more than before."""

from __future__ import annotations

import asyncio
import copy
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from crossplane.function import resource
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.compose_model_deployment import confirm
from functions.compose_model_deployment import fn as deployment_fn
from functions.compose_model_deployment.model import Footprint, Holding
from functions.compose_serving_stack import fn as stack_fn
from functions.compose_serving_stack import ledger as stack_ledger
from tests.ledgers import with_ledgers
from tests.unit.test_rollout_shell import CLUSTERS, DEPLOYMENT, request
from tests.unit.test_tenancy import _stack_request as tenancy_request

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
US_EAST = EXAMPLES / "inferenceclusters" / "us-east-h100.yaml"
REPLICA = REPO / "tests" / "render" / "testdata" / "modelreplica.yaml"
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
DEFAULT_TTL = 60.0  # the SDK's


def _stamp(ago: float) -> str:
    return (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _holding(cluster: str, pool: str, replicas: int, created: str) -> Holding:
    return Holding(
        namespace="ml-team",
        name=f"r-{cluster}",
        deployment="d",
        cluster=cluster,
        pool=pool,
        replicas=replicas,
        footprint=Footprint((), (1,), ()),
        order=(created, "ml-team", f"r-{cluster}"),
    )


# --- the rule, pure ------------------------------------------------------------------------


def test_a_new_placement_the_ledger_does_not_list_is_unconfirmed():
    assert confirm.unconfirmed([("a", "h100", 2)], {}, [], NOW) == [("a", "h100")]


def test_a_placement_the_ledger_lists_at_its_count_is_confirmed():
    listed = {("a", "h100"): 2}
    own = [_holding("a", "h100", 2, _stamp(10))]
    assert confirm.unconfirmed([("a", "h100", 2)], listed, own, NOW) == []


def test_a_recent_replica_whose_count_the_ledger_does_not_show_yet_is_unconfirmed():
    listed = {("a", "h100"): 1}
    own = [_holding("a", "h100", 1, _stamp(30))]
    assert confirm.unconfirmed([("a", "h100", 2)], listed, own, NOW) == [("a", "h100")]


def test_an_old_replica_is_left_to_the_usual_ttl_so_a_stuck_ledger_costs_minutes_not_ever():
    own = [_holding("a", "h100", 1, _stamp(confirm.CONFIRM_WINDOW_SECONDS + 1))]
    assert confirm.unconfirmed([("a", "h100", 2)], {}, own, NOW) == []


def test_a_target_at_zero_replicas_waits_for_nothing():
    assert confirm.unconfirmed([("a", "h100", 0)], {}, [], NOW) == []


def test_an_unreadable_creation_time_is_not_counted_as_new():
    own = [_holding("a", "h100", 1, "yesterday")]
    assert confirm.unconfirmed([("a", "h100", 2)], {}, own, NOW) == []


# --- compose-model-deployment ----------------------------------------------------------


def _deployment_request(observed: list[dict]) -> fnv1.RunFunctionRequest:
    """The example deployment with every example cluster, ledgers written for `observed`."""
    return request(DEPLOYMENT, observed)


def _ttl(rsp: fnv1.RunFunctionResponse) -> float:
    assert not [r.message for r in rsp.results if r.severity == fnv1.SEVERITY_FATAL]
    return rsp.meta.ttl.ToTimedelta().total_seconds()


def _as_observed(rsp: fnv1.RunFunctionResponse, created: str) -> list[dict]:
    """The composed ModelReplicas as core would observe them next time."""
    out = []
    for key, desired in sorted(rsp.desired.resources.items()):
        body = resource.struct_to_dict(desired.resource)
        body["metadata"].update(
            namespace=DEPLOYMENT["metadata"]["namespace"],
            annotations={"crossplane.io/composition-resource-name": key},
            uid=key,
            resourceVersion="1",
            creationTimestamp=created,
        )
        out.append(body)
    return out


def test_a_deployment_comes_back_within_seconds_until_its_clusters_ledgers_list_it():
    runner = deployment_fn.FunctionRunner(clock=lambda: NOW)
    # Placed on ledgers that do not list it yet (the clusters have not reconciled).
    first = asyncio.run(runner.RunFunction(_deployment_request([])))
    assert first.desired.resources, "the example placed nothing"
    assert _ttl(first) == confirm.CALL_BACK_SECONDS
    # Its ModelReplicas observed, and every ledger listing them: the usual TTL.
    observed = _as_observed(first, _stamp(20))
    settled = asyncio.run(runner.RunFunction(_deployment_request(observed)))
    assert _ttl(settled) == DEFAULT_TTL


def test_a_deployment_whose_new_replicas_no_ledger_lists_yet_keeps_coming_back():
    runner = deployment_fn.FunctionRunner(clock=lambda: NOW)
    observed = _as_observed(asyncio.run(runner.RunFunction(_deployment_request([]))), _stamp(20))
    req = _deployment_request(observed)
    # The ledgers as they were before the replicas: nothing listed.
    name = deployment_fn.REQUIRED_CLUSTERS
    del req.required_resources[name].items[:]
    for item in with_ledgers(CLUSTERS, []):
        req.required_resources[name].items.add().resource.update(item)
    assert _ttl(asyncio.run(runner.RunFunction(req))) == confirm.CALL_BACK_SECONDS


# --- compose-serving-stack --------------------------------------------------------------


def _stack_request(xr: dict, replicas: list[dict]) -> fnv1.RunFunctionRequest:
    """The cluster with its provider configs present (test_tenancy's request) and
    `replicas` as the ModelReplicas it requires."""
    req = tenancy_request(xr, existing=True)
    for body in replicas:
        req.required_resources[stack_fn.REQUIRED_REPLICAS].items.add().resource.update(body)
    return req


def _cluster_and_replica() -> tuple[dict, dict]:
    cluster = yaml.safe_load(US_EAST.read_text())
    replica = yaml.safe_load(REPLICA.read_text())
    replica["spec"]["cluster"]["name"] = cluster["metadata"]["name"]
    replica["metadata"]["creationTimestamp"] = _stamp(5)
    return cluster, replica


@pytest.mark.parametrize("written", [False, True], ids=["changed", "as_observed"])
def test_a_cluster_comes_back_within_seconds_only_after_changing_its_ledger(written):
    cluster, replica = _cluster_and_replica()
    if written:
        # The ledger this reconcile computes is the one already on the cluster (as a
        # Struct gives it back: every number a float).
        ledger, _ = stack_ledger.cluster_ledger(cluster["metadata"]["name"], [replica])
        cluster["status"] = {"ledger": copy.deepcopy(ledger)}
    rsp = asyncio.run(stack_fn.FunctionRunner().RunFunction(_stack_request(cluster, [replica])))
    expected = DEFAULT_TTL if written else stack_ledger.LEDGER_CALL_BACK_SECONDS
    assert _ttl(rsp) == expected


def test_a_ledger_read_back_with_float_numbers_is_not_a_change():
    ledger = {"replicas": 2, "pools": [{"name": "h100", "replicas": 2, "holders": ["x"]}]}
    as_read = {"replicas": 2.0, "pools": [{"name": "h100", "replicas": 2.0, "holders": ["x"]}]}
    assert not stack_ledger.ledger_changed({"ledger": as_read}, ledger)
    assert stack_ledger.ledger_changed({"ledger": {**as_read, "replicas": 3.0}}, ledger)
    assert stack_ledger.ledger_changed({}, ledger)
    assert stack_ledger.ledger_changed(None, ledger)
