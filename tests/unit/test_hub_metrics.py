"""The agent's metrics as Prometheus scrapes them: names and labels from the operations
guide's table, counters and model-health gauges at 0 from the start, hub-only gauges
gone when the agent is not the hub."""

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from functions.runtime.hub.metrics import HubMetrics


def scrape(registry) -> dict[str, list]:
    families = text_string_to_metric_families(generate_latest(registry).decode())
    out: dict[str, list] = {}
    for family in families:
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if not k.startswith("otel_")}
            out.setdefault(sample.name, []).append((labels, sample.value))
    return out


def metrics():
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    return HubMetrics(provider.get_meter("modelplane-runtime")), registry


def test_every_table_metric_is_exported_with_its_labels():
    m, registry = metrics()
    m.serve_policy("ml-team/llm")
    m.member_report("ml-team/llm", needed=3, static_room=2)
    m.hub_view("ml-team/llm", escalated=True, out_of_sync=1)
    m.decision("ml-team/llm", "AddCapacity", "rule", applied=True)
    m.time_to_ready("ml-team/llm", 95)
    got = scrape(registry)
    policy = {"policy": "ml-team/llm"}
    assert got["plumb_fleet_escalated"] == [(policy, 1.0)]
    assert got["plumb_fleet_members_out_of_sync"] == [(policy, 1.0)]
    assert got["plumb_member_needed_replicas"] == [(policy, 3.0)]
    assert got["plumb_member_static_room_replicas"] == [(policy, 2.0)]
    assert got["plumb_hub_decisions_total"] == [
        ({**policy, "action": "AddCapacity", "source": "rule", "applied": "true"}, 1.0)
    ]
    assert got["plumb_hub_step_errors_total"] == [(policy, 0.0)]
    assert got["plumb_decision_time_to_ready_seconds_count"] == [(policy, 1.0)]
    assert ({**policy, "le": "120"}, 1.0) in got["plumb_decision_time_to_ready_seconds_bucket"]
    assert ({**policy, "le": "60"}, 0.0) in got["plumb_decision_time_to_ready_seconds_bucket"]


def test_hub_only_gauges_disappear_when_the_agent_is_not_the_hub():
    m, registry = metrics()
    m.hub_view("ml-team/llm", escalated=False, out_of_sync=0)
    assert scrape(registry)["plumb_fleet_escalated"] == [({"policy": "ml-team/llm"}, 0.0)]
    m.not_hub()
    got = scrape(registry)
    assert "plumb_fleet_escalated" not in got
    assert "plumb_fleet_members_out_of_sync" not in got


def test_model_health_exists_at_zero_and_follows_the_records():
    m, registry = metrics()
    m.model_health({("ml-team", "llm-east"): (0, 0), ("ml-team", "kev-east"): (5, 0)})
    got = scrape(registry)
    assert got["modelplane_model_consecutive_start_failures"] == [
        ({"namespace": "ml-team", "model_replica": "kev-east"}, 5.0),
        ({"namespace": "ml-team", "model_replica": "llm-east"}, 0.0),
    ]
    assert ({"namespace": "ml-team", "model_replica": "llm-east"}, 0.0) in got[
        "modelplane_model_ready_replicas"
    ]
    m.model_health({("ml-team", "llm-east"): (0, 2)})
    got = scrape(registry)
    assert got["modelplane_model_consecutive_start_failures"] == [
        ({"namespace": "ml-team", "model_replica": "llm-east"}, 0.0)
    ]


def test_step_errors_count_up():
    m, registry = metrics()
    m.serve_policy("a/b")
    m.step_error("a/b")
    m.step_error("a/b")
    assert scrape(registry)["plumb_hub_step_errors_total"] == [({"policy": "a/b"}, 2.0)]
