"""Loading adapters into a member's engines: what is staged per base, what one engine
must load and unload, the readiness gate's condition, and one engine brought to hold
exactly the staged adapters (through an Engine whose transport records the calls)."""

import json
from pathlib import Path

import yaml

from functions.common import adapters as contract
from functions.common.contracts import LABEL_DEPLOYMENT
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse
from functions.runtime.agent import adapters
from tests.unit.test_adapters import REPLICA


def _config(name, path, base="llama", namespace="ml-team"):
    return {
        "metadata": {"namespace": namespace, "labels": {LABEL_DEPLOYMENT: base}},
        "data": {"servedName": name, "path": path},
    }


def test_staged_adapters_are_grouped_by_base_and_unsafe_ones_left_out():
    staged = adapters.staged_by_base(
        [
            _config("tone", "/adapters/tone"),
            _config("sql", "/adapters/sql"),
            _config("other", "/adapters/other", base="qwen"),
            _config("Bad Name", "/adapters/x"),
            _config("escape", "/adapters/../etc"),
            _config("elsewhere", "/models/x"),
        ]
    )
    assert {k: sorted(v) for k, v in staged.items()} == {
        ("ml-team", "llama"): ["sql", "tone"],
        ("ml-team", "qwen"): ["other"],
    }


def test_an_engine_loads_what_is_staged_and_unloads_what_is_not():
    staged = {n: adapters.Staged(n, f"/adapters/{n}") for n in ("a", "b")}
    plan = adapters.plan_pod(staged, {"b", "gone"})
    assert [s.served_name for s in plan.load] == ["a"]
    assert plan.unload == ("gone",)
    assert adapters.plan_pod(staged, {"a", "b"}) == adapters.PodPlan((), ())


class _Recorded:
    """A transport that answers as vLLM 0.32 answers (its /v1/models lists an adapter
    with its `parent`; loading a held name is a 400) and records every call."""

    def __init__(self, held, refuse=None):
        self.held = set(held)
        self.refuse = refuse or {}
        self.calls = []

    def get(self, url):
        self.calls.append(("GET", url))
        return {
            "data": [{"id": "llama", "parent": None}]
            + [{"id": n, "parent": "llama"} for n in sorted(self.held)]
        }

    def post(self, url, body):
        self.calls.append(("POST", url, body))
        name = body["lora_name"]
        if url.endswith("/load_lora_adapter"):
            if name in self.refuse:
                raise adapters.EngineError(f"400 {self.refuse[name]}")
            if name in self.held:
                raise adapters.EngineError(
                    f"400 The lora adapter '{name}' has already been loaded."
                )
            self.held.add(name)
        else:
            self.held.discard(name)


def test_an_engine_is_brought_to_hold_exactly_the_staged_adapters():
    transport = _Recorded({"old"})
    engine = adapters.Engine("http://10.0.0.1:8000", "vllm", transport.get, transport.post)
    staged = {"tone": adapters.Staged("tone", "/adapters/tone")}
    assert adapters.sync_engine(engine, staged) == (frozenset({"tone"}), "")
    assert transport.held == {"tone"}
    assert (
        "POST",
        "http://10.0.0.1:8000/v1/load_lora_adapter",
        {"lora_name": "tone", "lora_path": "/adapters/tone"},
    ) in transport.calls
    assert (
        "POST",
        "http://10.0.0.1:8000/v1/unload_lora_adapter",
        {"lora_name": "old"},
    ) in transport.calls


def test_the_engines_own_error_reaches_the_gate_condition():
    transport = _Recorded(set(), refuse={"big": "LoRA rank 64 is greater than max_lora_rank 16."})
    engine = adapters.Engine("http://10.0.0.1:8000", "vllm", transport.get, transport.post)
    staged = {n: adapters.Staged(n, f"/adapters/{n}") for n in ("big", "tone")}
    held, error = adapters.sync_engine(engine, staged)
    assert (held, "greater than max_lora_rank 16" in error) == (frozenset({"tone"}), True)
    condition = adapters.gate_condition(len(held), 2, error, "2026-12-07T00:00:00Z")
    assert condition["type"] == contract.ADAPTERS_GATE
    assert (condition["status"], condition["reason"]) == ("False", "AdapterLoadFailed")
    assert condition["message"].startswith("loaded 1 of 2 adapters: loading big: 400 LoRA rank 64")
    ok = adapters.gate_condition(2, 2, "", "2026-12-07T00:00:00Z")
    assert (ok["status"], ok["message"]) == ("True", "loaded 2 of 2 adapters")


def test_sglang_is_loaded_through_its_own_endpoints():
    transport = _Recorded(set())
    engine = adapters.Engine("http://10.0.0.2:30000", "sglang", transport.get, transport.post)
    adapters.sync_engine(engine, {"t": adapters.Staged("t", "/adapters/t")})
    assert transport.calls[1][:2] == ("POST", "http://10.0.0.2:30000/load_lora_adapter")


def test_an_engine_pod_of_a_base_that_takes_adapters_waits_for_them_to_count_ready():
    plan = compose(parse(REPLICA))
    workload = next(c for c in plan.composed if c.key.startswith("workload"))
    pod = workload.manifest["spec"]["template"]["spec"]
    assert {"conditionType": contract.ADAPTERS_GATE} in pod["readinessGates"]


def test_an_adapter_the_engine_already_holds_counts_as_loaded():
    transport = _Recorded(set())
    engine = adapters.Engine("http://10.0.0.1:8000", "vllm", transport.get, transport.post)
    transport.get = lambda url: {"data": []}  # a listing a moment old
    engine.get = transport.get
    transport.held = {"tone"}
    staged = {"tone": adapters.Staged("tone", "/adapters/tone")}
    assert adapters.sync_engine(engine, staged) == (frozenset({"tone"}), "")


def test_the_loaded_record_counts_each_adapter_over_the_bases_pods_with_the_first_error():
    staged = {n: adapters.Staged(n, f"/adapters/{n}") for n in ("big", "tone")}
    pods = [
        (frozenset({"tone"}), "loading big: 400 LoRA rank 64 is greater than max_lora_rank 16."),
        (frozenset({"tone", "big"}), ""),
        (frozenset(), ""),  # a new pod, not answering yet
    ]
    record = adapters.loaded_record("ml-team", "llama", staged, pods)
    assert record["metadata"]["name"] == contract.loaded_record_name("llama")
    assert json.loads(record["data"]["tone"]) == {"loaded": 2, "replicas": 3, "error": ""}
    big = json.loads(record["data"]["big"])
    assert (big["loaded"], big["replicas"]) == (1, 3)
    assert big["error"].startswith("loading big: 400 LoRA rank 64")


def test_only_the_pod_that_serves_the_api_waits_for_adapters_a_headless_rank_does_not():
    path = Path(__file__).parent / "testdata/model_replica/inputs/adapters-sglang.yaml"
    plan = compose(parse(yaml.safe_load(path.read_text())))
    workload = next(c for c in plan.composed if c.key.startswith("workload")).manifest
    leader = workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    worker = workload["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]
    assert {"conditionType": contract.ADAPTERS_GATE} in leader["readinessGates"]
    assert "readinessGates" not in worker
    # Both ranks start with the same LoRA flags (the ranks must agree).
    for spec in (leader, worker):
        assert "--enable-lora" in spec["containers"][0]["args"]
