"""The runtime's own metrics: one small registry of OpenTelemetry instruments, exported
to Prometheus on METRICS_PORT.

Every metric the agent and the scaler export is declared here once, by the name the
operations guide and its alerts use, so a rename is visible in one place. Components
take a `RuntimeMetrics` instead of reaching for a global, which keeps tests (and several
agents in one test process) apart: a test passes its own in-memory reader.

To add a metric: declare its name and help as constants, create the instrument in
`RuntimeMetrics.__init__`, and give it a small method that says what it records.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource

from functions.common.contracts import METRICS_PORT

HUB_LEADING: Final = "plumb_hub_leading"
FLEET_MEMBERS: Final = "plumb_fleet_members"

METER_NAME: Final = "modelplane.runtime"


class RuntimeMetrics:
    """The instruments, bound to one MeterProvider."""

    def __init__(self, reader: MetricReader, service: str = "modelplane-runtime") -> None:
        self.provider = MeterProvider(
            metric_readers=[reader], resource=Resource.create({"service.name": service})
        )
        meter = self.provider.get_meter(METER_NAME)
        self._hub_leading = meter.create_gauge(
            HUB_LEADING, description="1 while this agent is the fleet hub"
        )
        self._fleet_members = meter.create_gauge(
            FLEET_MEMBERS,
            description="Members this agent counts in the election, itself included",
        )

    def hub_leading(self, leading: bool) -> None:
        self._hub_leading.set(1 if leading else 0)

    def fleet_members(self, configured: int) -> None:
        self._fleet_members.set(configured)

    def shutdown(self) -> None:
        self.provider.shutdown()


def serve_prometheus(port: int = METRICS_PORT, addr: str = "0.0.0.0") -> RuntimeMetrics:
    """Metrics for a process: a Prometheus reader and `/metrics` served on `port`."""
    # Imported here: the exporter registers with prometheus_client's global registry on
    # construction, which only the process's own entry point should do.
    from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: PLC0415
    from prometheus_client import start_http_server  # noqa: PLC0415

    start_http_server(port, addr=addr)
    return RuntimeMetrics(PrometheusMetricReader())
