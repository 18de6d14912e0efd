"""Standard stack, one pod per replica: an apps/v1 Deployment.

A changed template (a rollout's wave, or a rollback) replaces the pods one at a time,
each old pod serving until its successor is Ready: `maxUnavailable: 0` and `maxSurge: 1`
(`ROLLING_UPDATE`). Kubernetes' default (25 % each) rounds maxUnavailable down to 0 for
fewer than four replicas but takes a quarter of a larger deployment out of service at
once, and surges a quarter. The price of serving throughout is room for one more pod
(its accelerators) while a pod is replaced; where there is none, the new pod stays
Pending, the old ones keep serving, and the rollout's progress deadline rolls it back
(docs/runbook.md, "A rollout is stuck").
"""

from __future__ import annotations

import copy

from functions.common.contracts import (
    LABEL_ROLE,
    LABEL_SERVING,
    ROLE_STANDALONE,
)
from functions.compose_model_replica.backends.base import Workload, replica_count, workload_name
from functions.compose_model_replica.model import Engine, Member, ModelReplica
from functions.compose_model_replica.pods import Wiring, pod_template

WORKLOAD_KEY = "workload"
ROLLING_UPDATE = {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


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
            "strategy": copy.deepcopy(ROLLING_UPDATE),
            "template": pod_template(replica, engine, member, wiring),
        },
    }


def standalone(replica: ModelReplica) -> Workload:
    engine = replica.engines[0]
    member = engine.member(ROLE_STANDALONE)
    assert member is not None  # model.parse checked the shape
    manifest = deployment(replica, engine, member, workload_name(replica))
    return Workload(WORKLOAD_KEY, manifest, "readyReplicas")
