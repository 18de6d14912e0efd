"""The operator's reading of a rollout (functions/runtime/operator/rollout.py): each
cluster's revision from its ModelReplicas, and what `modelplane rollout pause|resume|undo`
would change — the preview and the annotation patch, or why it refuses."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from functions.common import contracts
from functions.runtime.operator import fleet_status
from functions.runtime.operator import rollout as rollouts

NEW, OLD = "7f3a9c2e1d", "1b2c3d4e5f"


def replica(
    cluster: str,
    revision: str | None,
    *,
    pool: str = "h100",
    label: bool = False,
    rolled: str | None = None,
):
    spec: dict = {"deployment": "llama", "cluster": {"name": cluster}, "nodePool": pool}
    labels = {contracts.LABEL_CLUSTER: cluster}
    if revision and label:
        labels[contracts.LABEL_REVISION] = revision
    elif revision:
        spec["revision"] = revision
    return {
        "metadata": {"name": f"llama-{cluster}-{pool}", "namespace": "ml", "labels": labels},
        "spec": spec,
        # What its workloads rolled to (compose-model-replica): by default, its revision.
        "status": {"revision": revision if rolled is None else rolled},
    }


def deployment(rollout: dict | None, annotations: dict | None = None) -> dict:
    status: dict = {"desiredReplicas": 3, "readyReplicas": 3, "placedReplicas": 3}
    if rollout is not None:
        status["rollout"] = rollout
    return {
        "metadata": {
            "name": "llama",
            "namespace": "ml",
            "resourceVersion": "42",
            "annotations": annotations or {},
        },
        "spec": {},
        "status": status,
    }


def status_rollout(phase: str, **extra) -> dict:
    return {
        "revision": NEW,
        # The last good revision: the revision itself once Complete.
        "previous": NEW if phase == contracts.ROLLOUT_PHASE_COMPLETE else OLD,
        "phase": phase,
        "wave": 1,
        "waves": 2,
        "startedAt": "2026-12-07T02:00:00Z",
        "waveStartedAt": "2026-12-07T02:00:00Z",
        "clusters": [
            {"cluster": "eu-west", "revision": NEW, "since": "2026-12-07T02:00:05Z"},
            {"cluster": "us-east", "revision": OLD, "since": "2026-12-01T00:00:00Z"},
            {"cluster": "us-west", "revision": OLD, "since": "2026-12-01T00:00:00Z"},
        ],
        **extra,
    }


MID_WAVE_ONE = [replica("eu-west", NEW), replica("us-east", OLD), replica("us-west", OLD)]


def read(phase: str | None, annotations: dict | None = None, replicas=MID_WAVE_ONE, **extra):
    raw = None if phase is None else status_rollout(phase, **extra)
    return rollouts.read_rollout(deployment(raw, annotations), replicas)


# --- reading -------------------------------------------------------------------------------


def test_a_model_without_a_rollout_in_its_status_has_none():
    assert read(None) is None
    assert rollouts.read_rollout(deployment({"phase": "Progressing"}), MID_WAVE_ONE) is None


def test_each_clusters_revision_is_what_its_model_replica_is_composed_with():
    # The status still says us-east is on OLD; its ModelReplica already carries NEW (the
    # function composed it, the status write is the next step): the replica wins.
    replicas = [replica("eu-west", NEW), replica("us-east", NEW), replica("us-west", OLD)]
    got = read("Progressing", replicas=replicas)
    assert [(c.cluster, c.revision) for c in got.clusters] == [
        ("eu-west", NEW),
        ("us-east", NEW),
        ("us-west", OLD),
    ]
    # When and why still come from the status's record.
    assert got.clusters[1].since == "2026-12-01T00:00:00Z"


def test_the_revision_label_is_read_when_the_spec_has_none():
    got = read("Progressing", replicas=[replica("eu-west", NEW, label=True)])
    assert got.on(NEW) == ["eu-west"]


def test_a_cluster_with_two_pools_on_two_revisions_shows_both():
    replicas = [replica("eu-west", NEW), replica("eu-west", OLD, pool="a100")]
    got = read("Progressing", replicas=replicas)
    assert got.clusters[0].revision == f"{OLD}+{NEW}"


def test_a_replica_from_before_revisions_is_marked_unknown_not_dropped():
    got = read("Progressing", replicas=[replica("eu-west", None)])
    assert ("eu-west", "?") in [(c.cluster, c.revision) for c in got.clusters]


def test_a_cluster_only_the_status_names_keeps_its_word():
    got = read("Progressing", replicas=[replica("eu-west", NEW)])
    assert [(c.cluster, c.revision) for c in got.clusters] == [
        ("eu-west", NEW),
        ("us-east", OLD),
        ("us-west", OLD),
    ]


def test_gates_and_the_failed_gate_keep_their_numbers():
    got = read(
        "RolledBack",
        failedGate={"name": "errorRate", "observed": 0.1234567, "threshold": 0.05},
        gates=[
            {"name": "ready", "state": "Passed"},
            {"name": "errorRate", "state": "Failed", "observed": 0.1234567, "threshold": 0.05},
            {"name": "timeToFirstTokenP95", "state": "Unmeasured", "threshold": "2s"},
        ],
    )
    assert rollouts.gate_words(got.failed_gate) == "errorRate: observed 0.1235, threshold 0.05"
    assert [rollouts.gate_words(g) for g in got.gates] == [
        "ready Passed",
        "errorRate Failed: observed 0.1235, threshold 0.05",
        "timeToFirstTokenP95 Unmeasured: threshold 2s",
    ]


def test_the_steering_annotations_are_read():
    got = read(
        "Progressing",
        {contracts.ANNOTATION_ROLLOUT_PAUSED: "true", contracts.ANNOTATION_ROLLOUT_UNDO: NEW},
    )
    assert got.paused
    assert got.undo == NEW


# --- steering ------------------------------------------------------------------------------

REFUSALS = [
    # (action, phase, annotations, words the refusal must carry)
    ("pause", None, {}, "no rollout in its status"),
    ("resume", None, {}, "no rollout in its status"),
    ("undo", None, {}, "no rollout in its status"),
    ("pause", "Complete", {}, f"revision {NEW} is Complete on every cluster; nothing to pause"),
    ("undo", "Complete", {}, "change the template back"),
    ("undo", "RolledBack", {}, f"was rolled back to {OLD}"),
    ("pause", "RolledBack", {}, "nothing to pause"),
    ("pause", "Progressing", {contracts.ANNOTATION_ROLLOUT_PAUSED: "true"}, "already paused"),
    ("pause", "Paused", {}, "already paused by its policy (onFailure: Pause)"),
    ("resume", "Progressing", {}, "is not paused"),
    ("resume", "Paused", {}, "paused by its policy (onFailure: Pause)"),
    ("undo", "Progressing", {contracts.ANNOTATION_ROLLOUT_UNDO: NEW}, "rollback is asked"),
]


@pytest.mark.parametrize(("action", "phase", "annotations", "words"), REFUSALS)
def test_a_command_that_would_change_nothing_is_refused_naming_why(
    action, phase, annotations, words
):
    steering = rollouts.plan(action, read(phase, annotations))
    assert steering.patch is None
    assert words in steering.refusal


def test_a_policy_pause_names_the_gate_that_failed():
    got = read(
        "Paused",
        failedGate={"name": "timeToFirstTokenP95", "observed": 3.2, "threshold": 2.0},
    )
    refusal = rollouts.plan_resume(got).refusal
    assert "gate timeToFirstTokenP95: observed 3.2, threshold 2" in refusal


def test_undo_of_a_first_revision_is_refused():
    for previous in ("", NEW):
        got = rollouts.read_rollout(
            deployment({**status_rollout("Progressing"), "previous": previous}), MID_WAVE_ONE
        )
        assert "no previous revision" in rollouts.plan_undo(got).refusal


def test_pause_sets_the_annotation_and_changes_no_cluster():
    steering = rollouts.plan_pause(read("Progressing"))
    assert steering.patch == {"metadata": {"annotations": {"modelplane.ai/rollout-paused": "true"}}}
    assert steering.changes == []
    text = rollouts.preview("ml/llama", steering)
    assert "clusters that change at the next reconcile: none" in text
    assert f"stay on {NEW}: eu-west" in text
    assert f"stay on {OLD} until resumed: us-east, us-west" in text


def test_resume_removes_the_annotation_and_names_the_clusters_still_to_move():
    steering = rollouts.plan_resume(read("Paused", {contracts.ANNOTATION_ROLLOUT_PAUSED: "true"}))
    # A merge patch's null removes the key.
    assert steering.patch == {"metadata": {"annotations": {"modelplane.ai/rollout-paused": None}}}
    text = rollouts.preview("ml/llama", steering)
    assert "continues from wave 1/2" in text
    assert f"still to move to {NEW}, wave by wave: us-east, us-west" in text


def test_resume_clears_a_pause_left_after_the_rollout_ended():
    steering = rollouts.plan_resume(read("Complete", {contracts.ANNOTATION_ROLLOUT_PAUSED: "1"}))
    assert steering.patch == {"metadata": {"annotations": {"modelplane.ai/rollout-paused": None}}}
    assert steering.changes == []


def test_undo_returns_exactly_the_clusters_on_the_new_revision():
    replicas = [replica("eu-west", NEW), replica("us-east", NEW), replica("us-west", OLD)]
    steering = rollouts.plan_undo(read("Progressing", replicas=replicas))
    assert steering.patch == {"metadata": {"annotations": {"modelplane.ai/rollout-undo": NEW}}}
    assert [(c.cluster, c.before, c.after) for c in steering.changes] == [
        ("eu-west", NEW, OLD),
        ("us-east", NEW, OLD),
    ]
    text = rollouts.preview("ml/llama", steering)
    assert f"    eu-west: {NEW} -> {OLD}\n    us-east: {NEW} -> {OLD}\n" in text
    assert f"stay on {OLD}: us-west" in text


def test_undo_of_a_paused_rollout_says_the_pause_stays():
    steering = rollouts.plan_undo(read("Paused", {contracts.ANNOTATION_ROLLOUT_PAUSED: "true"}))
    assert steering.patch is not None
    assert any("rollout-paused stays set" in n for n in steering.notes)


# --- status and explain --------------------------------------------------------------------


def test_status_lists_a_rollout_that_is_not_complete_with_each_clusters_revision():
    stopped = deployment(
        status_rollout(
            "RolledBack",
            reason="StartFailed",
            message="vllm: error: unrecognized arguments: --max-num-seqz",
        )
    )
    done = {
        **deployment(status_rollout("Complete")),
        "metadata": {"name": "qwen", "namespace": "ml"},
    }
    fleet = fleet_status.summarize([], [stopped, done], MID_WAVE_ONE)
    table = fleet_status.render_table(fleet)
    assert "ROLLOUTS (in progress, paused or rolled back):" in table
    row = next(line for line in table.splitlines() if line.startswith("  ml/llama"))
    assert "RolledBack" in row
    assert f"{NEW} <- {OLD}" in row
    assert f"eu-west={NEW}, us-east={OLD}, us-west={OLD}" in row
    assert "unrecognized arguments: --max-num-seqz" in row
    assert not any(line.startswith("  ml/qwen") for line in table.splitlines())
    as_dict = fleet.to_dict()
    llama = next(m for m in as_dict["modelList"] if m["name"] == "llama")
    assert llama["rollout"]["phase"] == "RolledBack"
    assert llama["rollout"]["clusters"][0] == {
        "cluster": "eu-west",
        "revision": NEW,
        "since": "2026-12-07T02:00:05Z",
        "reason": "",
        "rolled": True,
    }


def test_status_has_no_rollout_section_when_every_rollout_is_complete():
    fleet = fleet_status.summarize([], [deployment(status_rollout("Complete"))], MID_WAVE_ONE)
    assert "ROLLOUTS" not in fleet_status.render_table(fleet)


def test_explain_shows_the_phase_the_wave_the_failed_gate_and_every_clusters_revision():
    text = fleet_status.explain(
        deployment(
            status_rollout(
                "Paused",
                reason="GateFailed",
                message="errorRate 0.12 above 0.05 on eu-west",
                failedGate={"name": "errorRate", "observed": 0.12, "threshold": 0.05},
                gates=[{"name": "ready", "state": "Passed"}],
            ),
            {contracts.ANNOTATION_ROLLOUT_PAUSED: "true"},
        ),
        MID_WAVE_ONE,
    )
    assert f"  rollout: Paused {NEW} (from {OLD}), wave 1/2" in text
    assert "    GateFailed: errorRate 0.12 above 0.05 on eu-west" in text
    assert "    failed gate: errorRate: observed 0.12, threshold 0.05" in text
    assert "    gate ready Passed" in text
    assert f"    eu-west: {NEW} (new) (since 2026-12-07T02:00:05Z)" in text
    assert f"    us-east: {OLD} (previous)" in text
    assert "modelplane rollout resume ml/llama" in text


def test_explain_escapes_what_the_engine_said():
    text = fleet_status.explain(
        deployment(status_rollout("RolledBack", message="boom\x1b]52;c;evil\x07")), MID_WAVE_ONE
    )
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "Revision" in text
    assert "rolled back" in text


def test_the_preview_of_a_hostile_revision_is_escaped_by_the_cli_not_the_patch():
    from functions.runtime.operator.terminal import escaped  # noqa: PLC0415

    hostile = "r\x1b[2J"
    got = rollouts.read_rollout(
        deployment({**status_rollout("Progressing"), "revision": hostile}),
        [replica("eu-west", hostile)],
    )
    steering = rollouts.plan_undo(got)
    assert steering.patch["metadata"]["annotations"][contracts.ANNOTATION_ROLLOUT_UNDO] == hostile
    assert "\x1b" not in rollouts.preview("ml/llama", escaped(steering))


def test_explain_of_a_policy_pause_points_at_undo_not_resume():
    text = fleet_status.explain(
        deployment(
            status_rollout("Paused", failedGate={"name": "ready", "observed": 0, "threshold": 1})
        ),
        MID_WAVE_ONE,
    )
    assert "paused by its policy (onFailure: Pause)" in text
    assert "modelplane rollout undo ml/llama" in text
    assert "rollout resume" not in text


def test_a_complete_rollout_names_one_revision_and_marks_no_cluster_new():
    got = read("Complete", replicas=[replica(c, NEW) for c in ("eu-west", "us-east")])
    assert rollouts.headline(got) == f"Complete {NEW}"
    lines = rollouts.explain_lines(got)
    assert not any("(new)" in line or "(previous)" in line for line in lines)


def test_explain_says_since_when_the_wave_bakes():
    got = read("Progressing", bakingSince="2026-12-07T02:03:00Z")
    assert rollouts.explain_lines(got)[1] == (
        "    started 2026-12-07T02:00:00Z; wave 1 started 2026-12-07T02:00:00Z, "
        "baking since 2026-12-07T02:03:00Z"
    )


# --- names the CLI takes -------------------------------------------------------------------

LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"


@settings(max_examples=300, deadline=None)
@given(namespace=st.text(max_size=70), name=st.text(max_size=260))
def test_a_name_is_taken_only_when_kubernetes_would_take_it(namespace, name):
    import click  # noqa: PLC0415

    from functions.runtime.operator.cli import checked_names  # noqa: PLC0415

    valid_namespace = re.fullmatch(LABEL, namespace) is not None
    valid_name = len(name) <= 253 and re.fullmatch(rf"{LABEL}(\.{LABEL})*", name) is not None
    if valid_namespace and valid_name:
        assert checked_names(namespace, name) == (namespace, name)
        return
    with pytest.raises(click.BadParameter) as refused:
        checked_names(namespace, name)
    # What is refused is named, and whatever it holds reaches no terminal raw.
    assert "is not a Kubernetes" in refused.value.message
    assert not any(ord(c) < 0x20 or c == "\x7f" for c in refused.value.message)


@settings(max_examples=100, deadline=None)
@given(
    namespace=st.from_regex(LABEL, fullmatch=True),
    name=st.from_regex(rf"{LABEL}(\.{LABEL}){{0,3}}", fullmatch=True).filter(
        lambda n: len(n) <= 253
    ),
)
def test_every_kubernetes_name_is_taken(namespace, name):
    from functions.runtime.operator.cli import checked_names  # noqa: PLC0415

    assert checked_names(namespace, name) == (namespace, name)


def test_a_wave_cluster_whose_workload_has_not_rolled_yet_says_so():
    replicas = [replica("eu-west", NEW, rolled=""), replica("us-east", OLD)]
    got = read("Progressing", replicas=replicas)
    assert [(c.cluster, c.rolled) for c in got.clusters][:2] == [
        ("eu-west", False),
        ("us-east", True),
    ]
    lines = rollouts.explain_lines(got)
    assert f"    eu-west: {NEW} (new, rolling) (since 2026-12-07T02:00:05Z)" in lines
    # One pool rolled, the other not: the cluster has not rolled.
    two = [replica("eu-west", NEW), replica("eu-west", NEW, pool="a100", rolled=OLD)]
    assert not read("Progressing", replicas=two).clusters[0].rolled
