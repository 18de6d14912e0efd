"""Standard stack, one pod per replica: an apps/v1 Deployment."""

from __future__ import annotations

from functions.common.contracts import (
    LABEL_ROLE,
    LABEL_SERVING,
    ROLE_STANDALONE,
)
from functions.compose_model_replica.backends.base import Workload, replica_count, workload_name
from functions.compose_model_replica.model import Engine, Member, ModelReplica
from functions.compose_model_replica.pods import Wiring, pod_template

WORKLOAD_KEY = "workload"


def deployment(
    replica: ModelReplica, engine: Engine, member: Member, name: str, wiring: Wiring | None = None
) -> dict:
    # The selector is immutable; serving + role is unique per pod set and never changes
    # for the life of the ModelReplica.
    selector = {LABEL_SERVING: replica.serving_label, LABEL_ROLE: member.role}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "namespace": replica.namespace,
            "labels": replica.workload_labels(),
        },
        "spec": {
            **replica_count(replica),
            "selector": {"matchLabels": selector},
            "template": pod_template(replica, engine, member, wiring),
        },
    }


def standalone(replica: ModelReplica) -> Workload:
    engine = replica.engines[0]
    member = engine.member(ROLE_STANDALONE)
    assert member is not None  # model.parse checked the shape
    manifest = deployment(replica, engine, member, workload_name(replica))
    return Workload(WORKLOAD_KEY, manifest, "readyReplicas")
