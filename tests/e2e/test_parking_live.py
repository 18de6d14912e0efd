"""Parking, live: a model whose pods fail to start is parked, as a user sees it.

Everything real between the pods and the status: KWOK fails the pods the way a kubelet
shows a broken engine (the box's switch `fleetbox.modelplane.ai/fail`), the member's
agent (our runtime, a process of the box) counts the start failures into the health
record on the member, provider-kubernetes reads the record back, compose-model-replica
copies it to the ModelReplica's status, and compose-model-deployment parks the model on
it (functions/compose_model_deployment/parking.py). Then:

- the ModelDeployment's status names the last error, its replicas go to 0, and the
  member's route answers every request at once with a direct response saying why;
- a new definition (here: the engine's args) is placed again, its failures counted from 0;
- `modelplane.ai/retry` places the same definition again;
- a pod lost with its node (the KWOK node deleted; the pod garbage collector removes the
  pod as in a cluster) is not a start failure.

The switch sits on the deployment's pod metadata (spec.template.metadata), which is not
part of the definition, so the retry can clear it without changing the definition.
"""

from __future__ import annotations

import json

import pytest

from fleetbox.gpu import FAIL_ANNOTATION, FAIL_CRASH_LOOP, add_nodes, member_nodes, remove_nodes
from fleetbox.wait import is_true, wait_for
from functions.common import answers
from functions.common.contracts import (
    ANNOTATION_DEFINITION_HASH,
    ANNOTATION_RETRY,
    LABEL_SERVING,
)
from functions.common.health import HealthRecord, health_record_name
from functions.compose_model_deployment.parking import DEFAULT_MAX_CONSECUTIVE_FAILURES
from functions.compose_model_replica.serving import ENVOY_GATEWAY_GROUP
from functions.runtime.agent.health import ANNOTATION_COUNTED, Counted
from tests.e2e import claims

NAMESPACE = "ml-team"
MEMBER = "us-east-1"  # the example member whose pods are Deployments' (Standard stack)
NAME = "e2e-parking"
# Placement's choice made certain: only us-east-1's H100s match, whatever else has room.
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
# Health records every 30 s, read through a watch, two compositions: generous.
PARK_SECONDS = 300.0


def _deployment(*, failing: bool, args_extra: tuple[str, ...] = (), retry: str = "") -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), NAME)
    document["spec"]["replicas"] = 1
    document["spec"].pop("autoscaling", None)
    template = document["spec"]["template"]
    template["metadata"].setdefault("annotations", {})
    if failing:
        template["metadata"]["annotations"][FAIL_ANNOTATION] = FAIL_CRASH_LOOP
    member = template["spec"]["engines"][0]["members"][0]
    member["nodeSelector"]["devices"][0]["selectors"].append({"cel": H100})
    member["template"]["spec"]["containers"][0]["args"] += list(args_extra)
    if retry:
        document["metadata"]["annotations"] = {ANNOTATION_RETRY: retry}
    return document


def _status(box) -> dict:
    return (claims.get(box, "modeldeployment", NAME, NAMESPACE) or {}).get("status") or {}


def _replica_names(box) -> set[str]:
    return {r["metadata"]["name"] for r in claims.replicas_of(box, NAME, NAMESPACE)}


