"""`modelplane status` on the fleet box, with the four states an operator looks for.

One fleet, four models set up at once, each through the real parts that make its state:
- parked: its pods crash-loop (KWOK, the box's `fleetbox.modelplane.ai/fail`), the
  member's agent counts the start failures, compose-model-deployment parks it;
- unplaceable: it asks for a card no pool has (NVIDIA H200), placement says why;
- an idle replica: it serves (the real kube-scheduler binds its pod to a KWOK H100 with a
  DRA device), a real collector scrapes a fake vLLM page for that pod (vLLM's own metric
  names, its request counter constant) and serves the normalized series at the agent's
  in-cluster signals address; the agent (`--idle-after`, seconds in the box) names the
  replica idle in its inventory, which reaches InferenceCluster.status.inventory through
  the observe-only Object;
- on demand at zero: `spec.onDemand` and never asked for, so it should have 0 now.

Then the real CLI, as an operator runs it (`modelplane status` with the control plane's
kubeconfig, in a subprocess): the table and `-o json`, which must validate against the
published schema (schemas/fleet-status.schema.json).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import jsonschema
import pytest
import yaml

from fleetbox.gpu import FAIL_ANNOTATION, FAIL_CRASH_LOOP, example_cluster
from fleetbox.runtime import AGENT_IDLE_AFTER, COLLECTOR_INTERVAL
from fleetbox.wait import is_true, wait_for
from functions.common.contracts import (
    COLLECTOR_SIGNALS_URL,
    LABEL_DEPLOYMENT,
    LABEL_ENGINE,
    LABEL_SERVING,
)
from functions.common.inventory import INVENTORY_RECORD_NAME, INVENTORY_RECORD_NAMESPACE
from functions.compose_serving_stack import collector
from functions.runtime.agent.idle import ANNOTATION_IDLE_MEMORY, REQUEST_COUNTER
from functions.runtime.agent.signals import Scope, parse_page
from tests.collector import engines, harness
from tests.conftest import require_tool
from tests.e2e import claims
from tests.e2e.conftest import measured
from tests.runtime.test_hub_integration import EnginePage, builtin_mapping_resources_parsed

NAMESPACE = "ml-team"
MEMBER = "us-east-1"  # the examples' Standard-stack member: its Deployments get pods
PARKED = "e2e-status-parked"
NOWHERE = "e2e-status-nowhere"
IDLE = "e2e-status-idle"
ON_DEMAND = "e2e-status-on-demand"
MODELS = (PARKED, NOWHERE, IDLE, ON_DEMAND)
H100 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H100 80GB HBM3"'
H200 = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"'
# The idle model's engine page: requests finished so far, and it never moves.
FINISHED = 1234
# Parking is the slowest of the four (five start failures, health records every 5 s,
# two compositions): as in test_parking_live, generous.
ALL_FOUR_SECONDS = 420.0
# A new claim through core, two compositions, provider-kubernetes, the scheduler and KWOK.
FIRST_POD_SECONDS = 300.0
SCHEMA = json.loads((claims.REPO / "schemas" / "fleet-status.schema.json").read_text())
# The console script installed with the distribution, beside the interpreter running us.
CLI = Path(sys.executable).parent / "modelplane"
COLLECTOR_ADDRESS = COLLECTOR_SIGNALS_URL.split("//", 1)[1].split("/", 1)[0]


def _deployment(name: str, *, selector: str = H100) -> dict:
    document = claims.renamed(claims.example("modeldeployments/llama-8b-vllm.yaml"), name)
    spec = document["spec"]
    spec["replicas"] = 1
    spec.pop("autoscaling", None)
    template = spec["template"]
    (device,) = template["spec"]["engines"][0]["members"][0]["nodeSelector"]["devices"]
    # Placement's choice made certain: only us-east-1's H100s match (or, for H200, nothing).
    device["selectors"].append({"cel": selector})
    if name == PARKED:
        template["metadata"].setdefault("annotations", {})[FAIL_ANNOTATION] = FAIL_CRASH_LOOP
    if name == ON_DEMAND:
        spec["onDemand"] = {"activationTimeout": "10m"}
    return document


def _deployments() -> list[dict]:
    return [
        _deployment(PARKED),
        _deployment(NOWHERE, selector=H200),
        _deployment(IDLE),
        _deployment(ON_DEMAND),
    ]


def _poll(what: str, check, timeout: float, every: float = 3.0):
    """`wait_for` at a pace a check that runs a CLI can afford."""

    def paced():
        try:
            return check()
        except Exception:
            time.sleep(every)
            raise

    return wait_for(what, paced, timeout)


def _ready_pod(box) -> dict:
    """The idle model's pod on the member, once it is Running and Ready."""
    found = json.loads(
        box.kubectl(
            MEMBER, "get", "pods", "-n", NAMESPACE, "-l", f"{LABEL_DEPLOYMENT}={IDLE}",
            "-o", "json",
        ).stdout
    )["items"]  # fmt: skip
    ready = [p for p in found if not p["metadata"].get("deletionTimestamp") and is_true(p, "Ready")]
    assert len(ready) == 1, [(p["metadata"]["name"], p.get("status", {})) for p in found]
    return ready[0]


