"""What compose-model-deployment tells a person to fix in a spec (advice.py)."""

from __future__ import annotations

import pytest

from functions.compose_model_deployment.advice import model_option_warnings
from functions.compose_model_deployment.model import read_deployment


def _deployment(engine_type: str, args: list[str], command: list[str] | None = None):
    container = {"name": "engine", "image": "vllm/vllm-openai:v0.32.0", "args": args}
    if command is not None:
        container["command"] = command
    member = {
        "role": "Standalone",
        "nodeSelector": {"cpu": "4", "memory": "8Gi"},
        "template": {"spec": {"containers": [container]}},
    }
    return read_deployment(
        {
            "metadata": {"name": "m", "namespace": "team-a"},
            "spec": {
                "replicas": 1,
                "source": {"uri": "hf://x/y"},
                "template": {
                    "spec": {"engines": [{"name": "e", "type": engine_type, "members": [member]}]}
                },
            },
        }
    )


@pytest.mark.parametrize(
    "args",
    [["--model", "x/y", "--port", "8000"], ["--model=x/y"], ["--dtype", "bf16", "--model", "x"]],
)
def test_a_vllm_model_option_is_called_deprecated_with_the_member_path(args):
    (warning,) = model_option_warnings(_deployment("vllm", args))
    assert warning.startswith("spec.template.spec.engines[0].members[0]")
    assert "`--model`" in warning
    assert "deprecates" in warning


@pytest.mark.parametrize(
    ("engine_type", "args", "command"),
    [
        ("vllm", ["x/y", "--port", "8000"], None),  # the positional model
        ("vllm", ["--port", "8000"], None),  # no model: spec.source names it
        ("vllm", ["x/y"], ["vllm", "serve"]),
        ("sglang", ["--model", "x/y"], ["python3", "-m", "sglang.launch_server"]),  # an alias
    ],
)
def test_no_warning_for_the_spellings_engines_keep(engine_type, args, command):
    assert model_option_warnings(_deployment(engine_type, args, command)) == []
