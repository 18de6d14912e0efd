"""LoRA adapters on the real engine: the launch line compose-model-replica composes for a
base that accepts adapters, run as a real vLLM process (the pinned CPU build, the tiny
model), and the member agent's own loader (functions/runtime/agent/adapters.py) loading
adapters made here into it while it runs.

The engine is started once from the composed engine container of the `adapters` replica
fixture: its LoRA flags (`--enable-lora --max-loras 8 --max-lora-rank 16`) and its
environment (`VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`) exactly as composed; only what this
machine needs differs (the tiny model for the positional model, a free port, a short
context, eager mode, a small KV cache). Adapters are made in the PEFT layout from seeded
random weights (tests/engines/make_lora.py) into a folder laid out as the base's adapter
volume is (/adapters/<name>), and reach the engine only through `sync_engine`, the code
the agent runs each turn:

- two adapters answer by their served names; at temperature 0 with a fixed seed, each
  completion differs from the base's and from the other's (the weights are applied);
- a third, staged while the engine runs, answers at once, from the same process (its
  PID and start time unchanged): no restart;
- an adapter no longer staged is unloaded and its name answers 404 naming it;
- adapter applied → first token, median of 3 (printed; held within 15 s).

What this does not cover (the fleet box does, tests/e2e): the control plane composing the
staging, the readiness gate held by a real kubelet, and requests through a route.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from functions.common import adapters as contract
from functions.compose_model_replica.compose import compose
from functions.compose_model_replica.model import parse
from functions.runtime.agent import adapters as loader
from tests.conftest import require_tool
from tests.unit.test_adapters import REPLICA

HERE = Path(__file__).resolve().parent
READY_SECONDS = 420.0
ANSWER_SECONDS = 30.0
FIRST_TOKEN_BUDGET = 15.0
PROMPT = "def fibonacci(n):"
COMPLETION = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, "seed": 7}
MACHINE_ARGS = {"--max-model-len": "512"}
MACHINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_CONFIGURE_LOGGING": "1",
}

pytestmark = pytest.mark.tools


def composed_engine() -> tuple[list[str], dict[str, str]]:
    """The engine container's args and plain env as compose-model-replica composes them
    for a base that accepts adapters."""
    plan = compose(parse(copy.deepcopy(REPLICA)))
    workload = next(c for c in plan.composed if c.key.startswith("workload"))
    container = workload.manifest["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}
    return [str(a) for a in container["args"]], env


def _tiny_model() -> Path:
    """The tiny model hack/tools/vllm.sh makes, beside the tools' bin folder."""
    model = require_tool("vllm", tool="vllm").parent.parent / "tiny-model"
    if not (model / "config.json").exists():
        pytest.fail(f"no tiny model at {model}: run 'bash hack/tools.sh vllm'")
    return model.resolve()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(url: str, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as rsp:
            return rsp.status, json.loads(rsp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"{}")


class RunningEngine:
    def __init__(self, process: subprocess.Popen, url: str, served: str, log: Path):
        self.process, self.url, self.served, self.log = process, url, served, log

    def complete(self, model: str) -> tuple[int, dict]:
        return _post(self.url + "/v1/completions", {**COMPLETION, "model": model})

    def text(self, model: str) -> str:
        status, body = self.complete(model)
        assert status == 200, (model, status, body)
        return body["choices"][0]["text"]

    def started_at(self) -> str:
        return Path(f"/proc/{self.process.pid}/stat").read_text().split()[21]


@pytest.fixture(scope="module")
def engine(tmp_path_factory) -> RunningEngine:
    vllm = require_tool("vllm", tool="vllm")
    model = _tiny_model()
    args, env = composed_engine()
    assert {"--enable-lora", "--max-loras", "--max-lora-rank"} <= set(args)
    assert env[contract.VLLM_RUNTIME_LORA_ENV] == "True"
    port = _free_port()
    served = args[args.index("--served-model-name") + 1]
    line = [str(model), *args[1:]]  # the positional model: the tiny model here
    line[line.index("--port") + 1] = str(port)
    for flag, value in MACHINE_ARGS.items():
        line[line.index(flag) + 1] = value
    line += ["--enforce-eager", "--distributed-executor-backend", "uni"]
    log = tmp_path_factory.mktemp("engine") / "engine.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(vllm), "serve", *line],
            env={**os.environ, **env, **MACHINE_ENV},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + READY_SECONDS
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"the engine exited {process.returncode}:\n{log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as rsp:
                    if rsp.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the engine was not ready in {READY_SECONDS:.0f}s")
            time.sleep(1)
        yield RunningEngine(process, url, served, log)
    finally:
        process.terminate()
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()


@pytest.fixture(scope="module")
def volume(tmp_path_factory, engine) -> Path:
    """The base's adapter volume as its engine pods see it: one folder per adapter."""
    root = tmp_path_factory.mktemp("adapters")
    python = require_tool("vllm", tool="vllm").resolve().parent / "python"
    model = _tiny_model()
    for seed, name in enumerate(("tone", "sql", "late"), start=1):
        subprocess.run(
            [str(python), str(HERE / "make_lora.py"), str(model), str(root / name), str(seed), "8"],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return root


def staged(volume: Path, *names: str) -> dict[str, loader.Staged]:
    return {n: loader.Staged(n, str(volume / n)) for n in names}


def test_two_adapters_answer_by_name_each_with_its_own_weights_applied(engine, volume):
    agent_view = loader.Engine(engine.url, "vllm")
    assert loader.sync_engine(agent_view, staged(volume, "tone", "sql")) == (
        frozenset({"tone", "sql"}),
        "",
    )
    assert agent_view.loaded() == {"tone", "sql"}
    base, tone, sql = (engine.text(m) for m in (engine.served, "tone", "sql"))
    print(f"\n  base: {base!r}\n  tone: {tone!r}\n  sql:  {sql!r}")
    assert len({base, tone, sql}) == 3, (base, tone, sql)
    # Deterministic: the same request answers the same.
    assert engine.text("tone") == tone


def test_an_adapter_staged_while_running_answers_from_the_same_process(engine, volume):
    pid, started = engine.process.pid, engine.started_at()
    agent_view = loader.Engine(engine.url, "vllm")
    began = time.monotonic()
    held, error = loader.sync_engine(agent_view, staged(volume, "tone", "sql", "late"))
    assert (held, error) == (frozenset({"tone", "sql", "late"}), "")
    status, _ = engine.complete("late")
    took = time.monotonic() - began
    print(f"\n  late adapter answered {took:.2f}s after it was staged")
    assert status == 200
    assert took < ANSWER_SECONDS
    assert engine.process.poll() is None
    assert (engine.process.pid, engine.started_at()) == (pid, started)


def test_an_adapter_no_longer_staged_is_unloaded_and_answers_404_naming_it(engine, volume):
    agent_view = loader.Engine(engine.url, "vllm")
    loader.sync_engine(agent_view, staged(volume, "tone", "sql", "late"))
    began = time.monotonic()
    held, error = loader.sync_engine(agent_view, staged(volume, "tone", "late"))
    assert (held, error) == (frozenset({"tone", "late"}), "")
    status, body = engine.complete("sql")
    assert time.monotonic() - began < ANSWER_SECONDS
    assert status == 404, body
    assert "sql" in json.dumps(body)
    assert engine.text("tone")  # the others still answer


def test_adapter_applied_to_first_token_median_of_three(engine, volume):
    agent_view = loader.Engine(engine.url, "vllm")
    timings = []
    for run in range(3):
        loader.sync_engine(agent_view, staged(volume, "tone"))
        name = f"bench-{run}"
        shutil.copytree(volume / "late", volume / name, dirs_exist_ok=True)
        began = time.monotonic()
        loader.sync_engine(agent_view, staged(volume, "tone", name))
        status, body = _post(
            engine.url + "/v1/completions", {**COMPLETION, "model": name, "max_tokens": 1}
        )
        timings.append(time.monotonic() - began)
        assert status == 200, body
    median = statistics.median(timings)
    shown = ", ".join(f"{t:.3f}" for t in timings)
    print(f"\n  adapter applied -> first token: {shown} s, median {median:.3f} s")
    assert median < FIRST_TOKEN_BUDGET
