"""A rollout through the real `crossplane render`, one reconcile after another.

Each step renders the ModelDeployment with the status the step before wrote and the
ModelReplicas it composed as observed resources (with the status a member would report:
rolled to a revision and Ready, or start failures in the engine's words), exactly what
core hands the function on its next reconcile. Nothing else carries state from one step
to the next, so each step is also a restarted function continuing the rollout.

llama-3-1-8b runs on eu-west-1 and us-east-1 (the production clusters of
model_deployment/clusters.yaml); the change is one engine flag. The default policy takes
eu-west-1 (first in name order) in wave 1 and us-east-1 in wave 2.

Each step's whole output is compared with testdata/rollout/<step>/expected.yaml (times the
function took from its clock read `<now>`). Regenerate them after an intended change with

    UPDATE_GOLDEN=1 .venv/bin/pytest tests/render/test_rollout.py

and read the diff before committing it.
"""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
import yaml

import render
from functions.common import conditions, contracts
from tests.ledgers import with_ledgers

TESTDATA = Path(__file__).parent / "testdata"
GOLDEN = TESTDATA / "rollout"
CLUSTERS = TESTDATA / "model_deployment" / "clusters.yaml"
UPDATE = os.environ.get("UPDATE_GOLDEN", "") == "1"
_TIMESTAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
# Times written by hand into a step's inputs (kept in the goldens as they are).
LONG_AGO = "2026-01-01T00:00:00Z"
_FIXED_TIMES = {"2024-01-01T00:00:00Z", LONG_AGO}
ENGINE_WORDS = "vllm: error: unrecognized arguments: --max-num-seqz 64"

DEPLOYMENT = {
    "apiVersion": contracts.API_GROUP_VERSION,
    "kind": contracts.KIND_MODEL_DEPLOYMENT,
    "metadata": {"name": "llama-3-1-8b", "namespace": "ml-team"},
    "spec": {
        "replicas": 2,
        "source": {"uri": "hf://meta-llama/Llama-3.1-8B-Instruct"},
        "template": {
            "spec": {
                "clusterSelector": {"matchLabels": {"fleet.example.com/tier": "production"}},
                "engines": [
                    {
                        "name": "vllm",
                        "type": "vllm",
                        "members": [
                            {
                                "role": "Standalone",
                                "nodeSelector": {"devices": [{"name": "gpu", "count": 1}]},
                                "template": {
                                    "spec": {
                                        "containers": [
                                            {
                                                "name": "engine",
                                                "image": "vllm/vllm-openai:v0.11.0",
                                                "args": ["--max-num-seqs", "64"],
                                            }
                                        ]
                                    }
                                },
                            }
                        ],
                    }
                ],
            }
        },
    },
}


def with_args(*args: str) -> dict:
    xr = copy.deepcopy(DEPLOYMENT)
    container = xr["spec"]["template"]["spec"]["engines"][0]["members"][0]["template"]["spec"]
    container["containers"][0]["args"] = list(args)
    return xr


GOOD_CHANGE = with_args("--max-num-seqs", "128")
BAD_CHANGE = with_args("--max-num-seqz", "64")


def _normalize(value):
    if isinstance(value, dict):
        return {k: _normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalize(v) for v in value]
    if isinstance(value, str) and _TIMESTAMP.match(value) and value not in _FIXED_TIMES:
        return "<now>"
    return value


class Reconcile:
    """One render: the XR (spec + the status written before) and the observed replicas."""

    def __init__(self, function_servers, tmp_path: Path) -> None:
        self.servers = function_servers
        self.tmp = tmp_path
        self.count = 0

    def __call__(self, xr: dict, observed: list[dict], golden: str = "") -> list[dict]:
        self.count += 1
        workdir = self.tmp / f"step-{self.count}"
        workdir.mkdir()
        (workdir / "xr.yaml").write_text(yaml.safe_dump(xr, sort_keys=False))
        clusters = [d for d in yaml.safe_load_all(CLUSTERS.read_text()) if d]
        (workdir / "required.yaml").write_text(
            yaml.safe_dump_all(with_ledgers(clusters, observed), sort_keys=False)
        )
        observed_path = None
        if observed:
            observed_path = workdir / "observed.yaml"
            observed_path.write_text(yaml.safe_dump_all(observed, sort_keys=False))
        result = render.render(
            self.servers,
            workdir / "xr.yaml",
            required=workdir / "required.yaml",
            observed=observed_path,
        )
        assert result.returncode == 0, result.stderr
        documents = result.documents
        if golden:
            normalized = [_normalize(d) for d in documents]
            path = GOLDEN / golden / "expected.yaml"
            if UPDATE:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(yaml.safe_dump_all(normalized, sort_keys=True, width=100))
            assert path.exists(), f"no golden file {path}: run with UPDATE_GOLDEN=1"
            assert normalized == list(yaml.safe_load_all(path.read_text())), (
                f"render differs from {path.relative_to(render.REPO)}; "
                "regenerate with UPDATE_GOLDEN=1 if the change is intended"
            )
        return documents


