"""`modelplane explain | retry | suggest` as an operator types them: which model a command
line names. The control plane is a stand-in here (its real reads are
tests/runtime/test_operator_cli.py).
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from functions.runtime.operator import cli, fleet_status
from functions.runtime.operator.cli import model_reference


def parked(name: str, namespace: str = "ml-team", last_error: str = "unknown arch") -> dict:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {},
        "status": {
            "desiredReplicas": 1,
            "placedReplicas": 0,
            "readyReplicas": 0,
            "placements": [],
            "parked": {
                "since": "2026-01-01T01:00:00Z",
                "failures": 5,
                "lastError": last_error,
                "definitionHash": "d9",
                "retry": "",
            },
        },
    }


class StandInPlane:
    """The control plane the commands read, holding ModelDeployments by (namespace, name)."""

    def __init__(self, *deployments: dict):
        self.deployments = {
            (d["metadata"]["namespace"], d["metadata"]["name"]): d for d in deployments
        }
        self.asked: list[tuple[str, str]] = []
        self.retried: list[tuple[str, str]] = []

    def deployment(self, namespace: str, name: str) -> dict:
        self.asked.append((namespace, name))
        if (namespace, name) not in self.deployments:
            raise click.ClickException(f"no ModelDeployment {namespace}/{name}")
        return self.deployments[(namespace, name)]

    def replicas_of(self, namespace: str, name: str) -> list:
        return []

    def clusters(self) -> list:
        return []

    def fleet(self, namespace: str | None) -> fleet_status.FleetStatus:
        return fleet_status.summarize([], list(self.deployments.values()), [])

    def set_retry(self, namespace: str, name: str, value: str) -> None:
        self.retried.append((namespace, name))


@pytest.fixture
def plane(monkeypatch) -> StandInPlane:
    stand_in = StandInPlane(parked("deepseek-v3"), parked("deepseek-v3", namespace="default"))
    monkeypatch.setattr(cli, "_plane", lambda ctx: stand_in)
    monkeypatch.setattr(cli, "_namespace_of", lambda kubeconfig, context: "default")
    return stand_in


def run(*args: str) -> click.testing.Result:
    return CliRunner().invoke(cli.main, list(args), prog_name="modelplane")


# --- which model a command line names -------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "namespace", "named"),
    [
        ("deepseek-v3", None, (None, "deepseek-v3")),
        ("deepseek-v3", "ml-team", ("ml-team", "deepseek-v3")),
        ("ml-team/deepseek-v3", None, ("ml-team", "deepseek-v3")),
        ("ml-team/deepseek-v3", "ml-team", ("ml-team", "deepseek-v3")),
    ],
    ids=[
        "a_plain_name_is_in_the_contexts_namespace",
        "a_plain_name_takes_the_namespace_option",
        "namespace_slash_name_as_status_prints_it",
        "the_same_namespace_twice_is_fine",
    ],
)
def test_a_model_is_named_as_status_prints_it_or_by_name_and_namespace(model, namespace, named):
    assert model_reference(model, namespace) == named


def test_a_namespace_option_naming_another_namespace_is_refused():
    with pytest.raises(click.UsageError) as refused:
        model_reference("ml-team/deepseek-v3", "prod")
    assert "in namespace 'ml-team' but -n/--namespace says 'prod'" in str(refused.value)


@pytest.mark.parametrize("model", ["a/b/c", "/deepseek-v3", "ml-team/"])
def test_a_malformed_reference_is_refused_naming_the_forms(model):
    with pytest.raises(click.BadParameter) as refused:
        model_reference(model, None)
    assert "expected NAME or NAMESPACE/NAME" in str(refused.value)


@pytest.mark.parametrize("command", ["explain", "retry", "suggest"])
@pytest.mark.parametrize(
    ("args", "asked"),
    [
        (["ml-team/deepseek-v3"], ("ml-team", "deepseek-v3")),
        (["deepseek-v3", "-n", "ml-team"], ("ml-team", "deepseek-v3")),
        (["deepseek-v3"], ("default", "deepseek-v3")),
    ],
    ids=["namespace_slash_name", "name_and_namespace_option", "name_in_contexts_namespace"],
)
def test_every_model_command_reads_the_model_the_line_names(plane, command, args, asked):
    done = run(command, *args)
    assert done.exit_code == 0, done.output
    assert plane.asked == [asked]


def test_explain_with_a_conflicting_namespace_reads_nothing_and_says_why(plane):
    done = run("explain", "ml-team/deepseek-v3", "-n", "prod")
    assert done.exit_code == 2
    assert "ml-team/deepseek-v3 is in namespace 'ml-team' but -n/--namespace says 'prod'" in (
        done.output
    )
    assert plane.asked == []


def test_retry_unparks_the_model_status_names(plane):
    done = run("retry", "ml-team/deepseek-v3")
    assert done.exit_code == 0, done.output
    assert plane.retried == [("ml-team", "deepseek-v3")]
    assert "`modelplane explain ml-team/deepseek-v3`" in done.output