@contextlib.contextmanager
def _engine_collector(folder: Path, pod: dict, page: EnginePage):
    """The member's collector as compose-serving-stack renders it (signals on), scraping
    `page` as the engine pod `pod`; yields its signals URL."""
    otelcol = require_tool("otelcol")
    rendered = collector.render_cluster_collector_config(
        collector.CollectorCluster(MEMBER),
        builtin_mapping_resources_parsed(),
        None,
        signals=True,
        scrape_interval_seconds=COLLECTOR_INTERVAL,
    )
    labels = pod["metadata"]["labels"]
    engine_pod = engines.Pod(
        pod["metadata"]["name"],
        pod["metadata"]["uid"],
        NAMESPACE,
        labels[LABEL_ENGINE],
        labels[LABEL_DEPLOYMENT],
        labels[LABEL_SERVING],
        "",
    )
    engine_pod.port = page.port
    folder.mkdir(parents=True, exist_ok=True)
    overlay = harness.live_overlay(rendered, [engine_pod], folder, "http://unused")
    with harness.running_collector(otelcol, overlay, folder):
        yield harness.signals_url(overlay)


@pytest.fixture(scope="module")
def fleet_of_four(box, runtime):
    """The four models applied at once; the idle one's engine page scraped by a real
    collector routed to the agent. Everything removed afterwards (other modules share the
    box and its GPUs)."""
    began = time.monotonic()
    page = EnginePage()
    page.finished = float(FINISHED)
    stack = contextlib.ExitStack()
    claims.apply_document(box, {"apiVersion": "v1", "kind": "List", "items": _deployments()})
    try:
        pod = wait_for(
            f"{IDLE}'s pod Ready on {MEMBER}", lambda: _ready_pod(box), FIRST_POD_SECONDS
        )
        signals = stack.enter_context(_engine_collector(box.root / "status-live", pod, page))
        runtime.route(MEMBER, COLLECTOR_ADDRESS, signals.split("//", 1)[1].split("/", 1)[0])
        yield {"pod": pod, "signals": signals, "began": began}
    finally:
        runtime.route(MEMBER, COLLECTOR_ADDRESS, None)
        stack.close()
        page.shutdown()
        remote = [
            pair
            for name in MODELS
            for pair in claims.everything_composed_for(box, name, NAMESPACE, deleted_with_it=True)
        ]
        for name in MODELS:
            claims.delete(box, "modeldeployment", name, NAMESPACE)
        claims.wait_gone(box, remote)
        measured("status live: set-up, CLI and clean-up", time.monotonic() - began)


