"""The fleet summary behind `modelplane status`, from recorded control-plane objects."""

import copy
import json
from datetime import UTC, datetime

import jsonschema
import pytest

from functions.runtime.operator import fleet_status
from functions.runtime.operator.fleet_status import (
    STATE_PARKED,
    STATE_PENDING,
    STATE_SATISFIED,
    STATE_SHORT,
    STATE_UNPLACEABLE,
    summarize,
)
from tests.conftest import REPO

SCHEMA = json.loads((REPO / "schemas" / "fleet-status.schema.json").read_text())


def cluster(name, pools, ready="True"):
    return {
        "metadata": {"name": name},
        "spec": {"region": "us-east-1", "stack": "Standard", "nodePools": pools},
        "status": {
            "telemetry": {"mode": "Push"},
            "conditions": [{"type": "Ready", "status": ready}],
        },
    }


def pool(name, nodes, per_node, product="H100"):
    devices = {"driver": "gpu.nvidia.com", "perNode": per_node}
    if product:
        devices["attributes"] = {"productName": {"string": product}}
    return {"name": name, "nodes": nodes, "devices": devices}


def deployment(name, status, namespace="ml"):
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {}, "status": status}


def replica(deployment_name, cluster_name, definition="d1", health=None, namespace="ml"):
    obj = {
        "metadata": {"name": f"{deployment_name}-{cluster_name}", "namespace": namespace},
        "spec": {"deployment": deployment_name, "definitionHash": definition},
        "status": {},
    }
    if health is not None:
        obj["status"]["health"] = health
    return obj


def health(
    failures, definition="d1", error="CrashLoopBackOff: unknown arch", at="2026-01-01T00:00:00Z"
):
    return {
        "definitionHash": definition,
        "consecutiveStartFailures": failures,
        "lastError": error,
        "observedAt": at,
    }


PLACED = deployment(
    "llama",
    {
        "desiredReplicas": 2,
        "placedReplicas": 2,
        "readyReplicas": 2,
        "placements": [
            {"cluster": "us-east", "nodePool": "h100", "replicas": 2, "readyReplicas": 2}
        ],
    },
)
PARKED = deployment(
    "kev",
    {
        "desiredReplicas": 1,
        "placedReplicas": 0,
        "readyReplicas": 0,
        "placements": [],
        "parked": {
            "since": "2026-01-01T01:00:00Z",
            "failures": 5,
            "lastError": "unknown model architecture",
            "definitionHash": "d9",
            "retry": "",
        },
    },
)
UNPLACEABLE = deployment(
    "phi",
    {
        "desiredReplicas": 1,
        "placedReplicas": 0,
        "readyReplicas": 0,
        "placements": [],
        "unplaceable": {
            "replicas": 1,
            "reason": "us-east/h100: 2 nodes lack 8 free devices",
            "since": "2026-01-01T02:00:00Z",
            "warnedAt": "2026-01-01T02:00:00Z",
        },
    },
)
SHORT = deployment(
    "qwen",
    {
        "desiredReplicas": 3,
        "placedReplicas": 3,
        "readyReplicas": 1,
        "placements": [
            {"cluster": "us-east", "nodePool": "h100", "replicas": 1, "readyReplicas": 1},
            {"cluster": "eu-west", "nodePool": "a100", "replicas": 2, "readyReplicas": 0},
        ],
    },
)
PENDING = deployment("new", {})
SCALED_TO_ZERO = deployment(
    "idle", {"desiredReplicas": 0, "placedReplicas": 0, "readyReplicas": 0, "placements": []}
)


@pytest.mark.parametrize(
    ("name", "obj", "state"),
    [
        ("a_model_with_every_desired_replica_ready_is_satisfied", PLACED, STATE_SATISFIED),
        ("a_parked_model_is_parked_never_satisfied", PARKED, STATE_PARKED),
        ("a_model_that_fits_nowhere_is_unplaceable", UNPLACEABLE, STATE_UNPLACEABLE),
        ("a_placed_model_not_yet_ready_is_short", SHORT, STATE_SHORT),
        ("a_model_without_a_written_status_is_pending_not_satisfied", PENDING, STATE_PENDING),
        ("a_model_that_should_have_zero_now_is_satisfied", SCALED_TO_ZERO, STATE_SATISFIED),
        (
            "parked_wins_over_unplaceable",
            deployment("both", {**UNPLACEABLE["status"], "parked": PARKED["status"]["parked"]}),
            STATE_PARKED,
        ),
    ],
)
def test_model_state(name, obj, state):
    assert fleet_status.read_model(obj, []).state == state, name


