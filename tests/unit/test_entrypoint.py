"""The image's entrypoint reaches every component by name or by environment."""

import re
import subprocess
import sys

import pytest

from functions.common.contracts import FUNCTIONS

ENTRYPOINT = [sys.executable, "-m", "functions.entrypoint"]


@pytest.mark.parametrize("function", FUNCTIONS)
def test_entrypoint_serves_each_function_by_name(function):
    done = subprocess.run(
        [*ENTRYPOINT, function, "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f"Serve the {function} composition function" in done.stdout
    assert "--tls-server-certs-dir" in done.stdout


def test_entrypoint_takes_the_component_from_the_environment():
    done = subprocess.run(
        [*ENTRYPOINT, "--help"],
        capture_output=True,
        text=True,
        check=False,
        env={"MODELPLANE_COMPONENT": FUNCTIONS[0], "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stderr
    assert FUNCTIONS[0] in done.stdout


def test_entrypoint_names_the_components_when_none_is_given():
    done = subprocess.run(
        ENTRYPOINT, capture_output=True, text=True, check=False, env={"PATH": "/usr/bin:/bin"}
    )
    assert done.returncode != 0
    assert all(f in done.stderr for f in FUNCTIONS)
    assert "runtime" in done.stderr


def test_runtime_commands_say_what_they_need():
    done = subprocess.run(
        [*ENTRYPOINT, "runtime", "agent"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "Missing option '--cluster'" in done.stderr
    done = subprocess.run(
        [*ENTRYPOINT, "runtime", "scaler", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "external-push" in done.stdout


def test_entrypoint_dispatches_the_operator_commands():
    done = subprocess.run(
        [*ENTRYPOINT, "status", "--help"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "json|yaml" in done.stdout or "[table|json|yaml]" in done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["--kubeconfig", "/nonexistent/kubeconfig", "status"],
        ["--kubeconfig=/nonexistent/kubeconfig", "status", "-o", "json"],
        ["--context", "prod", "--kubeconfig", "/nonexistent/kubeconfig", "explain", "llama"],
    ],
    ids=["kubeconfig_then_command", "kubeconfig_with_equals", "context_and_kubeconfig"],
)
def test_the_operator_options_may_come_before_the_command_as_with_kubectl(args):
    """`modelplane --kubeconfig FILE status` reaches the operator CLI (which then reads
    that file), instead of being refused as a missing component."""
    done = subprocess.run([*ENTRYPOINT, *args], capture_output=True, text=True, check=False)
    assert "name a component" not in done.stderr, done.stderr
    assert "cannot load the kubeconfig" in done.stderr, done.stderr


def test_an_option_value_that_looks_like_a_command_is_not_one():
    from functions.entrypoint import _operator_command  # noqa: PLC0415

    assert not _operator_command(["--kubeconfig", "status"])  # a file named status, no command
    assert not _operator_command(["--verbose", "status"])  # not an operator option
    assert _operator_command(["--kubeconfig", "status", "status"])


def test_help_lists_the_operators_commands_and_every_component():
    from functions.runtime.operator.cli import COMMANDS  # noqa: PLC0415

    for flag in ("--help", "-h"):
        done = subprocess.run(
            [*ENTRYPOINT, flag], capture_output=True, text=True, check=False, env=NO_COMPONENT
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("Usage: modelplane ")
        listed = _listed(done.stdout)
        assert [n for n in listed if n in COMMANDS] == list(COMMANDS)
        assert [n for n in listed if n not in COMMANDS] == [*FUNCTIONS, "runtime"]
        assert "--kubeconfig FILE" in done.stdout
        assert "agent, scaler" in done.stdout  # the runtime names its subcommands


@pytest.mark.parametrize("args", [["bogus"], ["stauts", "-n", "ml"], []], ids=str)
def test_an_unknown_command_gets_the_same_list_and_one_error_line(args):
    done = subprocess.run(
        [*ENTRYPOINT, *args], capture_output=True, text=True, check=False, env=NO_COMPONENT
    )
    assert done.returncode == 2
    assert done.stdout == ""
    helped = subprocess.run(
        [*ENTRYPOINT, "--help"], capture_output=True, text=True, check=False, env=NO_COMPONENT
    )
    listing, _, error = done.stderr.rpartition("\nError: ")
    assert listing == helped.stdout
    assert error.count("\n") == 1  # one line
    if args:
        assert f"{args[0]!r} is not a modelplane command or component" in error
    else:
        assert "name a command or a component" in error


def test_an_operator_option_without_a_known_command_is_the_operator_clis_to_refuse():
    done = subprocess.run(
        [*ENTRYPOINT, "--kubeconfig", "/nonexistent", "stauts"],
        capture_output=True,
        text=True,
        check=False,
        env=NO_COMPONENT,
    )
    assert done.returncode == 2
    assert "No such command 'stauts'" in done.stderr


NO_COMPONENT = {"PATH": "/usr/bin:/bin"}


def _listed(text: str) -> list[str]:
    """The names the help's Commands and Components sections list, in order."""
    names = []
    section = None
    for line in text.splitlines():
        if line and not line.startswith(" "):
            section = line
        elif section in ("Commands:", "Components:") and re.match(r"  \S", line):
            names.append(line.split()[0])
    return names
