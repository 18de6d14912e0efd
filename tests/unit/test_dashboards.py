"""The shipped dashboards (hack/dashboards.py -> package/dashboards/*.json) against the
names they read: every metric a panel queries is a vocabulary name or one the runtime
declares, and every label a panel groups by is one those metrics carry at the
destination. A renamed metric or label fails here, before anyone opens a dashboard.

The runtime's labels are read from its own instruments (recorded once into an in-memory
reader), not from a list kept here; the live counterpart, every query run against a real
Prometheus fed by the real collector tier, is tests/telemetry/test_live_dashboards.py.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import dashboards  # hack/, on sys.path through tests/conftest.py
import pytest
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from functions.common import contracts, vocabulary
from functions.common import cost as cost_contract
from functions.common.exposition import prometheus_label
from functions.runtime.activator.metrics import ActivatorMetrics
from functions.runtime.agent.cost import CostMetrics
from functions.runtime.hub.metrics import HubMetrics
from functions.runtime.operator.model_health import ModelHealthMetrics
from functions.runtime.shared.cert_expiry import CERTIFICATE_EXPIRY
from functions.runtime.shared.metrics import RuntimeMetrics

SPECS = [make() for make in dashboards.DASHBOARDS]
PANELS = [(spec.uid, panel) for spec in SPECS for panel in spec.panels]

# What the collector tier adds to every series it carries (resource attributes, as
# Prometheus labels at the destination).
RESOURCE_LABELS = {
    prometheus_label(a)
    for a in (
        contracts.RESOURCE_ATTRIBUTE_CLUSTER,
        contracts.RESOURCE_ATTRIBUTE_SCOPE,
        contracts.RESOURCE_ATTRIBUTE_GATEWAY,
        contracts.RESOURCE_ATTR_DEPLOYMENT,
        contracts.RESOURCE_ATTR_NAMESPACE,
        contracts.RESOURCE_ATTR_ENGINE,
        contracts.RESOURCE_ATTR_SERVING,
    )
}


def _runtime_labels() -> dict[str, set[str]]:
    """Each runtime metric's data-point labels, from its own instruments."""
    reader = InMemoryMetricReader()
    runtime = RuntimeMetrics(reader)
    runtime.hub_leading(True)
    runtime.fleet_members(2)
    meter = runtime.provider.get_meter("test")
    hub = HubMetrics(meter)
    hub.serve_policy("p")
    hub.member_report("p", 1, 2)
    hub.hub_view("p", True, 1)
    hub.decision("p", "raise-floor", "planner", True)
    hub.step_error("p")
    hub.time_to_ready("p", 30)
    hub.model_request(0.1, "ok")
    hub.planner_request(0.1, "ok")
    hub.model_health({("ns", "m"): (1, 2)})
    CostMetrics(meter).update({("ns", "m", "h100"): 4.5})
    activator = ActivatorMetrics(meter)
    activator.routed([("ns", "m")])
    activator.hold("ns", "m")
    activator.request("Proxied", "ns", "m")
    activator.request("NotRouted")
    activator.activation("ns", "m", "Ready", 12.0)
    activator.first_byte("ns", "m", 12.5, held=True)
    fleet = SimpleNamespace(
        model_list=[
            SimpleNamespace(
                namespace="ns",
                name="m",
                desired=1,
                ready=0,
                start_failures=0,
                parked=None,
                unplaceable=None,
                revisions=[SimpleNamespace(cluster="c", revision="r")],
            )
        ]
    )
    ModelHealthMetrics(meter, lambda: fleet)
    labels: dict[str, set[str]] = {}
    data = reader.get_metrics_data()
    for resource_metrics in data.resource_metrics:
        for scope in resource_metrics.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    labels.setdefault(metric.name, set()).update(point.attributes or {})
    runtime.shutdown()
    # The certificate gauge reads files at each scrape; its labels are its module's.
    labels[CERTIFICATE_EXPIRY] = {"component", "file", "subject"}
    return labels


RUNTIME = _runtime_labels()


def _labels_of(metric: str) -> set[str]:
    if metric in vocabulary.VOCABULARY_BY_NAME:
        definition = vocabulary.VOCABULARY_BY_NAME[metric]
        extra = {"le"} if definition.type is vocabulary.MetricType.HISTOGRAM else set()
        return set(definition.labels) | RESOURCE_LABELS | extra
    if metric in RUNTIME:
        return RUNTIME[metric] | RESOURCE_LABELS | {"le"}
    raise AssertionError(f"{metric} is neither a vocabulary name nor a runtime metric")


def test_the_runtime_declares_what_the_dashboards_read():
    # The instruments above are the runtime's: if one is renamed the name vanishes here.
    assert cost_contract.MODEL_COST_PER_HOUR in RUNTIME
    assert {"policy", "action", "applied"} <= RUNTIME["plumb_hub_decisions_total"]
    assert {"namespace", "deployment", "held"} <= RUNTIME[
        "modelplane_activator_time_to_first_byte_seconds"
    ]


@pytest.mark.parametrize(("uid", "panel"), PANELS, ids=lambda x: getattr(x, "title", x))
def test_every_metric_a_panel_reads_is_declared(uid, panel):
    for query in panel.queries:
        read = dashboards.metrics_read(query.expr)
        assert read, (uid, panel.title, query.expr)
        for metric in read:
            _labels_of(metric)  # raises naming the metric


@pytest.mark.parametrize(("uid", "panel"), PANELS, ids=lambda x: getattr(x, "title", x))
def test_every_label_a_panel_groups_by_is_carried_by_what_it_reads(uid, panel):
    for query in panel.queries:
        # A join (cost per token) may take a label from either side.
        carried = set().union(*(_labels_of(m) for m in dashboards.metrics_read(query.expr)))
        missing = set(query.by) - carried
        assert not missing, (uid, panel.title, missing)
        # The legend names only labels the series carry.
        for label in query.by:
            assert f"{{{{{label}}}}}" in query.legend or not query.by, (panel.title, label)


def test_a_renamed_metric_is_caught():
    with pytest.raises(AssertionError, match="modelplane_requests_runing"):
        _labels_of(next(iter(dashboards.metrics_read("sum(modelplane_requests_runing)"))))


def test_queries_use_only_the_dashboards_variables():
    for spec in SPECS:
        for panel in spec.panels:
            for query in panel.queries:
                plain = dashboards.substitute(
                    query.expr.replace(dashboards.RATE, "5m"),
                    {v: "x" for v in dashboards.VARIABLES},
                )
                assert "$" not in plain.replace('"$1"', ""), (spec.uid, panel.title, plain)
                used = {v for v in dashboards.VARIABLES if f"${v}" in query.expr}
                assert used <= set(spec.variables), (spec.uid, panel.title, used)


def test_the_checked_in_json_is_what_the_code_builds():
    files = dashboards.render_all()
    on_disk = {p.name: p.read_text() for p in dashboards.OUT.glob("*.json")}
    assert on_disk == files, "run .venv/bin/python hack/dashboards.py"
    for text in files.values():
        board = json.loads(text)
        assert board["uid"].startswith("modelplane-")
        targets = [t for p in board["panels"] for t in p.get("targets", [])]
        assert targets
        assert all(t["expr"] for t in targets)


def test_cost_panels_name_no_currency():
    """Prices are currency-free (pricePerGPUHour is in the platform's own unit): no panel
    shows a currency sign (issue 44 found dollars)."""
    for path in sorted(dashboards.OUT.glob("*.json")):
        text = path.read_text()
        assert "currency" not in text.lower(), path.name