@pytest.mark.parametrize(
    ("name", "status", "replicas", "failures", "error"),
    [
        ("no_replicas_no_failures", SHORT["status"], [], 0, ""),
        (
            "failures_of_the_current_definition_are_summed_across_clusters",
            SHORT["status"],
            [replica("qwen", "a", health=health(2)), replica("qwen", "b", health=health(1))],
            3,
            "CrashLoopBackOff: unknown arch",
        ),
        (
            "failures_of_an_old_definition_do_not_count",
            SHORT["status"],
            [replica("qwen", "a", health=health(4, definition="d0"))],
            0,
            "",
        ),
        (
            "failures_a_retry_already_spent_do_not_count_again",
            {**SHORT["status"], "retried": {"definitionHash": "d1", "failures": 5}},
            [replica("qwen", "a", health=health(7))],
            2,
            "CrashLoopBackOff: unknown arch",
        ),
        (
            "a_counter_below_the_retry_baseline_starts_a_new_run",
            {**SHORT["status"], "retried": {"definitionHash": "d1", "failures": 5}},
            [replica("qwen", "a", health=health(1))],
            1,
            "CrashLoopBackOff: unknown arch",
        ),
        (
            "mid_rollout_of_a_new_definition_nothing_is_counted",
            SHORT["status"],
            [replica("qwen", "a", health=health(2)), replica("qwen", "b", definition="d2")],
            0,
            "",
        ),
        (
            "a_parked_model_reports_the_failures_that_parked_it",
            PARKED["status"],
            [],
            5,
            "unknown model architecture",
        ),
    ],
)
def test_start_failures(name, status, replicas, failures, error):
    model = fleet_status.read_model(deployment("qwen", status), replicas)
    assert (model.start_failures, model.last_error) == (failures, error), name


def fleet():
    return summarize(
        [
            cluster("us-east", [pool("h100", 2, 8), pool("l4", 4, 1, product=None)]),
            cluster("eu-west", [pool("a100", 1, 8, product="A100")], ready="False"),
        ],
        [PLACED, PARKED, UNPLACEABLE, SHORT, PENDING],
        [replica("qwen", "eu-west", health=health(2))],
    )


def test_summary_counts_models_against_what_they_should_have_now():
    summary = fleet()
    assert summary.models == fleet_status.ModelTotals(total=5, satisfied=1, short=4)
    assert summary.replicas == fleet_status.ReplicaTotals(
        desired=7, placed=5, ready=3, unplaceable=1
    )


def test_summary_names_the_parked_and_the_unplaceable_models():
    summary = fleet()
    assert [m.name for m in summary.parked] == ["kev"]
    assert [m.name for m in summary.unplaceable] == ["phi"]


def test_summary_totals_devices_by_class_with_the_driver_for_unnamed_cards():
    assert [(d.device_class, d.nodes, d.devices) for d in fleet().devices] == [
        ("A100", 1, 8),
        ("H100", 2, 16),
        ("gpu.nvidia.com", 4, 4),
    ]


def test_summary_is_sorted_whatever_the_listing_order():
    shuffled = summarize(
        [
            cluster("eu-west", [pool("a100", 1, 8, product="A100")], ready="False"),
            cluster("us-east", [pool("l4", 4, 1, product=None), pool("h100", 2, 8)]),
        ],
        [SHORT, PENDING, UNPLACEABLE, PARKED, PLACED],
        [replica("qwen", "eu-west", health=health(2))],
    )
    assert shuffled == fleet()


def test_json_document_validates_against_the_published_schema():
    jsonschema.validate(fleet().to_dict(), SCHEMA)
    jsonschema.validate(summarize([], [], []).to_dict(), SCHEMA)


def test_schema_lists_every_state():
    states = SCHEMA["properties"]["modelList"]["items"]["properties"]["state"]["enum"]
    assert sorted(states) == sorted(fleet_status.STATES)


