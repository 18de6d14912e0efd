"""`modelplane runtime agent --interval STEP=SECONDS`: the agent's step cadence, which the
fleet box sets faster than a cluster's defaults; bad values are refused naming the option."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from functions.runtime.agent.loop import AgentConfig
from functions.runtime.cli import AGENT_STEPS, main, parse_intervals


def test_intervals_become_the_agents_config_fields():
    steps = parse_intervals(("report=2", "hub=0.5", "collector=2", "health=5"))
    assert steps == {
        "report_interval": 2.0,
        "hub_interval": 0.5,
        "collector_interval": 2.0,
        "health_interval": 5.0,
    }
    config = AgentConfig(cluster="a", **parse_intervals(tuple(f"{s}=3" for s in AGENT_STEPS)))
    assert {getattr(config, f"{s}_interval") for s in AGENT_STEPS} == {3.0}


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("reports=2", "the step must be one of signal, collector, report, hub, health"),
        ("report", "seconds must be a number above 0"),
        ("report=0", "seconds must be a number above 0 and at most 3600"),
        ("report=-1", "seconds must be a number above 0"),
        ("report=fast", "seconds must be a number above 0"),
        ("hub=3601", "at most 3600"),
    ],
)
def test_bad_intervals_are_refused_naming_the_option(value, says):
    with pytest.raises(click.BadParameter) as raised:
        parse_intervals((value,))
    assert says in str(raised.value)
    result = CliRunner().invoke(
        main, ["agent", "--cluster=a", "--pod=p", "--member=a=in-cluster", f"--interval={value}"]
    )
    assert result.exit_code == 2
    assert "--interval" in result.output
    assert says in result.output


class _Started(Exception):
    """Raised by the stand-in loop: the agent got as far as starting its steps."""


def _agent_config_from(monkeypatch, *args: str) -> dict:
    """The keyword arguments `modelplane-runtime agent ARGS` starts its loop with (the
    election and the API clients stubbed: only the command line is under test)."""
    from functions.runtime import cli  # noqa: PLC0415
    from functions.runtime.agent import loop as agent_module  # noqa: PLC0415

    seen: dict = {}

    def start_loop(*_args, **kwargs):
        seen.update(kwargs)
        raise _Started

    class _Election:
        def start(self):
            return self

    monkeypatch.setattr(cli, "election_agent", lambda *a, **k: _Election())
    monkeypatch.setattr(cli, "client_for", lambda source: object())
    monkeypatch.setattr(agent_module, "start_loop", start_loop)
    result = CliRunner().invoke(
        main,
        ["agent", "--cluster=a", "--pod=p", "--member=a=in-cluster", "--metrics-port=0", *args],
    )
    assert isinstance(result.exception, _Started), result.output
    return seen


def test_idle_after_defaults_to_ten_minutes_and_reaches_the_inventory(monkeypatch):
    from functions.common.inventory import IDLE_AFTER_SECONDS  # noqa: PLC0415

    assert _agent_config_from(monkeypatch)["idle_after"] == IDLE_AFTER_SECONDS == 600
    assert _agent_config_from(monkeypatch, "--idle-after=20")["idle_after"] == 20.0
    assert AgentConfig(cluster="a").idle_after == IDLE_AFTER_SECONDS


@pytest.mark.parametrize("value", ["0", "-5", "soon", "86401"])
def test_a_bad_idle_after_is_refused_naming_the_option(value):
    result = CliRunner().invoke(
        main, ["agent", "--cluster=a", "--pod=p", "--member=a=in-cluster", f"--idle-after={value}"]
    )
    assert result.exit_code == 2
    assert "--idle-after" in result.output
