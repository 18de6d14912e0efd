"""The gRPC shell of compose-serving-stack: an InferenceCluster becomes its member's
substrate, runtime and (while a TelemetryDestination exists) collector.

Top to bottom: read the cluster (fatal on a field no resource can be built from), ask
for the MetricMappings, the TelemetryDestinations, the other InferenceClusters (peers)
and this cluster's ModelReplicas (engine types), wait while any is not fetched yet,
plan with pure code (compose.py), write the desired resources, then status and
conditions from what is observed.
"""

from __future__ import annotations

import os
from typing import Final

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import conditions, contracts
from functions.common.builtin_mappings import builtin_mapping_resources
from functions.common.conditions import Condition
from functions.common.limits import TooLarge
from functions.common.metricmapping import resolve_mappings
from functions.common.sdk import (
    GuardedRunner,
    describe_composite,
    keep_observed,
    not_fetched,
    observed_composite,
    observed_resources,
    required,
    set_conditions,
)
from functions.common.telemetrydestination import (
    ENV_SECRET_NAMESPACES,
    InvalidDestination,
    active_destination,
    identity_of,
    parse_destination,
    secret_namespaces_from,
)
from functions.compose_serving_stack import (
    collector_objects,
    device_classes,
    runtime_hosting,
    substrate,
)
from functions.compose_serving_stack.compose import (
    Cluster,
    DestinationState,
    GatewayDestination,
    InvalidCluster,
    parse_cluster,
    plan,
)
from functions.compose_serving_stack.status import (
    gateway_address,
    is_ready,
    mappings_condition,
    observed_inventory,
    readiness,
    replicas_needing_signals,
    unmapped_engine_types,
)

REQUIRED_MAPPINGS: Final = "metric-mappings"
REQUIRED_DESTINATIONS: Final = "telemetry-destinations"
REQUIRED_CLUSTERS: Final = "inference-clusters"
REQUIRED_REPLICAS: Final = "model-replicas"

REASON_COMPOSED: Final = "Composed"
REASON_WAITING: Final = "WaitingForInputs"
REASON_DISABLED: Final = "TelemetryDisabled"
REASON_DESTINATION_INVALID: Final = "TelemetryDestinationInvalid"

# The runtime's image: the repository's one image (Dockerfile). A DeploymentRuntimeConfig
# sets the variable to the tag the function itself runs from.
ENV_RUNTIME_IMAGE: Final = "MODELPLANE_RUNTIME_IMAGE"
DEFAULT_RUNTIME_IMAGE: Final = "ghcr.io/modelplaneai/modelplane:v0.1.0"


def _destination_state(destinations: list[dict]) -> DestinationState:
    if not destinations:
        return DestinationState()
    winner = active_destination([identity_of(d) for d in destinations])
    chosen = next(d for d in destinations if identity_of(d) == winner)
    try:
        parsed = parse_destination(
            chosen, secret_namespaces_from(os.environ.get(ENV_SECRET_NAMESPACES))
        )
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


def _status(decided, observed: dict, cluster: Cluster) -> dict:
    """status: telemetry, the member Gateway's address, the inventory record and the
    DeviceClasses the pools need."""
    status: dict = {"telemetry": decided.telemetry.to_status()}
    if cluster.device_classes:
        status["deviceClasses"] = device_classes.report(cluster.device_classes, observed)
    gateway = gateway_address(observed.get(substrate.GATEWAY_KEY))
    if gateway:
        status["gateway"] = {"address": gateway}
    inventory = observed_inventory(observed.get(runtime_hosting.INVENTORY_KEY))
    if inventory is not None:
        status["inventory"] = inventory
    return status


def _usable_cluster(req: fnv1.RunFunctionRequest, xr: dict) -> tuple[Cluster | None, str]:
    """The InferenceCluster, or None and why this function must not compose it."""
    try:
        cluster = parse_cluster(xr)
    except InvalidCluster as err:
        return None, str(err)
    installed = substrate.installed_stack(req.observed.resources.keys())
    if installed is not None and installed != cluster.stack:
        # The XRD says so too (self == oldSelf), but an older XRD or a replaced object
        # must not make this function swap one stack's releases for the other's.
        return None, (
            f"spec.stack is immutable: the cluster was installed as {installed}, not "
            f"{cluster.stack}; set it back, or delete and recreate the InferenceCluster "
            "to change its stack"
        )
    return cluster, ""


