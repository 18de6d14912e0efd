"""The activator's own metrics, on an OpenTelemetry meter (the runtime's Prometheus
exporter serves them on `--metrics-port`, as it does the agent's and the scaler's).

Names and labels are the operations guide's table. Per-model series carry `namespace`
and `deployment` and exist only for identities the member's routes vouch for (a
request is counted against a model only once `RouteIndex` vouched for it), so a client
cannot create series by sending made-up identities: everything refused before that is
counted without a model. The held gauge is observable and reports every model the
routes vouch for (0 when none is held), from the first read of the routes, so an alert
on it needs no `absent()`; a model whose route goes away leaves it once nothing is held.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from opentelemetry.metrics import CallbackOptions, Meter, Observation

REQUESTS_HELD: Final = "modelplane_activator_requests_held"
REQUESTS_TOTAL: Final = "modelplane_activator_requests_total"
ACTIVATIONS_TOTAL: Final = "modelplane_activator_activations_total"
ACTIVATION_DURATION: Final = "modelplane_activator_activation_duration_seconds"
TIME_TO_FIRST_BYTE: Final = "modelplane_activator_time_to_first_byte_seconds"

ACTIVATOR_METRICS: Final = (
    REQUESTS_HELD,
    REQUESTS_TOTAL,
    ACTIVATIONS_TOTAL,
    ACTIVATION_DURATION,
    TIME_TO_FIRST_BYTE,
)
ACTIVATOR_HISTOGRAMS: Final = (ACTIVATION_DURATION, TIME_TO_FIRST_BYTE)

# A request's `outcome`: proxied to a replica, or the `reason` of the activator's answer
# (core.REASON_* and the attempt's Unplaceable/Parked), or the client left first.
OUTCOME_PROXIED: Final = "Proxied"
OUTCOME_CLIENT_GONE: Final = "ClientClosed"
# An activation's `result`: a replica was ready, or the reason it was refused.
RESULT_READY: Final = "Ready"

# Seconds from a request's head to the first byte of the model's answer: a ready model
# answers in well under a second; a held one waits for a node and a model load.
TIME_TO_FIRST_BYTE_BUCKETS: Final = (
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
)
# Seconds from a placement attempt to a ready replica (bounded by activationTimeout).
ACTIVATION_BUCKETS: Final = (1, 5, 15, 30, 60, 120, 180, 300, 450, 600, 900)


class ActivatorMetrics:
    def __init__(self, meter: Meter) -> None:
        self._held: dict[tuple[str, str], int] = {}
        meter.create_observable_gauge(
            REQUESTS_HELD,
            [self._observe_held],
            description="Requests held now for their model's activation",
        )
        self._requests = meter.create_counter(
            REQUESTS_TOTAL,
            description="Requests answered, by outcome (Proxied, or the activator's reason)",
        )
        self._activations = meter.create_counter(
            ACTIVATIONS_TOTAL,
            description="Placement attempts the activator asked for, by result",
        )
        self._activation_duration = meter.create_histogram(
            ACTIVATION_DURATION,
            unit="s",
            description="From asking for a placement attempt to its answer or a ready replica",
            explicit_bucket_boundaries_advisory=list(ACTIVATION_BUCKETS),
        )
        self._ttfb = meter.create_histogram(
            TIME_TO_FIRST_BYTE,
            unit="s",
            description="From a request's head to the first byte of its model's answer"
            " (held: it waited for an activation)",
            explicit_bucket_boundaries_advisory=list(TIME_TO_FIRST_BYTE_BUCKETS),
        )

    def _observe_held(self, _options: CallbackOptions) -> Iterable[Observation]:
        held = dict(self._held)  # a copy: the event loop changes it while this reads
        return [
            Observation(count, {"namespace": ns, "deployment": name})
            for (ns, name), count in sorted(held.items())
        ]

    # --- what the server calls (on its event loop) --------------------------------------

    def routed(self, models: Iterable[tuple[str, str]]) -> None:
        """The models the member's routes vouch for now (at each read of the routes)."""
        routed = set(models)
        for key in [k for k, held in self._held.items() if not held and k not in routed]:
            del self._held[key]
        for key in routed:
            self._held.setdefault(key, 0)

    def hold(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self._held[key] = self._held.get(key, 0) + 1

    def release(self, namespace: str, name: str) -> None:
        key = (namespace, name)
        self._held[key] = max(0, self._held.get(key, 0) - 1)

    def request(self, outcome: str, namespace: str = "", name: str = "") -> None:
        """One answered request; without a model when none was vouched for."""
        attributes = {"outcome": outcome}
        if name:
            attributes |= {"namespace": namespace, "deployment": name}
        self._requests.add(1, attributes)

    def activation(self, namespace: str, name: str, result: str, seconds: float) -> None:
        attributes = {"namespace": namespace, "deployment": name, "result": result}
        self._activations.add(1, attributes)
        self._activation_duration.record(seconds, attributes)

    def first_byte(self, namespace: str, name: str, seconds: float, *, held: bool) -> None:
        self._ttfb.record(
            seconds,
            {"namespace": namespace, "deployment": name, "held": "true" if held else "false"},
        )
