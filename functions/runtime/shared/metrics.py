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

from collections.abc import Callable, Mapping
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


Probe = Callable[[], tuple[bool, str]]


def serve_prometheus(
    port: int = METRICS_PORT, addr: str = "0.0.0.0", probes: Mapping[str, Probe] | None = None
) -> RuntimeMetrics:
    """Metrics for a process: a Prometheus reader and `/metrics` served on `port`, and
    beside it each probe's path (e.g. `/healthz`): 200 when it holds, 503 and why when
    not. One port, so a probe and a scrape both prove the process answers there."""
    # Imported here: the exporter registers with prometheus_client's global registry on
    # construction, which only the process's own entry point should do.
    import threading  # noqa: PLC0415
    from wsgiref.simple_server import make_server  # noqa: PLC0415

    from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: PLC0415
    from prometheus_client.exposition import (  # noqa: PLC0415
        ThreadingWSGIServer,
        _SilentHandler,
        make_wsgi_app,
    )

    metrics_app = make_wsgi_app()
    paths = dict(probes or {})

    def app(environ, start_response):
        probe = paths.get(environ.get("PATH_INFO", ""))
        if probe is None:
            return metrics_app(environ, start_response)
        holds, why = probe()
        start_response(
            "200 OK" if holds else "503 Service Unavailable",
            [("Content-Type", "text/plain; charset=utf-8")],
        )
        return [(why + "\n").encode()]

    server = make_server(addr, port, app, ThreadingWSGIServer, handler_class=_SilentHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return RuntimeMetrics(PrometheusMetricReader())
