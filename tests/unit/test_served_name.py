"""The name clients send: read from the user's engine args the way the engines parse them."""

import pytest

from functions.common.served_name import (
    container_served_names,
    served_name_mismatch,
    user_served_names,
)


@pytest.mark.parametrize(
    ("engine_type", "args", "names"),
    [
        ("vllm", ["--model", "m"], ()),
        ("vllm", ["--served-model-name", "a", "b", "--port", "8000"], ("a", "b")),
        ("vllm", ["--served-model-name=a"], ("a",)),
        ("sglang", ["--served-model-name", "a"], ("a",)),
        # An engine we do not know has no served-name flag we could read.
        ("trtllm", ["--served-model-name", "a"], ()),
    ],
)
def test_reads_the_users_served_names(engine_type, args, names):
    assert user_served_names(engine_type, args) == names


def test_reads_a_shell_script_as_the_shell_splits_it():
    container = {"command": ["sh", "-c"], "args": ["exec vllm serve m --served-model-name 'q 1'"]}
    assert container_served_names("vllm", container) == ("q 1",)


def _template(*args):
    return {"spec": {"containers": [{"name": "engine", "args": list(args)}]}}


def test_a_served_name_other_than_the_deployments_is_flagged_with_the_name_to_send():
    message = served_name_mismatch("vllm", _template("--served-model-name", "qwen3"), "qwen-8b")
    assert '"model": "qwen3"' in message
    assert '"qwen-8b"' in message


def test_no_flag_or_the_deployments_own_name_is_not_flagged():
    assert served_name_mismatch("vllm", _template("--model", "m"), "qwen-8b") == ""
    assert (
        served_name_mismatch("vllm", _template("--served-model-name", "x", "qwen-8b"), "qwen-8b")
        == ""
    )