def composite(documents: list[dict]) -> dict:
    return documents[0]


def replicas(documents: list[dict]) -> dict[str, dict]:
    """The composed ModelReplicas by cluster."""
    return {
        d["spec"]["cluster"]["name"]: d
        for d in documents[1:]
        if d.get("kind") == contracts.KIND_MODEL_REPLICA
    }


def results(documents: list[dict]) -> list[dict]:
    return [d for d in documents if d.get("kind") == "Result"]


def next_xr(spec_from: dict, documents: list[dict], **annotations: str) -> dict:
    """The XR the next reconcile reads: the (possibly changed) spec, the status written."""
    xr = copy.deepcopy(spec_from)
    if annotations:
        xr["metadata"]["annotations"] = dict(annotations)
    xr["status"] = copy.deepcopy(composite(documents)["status"])
    return xr


def as_observed(
    documents: list[dict], *, rolled: set[str] = frozenset(), failing: set[str] = frozenset()
) -> list[dict]:
    """The composed ModelReplicas as the API server returns them next time, each with the
    status its member reports: `rolled` clusters have every pod of their revision Ready;
    `failing` clusters' new pods exit with the engine's words."""
    out = []
    for cluster, body in sorted(replicas(documents).items()):
        mr = copy.deepcopy(body)
        mr["metadata"]["creationTimestamp"] = LONG_AGO
        spec = mr["spec"]
        status: dict = {"readyReplicas": 0}
        if cluster in rolled:
            status = {"readyReplicas": spec["replicas"], "revision": spec["revision"]}
        if cluster in failing:
            status["health"] = {
                "definitionHash": spec["definitionHash"],
                "consecutiveStartFailures": 6,
                "lastError": ENGINE_WORDS,
                "observedAt": LONG_AGO,
            }
        mr["status"] = status
        out.append(mr)
    return out


def baked(xr: dict) -> dict:
    """The same XR after the bake time has passed (the function reads the clock; the
    status says since when the wave has been Ready)."""
    xr = copy.deepcopy(xr)
    xr["status"]["rollout"]["bakingSince"] = LONG_AGO
    return xr


@pytest.fixture
def reconcile(function_servers, tmp_path) -> Reconcile:
    return Reconcile(function_servers, tmp_path)


@pytest.fixture
def serving(reconcile) -> list[dict]:
    """llama-3-1-8b serving its first revision on both clusters, rollout Complete."""
    first = reconcile(DEPLOYMENT, [])
    assert composite(first)["status"]["rollout"]["phase"] == contracts.ROLLOUT_PHASE_COMPLETE
    settled = reconcile(
        next_xr(DEPLOYMENT, first), as_observed(first, rolled={"eu-west-1", "us-east-1"})
    )
    return settled


