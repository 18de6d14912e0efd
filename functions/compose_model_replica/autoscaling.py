"""Autoscaling: a KEDA ScaledObject per workload and this member's AdaptivePolicy copy.

The ScaledObject's only trigger is the member's scaler (KEDA `external-push`), which
serves the floor the fleet hub decided; KEDA then owns the workload's replica count, so
the backends leave it unwritten. Its minimum is what placement put here, its maximum at
least this member's ceiling from the policy.

The AdaptivePolicy copy must be byte-identical on every member (the hub compares them
and reports members out of sync), so its spec holds only fleet-wide data: the policy
the deployment declared, and as `workload` the serving ScaledObject, named after the
deployment. Not the Deployment, LeaderWorkerSet or PodCliqueSet itself: one deployment
may run on a Standard member and a Dynamo member at once, and those kinds differ; the
ScaledObject is the same kind and name everywhere, and its scaleTargetRef leads to the
pods.
"""

from __future__ import annotations

import copy

from functions.common.adaptivepolicy import POLICY_FIELDS
from functions.common.contracts import (
    AUTOSCALING_GROUP_VERSION,
    KIND_ADAPTIVE_POLICY,
    KIND_SCALED_OBJECT,
    LABEL_DEPLOYMENT,
    SCALED_OBJECT_API_VERSION,
    SCALER_PORT,
    SCALER_SERVICE_NAME,
    SCALER_TRIGGER_AUTHENTICATION,
    SYSTEM_NAMESPACE,
)
from functions.common.naming import dns_label, label_value
from functions.compose_model_replica.backends.base import Workload
from functions.compose_model_replica.model import ModelReplica

SCALER_ADDRESS = f"{SCALER_SERVICE_NAME}.{SYSTEM_NAMESPACE}.svc.cluster.local:{SCALER_PORT}"
PAUSED_REPLICAS_ANNOTATION = "autoscaling.keda.sh/paused-replicas"
# The hub already waits `calmFor` before it lowers a floor; the HPA's own 300 s
# scale-down window on top would hold released GPUs five more minutes and leave the
# workload disagreeing with the floor the hub reports. So the HPA follows the floor.
ADVANCED = {
    "horizontalPodAutoscalerConfig": {
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
    }
}


def policy_name(replica: ModelReplica) -> str:
    return dns_label(replica.deployment)


def _canonical(value):
    # Numbers from a protobuf Struct arrive as floats; write whole numbers as integers
    # so the copy is the same whichever path the spec took.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


def scaled_object_name(replica: ModelReplica, workload: Workload, serving: bool) -> str:
    """The serving workload's ScaledObject is named after the deployment on every stack;
    another (the prefill Deployment on the Standard stack) after its workload."""
    return dns_label(replica.deployment) if serving else workload.ref["name"]


def adaptive_policy(replica: ModelReplica) -> dict:
    assert replica.autoscaling is not None
    spec = {
        f: _canonical(replica.autoscaling[f]) for f in POLICY_FIELDS if f in replica.autoscaling
    }
    spec["workload"] = {
        "apiVersion": SCALED_OBJECT_API_VERSION,
        "kind": KIND_SCALED_OBJECT,
        "name": dns_label(replica.deployment),
    }
    return {
        "apiVersion": AUTOSCALING_GROUP_VERSION,
        "kind": KIND_ADAPTIVE_POLICY,
        "metadata": {
            "name": policy_name(replica),
            "namespace": replica.namespace,
            "labels": {LABEL_DEPLOYMENT: label_value(replica.deployment)},
        },
        "spec": spec,
    }


def scaled_object(replica: ModelReplica, workload: Workload, *, serving: bool) -> dict:
    ceiling = replica.member_max_replicas() or 0
    metadata: dict = {
        "name": scaled_object_name(replica, workload, serving),
        "namespace": replica.namespace,
        "labels": replica.labels(),
    }
    if replica.unavailable is not None or replica.waiting_for_cache:
        # Parked, unplaceable, or the weights not here yet: KEDA holds the workload at 0
        # whatever the scaler says.
        metadata["annotations"] = {PAUSED_REPLICAS_ANNOTATION: "0"}
    return {
        "apiVersion": SCALED_OBJECT_API_VERSION,
        "kind": KIND_SCALED_OBJECT,
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": workload.ref,
            "minReplicaCount": replica.replicas,
            "maxReplicaCount": max(ceiling, replica.replicas),
            "advanced": copy.deepcopy(ADVANCED),
            "triggers": [
                {
                    "type": "external-push",
                    "metadata": {
                        "scalerAddress": SCALER_ADDRESS,
                        "policy": policy_name(replica),
                    },
                    # Client certificates (compose-serving-stack composes it per member).
                    "authenticationRef": {
                        "name": SCALER_TRIGGER_AUTHENTICATION,
                        "kind": "ClusterTriggerAuthentication",
                    },
                }
            ],
        },
    }
