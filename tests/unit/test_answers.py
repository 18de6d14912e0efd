"""A 503 is for whoever sent the request: its body says what the caller can do, and never
the fleet's detail — no cluster name, no DeviceClass, no spec path (functions/common/
answers.py). The operator's reason stays in status, where `modelplane explain` reads it.

The reasons here are the real ones: placement's own words for a model that fits
nowhere (naming clusters, pools, DeviceClasses and spec paths), a parked model's start
failure, a replica waiting for its weights; each goes through the path a client meets
it on — the route's direct response (compose-model-replica) and the on-demand
activator (its pure step and its server).
"""

from __future__ import annotations

import json
import re

import pytest

from functions.common import answers
from functions.compose_model_deployment.parking import Parked
from functions.compose_model_deployment.placement import place
from functions.compose_model_deployment.status import parked_message
from functions.runtime.activator import core
from tests.unit import test_device_classes as device_classes
from tests.unit import test_placement as placement
from tests.unit.test_activator import Plane, Routes, composed_route, engine, post, start
from tests.unit.test_model_replica import load, manifests

__all__ = ["engine"]  # the activator's upstream, a fixture

CLUSTERS = ("prod-gpu-east", "prod-gpu-west")
DEVICE_CLASSES = ("gpu.nvidia.com", "rdma.example.com")
# A spec or status path, as the operator's messages write them.
SPEC_PATH = re.compile(r"\b(spec|status)\.[A-Za-z]")


def _operator_reasons() -> dict[str, str]:
    """What placement and parking say, in their own words."""
    east, west = CLUSTERS
    missing_class = place(
        device_classes.deployment(),
        [
            device_classes.cluster(east, missing=["gpu.nvidia.com"]),
            device_classes.cluster(west, missing=["gpu.nvidia.com"]),
        ],
        [],
        1,
    ).reason
    full = place(
        placement.deployment(replicas=1, devices=4),
        [placement.cluster(east), placement.cluster(west)],
        [
            placement.holding("other", east, "h100", 14),
            placement.holding("other", west, "h100", 15),
        ],
        1,
    ).reason
    misspelt = place(
        placement.deployment(selector=placement.H100.replace("productName", "prodcutName")),
        [placement.cluster(east), placement.cluster(west)],
        [],
        1,
    ).reason
    parked = parked_message(
        Parked(
            since="2026-12-07T00:00:00Z",
            failures=5,
            last_error=f"pod on {east}: CrashLoopBackOff: no DeviceClass gpu.nvidia.com",
            definition_hash="3f2a9c1d0b",
            retry="",
        )
    )
    return {
        "missing_device_class": missing_class,
        "no_room": full,
        "misspelt_attribute": misspelt,
        "parked": parked,
    }


OPERATOR = _operator_reasons()
RESULT = {
    "missing_device_class": "Unplaceable",
    "no_room": "Unplaceable",
    "misspelt_attribute": "Unplaceable",
    "parked": "Parked",
}


def test_the_operators_reasons_do_name_what_a_caller_must_not_see():
    # Otherwise the tests below would prove nothing.
    text = " ".join(OPERATOR.values())
    assert all(c in text for c in CLUSTERS)
    assert "DeviceClass gpu.nvidia.com" in text
    assert SPEC_PATH.search(text)


def assert_for_callers(body: str | bytes) -> dict:
    text = body.decode() if isinstance(body, bytes) else body
    for name in (*CLUSTERS, "us-east-1", "eu-west-1"):
        assert name not in text, text
    for device_class in DEVICE_CLASSES:
        assert device_class not in text, text
    assert "DeviceClass" not in text, text
    assert not SPEC_PATH.search(text), text
    return json.loads(text)["error"]


@pytest.mark.parametrize("case", sorted(OPERATOR))
def test_the_routes_503_says_what_the_caller_can_do_and_nothing_of_the_fleet(case):
    xr = load("parked")
    xr["spec"]["unavailable"] = {"reason": RESULT[case], "message": OPERATOR[case]}
    route = manifests(xr)["route-unavailable"]["spec"]["directResponse"]
    assert route["statusCode"] == 503
    error = assert_for_callers(route["body"]["inline"])
    assert error == {
        "code": 503,
        "type": "model_unavailable",
        "reason": RESULT[case],
        "model": "llama-3-1-8b",
        "message": answers.caller_message(RESULT[case]),
    }


def test_a_replica_waiting_for_its_weights_does_not_name_its_cluster_or_cache():
    xr = load("model-cache-downloading")
    route = manifests(xr)["route-unavailable"]["spec"]["directResponse"]
    error = assert_for_callers(route["body"]["inline"])
    assert error["reason"] == "WaitingForModelCache"
    assert xr["spec"]["modelCache"]["name"] not in route["body"]["inline"]
    assert "retry in a few minutes" in error["message"]


@pytest.mark.parametrize("case", sorted(OPERATOR))
def test_the_activators_answer_to_an_attempt_is_for_callers(case):
    deployment = {
        "status": {
            "onDemand": {"attempt": {"id": "a1", "result": RESULT[case], "reason": OPERATOR[case]}}
        }
    }
    refusal = core.attempt_answer(deployment, "a1")
    assert isinstance(refusal, core.Refuse)
    error = assert_for_callers(
        core.error_body(refusal.status, refusal.reason, "llm", refusal.message)
    )
    assert (error["code"], error["reason"]) == (503, RESULT[case])


@pytest.mark.parametrize(
    ("reason", "says"),
    [
        ("Parked", "retrying will not help"),
        ("Unplaceable", "retry later"),
        ("WaitingForModelCache", "retry in a few minutes"),
        ("SomethingNew", "retry later"),
    ],
)
def test_each_reason_tells_the_caller_whether_to_retry(reason, says):
    assert says in answers.caller_message(reason)


class _Unplaceable(Plane):
    """A control plane that answers every attempt Unplaceable, with placement's reason."""

    def get(self, namespace, name):
        found = super().get(namespace, name)
        attempt = (found["status"].get("onDemand") or {}).get("attempt")
        if attempt:
            attempt.update(result="Unplaceable", reason=OPERATOR["missing_device_class"])
            found["status"].pop("placements", None)
        return found


def test_the_activator_server_answers_unplaceable_without_the_fleets_detail(engine):
    served = start(_Unplaceable(), Routes([composed_route("team-a", "llm")]), engine)
    try:
        status, _, body = post(served.port, "team-a/llm", json.dumps({"model": "llm"}).encode())
    finally:
        served.shutdown()
    assert status == 503
    error = assert_for_callers(body)
    assert (error["reason"], error["message"]) == (
        "Unplaceable",
        answers.caller_message("Unplaceable"),
    )


def test_the_activator_server_does_not_name_the_cluster_a_model_serves_on(engine):
    plane = Plane(ready_cluster=CLUSTERS[1])  # ready elsewhere, and no --gateway for it
    served = start(plane, Routes([composed_route("team-a", "llm")]), engine)
    try:
        status, _, body = post(served.port, "team-a/llm", json.dumps({"model": "llm"}).encode())
    finally:
        served.shutdown()
    assert status == 503
    error = assert_for_callers(body)
    assert error["reason"] == core.REASON_SERVING_ELSEWHERE
    assert "retry later" in error["message"]


def test_the_route_and_the_activator_write_one_shape():
    route = json.loads(answers.body(503, "Parked", "m", "x"))
    activator = json.loads(core.error_body(503, "Parked", "m", "x"))
    assert route == activator
    assert set(route["error"]) == {"code", "type", "reason", "model", "message"}