def test_table_puts_parked_and_unplaceable_first_with_their_reasons():
    table = fleet_status.render_table(fleet())
    assert table.index("PARKED") < table.index("UNPLACEABLE (") < table.index("\nMODEL ")
    assert "ml/kev" in table
    assert "unknown model architecture" in table
    assert "us-east/h100: 2 nodes lack 8 free devices" in table
    assert "Models:    5 total, 1 satisfied, 4 short" in table
    assert "eu-west/a100=0/2" in table


def test_explain_says_what_to_do_next():
    text = fleet_status.explain(PARKED, [])
    assert "parked since 2026-01-01T01:00:00Z after 5 consecutive start failures" in text
    assert "modelplane retry ml/kev" in text
    text = fleet_status.explain(SHORT, [replica("qwen", "eu-west", health=health(2))])
    assert "eu-west/a100: 0 of 2 ready" in text
    assert "2 consecutive start failures" in text


def test_explain_lists_the_launch_warnings_with_the_clusters_that_reported_them():
    deployment = copy.deepcopy(SHORT)
    deployment["status"]["warnings"] = [
        {
            "field": "spec.template.spec.engines[0].members[0].template.spec.containers[0].image",
            "reason": "ImageOlderThanChecked",
            "message": "image tag v0.11.0 is older than vLLM v0.32.0, ...",
            "clusters": ["eu-west"],
        },
        {
            "field": "spec.template.spec.engines[0].members[1].worker.nodes",
            "reason": "WorkerNodesOnWorker",
            "message": "worker.nodes is read only on the Leader member ...",
        },
    ]
    text = fleet_status.explain(deployment, [])
    assert (
        "  launch warning ImageOlderThanChecked (on eu-west): "
        "spec.template.spec.engines[0].members[0].template.spec.containers[0].image: "
        "image tag v0.11.0 is older than vLLM v0.32.0, ...\n"
    ) in text
    assert "  launch warning WorkerNodesOnWorker: spec.template" in text


def test_operator_commands_are_the_ones_the_entrypoint_dispatches():
    from functions import entrypoint  # noqa: PLC0415
    from functions.runtime.operator import cli as operator_cli  # noqa: PLC0415

    assert entrypoint.OPERATOR_COMMANDS == operator_cli.COMMANDS


def test_inventory_sums_the_members_reports_and_names_the_clusters_that_have_none():
    reported = {
        "metadata": {"name": "us-east-1"},
        "status": {
            "inventory": {
                "observedAt": "2026-12-01T10:00:00Z",
                "nodes": {"total": 4, "ready": 3, "unreachable": 1},
                "gpus": [{"deviceClass": "H100", "total": 32, "used": 20, "unhealthy": 8}],
                "fabrics": [{"name": "nvl-a", "nodes": 4, "largestFreeBlock": 0}],
                "replicas": {"ready": 2},
                "idleReplicas": [
                    {"namespace": "ml", "name": "a", "idleSeconds": 700, "gpus": 2},
                    {"namespace": "ml", "name": "b", "idleSeconds": 600, "gpus": 8},
                ],
                "requestCounters": "Available",
            }
        },
    }
    silent = {"metadata": {"name": "eu-west-1"}}
    inventory = fleet_status.summarize([silent, reported], [], []).inventory
    assert inventory.missing == ["eu-west-1"]
    assert [(g.device_class, g.free) for g in inventory.gpus] == [("H100", 4)]
    assert inventory.nodes["unreachable"] == 1
    # Most GPUs held first: the first place to find room.
    assert [i.name for i in inventory.idle_replicas] == ["b", "a"]
    table = fleet_status.render_table(fleet_status.summarize([silent, reported], [], []))
    assert "No inventory reported yet by: eu-west-1" in table


def test_explain_shows_each_members_room_for_a_model_that_is_short():
    deployment = {
        "metadata": {"namespace": "ml", "name": "big"},
        "status": {
            "desiredReplicas": 2,
            "unplaceable": {"replicas": 2, "reason": "no pool", "since": "t"},
        },
    }
    reported = {
        "metadata": {"name": "us-east-1"},
        "status": {
            "inventory": {
                "observedAt": "2026-12-01T10:00:00Z",
                "gpus": [{"deviceClass": "H100", "total": 16, "used": 8, "unhealthy": 0}],
                "fabrics": [{"name": "nvl-a", "nodes": 2, "largestFreeBlock": 1}],
            }
        },
    }
    text = fleet_status.explain(deployment, [], [reported, {"metadata": {"name": "eu-west-1"}}])
    assert "room on eu-west-1: no inventory reported yet" in text
    assert (
        "room on us-east-1 (as of 2026-12-01T10:00:00Z): H100 8 free of 16; "
        "fabric nvl-a: 1 whole nodes free" in text
    )


