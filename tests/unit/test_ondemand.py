"""On-demand models: when a model should run (compose-model-deployment's ondemand.py) and
what the activator does with a request (runtime/activator_core.py)."""

import json
from datetime import UTC, datetime, timedelta

import pytest

from functions.common import answers
from functions.compose_model_deployment import ondemand
from functions.compose_model_deployment.model import InputError, read_deployment
from functions.runtime.activator import core

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
STAMP = "2026-12-03T12:00:00Z"
POLICY = ondemand.OnDemand(idle_after=900, activation_timeout=120)


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def decide(activate="", previous=None, ready=None, idle=None):
    return ondemand.decide(
        policy=POLICY,
        activate=activate,
        previous=previous or {},
        ready_by_cluster=ready or {},
        idle_by_cluster=idle or {},
        now=NOW,
        stamp=STAMP,
    )


ACTIVE = {"state": "Active", "activatedAt": ago(3600), "attempt": {"id": "a/1"}}


@pytest.mark.parametrize(
    ("kwargs", "state", "fresh"),
    [
        pytest.param({}, "Idle", "", id="a_new_model_starts_idle"),
        pytest.param({"activate": "a/1"}, "Active", "a/1", id="a_new_activate_value_activates"),
        pytest.param(
            {"activate": "a/1", "previous": ACTIVE, "ready": {"us": 1}},
            "Active",
            "",
            id="an_answered_value_is_not_a_second_attempt",
        ),
        pytest.param(
            {"activate": "a/2", "previous": ACTIVE, "ready": {"us": 1}},
            "Active",
            "a/2",
            id="another_request_with_nothing_ready_is_another_attempt",
        ),
        pytest.param(
            {"previous": ACTIVE, "ready": {"us": 1}, "idle": {"us": 900}},
            "Idle",
            "",
            id="idle_everywhere_it_is_ready_for_idle_after_scales_to_zero",
        ),
        pytest.param(
            {"previous": ACTIVE, "ready": {"us": 1, "eu": 1}, "idle": {"us": 3000}},
            "Active",
            "",
            id="busy_on_one_cluster_keeps_it_active",
        ),
        pytest.param(
            {"previous": ACTIVE, "ready": {"us": 1}, "idle": {"us": 899}},
            "Active",
            "",
            id="idle_for_less_than_idle_after_keeps_it_active",
        ),
        pytest.param(
            {
                "previous": ACTIVE | {"activatedAt": ago(60)},
                "ready": {"us": 1},
                "idle": {"us": 900},
            },
            "Active",
            "",
            id="a_recent_activation_keeps_it_active_whatever_the_counters",
        ),
        pytest.param(
            {"previous": ACTIVE},
            "Idle",
            "",
            id="an_activation_that_placed_nothing_lapses_after_idle_after",
        ),
        pytest.param(
            {"previous": ACTIVE | {"activatedAt": ago(60)}},
            "Active",
            "",
            id="an_activation_that_placed_nothing_is_short_until_it_lapses",
        ),
    ],
)
def test_activity(kwargs, state, fresh):
    activity = decide(**kwargs)
    assert (activity.state, activity.fresh_attempt) == (state, fresh)
    assert activity.desired(3) == (3 if state == "Active" else 0)


def test_a_fresh_attempt_is_answered_for_exactly_its_value():
    activity = decide(activate="us-east-1/9", previous=ACTIVE)
    result = ondemand.attempt_result(parked_message="", unplaceable=1, reason="no H200")
    assert ondemand.status(activity, result=result, stamp=STAMP) == {
        "state": "Active",
        "activatedAt": STAMP,
        "attempt": {"id": "us-east-1/9", "result": "Unplaceable", "reason": "no H200", "at": STAMP},
    }
    # The next reconcile keeps that answer rather than answering again.
    again = decide(
        activate="us-east-1/9", previous=ondemand.status(activity, result=result, stamp=STAMP)
    )
    assert again.fresh_attempt == ""
    kept = ondemand.status(again, result=("Placed", ""), stamp=STAMP)
    assert kept["attempt"]["result"] == "Unplaceable"


def test_parked_wins_over_fits_nowhere():
    assert ondemand.attempt_result(parked_message="parked after 5", unplaceable=1, reason="x") == (
        "Parked",
        "parked after 5",
    )
    assert ondemand.attempt_result(parked_message="", unplaceable=0, reason="") == ("Placed", "")