def test_a_good_change_rolls_one_cluster_first_then_the_rest(reconcile, serving):
    old = replicas(serving)
    observed = as_observed(serving, rolled={"eu-west-1", "us-east-1"})

    # 1. The change: wave 1 is eu-west-1; us-east-1 keeps what it ran, byte for byte.
    wave1 = reconcile(next_xr(GOOD_CHANGE, serving), observed, golden="good-1-wave-1-starts")
    rollout = composite(wave1)["status"]["rollout"]
    assert (rollout["phase"], rollout["wave"], rollout["waves"]) == ("Progressing", 1, 2)
    now = replicas(wave1)
    assert now["us-east-1"]["spec"] == old["us-east-1"]["spec"]
    assert now["us-east-1"]["metadata"]["labels"] == old["us-east-1"]["metadata"]["labels"]
    assert now["eu-west-1"]["spec"]["revision"] == rollout["revision"] != rollout["previous"]
    assert now["eu-west-1"]["metadata"]["labels"][contracts.LABEL_REVISION] == rollout["revision"]
    args = now["eu-west-1"]["spec"]["engines"][0]["members"][0]["template"]["spec"]
    assert args["containers"][0]["args"] == ["--max-num-seqs", "128"]
    assert any("wave 1/2" in r["message"] and "started" in r["message"] for r in results(wave1))

    # 2. A re-render (or a restarted function) before eu-west-1 has rolled: still wave 1,
    #    nothing composed changes.
    rolling = as_observed(wave1, rolled={"us-east-1"})
    again = reconcile(next_xr(GOOD_CHANGE, wave1), rolling, golden="good-2-wave-1-rolling")
    assert composite(again)["status"]["rollout"]["wave"] == 1
    assert composite(again)["status"]["rollout"]["reason"] == "WaitingForGates"
    assert replicas(again) == replicas(wave1)

    # 3. eu-west-1 rolled and Ready; once the bake time has passed, wave 2 starts.
    ready = as_observed(wave1, rolled={"eu-west-1", "us-east-1"})
    waiting = reconcile(next_xr(GOOD_CHANGE, wave1), ready)
    assert composite(waiting)["status"]["rollout"]["wave"] == 1  # baking from now
    assert composite(waiting)["status"]["rollout"]["bakingSince"]
    wave2 = reconcile(baked(next_xr(GOOD_CHANGE, waiting)), ready, golden="good-3-wave-2-starts")
    rollout = composite(wave2)["status"]["rollout"]
    assert rollout["wave"] == 2
    assert {c: r["spec"]["revision"] for c, r in replicas(wave2).items()} == {
        "eu-west-1": rollout["revision"],
        "us-east-1": rollout["revision"],
    }

    # 4. us-east-1 rolled and Ready, baked: Complete; the new revision is the last good one.
    done_observed = as_observed(wave2, rolled={"eu-west-1", "us-east-1"})
    baking = reconcile(next_xr(GOOD_CHANGE, wave2), done_observed)
    done = reconcile(baked(next_xr(GOOD_CHANGE, baking)), done_observed, golden="good-4-complete")
    rollout = composite(done)["status"]["rollout"]
    assert rollout["phase"] == contracts.ROLLOUT_PHASE_COMPLETE
    assert rollout["previous"] == rollout["revision"]
    assert any("rolled out to every cluster" in r["message"] for r in results(done))


def test_a_bad_flag_rolls_back_after_the_first_wave_with_the_engines_words(reconcile, serving):
    old = replicas(serving)
    observed = as_observed(serving, rolled={"eu-west-1", "us-east-1"})
    wave1 = reconcile(next_xr(BAD_CHANGE, serving), observed)
    assert replicas(wave1)["us-east-1"]["spec"] == old["us-east-1"]["spec"]

    # eu-west-1's new pods exit with the engine's words; its old pod is gone (6 failures,
    # more than parking's 5) — the model still serves its last good revision on us-east-1.
    failing = as_observed(wave1, rolled={"us-east-1"}, failing={"eu-west-1"})
    back = reconcile(next_xr(BAD_CHANGE, wave1), failing, golden="bad-1-rolled-back")
    status = composite(back)["status"]
    rollout = status["rollout"]
    assert rollout["phase"] == contracts.ROLLOUT_PHASE_ROLLED_BACK
    assert rollout["failedGate"]["name"] == "StartFailures"
    assert ENGINE_WORDS in rollout["message"]
    # Every cluster returns to the last good revision, exactly as it ran before.
    for cluster in ("eu-west-1", "us-east-1"):
        assert replicas(back)[cluster]["spec"] == old[cluster]["spec"], cluster
    # Not parked: the failures are the failed revision's, and the last good one serves.
    assert "parked" not in status
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds[conditions.PARKED]["status"] == "False"
    assert any(
        r["severity"] == "SEVERITY_WARNING"
        and "failed" in r["message"]
        and ENGINE_WORDS in r["message"]
        for r in results(back)
    )

    # The next reconcile keeps it rolled back (the same spec is not tried again).
    still = reconcile(
        next_xr(BAD_CHANGE, back), as_observed(back, rolled={"eu-west-1", "us-east-1"})
    )
    assert composite(still)["status"]["rollout"]["phase"] == contracts.ROLLOUT_PHASE_ROLLED_BACK
    assert replicas(still) == replicas(back)


def test_a_paused_rollout_holds_the_clusters_where_they_are(reconcile, serving):
    observed = as_observed(serving, rolled={"eu-west-1", "us-east-1"})
    wave1 = reconcile(next_xr(GOOD_CHANGE, serving), observed)
    ready = as_observed(wave1, rolled={"eu-west-1", "us-east-1"})
    paused_xr = baked(next_xr(GOOD_CHANGE, wave1, **{contracts.ANNOTATION_ROLLOUT_PAUSED: "true"}))
    paused = reconcile(paused_xr, ready, golden="paused")
    rollout = composite(paused)["status"]["rollout"]
    assert (rollout["phase"], rollout["wave"]) == (contracts.ROLLOUT_PHASE_PAUSED, 1)
    assert replicas(paused) == replicas(wave1)
