"""The PrometheusRule the package ships, checked by the real Prometheus tooling: every
rule parses (`promtool check rules`), every alert fires on the series the agents export
and stays quiet when it should (`promtool test rules`), and every metric a rule names is
one the runtime exports.

promtool comes with the pinned Prometheus (Debian's package, linked by hack/tools.sh).
"""

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from functions.runtime.hub.metrics import HUB_HISTOGRAMS, HUB_METRICS
from functions.runtime.operator.model_health import MODEL_HEALTH_METRICS
from functions.runtime.shared import metrics as election_metrics
from functions.runtime.shared.cert_expiry import CERTIFICATE_EXPIRY
from tests.conftest import REPO, require_tool

RULE = REPO / "package" / "prometheusrule.yaml"
PLAIN_RULES = REPO / "package" / "prometheus-rules.yaml"


@pytest.fixture(scope="module")
def promtool() -> Path:
    prometheus = require_tool("prometheus")
    path = Path(os.path.realpath(prometheus)).parent / "promtool"
    if not path.exists():
        pytest.fail(f"promtool is not next to {os.path.realpath(prometheus)}")
    return path


@pytest.fixture(scope="module")
def rule_file(tmp_path_factory) -> Path:
    rule = yaml.safe_load(RULE.read_text())
    assert rule["kind"] == "PrometheusRule"
    path = tmp_path_factory.mktemp("rules") / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
    return path


def test_every_rule_parses(promtool, rule_file):
    done = subprocess.run(
        [str(promtool), "check", "rules", str(rule_file)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 12 rules found" in done.stdout


def test_rules_name_only_metrics_the_runtime_exports():
    exported = (
        set(HUB_METRICS)
        | set(MODEL_HEALTH_METRICS)
        | {election_metrics.HUB_LEADING, election_metrics.FLEET_MEMBERS}
        | {CERTIFICATE_EXPIRY}
    )
    # A histogram is exported as its _count, _sum and _bucket series.
    exported |= {f"{m}_{s}" for m in HUB_HISTOGRAMS for s in ("count", "sum", "bucket")}
    rule = yaml.safe_load(RULE.read_text())
    named = set()
    for group in rule["spec"]["groups"]:
        for r in group["rules"]:
            named |= set(re.findall(r"\b(?:plumb|modelplane)_[a-z_]+", r["expr"]))
    assert named
    assert named <= exported, named - exported


def test_the_plain_rules_file_carries_the_same_groups():
    """For a backend without the Prometheus Operator; regenerate: hack/gen_rules.py."""
    import gen_rules  # noqa: PLC0415  (hack/, on sys.path through tests/conftest.py)

    assert PLAIN_RULES.read_text() == gen_rules.plain_rules(), "run hack/gen_rules.py"


def model(metric: str, deployment: str, values: str) -> dict:
    return {
        "series": f'{metric}{{namespace="ml",deployment="{deployment}"}}',
        "values": values,
    }


def fired(alertname: str, deployment: str, severity: str = "warning") -> dict:
    return {
        "alertname": alertname,
        "exp_alerts": [
            {"exp_labels": {"severity": severity, "namespace": "ml", "deployment": deployment}}
        ],
    }


MODEL_HEALTH_TESTS = [
    {
        # phi should have 2 and has none; llama serves; idle should have none.
        "interval": "1m",
        "input_series": [
            model("modelplane_deployment_desired_replicas", "phi", "2x30"),
            model("modelplane_deployment_ready_replicas", "phi", "0x30"),
            model("modelplane_deployment_desired_replicas", "llama", "2x30"),
            model("modelplane_deployment_ready_replicas", "llama", "2x30"),
            model("modelplane_deployment_desired_replicas", "idle", "0x30"),
            model("modelplane_deployment_ready_replicas", "idle", "0x30"),
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "ModelNotServing", "exp_alerts": []},
            {**fired("ModelNotServing", "phi", "critical"), "eval_time": "20m"},
        ],
    },
    {
        "interval": "1m",
        "input_series": [
            model("modelplane_deployment_parked", "kev", "0 0 1x10"),
            model("modelplane_deployment_parked", "llama", "0x12"),
        ],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "ModelParked", "exp_alerts": []},
            {**fired("ModelParked", "kev"), "eval_time": "5m"},
        ],
    },
    {
        "interval": "1m",
        "input_series": [
            model("modelplane_deployment_unplaceable_replicas", "phi", "1x30"),
            model("modelplane_deployment_unplaceable_replicas", "llama", "0x30"),
        ],
        "alert_rule_test": [
            # Shorter than a placement takes: not yet.
            {"eval_time": "10m", "alertname": "ModelUnplaceable", "exp_alerts": []},
            {**fired("ModelUnplaceable", "phi"), "eval_time": "20m"},
        ],
    },
    {
        # kev climbs to 4 and stays; stuck sits at 3 without climbing; llama never fails.
        "interval": "1m",
        "input_series": [
            model("modelplane_deployment_consecutive_start_failures", "kev", "0 1 2 3 4x40"),
            model("modelplane_deployment_consecutive_start_failures", "stuck", "3x45"),
            model("modelplane_deployment_consecutive_start_failures", "llama", "0x45"),
        ],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "ModelStartFailuresClimbing", "exp_alerts": []},
            {**fired("ModelStartFailuresClimbing", "kev"), "eval_time": "5m"},
            {"eval_time": "30m", "alertname": "ModelStartFailuresClimbing", "exp_alerts": []},
        ],
    },
]