def test_idle_records_are_read_per_cluster_for_this_deployment_only():
    clusters = [
        {
            "metadata": {"name": "us"},
            "status": {
                "inventory": {
                    "idleReplicas": [
                        {"namespace": "ml", "deployment": "qwen", "idleSeconds": 1200},
                        {"namespace": "ml", "deployment": "qwen", "idleSeconds": 700},
                        {"namespace": "other", "deployment": "qwen", "idleSeconds": 5},
                        {"namespace": "ml", "deployment": "llama", "idleSeconds": 5},
                        "not a record",
                    ]
                }
            },
        },
        {"metadata": {"name": "eu"}, "status": {}},
    ]
    assert ondemand.idle_seconds_by_cluster(clusters, "ml", "qwen") == {"us": 700}


def _xr(on_demand):
    return {
        "metadata": {"name": "m", "namespace": "ml"},
        "spec": {
            "replicas": 1,
            "onDemand": on_demand,
            "source": {"uri": "hf://x/y"},
            "template": {
                "spec": {
                    "engines": [
                        {
                            "name": "e",
                            "type": "vllm",
                            "members": [
                                {
                                    "role": "Standalone",
                                    "nodeSelector": {"devices": [{"name": "gpu", "count": 1}]},
                                    "template": {"spec": {}},
                                }
                            ],
                        }
                    ]
                }
            },
        },
    }


def test_on_demand_fields_are_read_with_their_defaults_and_bounds():
    assert read_deployment(_xr({})).on_demand == ondemand.OnDemand(600, 300)
    assert read_deployment(_xr({"idleAfter": "1h", "activationTimeout": "30s"})).on_demand == (
        ondemand.OnDemand(3600, 30)
    )
    with pytest.raises(InputError, match=r"spec.onDemand.idleAfter.*outside"):
        read_deployment(_xr({"idleAfter": "5m"}))
    with pytest.raises(InputError, match=r"spec.onDemand.activationTimeout.*expected"):
        read_deployment(_xr({"activationTimeout": "soon"}))


# --- the activator ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        None,
        "",
        "ml",
        "ml/",
        "/m",
        "ML/m",
        "ml/m/x",
        "ml/m\r\nX-Injected: 1",
        "ml/../m",
        "a" * 64 + "/m",
    ],
)
def test_a_deployment_header_that_is_not_namespace_name_is_refused(header):
    with pytest.raises(core.BadDeployment):
        core.parse_deployment(header)


def test_a_deployment_header_names_namespace_and_name():
    assert core.parse_deployment("ml-team/qwen-3.8b") == ("ml-team", "qwen-3.8b")


def md(status=None, on_demand=True):
    return {
        "spec": {"onDemand": {"activationTimeout": "45s"}} if on_demand else {},
        "status": status or {},
    }


def test_first_step():
    assert core.first_step(None, "us") == core.Refuse(404, "NotFound", "no such ModelDeployment")
    assert isinstance(core.first_step(md(on_demand=False), "us"), core.Refuse)
    assert core.first_step(md(), "us") == core.Activate()
    ready = {
        "placements": [{"cluster": "eu", "readyReplicas": 1}, {"cluster": "us", "readyReplicas": 2}]
    }
    assert core.first_step(md(ready), "us") == core.Proxy("us")  # this member first
    assert core.first_step(md(ready), "ap") == core.Proxy("eu")


def test_an_attempt_is_answered_only_for_its_own_id():
    stale = md({"onDemand": {"attempt": {"id": "us/old", "result": "Unplaceable", "reason": "x"}}})
    assert core.attempt_answer(stale, "us/new") is None
    placed = md({"onDemand": {"attempt": {"id": "us/new", "result": "Placed"}}})
    assert core.attempt_answer(placed, "us/new") == core.Activate()
    nowhere = md(
        {"onDemand": {"attempt": {"id": "us/new", "result": "Unplaceable", "reason": "no H200"}}}
    )
    # Why it fits nowhere is the operator's (in status); the caller is told what to do.
    assert core.attempt_answer(nowhere, "us/new") == core.Refuse(
        503, "Unplaceable", answers.caller_message("Unplaceable")
    )
    assert core.activation_timeout(placed) == 45


def test_the_answer_body_is_json_whatever_the_message_holds():
    message = 'no "H200"\n}{"injected": true'
    body = json.loads(core.error_body(503, "Unplaceable", "m", message))
    assert body == {
        "error": {
            "code": 503,
            "type": "model_unavailable",
            "reason": "Unplaceable",
            "model": "m",
            "message": message,
        }
    }


def test_the_only_write_is_the_annotation():
    assert core.activate_patch("us/1", "modelplane.ai/activate") == {
        "metadata": {"annotations": {"modelplane.ai/activate": "us/1"}}
    }


# A burst sharing one attempt, against the real server: tests/unit/test_activator.py.