def on_demand(name, status):
    obj = deployment(name, status)
    obj["spec"] = {"onDemand": {"idleAfter": "10m"}}
    return obj


IDLE_AT_ZERO = on_demand(
    "idle",
    {"desiredReplicas": 0, "placedReplicas": 0, "readyReplicas": 0, "onDemand": {"state": "Idle"}},
)
ASKED_FITS_NOWHERE = on_demand(
    "asked",
    {
        "desiredReplicas": 1,
        "placedReplicas": 0,
        "readyReplicas": 0,
        "unplaceable": {
            "replicas": 1,
            "reason": "no H200 anywhere",
            "since": "2026-12-01T00:00:00Z",
        },
        "onDemand": {"state": "Active", "activatedAt": "2026-12-01T00:00:00Z"},
    },
)
ASKED_STARTING = on_demand(
    "starting",
    {
        "desiredReplicas": 1,
        "placedReplicas": 1,
        "readyReplicas": 0,
        "onDemand": {"state": "Active"},
    },
)


@pytest.mark.parametrize(
    ("obj", "state", "activity"),
    [
        pytest.param(IDLE_AT_ZERO, "Satisfied", "Idle", id="idle_at_zero_is_satisfied"),
        pytest.param(
            ASKED_FITS_NOWHERE, "Unplaceable", "Active", id="asked_and_fits_nowhere_is_short"
        ),
        pytest.param(ASKED_STARTING, "Short", "Active", id="asked_and_starting_is_short"),
        pytest.param(
            on_demand("new", {}), "Pending", "Idle", id="a_new_on_demand_claim_is_pending"
        ),
        pytest.param(PLACED, "Satisfied", "", id="an_always_on_model_says_nothing_of_demand"),
    ],
)
def test_on_demand_models_count_against_what_they_should_have_now(obj, state, activity):
    model = fleet_status.read_model(obj, [])
    assert (model.state, model.on_demand) == (state, activity)


def test_on_demand_models_in_the_json_and_the_table():
    summary = summarize([], [IDLE_AT_ZERO, ASKED_FITS_NOWHERE], [])
    assert summary.models == fleet_status.ModelTotals(total=2, satisfied=1, short=1)
    document = summary.to_dict()
    jsonschema.validate(document, SCHEMA)
    assert {m["name"]: m["onDemand"] for m in document["modelList"]} == {
        "idle": "Idle",
        "asked": "Active",
    }
    table = fleet_status.render_table(summary)
    assert "Satisfied (on demand: idle)" in table
    assert "Unplaceable (on demand: active)" in table


def _reporting(name, idle_after=None, idle=()):
    inventory = {
        "observedAt": "2026-12-01T10:00:00Z",
        "nodes": {"total": 2, "ready": 2},
        "gpus": [{"deviceClass": "H100", "total": 16, "used": 2, "unhealthy": 0}],
        "replicas": {"ready": 1},
        "idleReplicas": [
            {"namespace": "ml", "name": n, "deployment": "llama", "idleSeconds": s, "gpus": 2}
            for n, s in idle
        ],
        "requestCounters": "Available",
    }
    if idle_after is not None:
        inventory["idleAfterSeconds"] = idle_after
    obj = cluster(name, [pool("h100", 2, 8)])
    obj["status"]["inventory"] = inventory
    return obj


@pytest.mark.parametrize(
    ("case", "idle_after", "says"),
    [
        ("an_agent_that_does_not_say_used_ten_minutes", None, "nothing asked for 10m;"),
        ("a_shorter_setting_is_named_as_set", 45, "nothing asked for 45s;"),
    ],
)
def test_the_idle_list_names_the_threshold_the_agents_used(case, idle_after, says):
    fleet = summarize([_reporting("us-east-1", idle_after, [("llama-us-east-1", 150)])], [], [])
    table = fleet_status.render_table(fleet)
    assert f"IDLE (serving, {says} holding GPUs):" in table
    assert "2m30s" in table  # how long it has been idle, to the second
    document = fleet.to_dict()
    jsonschema.validate(document, SCHEMA)
    (report,) = document["inventory"]["reports"]
    assert report["idleAfterSeconds"] == (600 if idle_after is None else idle_after)


