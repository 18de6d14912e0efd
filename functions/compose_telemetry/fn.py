"""The gRPC shell of compose-telemetry.

A TelemetryDestination becomes the fleet's gateway collector (gateway.py, rollup.py),
unless an older destination already holds the fleet (destination.py): then it reports
`Conflict` and composes nothing new. A MetricMapping composes nothing; it is validated
(mapping_validation.py) and reports `MappingValid`.

Inputs are resolved explicitly: every TelemetryDestination (or MetricMapping) is a
required resource; until Crossplane has answered that requirement nothing new is
composed and whatever was composed before is kept.
"""

from __future__ import annotations

import os

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import conditions, contracts
from functions.common.conditions import Condition
from functions.common.sdk import (
    GuardedRunner,
    describe_composite,
    keep_observed,
    observed_composite,
    observed_resources,
    required,
    sdk_condition,
)
from functions.common.telemetrydestination import (
    ENV_SECRET_NAMESPACES,
    InvalidDestination,
    active_destination,
    identity_of,
    parse_destination,
    secret_namespaces_from,
)
from functions.compose_telemetry import gateway
from functions.compose_telemetry.mapping_validation import validate_mapping

REQUIRED_DESTINATIONS = "telemetry-destinations"
REQUIRED_MAPPINGS = "metric-mappings"

REASON_OLDEST: str = "OldestDestination"
REASON_NEWER: str = "NewerThanActive"
REASON_WAITING: str = "WaitingForDestinations"
REASON_AVAILABLE: str = "Available"
REASON_UNAVAILABLE: str = "Unavailable"
REASON_CREATING: str = "Creating"
REASON_VALID: str = "Valid"
REASON_INVALID: str = "Invalid"
REASON_COMPOSED: str = "Composed"
REASON_NOT_COMPOSED: str = "NotComposed"


def _condition(typ: str, status: bool | None, reason: str, message: str) -> resource.Condition:
    return sdk_condition(Condition(typ, conditions.truth(status), reason, message))


def _ready(observed: dict) -> bool | None:
    """Ready=True or False as the gateway's Object says; None while it says nothing."""
    said = conditions.condition_status(observed, conditions.READY)
    return None if said is None else said == conditions.TRUE


class FunctionRunner(GuardedRunner):
    def __init__(self) -> None:
        super().__init__()

    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = observed_composite(req)
        if xr.get("kind") == contracts.KIND_METRIC_MAPPING:
            self._validate_mapping(req, rsp, xr)
        else:
            self._compose_destination(req, rsp, xr)
        return rsp

    # --- MetricMapping ----------------------------------------------------------------

    def _validate_mapping(
        self, req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, xr: dict
    ) -> None:
        response.require_resources(
            rsp, REQUIRED_MAPPINGS, contracts.API_GROUP_VERSION, contracts.KIND_METRIC_MAPPING
        )
        # Not fetched yet: validated alone; the next call checks it against the others.
        others = required(req, REQUIRED_MAPPINGS)
        errors = validate_mapping(xr, list(others.items))
        name = describe_composite(xr)
        if errors:
            message = f"{name} is not used by any collector: " + "; ".join(
                e.message for e in errors
            )
            response.warning(rsp, message)
            response.set_conditions(
                rsp,
                _condition(conditions.MAPPING_VALID, False, REASON_INVALID, message),
                _condition(conditions.COMPOSED, True, REASON_COMPOSED, "nothing to compose"),
            )
            return
        response.set_conditions(
            rsp,
            _condition(
                conditions.MAPPING_VALID,
                True,
                REASON_VALID,
                f"every cluster's collector renames engine {xr['spec']['engine']!r} with it",
            ),
            _condition(conditions.COMPOSED, True, REASON_COMPOSED, "nothing to compose"),
        )

    # --- TelemetryDestination ---------------------------------------------------------

    def _compose_destination(
        self, req: fnv1.RunFunctionRequest, rsp: fnv1.RunFunctionResponse, xr: dict
    ) -> None:
        name = describe_composite(xr)
        # 1. Resolve inputs.
        try:
            destination = parse_destination(
                xr, secret_namespaces_from(os.environ.get(ENV_SECRET_NAMESPACES))
            )
        except InvalidDestination as err:
            # Fatal: Crossplane applies nothing, so what runs now keeps running.
            response.fatal(rsp, f"{name}: {err}")
            return
        response.require_resources(
            rsp,
            REQUIRED_DESTINATIONS,
            contracts.API_GROUP_VERSION,
            contracts.KIND_TELEMETRY_DESTINATION,
        )
        observed = observed_resources(req)
        destinations = required(req, REQUIRED_DESTINATIONS)
        if not destinations.fetched:
            keep_observed(rsp, observed)
            response.set_conditions(
                rsp,
                _condition(
                    conditions.CONFLICT,
                    None,
                    REASON_WAITING,
                    "asked for every TelemetryDestination; composing nothing new until they arrive",
                ),
            )
            return
        everyone = [identity_of(d) for d in destinations.items]
        me = identity_of(xr)
        if all(d.name != me.name for d in everyone):
            everyone.append(me)
        winner = active_destination(everyone)

        # 2. Decide, 3. write desired state and status.
        if winner.name != me.name:
            keep_observed(rsp, observed)
            kept = f"; kept the {len(observed)} resources it composed before" if observed else ""
            message = (
                f"the fleet already sends its telemetry to TelemetryDestination {winner.name} "
                f"(the oldest); this one is not used{kept}. Delete one of them"
            )
            response.warning(rsp, f"{name}: {message}")
            response.set_conditions(
                rsp,
                _condition(conditions.CONFLICT, True, REASON_NEWER, message),
                _condition(conditions.COMPOSED, False, REASON_NOT_COMPOSED, message),
            )
            return

        desired = gateway.render_gateway_objects(destination)
        not_ready = []
        for key, manifest in desired.items():
            resource.update(rsp.desired.resources[key], manifest)
            ready = _ready(observed.get(key, {}))
            if ready:
                rsp.desired.resources[key].ready = fnv1.READY_TRUE
            else:
                not_ready.append(key)
        resource.update(
            rsp.desired.composite,
            {
                "status": {
                    "endpoint": destination.gateway.endpoint,
                    "exporter": destination.exporter.type.value,
                }
            },
        )
        others = sorted(d.name for d in everyone if d.name != me.name)
        conflict_message = (
            f"this is the fleet's destination; newer ones not used: {', '.join(others)}"
            if others
            else "this is the fleet's only destination"
        )
        if not observed:
            gateway_ready = _condition(
                conditions.GATEWAY_READY, False, REASON_CREATING, "the gateway is being created"
            )
        elif not_ready:
            gateway_ready = _condition(
                conditions.GATEWAY_READY,
                False,
                REASON_UNAVAILABLE,
                f"not ready yet: {', '.join(sorted(not_ready))}",
            )
        else:
            gateway_ready = _condition(
                conditions.GATEWAY_READY,
                True,
                REASON_AVAILABLE,
                f"{destination.gateway.replicas} gateway replicas accept OTLP at "
                f"{destination.gateway.endpoint}",
            )
        response.set_conditions(
            rsp,
            _condition(conditions.CONFLICT, False, REASON_OLDEST, conflict_message),
            gateway_ready,
            _condition(
                conditions.COMPOSED,
                True,
                REASON_COMPOSED,
                f"gateway on provider config {destination.gateway.provider_config_name}, "
                f"exporting {destination.exporter.type.value}",
            ),
        )
        self.log.info("composed", composite=name, resources=len(desired))
