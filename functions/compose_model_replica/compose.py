"""Everything one ModelReplica needs on its cluster, as provider-kubernetes Objects.

`compose(replica)` is the function's one decision: a pure function from the typed
ModelReplica to the Objects, keyed by identity and sorted, so the same replica renders
the same bytes. The order of building mirrors how a request reaches a model: the
namespace, the GPUs, the workload, the endpoint, the route, then autoscaling; plus the
Observe-only Object that reads the runtime's health record back.
"""

from __future__ import annotations

from dataclasses import dataclass

from functions.common.health import (
    HEALTH_RECORD_API_VERSION,
    HEALTH_RECORD_KIND,
    health_record_name,
)
from functions.compose_model_replica import adapters, autoscaling, serving
from functions.compose_model_replica.backends import workloads
from functions.compose_model_replica.backends.base import Workload
from functions.compose_model_replica.model import ModelReplica
from functions.compose_model_replica.objects import (
    KEEP_ON_DELETE,
    OBSERVE_ONLY,
    Composed,
    envelope,
)
from functions.compose_model_replica.pods import resource_claim_template

HEALTH_KEY = "health"
POLICY_KEY = "adaptivepolicy"  # the AdaptivePolicy copy, whose report carries the signals
# The model's Service (serving.service). Not "service", the key that composed it under
# the deployment's own name before: a new key makes Crossplane delete that Object, and
# provider-kubernetes the Service that took the LeaderWorkerSet's name on the member
# (docs/upgrading.md); the same key with a new name would leave it behind.
SERVING_SERVICE_KEY = "serving-service"


def ready_query(workload: Workload) -> str:
    """CEL for the Object's readiness: every replica the workload asks for is ready."""
    field = workload.ready_field
    return (
        f"(has(object.status) && has(object.status.{field}) ? object.status.{field} : 0)"
        " >= (has(object.spec.replicas) ? object.spec.replicas : 1)"
    )


def serving_workload(replica: ModelReplica, built: list[Workload]) -> Workload:
    """The workload whose pods answer requests (decode in PrefillDecode)."""
    return built[-1]


@dataclass(frozen=True)
class Plan:
    composed: list[Composed]  # sorted by key
    workloads: list[Workload]  # whose observed status makes the replica's


def compose(replica: ModelReplica) -> Plan:
    composed: list[Composed] = [
        envelope(
            replica,
            "namespace",
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": replica.namespace,
                    # The cluster's pod policy, enforced by the member's API server too.
                    "labels": replica.cluster.pod_security.namespace_labels(),
                },
            },
            management_policies=KEEP_ON_DELETE,
        ),
        envelope(
            replica,
            HEALTH_KEY,
            {
                "apiVersion": HEALTH_RECORD_API_VERSION,
                "kind": HEALTH_RECORD_KIND,
                "metadata": {
                    "name": health_record_name(replica.name),
                    "namespace": replica.namespace,
                },
            },
            management_policies=OBSERVE_ONLY,
            # Start failures park a model: read as the agent writes them, not a poll later.
            watch=True,
        ),
    ]
    for engine in replica.engines:
        for member in engine.members:
            if member.devices:
                composed.append(
                    envelope(
                        replica,
                        f"claims-{engine.name}-{member.role.lower()}",
                        resource_claim_template(replica, engine, member),
                    )
                )
    if replica.adapters is not None:
        composed.append(
            envelope(
                replica,
                adapters.VOLUME_KEY,
                adapters.volume_claim(replica, replica.adapters),
            )
        )
    built = workloads(replica)
    for workload in built:
        composed.append(
            # The workload's readiness gates serving (the replica's status, the
            # deployment's readyReplicas, an on-demand model's first request): it
            # travels as it changes, not at provider-kubernetes' next poll.
            envelope(
                replica,
                workload.key,
                workload.manifest,
                ready_cel=ready_query(workload),
                watch=True,
            )
        )

    composed.append(envelope(replica, SERVING_SERVICE_KEY, serving.service(replica)))
    composed.append(envelope(replica, "inferencepool", serving.inference_pool(replica)))
    for key, manifest in serving.endpoint_picker(replica).items():
        composed.append(envelope(replica, key, manifest))
    composed.append(envelope(replica, "route", serving.route(replica)))
    for key, manifest in serving.exported_backend(replica).items():
        composed.append(envelope(replica, key, manifest))
    if replica.activator:
        composed.append(
            envelope(replica, "route-activator-grant", serving.activator_reference_grant(replica))
        )
    elif replica.answer is not None:
        composed.append(envelope(replica, "route-unavailable", serving.unavailable_filter(replica)))

    if replica.autoscaling is not None:
        serving_one = serving_workload(replica, built)
        for workload in built:
            key = workload.key.replace("workload", "scaledobject", 1)
            manifest = autoscaling.scaled_object(replica, workload, serving=workload is serving_one)
            composed.append(envelope(replica, key, manifest))
        # Its status carries the agent's report, the signals a rollout's gates read:
        # read as the agent writes it, not at provider-kubernetes' next poll.
        composed.append(
            envelope(replica, POLICY_KEY, autoscaling.adaptive_policy(replica), watch=True)
        )
    return Plan(sorted(composed, key=lambda c: c.key), built)