def test_clusters_with_different_thresholds_are_both_named():
    fleet = summarize(
        [_reporting("a", 30, [("x", 40)]), _reporting("b", 600, [("y", 700)])], [], []
    )
    assert "nothing asked for 30s or 10m;" in fleet_status.render_table(fleet)


@pytest.mark.parametrize("mode", ["Push", "Local", "Disabled", ""])
def test_every_telemetry_mode_the_cluster_reports_validates(mode):
    """The InferenceCluster XRD's status.telemetry.mode enum is Push, Local, Disabled: a
    fleet with a Local cluster (no destination, autoscaling on local signals) must still
    give a document the published schema accepts."""
    obj = cluster("us-east-1", [pool("h100", 2, 8)])
    obj["status"]["telemetry"] = {"mode": mode} if mode else {}
    jsonschema.validate(summarize([obj], [], []).to_dict(), SCHEMA)


def test_the_schema_knows_every_telemetry_mode_the_xrd_allows():
    import yaml  # noqa: PLC0415

    xrd = yaml.safe_load((REPO / "apis" / "inferenceclusters" / "definition.yaml").read_text())
    status = xrd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    modes = status["properties"]["telemetry"]["properties"]["mode"]["enum"]
    published = SCHEMA["properties"]["clusters"]["items"]["properties"]["telemetry"]["enum"]
    assert set(published) == {*modes, ""}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (45, "45s"), (60, "1m"), (150, "2m30s"), (600, "10m"), (3900, "1h05m")],
)
def test_durations_read_at_a_glance(seconds, text):
    assert fleet_status.duration(seconds) == text


def test_a_cpu_pool_is_listed_by_its_cpu_and_memory_and_counts_no_devices():
    cpu_pool = {"name": "c7i", "nodes": 2, "maxNodes": 6, "cpu": "31", "memory": "60Gi"}
    fleet = summarize(
        [cluster("us-east", [pool("h100", 2, 8)]), cluster("eu-central", [cpu_pool])],
        [
            deployment(
                "qwen-cpu",
                {
                    "desiredReplicas": 2,
                    "placedReplicas": 2,
                    "readyReplicas": 2,
                    "placements": [
                        {
                            "cluster": "eu-central",
                            "nodePool": "c7i",
                            "replicas": 2,
                            "readyReplicas": 2,
                        }
                    ],
                },
            )
        ],
        [],
    )
    (cpu,) = next(c for c in fleet.clusters if c.name == "eu-central").pools
    assert (cpu.device_class, cpu.devices, cpu.cpu_per_node, cpu.memory_per_node) == (
        "CPU",
        0,
        "31",
        "60Gi",
    )
    # The device totals are devices: a CPU pool adds no "CPU 0" line.
    assert [(d.device_class, d.devices) for d in fleet.devices] == [("H100", 16)]
    table = fleet_status.render_table(fleet)
    assert "c7i=2x(31 CPU, 60Gi)" in table
    assert "h100=2x8 H100" in table
    assert "eu-central/c7i=2/2" in table
    cluster_line = next(line for line in table.splitlines() if line.startswith("eu-central"))
    assert cluster_line.endswith("c7i=2x(31 CPU, 60Gi)")
    jsonschema.validate(fleet.to_dict(), SCHEMA)
    room = fleet_status.room_lines(
        [
            {
                **cluster("eu-central", [cpu_pool]),
                "status": {
                    "inventory": {"observedAt": "2026-01-01T00:00:00Z", "nodes": {"total": 2}}
                },
            }
        ]
    )
    assert room == [
        "  room on eu-central (as of 2026-01-01T00:00:00Z): CPU-only pools c7i=2x(31 CPU, "
        "60Gi) (CPU use not reported)"
    ]


# --- `modelplane explain` for an on-demand model (issue #35, item 4) ----------------------

NOW = datetime(2026, 12, 1, 0, 4, 0, tzinfo=UTC)