def _pods(box) -> list[dict]:
    names = _replica_names(box)
    if not names:
        return []
    found = json.loads(
        box.kubectl(
            MEMBER, "get", "pods", "-n", NAMESPACE, "-l",
            f"{LABEL_SERVING} in ({','.join(sorted(names))})", "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    return [p for p in found if not p["metadata"].get("deletionTimestamp")]


def _definition(pod: dict) -> str:
    return (pod["metadata"].get("annotations") or {}).get(ANNOTATION_DEFINITION_HASH, "")


def _record(box) -> dict | None:
    """The member's health record (a ConfigMap) of the deployment's ModelReplica, as the
    agent wrote it."""
    (replica,) = _replica_names(box)
    return claims.remote_get(
        box, MEMBER,
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": health_record_name(replica), "namespace": NAMESPACE}},
    )  # fmt: skip


def _route_answer(box) -> dict | None:
    """The body the member's route answers with directly, if it does (the
    HTTPRouteFilter the route names), else None."""
    for member, stub in claims.everything_composed_for(box, NAME, NAMESPACE):
        if member != MEMBER or stub["kind"] != "HTTPRoute":
            continue
        route = claims.remote_get(box, member, stub)
        if route is None:
            return None
        filters = [
            f["extensionRef"]["name"]
            for rule in route["spec"].get("rules") or []
            for f in rule.get("filters") or []
            if (f.get("extensionRef") or {}).get("kind") == "HTTPRouteFilter"
        ]
        backends = [
            b for rule in route["spec"].get("rules") or [] for b in rule.get("backendRefs") or []
        ]
        if not filters:
            return None
        assert not backends, f"a route answering directly still names backends: {backends}"
        (name,) = filters
        answer = claims.remote_get(
            box, member,
            {"apiVersion": f"{ENVOY_GATEWAY_GROUP}/v1alpha1", "kind": "HTTPRouteFilter",
             "metadata": {"name": name, "namespace": stub["metadata"]["namespace"]}},
        )  # fmt: skip
        assert answer is not None, f"the route names HTTPRouteFilter {name}, which is not there"
        direct = answer["spec"]["directResponse"]
        return {"status": direct["statusCode"], "body": json.loads(direct["body"]["inline"])}
    return None


def _wait_parked(box, definition: str | None = None) -> dict:
    def parked():
        status = _status(box)
        parked = status.get("parked")
        assert parked, f"not parked: {json.dumps(status)}"
        if definition is not None:
            assert parked["definitionHash"] == definition, parked
        return status

    return wait_for(f"{NAME} parked", parked, PARK_SECONDS)


def _wait_pods(box, check, what: str) -> list[dict]:
    def seen():
        pods = _pods(box)
        assert check(pods), f"pods {[(p['metadata']['name'], _definition(p)) for p in pods]}"
        return (pods,)  # truthy when there are none

    return wait_for(what, seen, PARK_SECONDS)[0]


@pytest.fixture
def cleanup(box):
    yield
    claims.delete(box, "modeldeployment", NAME, NAMESPACE)


def test_a_model_that_never_starts_is_parked_and_placed_again(box, runtime, cleanup):
    claims.apply_document(box, _deployment(failing=True))
    first = _wait_pods(box, lambda pods: len(pods) == 1, "the broken model's pod")[0]
    first_definition = _definition(first)
    assert first_definition

    # Parked: the status names the last error and the count that parked it.
    status = _wait_parked(box, first_definition)
    parked = status["parked"]
    assert parked["failures"] >= DEFAULT_MAX_CONSECUTIVE_FAILURES
    assert "container engine exited 1 (Error) before ready" in parked["lastError"]
    assert "fleetbox.modelplane.ai/fail" in parked["lastError"]  # the engine's own message
    assert not is_true(claims.get(box, "modeldeployment", NAME, NAMESPACE), "Ready")
    # Nothing runs: the workload went to 0 and its pods are gone.
    _wait_pods(box, lambda pods: not pods, "the parked model's pods gone")

    # Every request is answered at once, saying what the caller can do (not why: the
    # engine's log and the definition are the operator's, in status).
    def answering():
        answer = _route_answer(box)
        assert answer is not None, "the member's route still sends requests to backends"
        return answer

    answer = wait_for("the route's direct response", answering, claims.CONVERGE_SECONDS)
    assert answer["status"] == 503
    assert answer["body"]["error"]["reason"] == "Parked"
    assert answer["body"]["error"]["message"] == answers.caller_message("Parked")
    assert "fleetbox.modelplane.ai/fail" not in json.dumps(answer["body"])

    # A new definition (the engine's args) is placed again; it fails too, and is parked
    # for its own failures, counted from 0.
    claims.apply_document(box, _deployment(failing=True, args_extra=("--max-num-seqs", "8")))
    renewed = _wait_pods(
        box,
        lambda pods: any(_definition(p) not in ("", first_definition) for p in pods),
        "the new definition placed",
    )
    second_definition = next(_definition(p) for p in renewed if _definition(p) != first_definition)
    status = _wait_parked(box, second_definition)
    assert status["parked"]["failures"] >= DEFAULT_MAX_CONSECUTIVE_FAILURES
    # The operator retries once nothing runs (a pod of the parked model still failing
    # after the retry would count against it: the same definition, failing again).
    _wait_pods(box, lambda pods: not pods, "the parked model's pods gone")

    # The retry annotation places the same definition again (here the switch is cleared,
    # as an operator fixes a node image: the model starts and serves).
    claims.apply_document(
        box, _deployment(failing=False, args_extra=("--max-num-seqs", "8"), retry="1")
    )

    def serving():
        status = _status(box)
        assert "parked" not in status, status
        assert status.get("readyReplicas") == 1, status
        return status

    wait_for(f"{NAME} serving after the retry", serving, PARK_SECONDS)
    (pod,) = _wait_pods(box, lambda pods: len(pods) == 1, "one pod serving")
    assert _definition(pod) == second_definition
    assert wait_for(
        "the route back on its backends", lambda: _route_answer(box) is None or None,
        claims.CONVERGE_SECONDS,
    )  # fmt: skip

    # A pod lost with its node is not a start failure.
    lost = _lose_node_of(box, pod)
    try:
        replacement = _wait_pods(
            box,
            lambda pods: (
                len(pods) == 1
                and pods[0]["metadata"]["uid"] != pod["metadata"]["uid"]
                and is_true(pods[0], "Ready")
            ),
            "a replacement pod Ready on another node",
        )[0]
        assert replacement["spec"]["nodeName"] != lost
        # The agent has seen the new pod (ready) and counted nothing for the lost one.
        record = wait_for(
            "the health record after the node loss", lambda: _settled_record(box, replacement),
            PARK_SECONDS,
        )  # fmt: skip
        assert record.consecutive_start_failures == 0, record
        assert "parked" not in _status(box), _status(box)
        # The replacement's readiness reaches the status through provider-kubernetes'
        # poll of the member's Deployment and two compositions: it follows, not at once.
        wait_for(f"{NAME} serving after the node loss", serving, PARK_SECONDS)
    finally:
        _restore_node(box, lost)


def _settled_record(box, pod: dict) -> HealthRecord | None:
    """The record once the agent has seen `pod` Ready: its counted annotation lists the
    pod's uid among the ready ones. (The record's whole-second `observedAt` can equal the
    pod's Ready time, and the agent rewrites a record only when something changed, so a
    time comparison can wait forever.)"""
    found = _record(box)
    if not found:
        return None
    counted = Counted.from_annotation(
        (found["metadata"].get("annotations") or {}).get(ANNOTATION_COUNTED)
    )
    if pod["metadata"]["uid"] not in counted.ready:
        return None
    return HealthRecord.from_data(found.get("data") or {})


def _lose_node_of(box, pod: dict) -> str:
    node = pod["spec"]["nodeName"]
    (fake,) = [n for n in member_nodes(MEMBER) if n.name == node]
    remove_nodes(box, MEMBER, [fake])
    return node


def _restore_node(box, name: str) -> None:
    (fake,) = [n for n in member_nodes(MEMBER) if n.name == name]
    add_nodes(box, MEMBER, [fake])
