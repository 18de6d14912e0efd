"""Which TelemetryDestination a cluster's collector pushes to, as the collector needs it.

The fleet has one destination, the oldest (functions.common.telemetrydestination
.active_destination); compose-telemetry reports the same choice on each destination. A
destination that exists but cannot be used is not the same as none: the state says
why, and the collector that already runs keeps its last config (compose.py).

Pure: the fetched destinations and the allowed Secret namespaces in, a DestinationState
out (the shell reads the namespaces from its environment).
"""

from __future__ import annotations

from collections.abc import Sequence

from functions.common.telemetrydestination import (
    InvalidDestination,
    active_destination,
    identity_of,
    parse_destination,
)
from functions.compose_serving_stack.compose import DestinationState, GatewayDestination


def destination_state(
    destinations: Sequence[dict], secret_namespaces: frozenset[str]
) -> DestinationState:
    if not destinations:
        return DestinationState()
    winner = active_destination([identity_of(d) for d in destinations])
    chosen = next(d for d in destinations if identity_of(d) == winner)
    try:
        parsed = parse_destination(chosen, secret_namespaces)
    except InvalidDestination as err:
        return DestinationState(problem=f"TelemetryDestination {winner.name} is invalid: {err}")
    token = parsed.gateway.token
    return DestinationState(
        GatewayDestination(
            parsed.name,
            parsed.gateway.endpoint,
            token.namespace,
            token.name,
            token.key,
            traces_and_logs=parsed.exporter.carries_traces_and_logs,
        )
    )
