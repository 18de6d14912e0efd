"""`modelplane runtime agent --interval STEP=SECONDS`: the agent's step cadence, which the
fleet box sets faster than a cluster's defaults; bad values are refused naming the option."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from functions.runtime.agent import AgentConfig
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