def _modelplane(box, *args: str, env_kubeconfig: bool = True) -> str:
    """The installed `modelplane` command, as an operator runs it: the control plane's
    kubeconfig from KUBECONFIG, or (env_kubeconfig=False) from --kubeconfig."""
    kubeconfig = str(box.kubeconfigs[claims.CONTROL])
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    if env_kubeconfig:
        command, env["KUBECONFIG"] = [str(CLI), *args], kubeconfig
    else:
        command = [str(CLI), "--kubeconfig", kubeconfig, *args]
    done = subprocess.run(
        command, capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _by_name(items: list[dict]) -> dict[str, dict]:
    return {i["name"]: i for i in items if i.get("namespace") == NAMESPACE}


def _all_four(document: dict) -> dict:
    """The JSON once each of the four states has reached the control plane."""
    models = _by_name(document["modelList"])
    missing = [m for m in MODELS if m not in models]
    assert not missing, f"not listed yet: {missing}"
    assert models[PARKED]["state"] == "Parked", models[PARKED]
    assert models[NOWHERE]["state"] == "Unplaceable", models[NOWHERE]
    assert models[IDLE]["state"] == "Satisfied", models[IDLE]
    assert models[ON_DEMAND]["onDemand"] == "Idle", models[ON_DEMAND]
    assert models[ON_DEMAND]["state"] == "Satisfied", models[ON_DEMAND]
    idle = [r for r in document["inventory"]["idleReplicas"] if r["deployment"] == IDLE]
    assert idle, f"no idle replica yet: {document['inventory']}"
    return document


def _rows(table: str, title: str) -> dict[str, list[str]]:
    """A section of the table (the line starting with `title`, then its header), as
    rows of cells keyed by the first."""
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    if not title.startswith("MODEL"):
        start += 1  # a titled section: the title line, then the header
    rows = {}
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows[cells[0]] = cells
    return rows


def test_status_shows_a_parked_an_unplaceable_an_idle_and_an_on_demand_model(box, fleet_of_four):
    document = _poll(
        "all four states in `modelplane status -o json`",
        lambda: _all_four(json.loads(_modelplane(box, "status", "-o", "json"))),
        ALL_FOUR_SECONDS,
        every=8.0,
    )
    document, table = _table_between_equal_documents(box, document)
    measured(
        "status live: four set-ups until the CLI shows them",
        time.monotonic() - fleet_of_four["began"],
    )
    print(table)  # the table a user sees (docs/operating.md's copy comes from a run like this)

    jsonschema.validate(document, SCHEMA)
    assert yaml.safe_load(_modelplane(box, "status", "-o", "yaml"))["schema"] == document["schema"]
    replica = fleet_of_four["pod"]["metadata"]["labels"][LABEL_SERVING]
    _check_document(box, document, replica, fleet_of_four["signals"])
    _check_table(table, document, replica)


def _table_between_equal_documents(box, document: dict) -> tuple[dict, str]:
    """The table, and a JSON document that holds at the moment it was printed: the
    example models beside ours may still be changing (a replica getting ready), so the
    table is taken between two documents with the same models and totals."""
    for _ in range(5):
        table = _modelplane(box, "status", env_kubeconfig=False)
        after = _all_four(json.loads(_modelplane(box, "status", "-o", "json")))
        same = ("models", "replicas", "modelList", "unplaceable", "parked")
        if all(document[k] == after[k] for k in same):
            return after, table
        document = after
    raise AssertionError("the fleet kept changing between two `modelplane status` runs")


def _check_document(box, document: dict, replica: str, signals: str) -> None:
    models = _by_name(document["modelList"])

    # Parked: why, from the engine's own failure, and the count that parked it.
    parked = _by_name(document["parked"])[PARKED]
    assert parked["failures"] >= 5
    assert "container engine exited 1 (Error) before ready" in parked["lastError"]
    assert models[PARKED]["parked"]["lastError"] == parked["lastError"]
    assert models[PARKED]["ready"] == 0

    # Unplaceable: how many replicas and why (no pool has the card it asks for).
    nowhere = _by_name(document["unplaceable"])[NOWHERE]
    assert nowhere["replicas"] == 1
    assert "has matching devices" in nowhere["reason"]
    assert "NVIDIA H200" in nowhere["reason"]
    assert PARKED not in _by_name(document["unplaceable"])

    # Idle: exactly the replica whose engine page the collector scrapes, with its GPU. The
    # example llama-3-1-8b also serves on us-east-1, but no page carries its counter, and
    # unknown is not idle.
    (idle,) = document["inventory"]["idleReplicas"]
    assert (idle["cluster"], idle["namespace"], idle["name"], idle["deployment"]) == (
        MEMBER, NAMESPACE, replica, IDLE,
    )  # fmt: skip
    assert idle["gpus"] == 1  # the one H100 its ResourceClaim holds
    assert idle["idleSeconds"] >= AGENT_IDLE_AFTER
    report = next(r for r in document["inventory"]["reports"] if r["cluster"] == MEMBER)
    assert report["requestCounters"] == "Available"
    assert report["idleAfterSeconds"] == AGENT_IDLE_AFTER
    # The agent's clock runs on the counter the real collector made of vLLM's own
    # `vllm:request_success_total`: the value it keeps is the one on the signals page.
    assert _counter_the_agent_keeps(box, replica) == _counter_on_page(signals) == FINISHED
    assert (models[IDLE]["ready"], models[IDLE]["desired"]) == (1, 1)

    # Fabrics as the member's pools declare them (the box labels each pool's nodes with its
    # fabricNodeLabel; the agent reads that label, as compose-serving-stack tells it to).
    declared = {
        (MEMBER, fabric["name"]): fabric["nodes"]
        for pool in example_cluster(MEMBER)["spec"]["nodePools"]
        for fabric in pool.get("fabrics") or []
    }
    fabrics = {(f["cluster"], f["name"]): f["nodes"] for f in document["inventory"]["fabrics"]}
    assert declared
    assert {k: fabrics.get(k) for k in declared} == declared, document["inventory"]["fabrics"]

    # On demand, never asked for: it should have 0 now, and has.
    assert (models[ON_DEMAND]["desired"], models[ON_DEMAND]["ready"]) == (0, 0)

    # Counted against what each should have now.
    states = [m["state"] for m in document["modelList"]]
    totals = document["models"]
    assert totals["total"] == len(states)
    assert totals["satisfied"] == states.count("Satisfied")
    assert totals["short"] == totals["total"] - totals["satisfied"]


def _check_table(table: str, document: dict, replica: str) -> None:
    """The table says what the JSON says."""
    totals = document["models"]
    first = table.splitlines()[0]
    assert first.split() == [
        "Models:", str(totals["total"]), "total,", str(totals["satisfied"]), "satisfied,",
        str(totals["short"]), "short",
    ], first  # fmt: skip
    row = _rows(table, "PARKED")[f"{NAMESPACE}/{PARKED}"]
    assert int(row[1]) >= 5
    assert "container engine exited 1 (Error) before ready" in row[3]
    row = _rows(table, "UNPLACEABLE")[f"{NAMESPACE}/{NOWHERE}"]
    assert row[1] == "1"
    assert "NVIDIA H200" in row[3]
    idle_title = f"IDLE (serving, nothing asked for {AGENT_IDLE_AFTER}s;"
    assert idle_title in table
    row = _rows(table, "IDLE")[f"{NAMESPACE}/{replica}"]
    assert (row[1], row[2], row[4]) == (MEMBER, IDLE, "1")
    model_rows = _rows(table, "MODEL ")
    assert model_rows[f"{NAMESPACE}/{PARKED}"][1] == "Parked"
    assert model_rows[f"{NAMESPACE}/{NOWHERE}"][1] == "Unplaceable"
    assert model_rows[f"{NAMESPACE}/{IDLE}"][1:4] == ["Satisfied", "1", "1"]
    assert model_rows[f"{NAMESPACE}/{ON_DEMAND}"][1:4] == ["Satisfied (on demand: idle)", "0", "0"]


def _counter_on_page(signals: str) -> float:
    with urllib.request.urlopen(signals, timeout=10) as response:
        page = parse_page(response.read().decode(), time.time())
    samples = page.samples.get(Scope(NAMESPACE, IDLE)) or {}
    counted = [v for (name, _), (v, _) in samples.items() if name == REQUEST_COUNTER]
    assert counted, f"no {REQUEST_COUNTER} for {NAMESPACE}/{IDLE} on the signals page"
    return sum(counted)


def _counter_the_agent_keeps(box, replica: str) -> float:
    record = claims.remote_get(
        box, MEMBER,
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": INVENTORY_RECORD_NAME, "namespace": INVENTORY_RECORD_NAMESPACE}},
    )  # fmt: skip
    assert record is not None, "no inventory record on the member"
    memory = json.loads(record["metadata"]["annotations"][ANNOTATION_IDLE_MEMORY])
    return float(memory[f"{NAMESPACE}/{replica}"][0])