class FunctionRunner(GuardedRunner):
    def __init__(self) -> None:
        super().__init__()

    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = observed_composite(req)
        name = describe_composite(xr)

        # 1. Resolve inputs.
        cluster, refused = _usable_cluster(req, xr)
        if cluster is None:
            response.fatal(rsp, f"{name}: {refused}")
            return rsp
        group = contracts.API_GROUP_VERSION
        response.require_resources(rsp, REQUIRED_MAPPINGS, group, contracts.KIND_METRIC_MAPPING)
        response.require_resources(
            rsp, REQUIRED_DESTINATIONS, group, contracts.KIND_TELEMETRY_DESTINATION
        )
        response.require_resources(rsp, REQUIRED_CLUSTERS, group, contracts.KIND_INFERENCE_CLUSTER)
        response.require_resources(
            rsp,
            REQUIRED_REPLICAS,
            group,
            contracts.KIND_MODEL_REPLICA,
            match_labels={contracts.LABEL_CLUSTER: cluster.name},
        )
        asked_mappings, asked_destinations, asked_clusters, asked_replicas = answers = (
            required(req, REQUIRED_MAPPINGS),
            required(req, REQUIRED_DESTINATIONS),
            required(req, REQUIRED_CLUSTERS),
            required(req, REQUIRED_REPLICAS),
        )
        observed = observed_resources(req)
        missing = sorted(not_fetched(*answers))
        if missing:
            # Not fetched yet is not "none exist": keep everything as it is and ask.
            keep_observed(rsp, observed)
            set_conditions(
                rsp,
                Condition(
                    conditions.COMPOSED,
                    conditions.FALSE,
                    REASON_WAITING,
                    f"waiting for {', '.join(missing)}",
                ),
            )
            return rsp

        # The built-ins are always in effect; an applied mapping replaces its engine's.
        mappings = resolve_mappings(list(asked_mappings.items), builtin_mapping_resources())
        destination = _destination_state(list(asked_destinations.items))
        peers = [
            str((c.get("metadata") or {}).get("name", ""))
            for c in asked_clusters.items
            if (c.get("metadata") or {}).get("name")
        ]
        unmapped = unmapped_engine_types(
            list(asked_replicas.items), cluster.name, mappings.mapped_engines
        )
        signals_for = replicas_needing_signals(list(asked_replicas.items), cluster.name)

        # 2. Decide.
        image = os.environ.get(ENV_RUNTIME_IMAGE, DEFAULT_RUNTIME_IMAGE)
        try:
            decided = plan(
                cluster,
                mappings,
                destination=destination,
                peers=peers,
                unmapped=unmapped,
                runtime_image=image,
                signals_for=signals_for,
            )
        except TooLarge as err:
            # Refused here, naming what to shrink, rather than applied to fail on the
            # member; a fatal result changes nothing that runs.
            response.fatal(rsp, f"{name}: {err}")
            return rsp

        # 3. Desired resources.
        for composed in decided.composed:
            resource.update(rsp.desired.resources[composed.key], composed.resource)
        # The observed inventory record never gates the cluster's readiness.
        rsp.desired.resources[runtime_hosting.INVENTORY_KEY].ready = fnv1.Ready.READY_TRUE
        for key in decided.always_ready:
            rsp.desired.resources[key].ready = fnv1.Ready.READY_TRUE
        if decided.keep_observed_collector:
            keep_observed(rsp, observed, replaced={c.key for c in decided.composed})

        # 4. Status and conditions.
        status = _status(decided, observed, cluster)
        resource.update(rsp.desired.composite, {"status": status})
        for missing_class in device_classes.missing(status.get("deviceClasses") or []):
            response.warning(
                rsp,
                f"{name}: DeviceClass {missing_class} (a node pool's devices.driver or "
                "additionalDevices driver) does not exist on the cluster: no model is placed "
                "in a pool that would claim it (its pods would stay pending); install the "
                "DRA driver's DeviceClass or correct the driver",
            )

        stack_ready = readiness(
            conditions.STACK_READY,
            # The inventory record's absence (no agent turn yet) is not an unready stack.
            [k for k in decided.stack_keys if k != runtime_hosting.INVENTORY_KEY],
            observed,
            f"{cluster.stack} stack",
        )
        if decided.collector_keys:
            collector_ready = readiness(
                conditions.COLLECTOR_READY,
                [collector_objects.DEPLOYMENT_KEY],
                observed,
                "collector",
            )
        elif decided.keep_observed_collector:
            collector_ready = Condition(
                conditions.COLLECTOR_READY,
                conditions.truth(is_ready(observed.get(collector_objects.DEPLOYMENT_KEY))),
                REASON_DESTINATION_INVALID,
                decided.telemetry.reason,
            )
        else:
            collector_ready = Condition(
                conditions.COLLECTOR_READY,
                conditions.FALSE,
                REASON_DISABLED,
                decided.telemetry.reason,
            )
        refusals = mappings_condition(
            conditions.MAPPINGS_ACCEPTED, mappings.refused, mappings.in_use
        )
        composed_message = (
            f"{name} (stack {cluster.stack}, region {cluster.region}): "
            f"{len(decided.composed)} resources; telemetry {decided.telemetry.mode}"
        )
        set_conditions(
            rsp,
            stack_ready,
            collector_ready,
            refusals,
            Condition(conditions.COMPOSED, conditions.TRUE, REASON_COMPOSED, composed_message),
        )
        for refused in mappings.refused:
            response.warning(rsp, f"{refused.message}: left out of the collector on {cluster.name}")
        if decided.telemetry.unmapped_engine_types:
            response.normal(
                rsp,
                "engine types without a MetricMapping pass through under their own names: "
                + ", ".join(decided.telemetry.unmapped_engine_types),
            )
        self.log.info("composed", composite=name, resources=len(decided.composed))
        return rsp