ALERT_TESTS = {
    "rule_files": ["rules.yaml"],
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                {"series": 'plumb_hub_leading{instance="a"}', "values": "0x10"},
                {"series": 'plumb_hub_leading{instance="b"}', "values": "0x10"},
            ],
            "alert_rule_test": [
                {"eval_time": "4m", "alertname": "PlumbNoHub", "exp_alerts": []},
                {
                    "eval_time": "6m",
                    "alertname": "PlumbNoHub",
                    "exp_alerts": [{"exp_labels": {"severity": "critical"}}],
                },
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                {"series": 'plumb_hub_leading{instance="a"}', "values": "0x10"},
                {"series": 'plumb_hub_leading{instance="b"}', "values": "1x10"},
            ],
            "alert_rule_test": [{"eval_time": "8m", "alertname": "PlumbNoHub", "exp_alerts": []}],
        },
        {
            "interval": "1m",
            "input_series": [
                {"series": 'plumb_hub_step_errors_total{policy="ml/llm"}', "values": "0+1x20"},
                {"series": 'plumb_hub_step_errors_total{policy="ml/quiet"}', "values": "0+0x20"},
            ],
            "alert_rule_test": [
                {
                    "eval_time": "12m",
                    "alertname": "PlumbHubStepErrors",
                    "exp_alerts": [{"exp_labels": {"severity": "warning", "policy": "ml/llm"}}],
                }
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                {"series": 'plumb_fleet_escalated{policy="ml/llm"}', "values": "1x40"},
                {"series": 'plumb_fleet_escalated{policy="ml/blip"}', "values": "1x20 0 1x19"},
            ],
            "alert_rule_test": [
                # Escalated since the series began 25 minutes ago: not yet.
                {"eval_time": "25m", "alertname": "PlumbEscalatedTooLong", "exp_alerts": []},
                {
                    "eval_time": "35m",
                    "alertname": "PlumbEscalatedTooLong",
                    "exp_alerts": [{"exp_labels": {"severity": "warning", "policy": "ml/llm"}}],
                },
            ],
        },
        {
            # A ranking error every minute: pending for 15 minutes, then firing.
            "interval": "1m",
            "input_series": [
                {
                    "series": 'plumb_model_request_duration_seconds_count{result="error"}',
                    "values": "0+1x40",
                },
                {
                    "series": 'plumb_model_request_duration_seconds_count{result="ok"}',
                    "values": "0+5x40",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "PlumbModelErrors", "exp_alerts": []},
                {
                    "eval_time": "20m",
                    "alertname": "PlumbModelErrors",
                    "exp_alerts": [{"exp_labels": {"severity": "warning"}}],
                },
            ],
        },
        {
            # Successful ranking calls only: quiet.
            "interval": "1m",
            "input_series": [
                {
                    "series": 'plumb_model_request_duration_seconds_count{result="ok"}',
                    "values": "0+5x40",
                },
                {
                    "series": 'plumb_model_request_duration_seconds_count{result="error"}',
                    "values": "0x40",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "30m", "alertname": "PlumbModelErrors", "exp_alerts": []}
            ],
        },
        {
            # 3 planner errors in 30 minutes is within bounds; the 4th fires.
            "interval": "1m",
            "input_series": [
                {
                    "series": 'plumb_planner_request_duration_seconds_count{result="error"}',
                    "values": "0 1 1 2 2 3x10 4x20",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "10m", "alertname": "PlumbPlannerErrors", "exp_alerts": []},
                {
                    "eval_time": "16m",
                    "alertname": "PlumbPlannerErrors",
                    "exp_alerts": [{"exp_labels": {"severity": "warning"}}],
                },
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                {"series": 'plumb_fleet_members_out_of_sync{policy="ml/llm"}', "values": "1x40"}
            ],
            "alert_rule_test": [
                {"eval_time": "20m", "alertname": "PlumbMembersOutOfSync", "exp_alerts": []},
                {
                    "eval_time": "32m",
                    "alertname": "PlumbMembersOutOfSync",
                    "exp_alerts": [{"exp_labels": {"severity": "warning", "policy": "ml/llm"}}],
                },
            ],
        },
        {
            "interval": "1m",
            "input_series": [
                {
                    "series": 'modelplane_model_consecutive_start_failures{namespace="ml",'
                    'model_replica="kev-east"}',
                    "values": "0 1 2 3x10",
                },
                {
                    "series": 'modelplane_model_consecutive_start_failures{namespace="ml",'
                    'model_replica="llm-east"}',
                    "values": "0x12",
                },
            ],
            "alert_rule_test": [
                {
                    "eval_time": "9m",
                    "alertname": "ModelStartFailures",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "severity": "warning",
                                "namespace": "ml",
                                "model_replica": "kev-east",
                            }
                        }
                    ],
                }
            ],
        },
    ],
}


