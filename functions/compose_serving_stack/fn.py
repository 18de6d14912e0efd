"""The gRPC shell of compose-serving-stack: an InferenceCluster becomes its member's
substrate, runtime and (while something reads it) collector.

Top to bottom: read the cluster (fatal on a field no resource can be built from, or on
a changed stack), ask for the MetricMappings, the TelemetryDestinations, the other
InferenceClusters (peers) and this cluster's ModelReplicas (engine types), wait while
any is not fetched yet, plan with pure code (compose.py, destination.py), write the
desired resources, then status, conditions and events from what is observed
(status.py; whether the member has each DeviceClass the pools name, device_classes.py;
the capacity ledger placement reads, ledger.py).
"""

from __future__ import annotations

import os
from typing import Final

from crossplane.function import resource, response
from crossplane.function.proto.v1 import run_function_pb2 as fnv1

from functions.common import contracts
from functions.common.builtin_mappings import builtin_mapping_resources
from functions.common.limits import TooLarge
from functions.common.metricmapping import resolve_mappings
from functions.common.sdk import (
    GuardedRunner,
    Required,
    call_back_within,
    describe_composite,
    emit,
    keep_observed,
    not_fetched,
    observed_composite,
    observed_resources,
    required,
    set_conditions,
)
from functions.common.telemetrydestination import ENV_SECRET_NAMESPACES, secret_namespaces_from
from functions.compose_serving_stack import access, names, runtime_hosting, status, substrate
from functions.compose_serving_stack.compose import (
    Cluster,
    InvalidCluster,
    parse_cluster,
    peer_names,
    plan,
)
from functions.compose_serving_stack.destination import destination_state
from functions.compose_serving_stack.ledger import (
    LEDGER_CALL_BACK_SECONDS,
    cluster_ledger,
    ledger_changed,
)

REQUIRED_MAPPINGS: Final = "metric-mappings"
REQUIRED_DESTINATIONS: Final = "telemetry-destinations"
REQUIRED_CLUSTERS: Final = "inference-clusters"
REQUIRED_REPLICAS: Final = "model-replicas"

# The runtime's image: the repository's one image (Dockerfile). A DeploymentRuntimeConfig
# sets the variable to the tag the function itself runs from.
ENV_RUNTIME_IMAGE: Final = "MODELPLANE_RUNTIME_IMAGE"
DEFAULT_RUNTIME_IMAGE: Final = "ghcr.io/modelplaneai/modelplane:v0.1.0"


def _asked_provider_configs(req: fnv1.RunFunctionRequest, cluster: Cluster) -> list[Required]:
    if cluster.kubeconfig is None:
        return []
    return [required(req, name) for name, _api, _key in names.PROVIDER_CONFIGS]


def _names_refused(
    rsp: fnv1.RunFunctionResponse, cluster: Cluster, req: fnv1.RunFunctionRequest
) -> str | None:
    """Why the cluster would reach what is not its own (names.py), asking for the provider
    configs of its name; None when it would not (or until they are fetched)."""
    problem = names.secret_problem(cluster.kubeconfig) or names.reserved_name_problem(
        cluster.name, cluster.kubeconfig
    )
    if problem is not None or cluster.kubeconfig is None:
        return problem
    for required_name, api_version, _key in names.PROVIDER_CONFIGS:
        response.require_resources(
            rsp,
            required_name,
            api_version,
            access.PROVIDER_CONFIG_KIND,
            match_name=cluster.name,
        )
    asked = _asked_provider_configs(req, cluster)
    if any(not a.fetched for a in asked):
        return None
    return names.takeover_problem(
        cluster.name,
        [
            (key, bool(a.items))
            for (_n, _api, key), a in zip(names.PROVIDER_CONFIGS, asked, strict=True)
        ],
        set(req.observed.resources.keys()),
    )


class FunctionRunner(GuardedRunner):
    def run(self, req: fnv1.RunFunctionRequest) -> fnv1.RunFunctionResponse:
        rsp = response.to(req)
        xr = observed_composite(req)
        name = describe_composite(xr)

        # 1. Resolve inputs.
        try:
            cluster = parse_cluster(xr)
        except InvalidCluster as err:
            response.fatal(rsp, f"{name}: {err}")
            return rsp
        refused = substrate.stack_change_refused(req.observed.resources.keys(), cluster.stack)
        if refused:
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
        refused = _names_refused(rsp, cluster, req)
        if refused is not None:
            response.fatal(rsp, f"{name}: {refused}")
            return rsp
        observed = observed_resources(req)
        missing = sorted(not_fetched(*answers, *_asked_provider_configs(req, cluster)))
        if missing:
            # Not fetched yet is not "none exist": keep everything as it is and ask.
            keep_observed(rsp, observed)
            set_conditions(rsp, status.waiting_condition(missing))
            return rsp
        # The built-ins are always in effect; an applied mapping replaces its engine's.
        mappings = resolve_mappings(list(asked_mappings.items), builtin_mapping_resources())
        destination = destination_state(
            list(asked_destinations.items),
            secret_namespaces_from(os.environ.get(ENV_SECRET_NAMESPACES)),
        )
        replicas = list(asked_replicas.items)

        # 2. Decide.
        try:
            decided = plan(
                cluster,
                mappings,
                destination=destination,
                peers=peer_names(asked_clusters.items),
                unmapped=status.unmapped_engine_types(
                    replicas, cluster.name, mappings.mapped_engines
                ),
                runtime_image=os.environ.get(ENV_RUNTIME_IMAGE, DEFAULT_RUNTIME_IMAGE),
                signals_for=status.replicas_needing_signals(replicas, cluster.name),
                health_records=status.replicas_on(replicas, cluster.name),
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

        # 4. Status, conditions and events.
        cluster_status = status.cluster_status(decided.telemetry, observed, cluster.device_classes)
        # The capacity ledger: what placement reads instead of every ModelReplica.
        cluster_status["ledger"], ledger_warnings = cluster_ledger(cluster.name, replicas)
        if ledger_changed(xr.get("status"), cluster_status["ledger"]):
            call_back_within(rsp, LEDGER_CALL_BACK_SECONDS)
        for message in ledger_warnings:
            response.warning(rsp, f"{name}: {message}")
        resource.update(rsp.desired.composite, {"status": cluster_status})
        set_conditions(rsp, *status.derive_conditions(name, cluster, decided, mappings, observed))
        emit(
            rsp,
            *status.events(
                name,
                cluster.name,
                mappings,
                decided.telemetry,
                cluster_status.get("deviceClasses") or [],
            ),
        )
        self.log.info("composed", composite=name, resources=len(decided.composed))
        return rsp
