"""`modelplane rollout pause|resume|undo` and the rollout in `status` / `explain`, against
a real kube-apiserver serving the kinds from their XRDs (as test_operator_cli.py does).

Three models of the render tier's first placement, each with its ModelReplicas on three
clusters: one mid-rollout (wave 1 of 2: eu-west-1 on the new revision, dev-1 and
us-east-1 on the previous one), one whose rollout is Complete, one RolledBack. The CLI
runs as an operator runs it, through a kubeconfig; what it wrote is read back from the
API server. Every refusal is checked to have written nothing.
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import jsonschema
import pytest
import yaml
from kubernetes import client

from functions.common import contracts
from functions.common.contracts import API_GROUP, API_VERSION
from tests.conftest import REPO
from tests.runtime.cluster import Member
from tests.runtime.test_operator_cli import CLI, SCHEMA, recorded, start_control_plane

NAMESPACE = "ml-team"
NEW, OLD = "5d41402abc", "7d793037a0"
CLUSTERS = ("dev-1", "eu-west-1", "us-east-1")
PAUSED, UNDO = contracts.ANNOTATION_ROLLOUT_PAUSED, contracts.ANNOTATION_ROLLOUT_UNDO
ENGINE_WORDS = "api_server.py: error: unrecognized arguments: --max-num-seqz"


def _rollout(phase: str, on_new: tuple[str, ...]) -> dict:
    rollout = {
        "revision": NEW,
        # The last good revision: the revision itself once Complete.
        "previous": NEW if phase == contracts.ROLLOUT_PHASE_COMPLETE else OLD,
        "phase": phase,
        "wave": 1,
        "waves": 2,
        "reason": "",
        "message": "",
        "startedAt": "2026-12-07T02:00:00Z",
        "waveStartedAt": "2026-12-07T02:00:00Z",
        "clusters": [
            {
                "cluster": c,
                "revision": NEW if c in on_new else OLD,
                "since": "2026-12-07T02:00:05Z",
                "reason": "Wave1" if c in on_new else "",
            }
            for c in CLUSTERS
        ],
    }
    if phase == contracts.ROLLOUT_PHASE_ROLLED_BACK:
        rollout |= {
            "reason": "StartFailed",
            "message": ENGINE_WORDS,
            "failedGate": {"name": "noStartFailure", "observed": "3", "threshold": "0"},
        }
    return rollout


MODELS = {
    # name: (phase, clusters on the new revision)
    "rolling": (contracts.ROLLOUT_PHASE_PROGRESSING, ("eu-west-1",)),
    "finished": (contracts.ROLLOUT_PHASE_COMPLETE, CLUSTERS),
    "stopped": (contracts.ROLLOUT_PHASE_ROLLED_BACK, ()),
}


def with_rollout_status(crd: dict) -> dict:
    """The ModelDeployment CRD with status.rollout kept: the XRD's own schema for it when
    it declares one (from #41's core), else the field kept as written."""
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    status = schema["properties"]["status"].setdefault("properties", {})
    status.setdefault("rollout", {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    return crd


def _objects(name: str, phase: str, on_new: tuple[str, ...]) -> list[dict]:
    """The first-placement golden's ModelDeployment (renamed) and one ModelReplica per
    cluster, each carrying its revision as the composed ones do (spec.revision and the
    label), with the status a rollout in `phase` writes."""
    golden = recorded("first-placement")
    deployment = copy.deepcopy(next(o for o in golden if o["kind"] == "ModelDeployment"))
    template = next(o for o in golden if o["kind"] == "ModelReplica")
    deployment["metadata"] = {"name": name, "namespace": NAMESPACE}
    deployment["status"]["rollout"] = _rollout(phase, on_new)
    found = [deployment]
    for cluster in CLUSTERS:
        body = copy.deepcopy(template)
        revision = NEW if cluster in on_new else OLD
        body["metadata"] = {
            "name": f"{name}-{cluster}",
            "namespace": NAMESPACE,
            "labels": {
                contracts.LABEL_DEPLOYMENT: name,
                contracts.LABEL_CLUSTER: cluster,
                contracts.LABEL_REVISION: revision,
            },
        }
        body["spec"]["deployment"] = name
        body["spec"]["cluster"]["name"] = cluster
        body["spec"]["revision"] = revision
        found.append(body)
    return found


@pytest.fixture(scope="module")
def control_plane(tmp_path_factory) -> Iterator[Member]:
    workdir = tmp_path_factory.mktemp("rollout-control-plane")
    member = start_control_plane("control-plane", workdir, adjust=with_rollout_status)
    try:
        api = member.client()
        client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
        objects = client.CustomObjectsApi(api)
        for name, (phase, on_new) in MODELS.items():
            for obj in _objects(name, phase, on_new):
                plural = "modeldeployments" if obj["kind"] == "ModelDeployment" else "modelreplicas"
                status = obj.pop("status", None)
                created = objects.create_namespaced_custom_object(
                    API_GROUP, API_VERSION, NAMESPACE, plural, obj
                )
                if status:
                    created["status"] = status
                    objects.replace_namespaced_custom_object_status(
                        API_GROUP, API_VERSION, NAMESPACE, plural, obj["metadata"]["name"], created
                    )
        api.close()
        yield member
    finally:
        member.close()


@pytest.fixture(scope="module")
def kubeconfig(control_plane: Member, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("kubeconfig") / "config"
    path.write_text(yaml.safe_dump(control_plane.kubeconfig(namespace=NAMESPACE)))
    return path


def run(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        check=False,
        env={"KUBECONFIG": str(kubeconfig), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
    )


def annotations(control_plane: Member, name: str) -> dict:
    api = control_plane.client()
    try:
        got = client.CustomObjectsApi(api).get_namespaced_custom_object(
            API_GROUP, API_VERSION, NAMESPACE, "modeldeployments", name
        )
    finally:
        api.close()
    return {k: v for k, v in (got["metadata"].get("annotations") or {}).items() if "rollout" in k}


def annotate(control_plane: Member, name: str, values: dict) -> None:
    api = control_plane.client()
    try:
        client.CustomObjectsApi(api).patch_namespaced_custom_object(
            API_GROUP,
            API_VERSION,
            NAMESPACE,
            "modeldeployments",
            name,
            {"metadata": {"annotations": values}},
        )
    finally:
        api.close()


@pytest.fixture
def clean(control_plane: Member) -> Iterator[None]:
    """Every model without steering annotations before and after the test."""
    for name in MODELS:
        annotate(control_plane, name, {PAUSED: None, UNDO: None})
    yield
    for name in MODELS:
        annotate(control_plane, name, {PAUSED: None, UNDO: None})


@pytest.mark.tools
def test_pause_previews_then_writes_only_the_pause_annotation(kubeconfig, control_plane, clean):
    done = run(kubeconfig, "rollout", "pause", f"{NAMESPACE}/rolling")
    assert done.returncode == 0, done.stderr
    preview, written = done.stdout.split("set ", 1)
    assert "clusters that change at the next reconcile: none" in preview
    assert f"stay on {NEW}: eu-west-1" in preview
    assert f"stay on {OLD} until resumed: dev-1, us-east-1" in preview
    assert written.startswith(f"{PAUSED}=true")
    assert annotations(control_plane, "rolling") == {PAUSED: "true"}
    # Again: already paused, refused, nothing else written.
    again = run(kubeconfig, "rollout", "pause", f"{NAMESPACE}/rolling")
    assert again.returncode == 1
    assert f"{NAMESPACE}/rolling is already paused" in again.stderr
    assert annotations(control_plane, "rolling") == {PAUSED: "true"}


@pytest.mark.tools
def test_resume_removes_the_pause_and_names_the_clusters_still_to_move(
    kubeconfig, control_plane, clean
):
    refused = run(kubeconfig, "rollout", "resume", "rolling")
    assert refused.returncode == 1
    assert "is not paused" in refused.stderr
    annotate(control_plane, "rolling", {PAUSED: "true"})
    done = run(kubeconfig, "rollout", "resume", "rolling", "-n", NAMESPACE)
    assert done.returncode == 0, done.stderr
    assert f"still to move to {NEW}, wave by wave: dev-1, us-east-1" in done.stdout
    assert f"removed {PAUSED}" in done.stdout
    assert annotations(control_plane, "rolling") == {}


@pytest.mark.tools
def test_undo_dry_run_previews_and_writes_nothing(kubeconfig, control_plane, clean):
    done = run(kubeconfig, "rollout", "undo", f"{NAMESPACE}/rolling", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert f"    eu-west-1: {NEW} -> {OLD}\n" in done.stdout
    assert "--dry-run: nothing written." in done.stdout
    assert annotations(control_plane, "rolling") == {}


@pytest.mark.tools
def test_undo_names_the_revision_in_progress(kubeconfig, control_plane, clean):
    done = run(kubeconfig, "rollout", "undo", f"{NAMESPACE}/rolling")
    assert done.returncode == 0, done.stderr
    assert done.stdout.index(f"eu-west-1: {NEW} -> {OLD}") < done.stdout.index("set ")
    assert f"stay on {OLD}: dev-1, us-east-1" in done.stdout
    assert annotations(control_plane, "rolling") == {UNDO: NEW}


@pytest.mark.tools
@pytest.mark.parametrize(
    ("action", "model", "words"),
    [
        ("pause", "finished", f"revision {NEW} is Complete on every cluster; nothing to pause"),
        ("undo", "finished", "change the template back"),
        ("undo", "stopped", f"was rolled back to {OLD} (StartFailed)"),
        ("resume", "stopped", "nothing to resume"),
    ],
)
@pytest.mark.usefixtures("clean")
def test_a_model_without_a_rollout_in_progress_is_refused_and_left_alone(
    kubeconfig, control_plane, action, model, words
):
    done = run(kubeconfig, "rollout", action, f"{NAMESPACE}/{model}")
    assert done.returncode == 1
    assert words in done.stderr
    assert done.stdout == ""  # no preview: nothing would change
    assert annotations(control_plane, model) == {}


@pytest.mark.tools
@pytest.mark.parametrize(
    ("model", "words"),
    [
        ("ml-team/Rolling", "'Rolling' is not a Kubernetes object name"),
        ("ML_team/rolling", "namespace 'ML_team' is not a Kubernetes namespace name"),
        ("ml-team/rolling\x1b[2J", "'rolling\\x1b[2J' is not a Kubernetes object name"),
        ("ml-team/" + "a" * 254, "at most 253"),
    ],
)
def test_a_name_kubernetes_would_not_take_is_refused_before_any_request(
    kubeconfig, control_plane, model, words
):
    done = run(kubeconfig, "rollout", "pause", model)
    assert done.returncode == 2
    assert words in done.stderr
    assert "\x1b" not in done.stderr


@pytest.mark.tools
def test_a_write_after_the_rollout_moved_on_is_refused(control_plane, clean):
    import click  # noqa: PLC0415

    from functions.runtime.operator.cli import ControlPlane  # noqa: PLC0415

    api = control_plane.client()
    try:
        plane = ControlPlane(api)
        read = plane.deployment(NAMESPACE, "rolling")
        annotate(control_plane, "rolling", {"example.com/touched": "yes"})  # it moves on
        with pytest.raises(click.ClickException, match="changed since it was read"):
            plane.annotate(NAMESPACE, "rolling", {UNDO: NEW}, read["metadata"]["resourceVersion"])
    finally:
        api.close()
    assert annotations(control_plane, "rolling") == {}


@pytest.mark.tools
def test_status_and_explain_show_the_rollout(kubeconfig):
    done = run(kubeconfig, "status", "-o", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    jsonschema.validate(document, SCHEMA)
    rollouts = {m["name"]: m["rollout"] for m in document["modelList"]}
    assert rollouts["rolling"]["phase"] == "Progressing"
    assert [(c["cluster"], c["revision"]) for c in rollouts["rolling"]["clusters"]] == [
        ("dev-1", OLD),
        ("eu-west-1", NEW),
        ("us-east-1", OLD),
    ]
    table = run(kubeconfig, "status").stdout
    assert "ROLLOUTS (in progress, paused or rolled back):" in table
    assert ENGINE_WORDS in next(line for line in table.splitlines() if "ml-team/stopped" in line)
    section = table.split("ROLLOUTS", 1)[1].split("\n\n", 1)[0]
    assert "ml-team/rolling" in section
    assert "ml-team/finished" not in section  # Complete: nothing to look at
    text = run(kubeconfig, "explain", f"{NAMESPACE}/stopped").stdout
    assert f"  rollout: RolledBack {NEW} (from {OLD})" in text
    assert f"    StartFailed: {ENGINE_WORDS}" in text
    assert "    failed gate: noStartFailure: observed 3, threshold 0" in text
    assert f"    eu-west-1: {OLD} (previous)" in text
    assert f"Next: Revision {NEW} was rolled back" in text
    text = run(kubeconfig, "explain", "rolling").stdout
    assert f"  rollout: Progressing {NEW} (from {OLD}), wave 1/2" in text
    assert f"modelplane rollout pause {NAMESPACE}/rolling" in text