def render(template: str, labels: dict, value: str) -> str:
    text = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels[m.group(1)], template)
    return text.replace("{{ $value }}", value)


def with_annotations(tests: dict) -> dict:
    """Fill each expected alert's annotations from the rule, as Prometheus renders them."""
    rules = {
        r["alert"]: r
        for group in yaml.safe_load(RULE.read_text())["spec"]["groups"]
        for r in group["rules"]
    }
    values = {"ModelStartFailures": "3", "ModelNotServing": "2", "ModelUnplaceable": "1"}
    for case in tests["tests"]:
        for check in case["alert_rule_test"]:
            for alert in check["exp_alerts"]:
                labels = alert["exp_labels"]
                alert["exp_annotations"] = {
                    key: render(text, labels, values.get(check["alertname"], ""))
                    for key, text in rules[check["alertname"]].get("annotations", {}).items()
                }
    return tests


def run_promtool_tests(promtool: Path, rule_file: Path, tests: dict, name: str) -> None:
    """`promtool test rules` on these cases (annotations filled in) against the rules."""
    path = rule_file.parent / name
    path.write_text(yaml.safe_dump(with_annotations(tests)))
    done = subprocess.run(
        [str(promtool), "test", "rules", str(path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=rule_file.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_alerts_fire_on_the_exported_series_and_stay_quiet_otherwise(promtool, rule_file):
    every = {**ALERT_TESTS, "tests": ALERT_TESTS["tests"] + MODEL_HEALTH_TESTS}
    run_promtool_tests(promtool, rule_file, every, "tests.yaml")
