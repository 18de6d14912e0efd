"""The gRPC shell of compose-telemetry: a TelemetryDestination (a MetricMapping has its
own shell, mapping_fn.py; main.py picks one by kind).

A TelemetryDestination becomes the fleet's gateway collector (gateway.py, rollup.py),
unless an older destination already holds the fleet (destination.py): then it reports
`Conflict` and composes nothing new.

Inputs are resolved explicitly: every TelemetryDestination is a required resource; until
Crossplane has answered that requirement nothing new is composed and whatever was
composed before is kept.
"""

from __future__ import annotations

import os
from typing import Final

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import contracts
from functions.common.sdk import (
    GuardedRunner,
    describe_composite,
    keep_observed,
    observed_composite,
    observed_resources,
    required,
    set_conditions,
)
from functions.common.telemetrydestination import (
    ENV_SECRET_NAMESPACES,
    InvalidDestination,
    identity_of,
    parse_destination,
    secret_namespaces_from,
)
from functions.compose_telemetry import destination as fleet_destination
from functions.compose_telemetry import gateway

REQUIRED_DESTINATIONS: Final = "telemetry-destinations"


class FunctionRunner(GuardedRunner):
    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = observed_composite(req)
        name = describe_composite(xr)

        # 1. Resolve inputs.
        try:
            destination = parse_destination(
                xr, secret_namespaces_from(os.environ.get(ENV_SECRET_NAMESPACES))
            )
        except InvalidDestination as err:
            # Fatal: Crossplane applies nothing, so what runs now keeps running.
            response.fatal(rsp, f"{name}: {err}")
            return rsp
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
            set_conditions(rsp, *fleet_destination.waiting_conditions())
            return rsp

        # 2. Decide.
        me = identity_of(xr)
        standing = fleet_destination.standing(me, (identity_of(d) for d in destinations.items))
        if not standing.active(me):
            keep_observed(rsp, observed)
            message = fleet_destination.not_used_message(standing.winner.name, len(observed))
            response.warning(rsp, f"{name}: {message}")
            set_conditions(rsp, *fleet_destination.not_used_conditions(message))
            return rsp
        desired = gateway.render_gateway_objects(destination)

        # 3. Desired resources.
        not_ready = []
        for key, manifest in desired.items():
            resource.update(rsp.desired.resources[key], manifest)
            if fleet_destination.object_ready(observed.get(key, {})):
                rsp.desired.resources[key].ready = fnv1.READY_TRUE
            else:
                not_ready.append(key)

        # 4. Status and conditions.
        resource.update(
            rsp.desired.composite,
            {"status": fleet_destination.destination_status(destination)},
        )
        set_conditions(
            rsp,
            *fleet_destination.active_conditions(
                destination, standing, composed_before=bool(observed), not_ready=not_ready
            ),
        )
        self.log.info("composed", composite=name, resources=len(desired))
        return rsp