def _serving_on(name, cluster_name, activated_at, attempt=None):
    status = {
        "desiredReplicas": 1,
        "placedReplicas": 1,
        "readyReplicas": 1,
        "placements": [
            {"cluster": cluster_name, "nodePool": "h100", "replicas": 1, "readyReplicas": 1}
        ],
        "onDemand": {"state": "Active", "activatedAt": activated_at},
    }
    if attempt:
        status["onDemand"]["attempt"] = attempt
    return on_demand(name, status)


def _member(name, idle=()):
    """An InferenceCluster whose inventory names (deployment, idleSeconds) idle."""
    return {
        "metadata": {"name": name},
        "status": {
            "inventory": {
                "observedAt": "2026-12-01T00:04:00Z",
                "idleReplicas": [
                    {"namespace": "ml", "name": f"{d}-x", "deployment": d, "idleSeconds": s}
                    for d, s in idle
                ],
            }
        },
    }


def test_explain_says_an_idle_on_demand_model_starts_on_its_first_request():
    text = fleet_status.explain(IDLE_AT_ZERO, [], now=NOW)
    assert "on demand: idle, scaled to zero (no pod, no GPU held)" in text
    assert "the first request through the inference Gateway activates it" in text
    # activationTimeout is not set: its default, 5m.
    assert "at most activationTimeout, 5m" in text
    assert "never activated yet" in text
    assert "Next: Nothing to do: it starts when it is asked for." in text


def test_explain_gives_an_idle_model_its_last_activation_and_attempt():
    obj = on_demand(
        "was-used",
        {
            "desiredReplicas": 0,
            "onDemand": {
                "state": "Idle",
                "activatedAt": "2026-11-30T22:00:00Z",
                "attempt": {
                    "id": "us-east/abc",
                    "result": "Placed",
                    "reason": "",
                    "at": "2026-11-30T22:00:00Z",
                },
            },
        },
    )
    obj["spec"]["onDemand"]["activationTimeout"] = "90s"
    text = fleet_status.explain(obj, [], now=NOW)
    assert "at most activationTimeout, 1m30s" in text
    assert "last placement attempt us-east/abc at 2026-11-30T22:00:00Z: Placed\n" in text
    assert "last activated at 2026-11-30T22:00:00Z" in text
    assert "never activated" not in text


def test_explain_says_when_an_active_model_can_go_back_to_idle():
    # Activated 4 minutes ago, idle after 10m: 6 minutes at the earliest.
    recent = _serving_on("hot", "us-east", "2026-12-01T00:00:00Z")
    text = fleet_status.explain(recent, [], [_member("us-east", [("hot", 240)])], now=NOW)
    assert "on demand: active since 2026-12-01T00:00:00Z" in text
    assert "idle in 6m at the earliest if no request comes" in text
    # Activated long ago but idle only 2 minutes on its cluster: 8 more.
    old = _serving_on("warm", "us-east", "2026-11-30T00:00:00Z")
    text = fleet_status.explain(old, [], [_member("us-east", [("warm", 120)])], now=NOW)
    assert "idle in 8m at the earliest" in text
    # Not idle at all where it is ready: no time can be given.
    text = fleet_status.explain(old, [], [_member("us-east")], now=NOW)
    assert "still asked for on us-east" in text
    # Idle long enough everywhere and activated long ago: the next reconcile parks it.
    text = fleet_status.explain(old, [], [_member("us-east", [("warm", 900)])], now=NOW)
    assert "due now: the next reconcile scales it to zero" in text


def test_explain_gives_an_active_models_refused_attempt_with_why():
    text = fleet_status.explain(ASKED_FITS_NOWHERE, [], now=NOW)
    assert "on demand: active since 2026-12-01T00:00:00Z" in text
    assert "no H200 anywhere" in text
    refused = _serving_on(
        "refused",
        "us-east",
        "2026-12-01T00:00:00Z",
        attempt={"id": "a/1", "result": "Unplaceable", "reason": "no H200", "at": "t"},
    )
    text = fleet_status.explain(refused, [], now=NOW)
    assert "last placement attempt a/1 at t: Unplaceable: no H200" in text


def test_explain_says_nothing_of_demand_for_a_model_that_always_runs():
    assert "on demand" not in fleet_status.explain(PLACED, [], now=NOW)
